/**
 * Informer: a reflector (LIST, then WATCH from the list's resourceVersion) feeding an indexed
 * in-memory cache and event handlers, after client-go's `Reflector` + `SharedIndexInformer`.
 *
 * Failure handling (the part that matters in production):
 * - the server ends every watch after `timeoutSeconds` (jittered, so informers do not reconnect in
 *   lockstep); the informer re-watches from the last seen resourceVersion, without relisting;
 * - bookmarks (`allowWatchBookmarks`) advance the resourceVersion on quiet streams, so a restart
 *   does not start from a version etcd has compacted meanwhile;
 * - 410 Gone (HTTP status or an `ERROR` event with code 410: "too old resource version") means the
 *   events in between are lost: the informer relists at once and reconciles the cache with the new
 *   list, emitting add/update/delete for the differences;
 * - any other error (unreachable API server, 5xx, a dead connection found by the client-side
 *   inactivity timeout) is logged and retried with exponential backoff (800 ms … 30 s, like
 *   client-go), forever, until `stop()`; the informer never stops silently;
 * - a throwing (or rejecting) handler is logged and skipped; the watch goes on.
 *
 * Cached objects are shared with every handler and reader: treat them as read-only (clone with
 * `structuredClone` before modifying). They pass a transform before they are cached (default
 * {@link stripManagedFields}, as controller-runtime's `cache.TransformStripManagedFields`): the cache
 * holds what readers use, not the server's bookkeeping. A PUT of a cached object leaves
 * `managedFields` as they are (an absent field is not a reset; only `[]` resets them).
 *
 * `observe()` takes an object this process just received from the API server (a write's answer):
 * `get()` returns it while the watch has not delivered that version yet (client-go's
 * `MutationCache`), so a reconcile or a callback that follows a write in this process sees it and
 * does not write again for nothing or get a 409. `list()`, `byIndex()` and the handlers see the
 * watched versions only.
 */
import type pino from 'pino';
import { Backoff, sleep } from './backoff.js';
import { ApiError, type KubeClient } from './client.js';
import { matchesTerms, parseEqualitySelector } from './label-selector.js';
import { newLogger } from './logger.js';
import type { RuntimeMetrics } from './metrics.js';
import { apiVersionOf, type KObject, objectKey, type ResourceType } from './resource.js';

export type InformerEvent = 'add' | 'update' | 'delete';
/**
 * `old` is set for 'update' only. For 'delete', `obj` is the last known state. A handler may be async:
 * a returned promise's rejection is logged like a thrown error.
 */
export type InformerHandler<T> = (obj: T, old?: T) => void;

export interface InformerOptions<T extends KObject> {
  /** Only this namespace (default: all namespaces, or the cluster scope). */
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Named index functions: each returns the index values of an object (see {@link Informer.byIndex}). */
  indexers?: Record<string, (obj: T) => string[]>;
  /** Server-side watch timeout in s, jittered ±10% per watch. Default 300. */
  watchTimeoutSeconds?: number;
  /** Client-side dead-connection detector: re-watch when no byte arrived for this many ms. Default 90 000. */
  clientTimeoutMs?: number;
  /** LIST page size. Default 500. */
  pageSize?: number;
  /** Retry pacing after errors, in ms. Default 800 … 30 000. */
  backoff?: { initialMs: number; maxMs: number };
  log?: pino.Logger;
  metrics?: RuntimeMetrics;
  /**
   * Applied to every listed or watched object before it is cached and handed to handlers; may modify
   * and return its argument. Default {@link stripManagedFields}; `null` caches objects as received.
   */
  transform?: ((obj: T) => T) | null;
}

/**
 * Drops `metadata.managedFields` (server-side apply ownership, typically 30–60 % of a small object's
 * JSON): no reader of the cache uses it. Returns its argument.
 */
export function stripManagedFields<T extends KObject>(obj: T): T {
  const m = obj.metadata as { managedFields?: unknown } | undefined;
  if (m && 'managedFields' in m) delete m.managedFields;
  return obj;
}

/** Objects kept by `observe()` ahead of the watch, at most (oldest out); the watch normally drains them in ms. */
const MAX_OBSERVED = 10_000;
/** Versions remembered per object for {@link Informer.writtenBy}. */
const WRITERS_PER_KEY = 8;
/**
 * How long `get()` answers with an object this process created before the watch delivered it: long
 * enough for any watch lag seen here, short enough that a creation the watch never shows (deleted
 * again inside a relist's gap) does not linger.
 */
const CREATED_VIEW_MS = 30_000;

/** `a` is a later resourceVersion than `b` (etcd's are integers; anything else is never "later"). */
function laterVersion(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b || !/^\d{1,30}$/.test(a) || !/^\d{1,30}$/.test(b)) return false;
  return a.length !== b.length ? a.length > b.length : a > b;
}

/** Counters for tests and diagnostics. */
export interface InformerStats {
  /** Completed full LISTs (the first sync included). */
  lists: number;
  /** Watch streams opened (HTTP 200). */
  watches: number;
  /** 410 Gone answers that forced a relist. */
  gone: number;
  /** Errors retried with backoff (list or watch). */
  errors: number;
}

export class Informer<T extends KObject> {
  readonly stats: InformerStats = { lists: 0, watches: 0, gone: 0, errors: 0 };
  private readonly store = new Map<string, T>();
  /** key → a later version than `store` has, from `observe()`; dropped once the watch catches up. */
  private readonly observed = new Map<string, T>();
  /** key → the last versions this process wrote and who wrote them (oldest out; see {@link writtenBy}). */
  private readonly writers = new Map<string, { rv: string; writer: string }[]>();
  /** keys of `observed` this process created (not yet in `store`) → when that view expires (ms). */
  private readonly createdUntil = new Map<string, number>();
  /** The label selector's terms, when creations can be checked against it (equality-based). */
  private readonly selectorTerms: ReturnType<typeof parseEqualitySelector>;
  private readonly byNamespace = new Map<string, Set<string>>();
  private readonly indexers = new Map<string, (obj: T) => string[]>();
  /** index → value → keys */
  private readonly indices = new Map<string, Map<string, Set<string>>>();
  /** index → key → values (what to remove on update/delete) */
  private readonly indexed = new Map<string, Map<string, string[]>>();
  private readonly handlers: Record<InformerEvent, InformerHandler<T>[]> = {
    add: [],
    update: [],
    delete: [],
  };
  private readonly log: pino.Logger;
  private readonly resourceLabel: string;
  private rv = '';
  private synced = false;
  private abort?: AbortController;
  private syncPromise?: Promise<void>;
  private rejectSync?: (err: Error) => void;
  private loopDone?: Promise<void>;

  constructor(
    private readonly client: KubeClient,
    readonly rt: ResourceType,
    private readonly opts: InformerOptions<T> = {},
  ) {
    this.resourceLabel = rt.group ? `${rt.plural}.${rt.group}` : rt.plural;
    this.log = (opts.log ?? newLogger('informer')).child({
      informer: this.resourceLabel,
      ...(opts.namespace ? { namespace: opts.namespace } : {}),
    });
    if (opts.indexers) this.addIndexers(opts.indexers);
    this.selectorTerms = parseEqualitySelector(opts.labelSelector);
  }

  /**
   * Starts list+watch. Resolves once the first full LIST is in the cache (handlers have seen an 'add'
   * for each object); rejects only if `stop()` comes first. Errors before that are logged and retried.
   * Calling it again returns the same promise.
   */
  start(): Promise<void> {
    if (this.syncPromise) return this.syncPromise;
    const abort = new AbortController();
    this.abort = abort;
    let resolveSync!: () => void;
    this.syncPromise = new Promise<void>((ok, fail) => {
      resolveSync = ok;
      this.rejectSync = fail;
    });
    this.loopDone = this.run(abort.signal, resolveSync);
    return this.syncPromise;
  }

  /** Stops watching. The cache keeps its last content. */
  stop(): void {
    if (!this.abort || this.abort.signal.aborted) return;
    this.abort.abort();
    if (!this.synced)
      this.rejectSync?.(new Error(`informer ${this.resourceLabel} stopped before its first sync`));
  }

  /** Resolves when the list/watch loop has ended after `stop()`. */
  async stopped(): Promise<void> {
    await this.loopDone;
  }

  hasSynced(): boolean {
    return this.synced;
  }

  /** resourceVersion of the last list, event or bookmark seen ('' before the first list). */
  get resourceVersion(): string {
    return this.rv;
  }

  /**
   * From the cache, no API call: the watched version, or a later one this process received
   * (`observe()`). `namespace` is ignored for cluster-scoped kinds.
   */
  get(name: string, namespace?: string): T | undefined {
    const key = this.rt.namespaced && namespace ? `${namespace}/${name}` : name;
    const cached = this.store.get(key);
    const later = this.observed.get(key);
    if (!later) return cached;
    if (!cached) {
      if ((this.createdUntil.get(key) ?? 0) > Date.now()) return later;
      this.dropObserved(key);
      return undefined;
    }
    if (laterVersion(later.metadata.resourceVersion, cached.metadata.resourceVersion)) return later;
    this.observed.delete(key);
    return cached;
  }

  /**
   * Offers an object received from the API server outside the watch (a write's answer). Kept for
   * `get()` when it is a cached object of this kind (same key and uid) at a later resourceVersion, or
   * an object not cached yet that this informer's namespace and (equality-based) label selector
   * would include — a creation of this process, answered by `get()` for at most
   * {@link CREATED_VIEW_MS} unless the watch delivers it first; ignored otherwise (objects outside
   * the selector never enter; `list()` and indexes show only watched objects). Not modified: a
   * transformed copy is kept. `writer`: the request origin whose write answered `obj` (a
   * controller's name), remembered for {@link writtenBy}.
   */
  observe(obj: KObject, writer?: string): void {
    if (obj.kind !== this.rt.kind || obj.apiVersion !== apiVersionOf(this.rt)) return;
    const key = objectKey(obj);
    if (writer !== undefined && obj.metadata.resourceVersion) this.noteWriter(key, obj, writer);
    const cached = this.store.get(key);
    const pending = this.observed.get(key);
    if (!cached) {
      // A creation (or a write to one) of this process that the watch has not delivered yet.
      if (pending ? pending.metadata.uid !== obj.metadata.uid : !this.wouldWatch(obj)) return;
    } else if (cached.metadata.uid !== obj.metadata.uid) return;
    const newest = pending ?? cached;
    if (newest && !laterVersion(obj.metadata.resourceVersion, newest.metadata.resourceVersion)) return;
    const transform = this.opts.transform === undefined ? stripManagedFields : this.opts.transform;
    const copy = structuredClone(obj) as T;
    this.observed.delete(key);
    this.observed.set(key, transform ? transform(copy) : copy);
    if (!cached && !pending) this.createdUntil.set(key, Date.now() + CREATED_VIEW_MS);
    if (this.observed.size > MAX_OBSERVED) this.dropObserved(this.observed.keys().next().value!);
  }

  /**
   * True when this informer's list/watch would include `obj`: its namespace and an equality-based
   * label selector that the labels satisfy (a set-based selector: false, so nothing unsure enters).
   */
  private wouldWatch(obj: KObject): boolean {
    if (obj.metadata.deletionTimestamp || !this.selectorTerms) return false;
    if (this.rt.namespaced && this.opts.namespace && obj.metadata.namespace !== this.opts.namespace)
      return false;
    return matchesTerms(this.selectorTerms, obj.metadata.labels);
  }

  /**
   * The request origin (a controller's name, {@link withRequestOrigin}) whose write produced exactly
   * this version of `obj` in this process, or undefined (another process, or not known). How a
   * controller tells the watch echo of its own write from a change made by someone else.
   */
  writtenBy(obj: KObject): string | undefined {
    const rv = obj.metadata.resourceVersion;
    if (!rv) return undefined;
    return this.writers.get(objectKey(obj))?.find((w) => w.rv === rv)?.writer;
  }

  private noteWriter(key: string, obj: KObject, writer: string): void {
    const list = this.writers.get(key) ?? [];
    list.push({ rv: obj.metadata.resourceVersion!, writer });
    // A reconcile writes an object a few times at most before the watch delivers the first echo.
    if (list.length > WRITERS_PER_KEY) list.shift();
    this.writers.delete(key);
    this.writers.set(key, list);
    if (this.writers.size > MAX_OBSERVED) this.writers.delete(this.writers.keys().next().value!);
  }

  private dropObserved(key: string): void {
    this.observed.delete(key);
    this.createdUntil.delete(key);
  }

  /** Cached objects, of one namespace when given. */
  list(namespace?: string): T[] {
    if (namespace === undefined || !this.rt.namespaced) return [...this.store.values()];
    const keys = this.byNamespace.get(namespace);
    return keys ? [...keys].map((k) => this.store.get(k)!) : [];
  }

  /** Cached objects whose index function returned `value`. Throws for an unknown index name. */
  byIndex(index: string, value: string): T[] {
    const idx = this.indices.get(index);
    if (!idx) throw new Error(`informer ${this.resourceLabel}: no index named ${index}`);
    const keys = idx.get(value);
    return keys ? [...keys].map((k) => this.store.get(k)!) : [];
  }

  /**
   * Adds index functions (also after start: the cache is indexed at once). Re-adding a name with the
   * same function is a no-op; with a different function it throws, because two users of one shared
   * informer would otherwise silently read each other's index.
   */
  addIndexers(indexers: Record<string, (obj: T) => string[]>): void {
    for (const [name, fn] of Object.entries(indexers)) {
      const existing = this.indexers.get(name);
      if (existing === fn) continue;
      if (existing) throw new Error(`informer ${this.resourceLabel}: index ${name} is already defined`);
      this.indexers.set(name, fn);
      this.indices.set(name, new Map());
      this.indexed.set(name, new Map());
      for (const [key, obj] of this.store) this.indexOne(name, fn, key, obj);
    }
  }

  /** Registers a handler. Handlers run synchronously in event order; exceptions are logged, never fatal. */
  on(event: InformerEvent, handler: InformerHandler<T>): void {
    this.handlers[event].push(handler);
  }

  private async run(signal: AbortSignal, resolveSync: () => void): Promise<void> {
    const backoff = new Backoff(this.opts.backoff ?? { initialMs: 800, maxMs: 30_000 });
    let needList = true;
    let listedAt = 0;
    // 410 right after a fresh list would mean the list itself is already compacted away: pace it.
    const paceRelist = () => (Date.now() - listedAt < 1000 ? sleep(backoff.next(), signal) : undefined);
    while (!signal.aborted) {
      try {
        if (needList) {
          await this.relist(signal);
          listedAt = Date.now();
          needList = false;
          if (!this.synced) {
            this.synced = true;
            resolveSync();
          }
        }
        const t0 = Date.now();
        const outcome = await this.watchOnce(signal, backoff);
        if (outcome === 'gone') {
          needList = true;
          await paceRelist();
          continue;
        }
        // A stream the server ends at once (and keeps ending) must not become a hot loop.
        if (outcome === 'ended' && Date.now() - t0 < 1000) await sleep(backoff.next(), signal);
      } catch (err) {
        if (signal.aborted) break;
        if (err instanceof ApiError && err.status === 410) {
          this.markGone(err.message);
          needList = true;
          await paceRelist();
          continue;
        }
        if (err instanceof ApiError && err.reason === 'WatchIdle') {
          // Quiet resources without bookmarks look exactly like a dead connection; re-watching is cheap.
          this.log.debug({ err }, 'watch idle; re-watching');
          this.opts.metrics?.informerWatchRestarts.inc({ resource: this.resourceLabel, reason: 'timeout' });
          continue;
        }
        this.stats.errors++;
        const delay = backoff.next();
        const level = backoff.attempts > 3 ? 'error' : 'warn';
        this.log[level](
          { err, retryInMs: Math.round(delay), phase: needList ? 'list' : 'watch', resourceVersion: this.rv },
          `informer ${needList ? 'list' : 'watch'} failed; retrying`,
        );
        this.opts.metrics?.informerWatchRestarts.inc({ resource: this.resourceLabel, reason: 'error' });
        await sleep(delay, signal);
      }
    }
  }

  private markGone(detail: string): void {
    this.stats.gone++;
    this.opts.metrics?.informerWatchRestarts.inc({ resource: this.resourceLabel, reason: 'gone' });
    this.log.info({ resourceVersion: this.rv, detail }, 'resourceVersion too old (410 Gone); relisting');
  }

  /** Full paginated LIST (a consistent read), then reconciles the cache with it. */
  private async relist(signal: AbortSignal): Promise<void> {
    const items: T[] = [];
    let rv = '';
    let cont: string | undefined;
    for (let restarts = 0; ; ) {
      let page: Awaited<ReturnType<KubeClient['list']>>;
      try {
        page = await this.client.list<T>(this.rt, {
          namespace: this.opts.namespace,
          labelSelector: this.opts.labelSelector,
          fieldSelector: this.opts.fieldSelector,
          limit: this.opts.pageSize ?? 500,
          continue: cont,
        });
      } catch (err) {
        // An expired continue token (410) only invalidates this pagination: start the list over.
        if (cont && err instanceof ApiError && err.status === 410 && restarts++ < 3) {
          items.length = 0;
          cont = undefined;
          continue;
        }
        throw err;
      }
      if (signal.aborted) return;
      items.push(...(page.items as T[]));
      rv = page.resourceVersion;
      cont = page.continue;
      if (!cont) break;
    }
    const seen = new Set<string>();
    for (const obj of items) seen.add(this.upsert(obj));
    for (const [key, obj] of this.store) if (!seen.has(key)) this.remove(key, obj);
    this.rv = rv;
    this.stats.lists++;
    this.opts.metrics?.informerRelists.inc({ resource: this.resourceLabel });
    this.log.debug({ objects: this.store.size, resourceVersion: rv }, 'listed');
  }

  /** One watch stream. 'gone' = relist needed; 'ended' = server closed the stream normally. */
  private async watchOnce(signal: AbortSignal, backoff: Backoff): Promise<'gone' | 'ended'> {
    const ac = new AbortController();
    const onStop = () => ac.abort();
    signal.addEventListener('abort', onStop, { once: true });
    let gone = false;
    let failure: ApiError | undefined;
    const base = this.opts.watchTimeoutSeconds ?? 300;
    try {
      await this.client.watch(
        this.rt,
        {
          namespace: this.opts.namespace,
          resourceVersion: this.rv,
          allowWatchBookmarks: true,
          timeoutSeconds: Math.max(1, Math.round(base * (0.9 + Math.random() * 0.2))),
          labelSelector: this.opts.labelSelector,
          fieldSelector: this.opts.fieldSelector,
          inactivityTimeoutMs: this.opts.clientTimeoutMs ?? 90_000,
          onConnected: () => {
            this.stats.watches++;
            backoff.reset();
          },
        },
        (type, obj) => {
          switch (type) {
            case 'ADDED':
            case 'MODIFIED':
              this.upsert(obj as T);
              this.rv = (obj as T).metadata.resourceVersion ?? this.rv;
              break;
            case 'DELETED': {
              const o = obj as T;
              const key = objectKey(o);
              if (this.store.has(key)) this.remove(key, o);
              this.rv = o.metadata.resourceVersion ?? this.rv;
              break;
            }
            case 'BOOKMARK':
              this.rv = (obj as T).metadata?.resourceVersion ?? this.rv;
              break;
            case 'ERROR': {
              const st = obj as { code?: number; reason?: string; message?: string };
              if (st.code === 410) gone = true;
              else
                failure = new ApiError(
                  `watch ERROR event: ${st.code} ${st.reason}: ${st.message}`,
                  st.code ?? 500,
                  { reason: st.reason, body: st },
                );
              ac.abort();
              break;
            }
          }
        },
        ac.signal,
      );
    } finally {
      signal.removeEventListener('abort', onStop);
    }
    if (gone) {
      this.markGone('watch ERROR event');
      return 'gone';
    }
    if (failure) throw failure;
    if (!signal.aborted)
      this.opts.metrics?.informerWatchRestarts.inc({ resource: this.resourceLabel, reason: 'timeout' });
    return 'ended';
  }

  /** Stores `obj`, emits add/update (nothing when the resourceVersion is unchanged). Returns the key. */
  private upsert(received: T): string {
    const key = objectKey(received);
    const old = this.store.get(key);
    if (old && old.metadata.resourceVersion === received.metadata.resourceVersion) return key;
    const transform = this.opts.transform === undefined ? stripManagedFields : this.opts.transform;
    const obj = transform ? transform(received) : received;
    this.store.set(key, obj);
    const later = this.observed.get(key);
    this.createdUntil.delete(key);
    if (later && !laterVersion(later.metadata.resourceVersion, obj.metadata.resourceVersion))
      this.observed.delete(key);
    if (!old && this.rt.namespaced) {
      const ns = obj.metadata.namespace ?? '';
      const set = this.byNamespace.get(ns);
      if (set) set.add(key);
      else this.byNamespace.set(ns, new Set([key]));
    }
    for (const [name, fn] of this.indexers) this.indexOne(name, fn, key, obj);
    this.emit(old ? 'update' : 'add', obj, old);
    return key;
  }

  private remove(key: string, last: T): void {
    const cached = this.store.get(key);
    this.dropObserved(key);
    this.writers.delete(key);
    if (!cached) return;
    this.store.delete(key);
    if (this.rt.namespaced) {
      const ns = cached.metadata.namespace ?? '';
      const set = this.byNamespace.get(ns);
      set?.delete(key);
      if (set?.size === 0) this.byNamespace.delete(ns);
    }
    for (const name of this.indexers.keys()) this.unindexOne(name, key);
    this.emit('delete', last);
  }

  private indexOne(name: string, fn: (obj: T) => string[], key: string, obj: T): void {
    this.unindexOne(name, key);
    let values: string[];
    try {
      values = fn(obj);
    } catch (err) {
      this.log.error({ err, index: name, key }, 'index function threw; object not indexed');
      return;
    }
    const idx = this.indices.get(name)!;
    for (const v of values) {
      const set = idx.get(v);
      if (set) set.add(key);
      else idx.set(v, new Set([key]));
    }
    this.indexed.get(name)!.set(key, values);
  }

  private unindexOne(name: string, key: string): void {
    const byKey = this.indexed.get(name)!;
    const prev = byKey.get(key);
    if (!prev) return;
    const idx = this.indices.get(name)!;
    for (const v of prev) {
      const set = idx.get(v);
      set?.delete(key);
      if (set?.size === 0) idx.delete(v);
    }
    byKey.delete(key);
  }

  private emit(event: InformerEvent, obj: T, old?: T): void {
    for (const h of this.handlers[event]) {
      try {
        const r: unknown = h(obj, old);
        if (r instanceof Promise) r.catch((err: unknown) => this.handlerFailed(err, event, obj));
      } catch (err) {
        this.handlerFailed(err, event, obj);
      }
    }
  }

  private handlerFailed(err: unknown, event: InformerEvent, obj: T): void {
    this.log.error({ err, event, key: objectKey(obj) }, 'informer event handler threw');
  }
}
