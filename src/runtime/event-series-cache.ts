/**
 * The event recorder's series cache (events.ts): aggregation key → its series, bounded to `max`
 * entries, ordered by last use. Entries older than the series window are dropped first, then the
 * least recently used. Pure bookkeeping: no timers, no I/O; `now` is passed in.
 *
 * Why ordered by last use: each `remember` moves its entry to the end, so the expired entries lead
 * and eviction walks only what it drops (one deletion per new entry once full), where a scan of the
 * whole cache per new Event made a fleet's Events quadratic. An entry whose series ended
 * (`forget`) leaves at once, so no dead entry sits behind live ones.
 */

/** What the cache needs of an entry: when its series was last seen, ms since the epoch. */
export interface SeriesCacheEntry {
  lastSeen: number;
}

export class SeriesCache<E extends SeriesCacheEntry> {
  readonly #entries = new Map<string, E>();

  /** `max` entries at most; an entry not seen for `windowMs` is expired. */
  constructor(
    readonly max: number,
    readonly windowMs: number,
  ) {}

  get size(): number {
    return this.#entries.size;
  }

  get(key: string): E | undefined {
    return this.#entries.get(key);
  }

  /** Every entry, least recently used first. */
  entries(): IterableIterator<[string, E]> {
    return this.#entries.entries();
  }

  /**
   * Stores `entry` as the most recently used; then, over `max`, drops entries from the least
   * recently used end: every expired one it meets, and live ones until back at `max`.
   */
  remember(key: string, entry: E, now: number): void {
    this.#entries.delete(key);
    this.#entries.set(key, entry);
    if (this.#entries.size <= this.max) return;
    const cutoff = now - this.windowMs;
    for (const [k, e] of this.#entries) {
      if (this.#entries.size <= this.max && e.lastSeen >= cutoff) break;
      this.#entries.delete(k);
    }
  }

  /** Ends `entry`'s series: out of the window (a timer still holding it finds it so) and out of the cache. */
  forget(key: string, entry: E): void {
    entry.lastSeen = 0;
    if (this.#entries.get(key) === entry) this.#entries.delete(key);
  }
}
