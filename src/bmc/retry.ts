/**
 * Retry policy shared by the Redfish transport and the simulated hosts' agent: which HTTP statuses
 * are worth another attempt, the server's `Retry-After`, and the time budget that bounds a whole call.
 * Pauses between attempts otherwise come from the project's `Backoff` (`src/runtime/backoff.ts`).
 * All durations are milliseconds.
 */

import { setTimeout as sleep } from 'node:timers/promises';

/** Statuses retried for idempotent requests: server-side trouble (RFC 9110 §15.6) and rate limiting (RFC 6585). */
const RETRYABLE_STATUS = new Set([429, 500, 502, 503, 504]);

/**
 * Whether a response status is worth retrying. Non-idempotent requests (e.g. `ForceRestart`) are
 * retried only on 503 and 429: both mean the service did not act on the request, whereas after a
 * 500/502/504 it may have.
 */
export function isRetryableStatus(status: number, idempotent: boolean): boolean {
  return idempotent ? RETRYABLE_STATUS.has(status) : status === 503 || status === 429;
}

/**
 * Parses `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date. Returns ms ≥ 0, or
 * `undefined` when absent or unparsable.
 */
export function parseRetryAfter(value: string | string[] | undefined, now = Date.now()): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined) return undefined;
  const trimmed = v.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Math.round(Number(trimmed) * 1000);
  const date = Date.parse(trimmed);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - now);
}

/**
 * The time budget of one call: a monotonic deadline plus the caller's abort signal. A call that
 * includes several requests (GET then PATCH) shares one budget.
 */
export class Budget {
  private readonly deadline: number;
  readonly startedAt: number;

  constructor(
    /** Total time allowed, ms. */
    readonly totalMs: number,
    readonly signal?: AbortSignal,
  ) {
    this.startedAt = performance.now();
    this.deadline = this.startedAt + totalMs;
  }

  /** Ms left, never negative. */
  remainingMs(): number {
    return Math.max(0, this.deadline - performance.now());
  }

  elapsedMs(): number {
    return performance.now() - this.startedAt;
  }

  /** Throws the caller's abort reason if the call was aborted. */
  throwIfAborted(): void {
    this.signal?.throwIfAborted();
  }

  /** Sleeps `ms`; rejects with the caller's abort reason when aborted. */
  async pause(ms: number): Promise<void> {
    if (ms <= 0) return;
    try {
      await sleep(ms, undefined, this.signal ? { signal: this.signal } : undefined);
    } catch (err) {
      if (this.signal?.aborted) throw this.signal.reason;
      throw err;
    }
  }
}
