/**
 * Client-side request rate limit for the Kubernetes API client, after client-go's
 * `flowcontrol.NewTokenBucketRateLimiter` (QPS + burst, FIFO by reservation, as golang.org/x/time/rate
 * which client-go uses), plus backpressure: a 429 (API Priority and Fairness rejected the request, or
 * the server's max-in-flight limit) pauses every request of this client until its `Retry-After` and
 * halves the rate, which then grows back by 1 % of the configured QPS per successful request
 * (additive increase, multiplicative decrease), so a client follows the API server's capacity rather
 * than a fixed worker count.
 *
 * Units: QPS in requests per second, times in ms. Every wait is bounded: a pause lasts at most
 * {@link MAX_PAUSE_MS}; a reservation waits at most `burst / minimum rate` seconds.
 */
import { sleep } from './backoff.js';

/** Longest pause one 429 imposes, in ms (client-go caps Retry-After-driven waits likewise). */
export const MAX_PAUSE_MS = 10_000;
/** The rate never drops below this share of the configured QPS after 429s. */
const MIN_RATE_SHARE = 0.1;

export interface RateLimiterOptions {
  /** Sustained requests per second; 0 or less: no rate limit (backpressure on 429 still applies). */
  qps: number;
  /** Requests that may go at once after an idle spell (bucket size). Default max(1, ceil(qps)). */
  burst?: number;
  /** Clock in ms (tests). */
  now?: () => number;
}

export class TokenBucketRateLimiter {
  readonly qps: number;
  readonly burst: number;
  private rate: number;
  private tokens: number;
  private last: number;
  private pausedUntil = 0;
  private readonly now: () => number;

  constructor(opts: RateLimiterOptions) {
    this.qps = Math.max(0, opts.qps);
    this.burst = Math.max(1, Math.floor(opts.burst ?? Math.ceil(this.qps)));
    this.rate = this.qps;
    this.now = opts.now ?? (() => performance.now());
    this.tokens = this.burst;
    this.last = this.now();
  }

  /** Current rate in requests/s (below `qps` after 429s); Infinity when unlimited. */
  get currentQps(): number {
    return this.qps > 0 ? this.rate : Number.POSITIVE_INFINITY;
  }

  /**
   * Reserves one request slot and returns how long to wait for it, in ms (0: go now). Reservations
   * are handed out in call order, so waiting requests are served FIFO.
   */
  reserve(): number {
    const now = this.now();
    const pause = Math.max(0, this.pausedUntil - now);
    if (this.qps <= 0) return pause;
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.rate);
    this.last = now;
    this.tokens -= 1;
    const wait = this.tokens >= 0 ? 0 : (-this.tokens / this.rate) * 1000;
    return Math.max(wait, pause);
  }

  /** Waits for a slot (see {@link reserve}); resolves at once when one is free. */
  async acquire(): Promise<number> {
    const wait = this.reserve();
    if (wait > 0) await sleep(wait);
    return wait;
  }

  /**
   * Backpressure from the API server (429): no request starts for `retryAfterSeconds` (default 1 s,
   * at most {@link MAX_PAUSE_MS}); concurrent 429s extend one pause rather than adding up; the rate
   * halves (not below 10 % of `qps`).
   */
  throttled(retryAfterSeconds?: number): number {
    const ms = Math.min(Math.max(retryAfterSeconds ?? 1, 0) * 1000, MAX_PAUSE_MS);
    this.pausedUntil = Math.max(this.pausedUntil, this.now() + ms);
    if (this.qps > 0) this.rate = Math.max(this.qps * MIN_RATE_SHARE, this.rate / 2);
    return ms;
  }

  /** A request the API server accepted: the rate recovers towards `qps` by 1 % of it. */
  succeeded(): void {
    if (this.qps > 0 && this.rate < this.qps) this.rate = Math.min(this.qps, this.rate + this.qps / 100);
  }
}
