/**
 * A controller: informer events → keys in a {@link WorkQueue} → `reconcile` on N workers, after
 * controller-runtime. Guarantees: one key is never reconciled by two workers at once (also across a
 * stop/start, e.g. a leadership change); a failing reconcile is retried with per-key exponential
 * backoff; `requeueAfterMs` schedules a later run (the way to poll slow external state such as BMCs
 * without blocking a worker).
 *
 * A controller's own writes do not defeat its requeue delay: the watch echo of a write this
 * controller made (Informer.writtenBy: same resourceVersion, same request origin) re-enqueues its
 * key only when the reconcile that wrote it asked for no later run; after a `requeueAfterMs` the
 * echo waits for that time (the reconcile already knew what it wrote). Changes by anyone else
 * enqueue at once, as before.
 */
import type pino from 'pino';
import { ApiError, withRequestOrigin } from './client.js';
import type { Informer } from './informer.js';
import { newLogger } from './logger.js';
import type { RuntimeMetrics } from './metrics.js';
import { controllerOf } from './ownerrefs.js';
import { WorkQueue, type WorkQueueOptions } from './queue.js';
import { type KObject, parseObjectKey, Resources, type ResourceType } from './resource.js';

/** What to reconcile: the object's name, and namespace for namespaced kinds. */
export interface Request {
  name: string;
  namespace?: string;
}

/**
 * `requeueAfterMs` > 0: run again after that many ms (failure count reset). `requeue`: run again with
 * rate-limited backoff. Neither: done until the next event. A thrown error counts as a failure and
 * is retried with backoff.
 */
export interface Result {
  requeueAfterMs?: number;
  requeue?: boolean;
  /**
   * With `requeueAfterMs`: the run failed on an external dependency (a BMC refused); the delay grows
   * per key, `requeueAfterMs·2^n` for the n-th such result in a row, up to the queue's
   * `maxRequeueBackoffMs` (see WorkQueue.backoffDelayMs). Any other result resets it.
   */
  backoff?: boolean;
  /** With `backoff`: the grown delay never exceeds this many ms (a deadline that must be acted on). */
  latestMs?: number;
}

export interface ControllerOptions {
  // biome-ignore lint/suspicious/noConfusingVoidType: reconcilers that never requeue simply return nothing
  reconcile: (req: Request) => Promise<Result | void>;
  /** Concurrent reconciles (of different keys). Default 1. */
  workers?: number;
  log?: pino.Logger;
  metrics?: RuntimeMetrics;
  /** Work-queue tuning (backoff and rate limit). */
  queue?: Omit<WorkQueueOptions, 'name' | 'metrics'>;
}

export class Controller {
  private queue?: WorkQueue;
  private readonly sources: (() => void)[] = [];
  private workersDone: Promise<void> = Promise.resolve();
  private readonly workers: number;
  private readonly log: pino.Logger;
  /** Keys whose last reconcile asked to run again not before this time (performance.now() ms). */
  private readonly holdUntil = new Map<string, number>();
  /**
   * Update events that arrived while their key's reconcile ran, each with its "is it our own echo?"
   * test: any foreign one re-enqueues at once; echoes only when the reconcile asked for no delay.
   */
  private readonly duringRun = new Map<string, (() => boolean)[]>();

  constructor(
    readonly name: string,
    private readonly opts: ControllerOptions,
  ) {
    this.workers = Math.max(1, opts.workers ?? 1);
    this.log = (opts.log ?? newLogger('controller')).child({ controller: name });
  }

  /**
   * Enqueues `map(obj)` for every add, update (old and new object) and delete seen by `inf`, and for
   * every cached object when the controller starts. Default map: the object itself.
   *
   * `opts.mapOld` maps the old object of an update instead of `map` (only with a `map`: without one,
   * an update enqueues the object itself, once): for a map that answers "who may act now that it
   * looks like this", which the replaced version no longer does. Why: the claim controller wakes the
   * waiting claims of an available Server, and mapping the old version too woke them again on every
   * binding (quadratic in a fleet of claims).
   */
  watches<T extends KObject>(
    inf: Informer<T>,
    map?: (obj: T) => Request[],
    opts: { mapOld?: (old: T) => Request[] } = {},
  ): this {
    const toRequests =
      map ?? ((o: T) => [{ name: o.metadata.name ?? '', namespace: o.metadata.namespace || undefined }]);
    const oldToRequests = opts.mapOld ?? toRequests;
    const enqueueFor = (obj: T) => {
      let reqs: Request[];
      try {
        reqs = toRequests(obj);
      } catch (err) {
        this.log.error({ err, informer: inf.rt.kind }, 'watch map function threw');
        return;
      }
      for (const r of reqs) this.enqueue(r);
    };
    const updated = (obj: T, old?: T) => {
      let reqs: Request[];
      try {
        reqs = toRequests(obj);
        if (map && old) reqs = [...reqs, ...oldToRequests(old)];
      } catch (err) {
        this.log.error({ err, informer: inf.rt.kind }, 'watch map function threw');
        return;
      }
      // The watch may deliver a write's echo before the write's own answer has been read, so
      // whether it is an echo is asked again when the reconcile of its key ends.
      const own = () => inf.writtenBy(obj) === this.name;
      for (const r of reqs) this.enqueueUpdate(r, own);
    };
    inf.on('add', (o) => enqueueFor(o));
    inf.on('update', (o, old) => updated(o, old));
    inf.on('delete', (o) => enqueueFor(o));
    this.sources.push(() => {
      for (const o of inf.list()) enqueueFor(o);
    });
    return this;
  }

  /**
   * Enqueues the controller owner (ownerReference with `controller: true` and kind `ownerKind`) of
   * every object seen by `inf`. The owner is looked up in the dependent's namespace when the owner
   * kind is namespaced, else at cluster scope (owner references never cross namespaces). Pass a
   * ResourceType for kinds not in {@link Resources}; an unknown kind name is assumed namespaced
   * like the dependent.
   */
  owns<T extends KObject>(inf: Informer<T>, ownerKind: string | ResourceType): this {
    const kind = typeof ownerKind === 'string' ? ownerKind : ownerKind.kind;
    const known: ResourceType | undefined =
      typeof ownerKind === 'string' ? Object.values(Resources).find((r) => r.kind === ownerKind) : ownerKind;
    return this.watches(inf, (obj) => {
      const ref = controllerOf(obj);
      if (!ref || ref.kind !== kind) return [];
      const namespaced = known ? known.namespaced : !!obj.metadata.namespace;
      return [{ name: ref.name, namespace: namespaced ? obj.metadata.namespace : undefined }];
    });
  }

  /** Queues a reconcile of `req` (deduplicated). Ignored while the controller is stopped. */
  enqueue(req: Request): void {
    if (!req.name) return;
    this.queue?.add(req.namespace ? `${req.namespace}/${req.name}` : req.name);
  }

  /** An update event for `req`; `own()`: it is the echo of this controller's write (see the class comment). */
  private enqueueUpdate(req: Request, own: () => boolean): void {
    const q = this.queue;
    if (!req.name || !q) return;
    const key = req.namespace ? `${req.namespace}/${req.name}` : req.name;
    if (q.isProcessing(key)) {
      const list = this.duringRun.get(key) ?? [];
      list.push(own);
      this.duringRun.set(key, list);
      return;
    }
    if (!own()) {
      q.add(key);
      return;
    }
    const wait = (this.holdUntil.get(key) ?? 0) - performance.now();
    if (wait > 0) q.addAfter(key, wait);
    else {
      this.holdUntil.delete(key);
      q.add(key);
    }
  }

  /** Queues `req` after `ms` milliseconds. */
  enqueueAfter(req: Request, ms: number): void {
    if (!req.name) return;
    this.queue?.addAfter(req.namespace ? `${req.namespace}/${req.name}` : req.name, ms);
  }

  get running(): boolean {
    return !!this.queue && !this.queue.isShuttingDown;
  }

  /**
   * Starts the workers and enqueues every object the watched informers hold. After a `stop()`, the new
   * workers begin only once the previous ones have finished, so keys never overlap.
   */
  start(): void {
    if (this.running) return;
    const q = new WorkQueue({ ...this.opts.queue, name: this.name, metrics: this.opts.metrics });
    this.queue = q;
    for (const s of this.sources) s();
    this.workersDone = this.workersDone.then(async () => {
      await Promise.all(Array.from({ length: this.workers }, () => this.work(q)));
    });
    this.log.info({ workers: this.workers, queued: q.len() }, 'controller started');
  }

  /**
   * Stops handing out keys (queued keys are dropped: a restart re-enqueues everything from the caches).
   * With `drain`, resolves once every reconcile in flight has finished.
   */
  async stop(drain = false): Promise<void> {
    const q = this.queue;
    if (q && !q.isShuttingDown) {
      this.log.info({ drain, inFlight: q.inFlight(), dropped: q.len() }, 'controller stopping');
      await q.shutDown(drain);
    }
    if (drain) await this.workersDone;
  }

  private async work(q: WorkQueue): Promise<void> {
    for (;;) {
      const key = await q.get();
      if (key === undefined) return;
      await this.process(q, key);
    }
  }

  private async process(q: WorkQueue, key: string): Promise<void> {
    const m = this.opts.metrics;
    m?.activeWorkers.inc({ controller: this.name });
    const t0 = performance.now();
    let result: 'success' | 'error' | 'requeue' | 'requeue_after' = 'success';
    try {
      const res = await withRequestOrigin(this.name, () => this.opts.reconcile(parseObjectKey(key)));
      const during = this.duringRun.get(key) ?? [];
      this.duringRun.delete(key);
      const echo = during.length > 0;
      if (during.some((own) => !own())) q.add(key);
      if (res?.requeueAfterMs && res.requeueAfterMs > 0) {
        let delay = res.requeueAfterMs;
        if (res.backoff) {
          delay = q.backoffDelayMs(key, delay);
          if (res.latestMs !== undefined) delay = Math.min(delay, Math.max(0, res.latestMs));
        } else q.forget(key);
        q.addAfter(key, delay);
        this.holdUntil.set(key, performance.now() + delay);
        result = 'requeue_after';
      } else {
        this.holdUntil.delete(key);
        if (res?.requeue) {
          q.addRateLimited(key);
          result = 'requeue';
        } else {
          q.forget(key);
          if (echo) q.add(key);
        }
      }
    } catch (err) {
      this.duringRun.delete(key);
      this.holdUntil.delete(key);
      result = 'error';
      m?.reconcileErrors.inc({ controller: this.name });
      // Conflicts are the normal outcome of optimistic concurrency: retry quietly, with the per-key
      // backoff only (see WorkQueue.addWithBackoff).
      const quiet = err instanceof ApiError && err.status === 409;
      if (quiet) q.addWithBackoff(key);
      else q.addRateLimited(key);
      this.log[quiet ? 'debug' : 'error'](
        { err, key, retries: q.numRequeues(key) },
        'reconcile failed; requeued',
      );
    } finally {
      // One debug line per reconcile: where a step's time went (queue or work), in ms (bench/e2e.ts).
      if (this.log.isLevelEnabled('debug'))
        this.log.debug(
          {
            ...parseObjectKey(key),
            queuedMs: round1(q.queuedMs(key)),
            ms: round1(performance.now() - t0),
            result,
          },
          'reconciled',
        );
      q.done(key);
      if (m) {
        m.activeWorkers.dec({ controller: this.name });
        m.reconcileTime.observe({ controller: this.name }, (performance.now() - t0) / 1000);
        m.reconcileTotal.inc({ controller: this.name, result });
      }
    }
  }
}

function round1(ms: number | undefined): number | undefined {
  return ms === undefined ? undefined : Math.round(ms * 10) / 10;
}
