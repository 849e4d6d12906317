/**
 * Event recorder: core/v1 Events written the events.k8s.io way (the same as client-go's
 * `k8s.io/client-go/tools/events` recorder does through core/v1 for older clusters):
 * `eventTime` (MicroTime), `reportingComponent`, `reportingInstance` and `action` set; repeats of one
 * (object, type, reason, message) within 10 minutes update the existing Event — `series.count`,
 * `series.lastObservedTime`, plus the legacy `count`/`lastTimestamp` that `kubectl describe` shows —
 * instead of creating new ones.
 *
 * Recording is fire-and-forget: `event()` never throws and never blocks a reconcile; failures are
 * logged. Writes for one aggregation key are serialised so counts never go backwards.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type pino from 'pino';
import { ApiError, type KubeClient } from './client.js';
import { newLogger } from './logger.js';
import { type KObject, Resources } from './resource.js';
import { microTime, rfc3339 } from './time.js';

/** events.k8s.io series window: repeats within it update the existing Event. */
const SERIES_WINDOW_MS = 10 * 60_000;
/** Validation limits of core/v1 Events that carry eventTime (k8s.io/kubernetes pkg/apis/core/validation/events.go). */
const NOTE_LIMIT = 1024;
const REPORTING_INSTANCE_LIMIT = 128;
const ACTION_LIMIT = 128;
const MAX_CACHED = 4096;
const MAX_PENDING = 1000;

export type EventType = 'Normal' | 'Warning';

export interface EventRecorderOptions {
  log?: pino.Logger;
  /** `reportingInstance`; default `<component>-<hostname>`. */
  instance?: string;
}

interface SeriesEntry {
  name: string;
  namespace: string;
  count: number;
  lastSeen: number;
}

export class EventRecorder {
  private readonly log: pino.Logger;
  private readonly instance: string;
  private readonly series = new Map<string, SeriesEntry>();
  private readonly chains = new Map<string, Promise<void>>();
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly client: KubeClient,
    readonly component: string,
    opts: EventRecorderOptions = {},
  ) {
    this.log = (opts.log ?? newLogger('events')).child({ component: 'events' });
    this.instance = (opts.instance ?? `${component}-${hostname()}`).slice(0, REPORTING_INSTANCE_LIMIT);
  }

  /**
   * Records an Event about `obj` (which needs apiVersion, kind and name; uid when known). The Event
   * lives in the object's namespace, or in `default` for cluster-scoped objects (the only namespaces
   * the API server accepts for those). `action` (what the component did) defaults to `reason`.
   */
  event(
    obj: KObject & { apiVersion?: string; kind?: string },
    type: EventType,
    reason: string,
    message: string,
    opts: { action?: string } = {},
  ): void {
    try {
      if (this.pending.size >= MAX_PENDING) {
        this.log.warn(
          { reason, kind: obj.kind, name: obj.metadata.name },
          'event backlog full; event dropped',
        );
        return;
      }
      const m = obj.metadata;
      if (!m.name || !obj.kind) throw new Error('the object needs kind and metadata.name');
      const note = message.length > NOTE_LIMIT ? `${message.slice(0, NOTE_LIMIT - 3)}...` : message;
      const key = [m.uid || `${obj.kind}/${m.namespace ?? ''}/${m.name}`, type, reason, note].join('\u0000');
      const at = new Date();
      const run = (this.chains.get(key) ?? Promise.resolve())
        .then(() =>
          this.record(key, obj, type, reason, note, at, (opts.action ?? reason).slice(0, ACTION_LIMIT)),
        )
        .catch((err: unknown) =>
          this.log.warn(
            { err, reason, kind: obj.kind, name: m.name, namespace: m.namespace },
            'failed to record event',
          ),
        );
      this.chains.set(key, run);
      this.pending.add(run);
      void run.finally(() => {
        this.pending.delete(run);
        if (this.chains.get(key) === run) this.chains.delete(key);
      });
    } catch (err) {
      this.log.warn({ err, reason, kind: obj?.kind, name: obj?.metadata?.name }, 'failed to record event');
    }
  }

  /** Resolves when every event recorded so far has been written (or has failed and been logged). */
  async flush(): Promise<void> {
    while (this.pending.size) await Promise.allSettled([...this.pending]);
  }

  private async record(
    key: string,
    obj: KObject,
    type: EventType,
    reason: string,
    note: string,
    at: Date,
    action: string,
  ): Promise<void> {
    const prev = this.series.get(key);
    if (prev && at.getTime() - prev.lastSeen < SERIES_WINDOW_MS) {
      const count = prev.count + 1;
      try {
        await this.client.mergePatch(Resources.Event, prev.name, prev.namespace, {
          count,
          lastTimestamp: rfc3339(at),
          series: { count, lastObservedTime: microTime(at) },
        });
        prev.count = count;
        prev.lastSeen = at.getTime();
        this.remember(key, prev);
        return;
      } catch (err) {
        // Deleted meanwhile (Events have a TTL, 1 h by default): start a new one.
        if (!(err instanceof ApiError && err.status === 404)) throw err;
      }
    }
    const m = obj.metadata;
    const namespace = m.namespace || 'default';
    const name = `${m.name!.slice(0, 200)}.${Date.now().toString(16)}${randomBytes(3).toString('hex')}`;
    await this.client.create(Resources.Event, {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { name, namespace },
      involvedObject: {
        apiVersion: obj.apiVersion,
        kind: obj.kind,
        name: m.name,
        ...(m.namespace ? { namespace: m.namespace } : {}),
        ...(m.uid ? { uid: m.uid } : {}),
        ...(m.resourceVersion ? { resourceVersion: m.resourceVersion } : {}),
      },
      type,
      reason,
      message: note,
      action,
      eventTime: microTime(at),
      firstTimestamp: rfc3339(at),
      lastTimestamp: rfc3339(at),
      count: 1,
      source: { component: this.component },
      reportingComponent: this.component,
      reportingInstance: this.instance,
    });
    this.remember(key, { name, namespace, count: 1, lastSeen: at.getTime() });
  }

  /** Keeps the series cache bounded: expired entries first, then the least recently used. */
  private remember(key: string, entry: SeriesEntry): void {
    this.series.delete(key);
    this.series.set(key, entry);
    if (this.series.size <= MAX_CACHED) return;
    const cutoff = Date.now() - SERIES_WINDOW_MS;
    for (const [k, e] of this.series) if (e.lastSeen < cutoff) this.series.delete(k);
    while (this.series.size > MAX_CACHED) this.series.delete(this.series.keys().next().value!);
  }
}
