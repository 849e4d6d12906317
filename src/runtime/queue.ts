/**
 * A rate-limited work queue with the semantics of client-go's `workqueue` (type, delaying and
 * rate-limiting queues), which controllers rely on:
 *
 * - dedupe: a key added several times before a worker takes it is handed out once;
 * - no concurrent processing of one key: a key added while a worker holds it (between `get()` and
 *   `done()`) is handed out again only after `done()`;
 * - `addAfter` keeps the earliest pending time per key; delays are clamped to {@link MAX_TIMER_MS};
 * - `addRateLimited` waits the larger of a per-key exponential backoff (`baseDelayMs·2^failures`,
 *   capped at `maxDelayMs`; reset by `forget`) and an overall token bucket (`ratePerSecond`, `burst`),
 *   like client-go's `DefaultControllerRateLimiter` (5 ms … 1000 s, 10 qps, burst 100).
 */
import type { Counter, Gauge, Histogram } from 'prom-client';
import type { RuntimeMetrics } from './metrics.js';

/** The longest delay `setTimeout` honours (2^31-1 ms, about 24.8 days); longer delays are clamped to it. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

export interface WorkQueueOptions {
  /** First per-key retry delay in ms. Default 5. */
  baseDelayMs?: number;
  /** Per-key retry delay cap in ms. Default 1 000 000 (client-go: 1000 s). */
  maxDelayMs?: number;
  /** Token-bucket refill rate for rate-limited adds, per second. Default 10. */
  ratePerSecond?: number;
  /** Token-bucket size. Default 100. */
  burst?: number;
  /**
   * Cap of a growing requeue delay ({@link WorkQueue.backoffDelayMs}), ms. Default 300 000 (5 min,
   * the longest BMC `Retry-After` the controllers honour).
   */
  maxRequeueBackoffMs?: number;
  /** Label for metrics and logs. */
  name?: string;
  metrics?: RuntimeMetrics;
}

export class WorkQueue {
  readonly name: string;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly maxRequeueBackoffMs: number;
  private readonly rate: number;
  private readonly burst: number;
  /** FIFO of keys ready for a worker; `head` avoids O(n) shifts. */
  private items: string[] = [];
  private head = 0;
  /** Keys that need processing (queued, or re-added while in flight). */
  private readonly dirty = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly enqueuedAt = new Map<string, number>();
  /** Keys in flight → ms they waited in the ready queue before `get()` handed them out. */
  private readonly waitedMs = new Map<string, number>();
  private readonly delayed = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private readonly failures = new Map<string, number>();
  private waiters: ((key: string | undefined) => void)[] = [];
  private idleWaiters: (() => void)[] = [];
  private tokens: number;
  private refilledAt = performance.now();
  private shuttingDown = false;
  private readonly m?: {
    depth: Gauge.Internal<'name'>;
    adds: Counter.Internal;
    retries: Counter.Internal;
    latency: Histogram.Internal<'name'>;
  };

  constructor(opts: WorkQueueOptions = {}) {
    this.name = opts.name ?? 'queue';
    this.baseDelayMs = opts.baseDelayMs ?? 5;
    this.maxDelayMs = opts.maxDelayMs ?? 1_000_000;
    this.maxRequeueBackoffMs = opts.maxRequeueBackoffMs ?? 300_000;
    this.rate = opts.ratePerSecond ?? 10;
    this.burst = opts.burst ?? 100;
    this.tokens = this.burst;
    if (opts.metrics) {
      const mm = opts.metrics;
      this.m = {
        depth: mm.queueDepth.labels(this.name),
        adds: mm.queueAdds.labels(this.name),
        retries: mm.queueRetries.labels(this.name),
        latency: mm.queueLatency.labels(this.name),
      };
    }
  }

  /** Marks `key` as needing processing. Ignored after shutdown. */
  add(key: string): void {
    if (this.shuttingDown || this.dirty.has(key)) return;
    this.dirty.add(key);
    this.m?.adds.inc();
    if (this.processing.has(key)) return; // re-queued by done()
    this.push(key);
  }

  /** Adds `key` after `ms` milliseconds (at once when `ms` ≤ 0). An earlier pending time wins. */
  addAfter(key: string, ms: number): void {
    if (this.shuttingDown) return;
    // setTimeout fires after 1 ms for delays above 2^31-1 ms (or NaN): a far-away requeue would spin.
    if (!(ms <= MAX_TIMER_MS)) ms = MAX_TIMER_MS;
    if (ms <= 0) {
      this.add(key);
      return;
    }
    const at = performance.now() + ms;
    const prev = this.delayed.get(key);
    if (prev) {
      if (prev.at <= at) return;
      clearTimeout(prev.timer);
    }
    const timer = setTimeout(() => {
      this.delayed.delete(key);
      this.add(key);
    }, ms);
    this.delayed.set(key, { at, timer });
  }

  /** Adds `key` after its backoff (see class doc) and counts a failure for it. */
  addRateLimited(key: string): void {
    if (this.shuttingDown) return;
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    this.m?.retries.inc();
    this.addAfter(key, Math.max(this.itemDelayMs(n), this.bucketDelayMs()));
  }

  /**
   * Adds `key` after its per-key backoff only, counting a failure, without drawing from the overall
   * bucket. For optimistic-concurrency conflicts: the cache was behind and the next try (after the
   * watch delivered the newer object) succeeds, so a burst of them is not the error storm the bucket
   * guards against, and throttling it to the bucket's 10/s stalls whole fleets.
   */
  addWithBackoff(key: string): void {
    if (this.shuttingDown) return;
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    this.m?.retries.inc();
    this.addAfter(key, this.itemDelayMs(n));
  }

  /**
   * The delay of a requeue after a failure of an external dependency whose own delay is `ms`: `ms`
   * doubled per earlier such failure of `key` since the last `forget` (`ms·2^failures`), at most
   * `maxRequeueBackoffMs` but never below `ms`; counts a failure. What keeps a dependency that
   * refuses for good (a BMC) from being asked at its own fixed pace forever.
   */
  backoffDelayMs(key: string, ms: number): number {
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    this.m?.retries.inc();
    return Math.max(ms, Math.min(this.maxRequeueBackoffMs, ms * 2 ** n));
  }

  /** Whether a worker holds `key` (between `get()` and `done()`). */
  isProcessing(key: string): boolean {
    return this.processing.has(key);
  }

  /** Clears the failure count of `key` (after a successful reconcile). */
  forget(key: string): void {
    this.failures.delete(key);
  }

  /** Rate-limited adds of `key` since the last `forget`. */
  numRequeues(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  /**
   * The next key, marked in flight until `done(key)`. Waits while the queue is empty; resolves
   * undefined once the queue is shut down (queued keys are then no longer handed out).
   */
  get(): Promise<string | undefined> {
    if (this.shuttingDown) return Promise.resolve(undefined);
    if (this.head < this.items.length) return Promise.resolve(this.take());
    return new Promise((ok) => this.waiters.push(ok));
  }

  /** How long `key`, now in flight, waited for a worker after it became ready, ms (undefined: not in flight). */
  queuedMs(key: string): number | undefined {
    return this.waitedMs.get(key);
  }

  /** Ends processing of `key`; if it was added meanwhile it is queued again. */
  done(key: string): void {
    this.processing.delete(key);
    this.waitedMs.delete(key);
    if (this.dirty.has(key) && !this.shuttingDown) this.push(key);
    if (this.processing.size === 0 && this.idleWaiters.length) {
      const ws = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of ws) w();
    }
  }

  /**
   * Stops handing out keys and drops delayed adds; waiting `get()` calls resolve undefined. With
   * `drain`, resolves only when every key in flight is `done()` (client-go `ShutDownWithDrain`).
   */
  shutDown(drain = false): Promise<void> {
    this.shuttingDown = true;
    for (const d of this.delayed.values()) clearTimeout(d.timer);
    this.delayed.clear();
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w(undefined);
    if (!drain || this.processing.size === 0) return Promise.resolve();
    return new Promise((ok) => this.idleWaiters.push(ok));
  }

  get isShuttingDown(): boolean {
    return this.shuttingDown;
  }

  /** Keys ready for a worker (not counting delayed or in-flight keys). */
  len(): number {
    return this.items.length - this.head;
  }

  /** Keys currently held by workers. */
  inFlight(): number {
    return this.processing.size;
  }

  private push(key: string): void {
    this.items.push(key);
    this.enqueuedAt.set(key, performance.now());
    while (this.waiters.length && this.head < this.items.length) this.waiters.shift()!(this.take());
    this.m?.depth.set(this.len());
  }

  private take(): string {
    const key = this.items[this.head++]!;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    this.dirty.delete(key);
    this.processing.add(key);
    const t = this.enqueuedAt.get(key);
    this.enqueuedAt.delete(key);
    if (t !== undefined) this.waitedMs.set(key, performance.now() - t);
    if (this.m) {
      this.m.depth.set(this.len());
      if (t !== undefined) this.m.latency.observe((performance.now() - t) / 1000);
    }
    return key;
  }

  private itemDelayMs(failures: number): number {
    // 2^failures overflows to Infinity long before it matters; the cap handles it.
    return Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** failures);
  }

  /** Reserves a token; the delay until it is available (tokens may go negative = future reservations). */
  private bucketDelayMs(): number {
    const now = performance.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.refilledAt) / 1000) * this.rate);
    this.refilledAt = now;
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : (-this.tokens / this.rate) * 1000;
  }
}
