/**
 * Go `time.Duration` strings (`15m`, `1h30m`, `2.5s`, `500ms`), the format of
 * `ServerClaim.spec.bootCompletion.timeout` and of the manager's duration flags.
 */

const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

const PART = /([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)/y;

/**
 * Parses a Go duration into milliseconds (fractions kept). `0` alone is accepted as zero, like Go.
 * Throws `Error` for anything else that `time.ParseDuration` would reject, and for negative values.
 */
export function parseDuration(text: string): number {
  const s = text.trim();
  if (s === '0') return 0;
  if (s === '') throw new Error('empty duration');
  let total = 0;
  PART.lastIndex = 0;
  while (PART.lastIndex < s.length) {
    const at = PART.lastIndex;
    const m = PART.exec(s);
    if (!m || m.index !== at)
      throw new Error(`invalid duration ${JSON.stringify(text)} (expected e.g. 90s, 15m, 1h30m)`);
    total += Number(m[1]) * (UNIT_MS[m[2] as string] ?? Number.NaN);
  }
  if (!Number.isFinite(total)) throw new Error(`invalid duration ${JSON.stringify(text)}`);
  return total;
}

/** Formats milliseconds the way Go prints durations (`1m30s`, `2s`, `250ms`), for messages. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  let rest = Math.round(ms / 100) / 10; // seconds, one decimal
  const h = Math.floor(rest / 3600);
  rest -= h * 3600;
  const m = Math.floor(rest / 60);
  rest = Math.round((rest - m * 60) * 10) / 10;
  return `${h ? `${h}h` : ''}${h || m ? `${m}m` : ''}${rest}s`;
}
