/**
 * Coalesces and paces live API reads per key (one ServerBootConfiguration): concurrent callers share
 * one read, and a new read starts at most once per `intervalMs` per key; in between, callers get the
 * last result marked `fresh: false`. That bounds what a flood of wrong tokens can cost the API server
 * to one read per SBC per interval, whatever the request rate (security review S6).
 *
 * Failures are not remembered (the next caller reads again). At most `maxKeys` results are kept;
 * the oldest is dropped first.
 */

export interface FlightResult<T> {
  value: T;
  /** True only for the caller whose call started the read: the value is newer than its request. */
  fresh: boolean;
}

export class SingleFlight<T> {
  private readonly inflight = new Map<string, Promise<T>>();
  private readonly recent = new Map<string, { at: number; value: T }>();
  /** Reads actually started (for metrics and tests). */
  reads = 0;

  constructor(
    private readonly intervalMs = 1000,
    private readonly maxKeys = 10_000,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Runs `read` for `key`, joins the read in flight for it, or returns the result of one that
   * finished less than `intervalMs` ago. `force` starts a read even within the interval (used after
   * a 409 from a guarded write, whose cause is bounded by successful writes).
   */
  async do(key: string, read: () => Promise<T>, force = false): Promise<FlightResult<T>> {
    const running = this.inflight.get(key);
    if (running) return { value: await running, fresh: false };
    const last = this.recent.get(key);
    if (!force && last && this.now() - last.at < this.intervalMs) return { value: last.value, fresh: false };
    this.reads++;
    const p = read();
    this.inflight.set(key, p);
    try {
      const value = await p;
      this.recent.delete(key);
      this.recent.set(key, { at: this.now(), value });
      if (this.recent.size > this.maxKeys) this.recent.delete(this.recent.keys().next().value!);
      return { value, fresh: true };
    } finally {
      this.inflight.delete(key);
    }
  }
}
