/**
 * Rate limit on failed authentication per client address (security review S6): every 401 answered
 * to an address spends one token of its bucket (`burst` tokens, refilled at `perSecond`); while the
 * bucket is empty, that address gets 429 `TooManyAuthFailures` with `Retry-After` before any lookup,
 * so guessing tokens costs neither cache scans nor API reads. Successful requests spend nothing.
 *
 * Memory is bounded: at most `maxAddresses` buckets, the least recently touched dropped first (a
 * dropped bucket is a full one, which only forgets an attacker's debt, never a legitimate budget).
 */

export interface AuthFailureLimitOptions {
  /** Failures an address may have in a burst. Default 20. */
  burst?: number;
  /** Failures per second refilled. Default 1. */
  perSecond?: number;
  /** Addresses tracked at once. Default 10 000. */
  maxAddresses?: number;
}

export class AuthFailureLimit {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly burst: number;
  private readonly perSecond: number;
  private readonly maxAddresses: number;

  constructor(
    opts: AuthFailureLimitOptions = {},
    private readonly now: () => number = Date.now,
  ) {
    this.burst = opts.burst ?? 20;
    this.perSecond = opts.perSecond ?? 1;
    this.maxAddresses = opts.maxAddresses ?? 10_000;
  }

  private level(address: string): { tokens: number; at: number } {
    const t = this.now();
    const b = this.buckets.get(address);
    if (!b) return { tokens: this.burst, at: t };
    return { tokens: Math.min(this.burst, b.tokens + ((t - b.at) / 1000) * this.perSecond), at: t };
  }

  /** Seconds until `address` may try again; 0 when it may now. */
  retryAfterSeconds(address: string): number {
    const b = this.level(address);
    return b.tokens >= 1 ? 0 : Math.max(1, Math.ceil((1 - b.tokens) / this.perSecond));
  }

  /** Records one failed authentication of `address`. */
  fail(address: string): void {
    const b = this.level(address);
    b.tokens = Math.max(0, b.tokens - 1);
    this.buckets.delete(address);
    this.buckets.set(address, b);
    if (this.buckets.size > this.maxAddresses) this.buckets.delete(this.buckets.keys().next().value!);
  }
}
