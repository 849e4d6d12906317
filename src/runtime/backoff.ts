/**
 * Exponential backoff with jitter, and an abortable sleep: how the informer paces list/watch retries
 * (and how long-running loops such as the leader elector wait without blocking a clean stop).
 */

/** Delays grow `initialMs·factor^n` up to `maxMs`; each is spread by ±`jitter`/2 so peers desynchronise. */
export class Backoff {
  private n = 0;

  constructor(
    private readonly opts: { initialMs: number; maxMs: number; factor?: number; jitter?: number } = {
      initialMs: 800,
      maxMs: 30_000,
    },
  ) {}

  /** The next delay in ms (and advances). */
  next(): number {
    const { initialMs, maxMs, factor = 2, jitter = 0.5 } = this.opts;
    const base = Math.min(maxMs, initialMs * factor ** this.n);
    if (base < maxMs) this.n++;
    return Math.max(0, base * (1 - jitter / 2 + Math.random() * jitter));
  }

  /** Back to `initialMs`, after a success. */
  reset(): void {
    this.n = 0;
  }

  /** Failures since the last reset. */
  get attempts(): number {
    return this.n;
  }
}

/** Resolves after `ms` milliseconds, or early (never rejecting) when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((ok) => {
    if (signal?.aborted) return ok();
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      ok();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
