/**
 * Event recorder: core/v1 Events written the events.k8s.io way (the same as client-go's
 * `k8s.io/client-go/tools/events` recorder does through core/v1 for older clusters):
 * `eventTime` (MicroTime), `reportingComponent`, `reportingInstance` and `action` set.
 *
 * Aggregation, so a reconcile that repeats a step costs no API request per repeat:
 * - repeats of one (object, type, reason, message) within 10 minutes update the existing Event —
 *   `series.count`, `series.lastObservedTime`, plus the legacy `count`/`lastTimestamp` that
 *   `kubectl describe` shows. The first occurrence is created at once; later ones only count in
 *   memory and are written together, at most one PATCH per Event every {@link SERIES_FLUSH_MS}
 *   (client-go's events.k8s.io recorder likewise defers series updates to a heartbeat);
 * - after {@link MAX_SIMILAR} distinct messages for one (object, type, reason) within 10 minutes,
 *   further ones go into one Event with the message `(combined from similar events): <latest>`,
 *   as client-go's `EventCorrelator` (`EventAggregator`, maxEvents 10) does.
 *
 * Recording is fire-and-forget: `event()` never throws and never blocks a reconcile; failures are
 * logged. Writes for one aggregation key are serialised so counts never go backwards; `flush()`
 * writes pending counts at once (the manager calls it on stop). A count still pending when the
 * process is killed is lost (an Event is an audit aid, not state).
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type pino from 'pino';
import { ApiError, type KubeClient } from './client.js';
import { SeriesCache } from './event-series-cache.js';
import { newLogger } from './logger.js';
import { apiVersionOf, type KObject, Resources, type ResourceType } from './resource.js';
import { microTime, rfc3339 } from './time.js';

/** events.k8s.io series window: repeats within it update the existing Event. */
const SERIES_WINDOW_MS = 10 * 60_000;
/** Validation limits of core/v1 Events that carry eventTime (k8s.io/kubernetes pkg/apis/core/validation/events.go). */
const NOTE_LIMIT = 1024;
const REPORTING_INSTANCE_LIMIT = 128;
const ACTION_LIMIT = 128;
const MAX_CACHED = 4096;
const MAX_PENDING = 1000;
/** Series updates (repeat counts) of one Event are written at most this often, in ms. */
export const SERIES_FLUSH_MS = 5_000;
/** Distinct messages per (object, type, reason) before they combine into one Event (client-go: 10). */
export const MAX_SIMILAR = 10;
const COMBINED_PREFIX = '(combined from similar events): ';

export type EventType = 'Normal' | 'Warning';

export interface EventRecorderOptions {
  log?: pino.Logger;
  /** `reportingInstance`; default `<component>-<hostname>`. */
  instance?: string;
}

interface SeriesEntry {
  /** Set once the Event exists. */
  name?: string;
  namespace: string;
  /** Occurrences observed in this series. */
  count: number;
  /** Occurrences the API server has. */
  written: number;
  lastSeen: number;
  /** The latest message (combined Events show the latest one). */
  note: string;
  timer?: NodeJS.Timeout;
}

interface SimilarEntry {
  messages: Set<string>;
  since: number;
}

export class EventRecorder {
  private readonly log: pino.Logger;
  private readonly instance: string;
  private readonly series = new SeriesCache<SeriesEntry>(MAX_CACHED, SERIES_WINDOW_MS);
  private readonly similar = new Map<string, SimilarEntry>();
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
   * Records an Event about `obj` of kind `rt`: the one way controllers name an Event's object
   * (`involvedObject`/`regarding` take apiVersion and kind from `rt`, not from the cached object,
   * which informers store without them). Same contract as {@link event}.
   */
  record(
    rt: ResourceType,
    obj: KObject,
    type: EventType,
    reason: string,
    message: string,
    opts: { action?: string } = {},
  ): void {
    this.event({ ...obj, apiVersion: apiVersionOf(rt), kind: rt.kind }, type, reason, message, opts);
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
      let note = message.length > NOTE_LIMIT ? `${message.slice(0, NOTE_LIMIT - 3)}...` : message;
      const at = new Date();
      const subject = [m.uid || `${obj.kind}/${m.namespace ?? ''}/${m.name}`, type, reason].join('\u0000');
      let key = `${subject}\u0000${note}`;
      if (this.tooManySimilar(subject, note, at.getTime())) {
        key = `${subject}\u0000${COMBINED_PREFIX}`;
        note = `${COMBINED_PREFIX}${note}`.slice(0, NOTE_LIMIT);
      }
      const prev = this.series.get(key);
      if (prev && at.getTime() - prev.lastSeen < SERIES_WINDOW_MS) {
        prev.count++;
        prev.lastSeen = at.getTime();
        prev.note = note;
        this.series.remember(key, prev, at.getTime());
        this.scheduleSeriesWrite(key, prev, obj);
        return;
      }
      const entry: SeriesEntry = {
        namespace: m.namespace || 'default',
        count: 1,
        written: 0,
        lastSeen: at.getTime(),
        note,
      };
      this.series.remember(key, entry, at.getTime());
      const action = (opts.action ?? reason).slice(0, ACTION_LIMIT);
      this.enqueue(key, obj, reason, () => this.create(key, entry, obj, type, reason, at, action));
    } catch (err) {
      this.log.warn({ err, reason, kind: obj?.kind, name: obj?.metadata?.name }, 'failed to record event');
    }
  }

  /**
   * True when `note` is a new message for `subject` after {@link MAX_SIMILAR} others in the window
   * (EventAggregator). The message set is bounded by MAX_SIMILAR.
   */
  private tooManySimilar(subject: string, note: string, now: number): boolean {
    let s = this.similar.get(subject);
    if (!s || now - s.since >= SERIES_WINDOW_MS) {
      s = { messages: new Set(), since: now };
      this.similar.delete(subject);
      this.similar.set(subject, s);
      if (this.similar.size > MAX_CACHED) this.similar.delete(this.similar.keys().next().value!);
    }
    if (s.messages.has(note)) return false;
    if (s.messages.size >= MAX_SIMILAR) return true;
    s.messages.add(note);
    return false;
  }

  /** Runs `write` after the earlier writes of `key`; failures are logged. */
  private enqueue(key: string, obj: KObject, reason: string, write: () => Promise<void>): void {
    const run = (this.chains.get(key) ?? Promise.resolve())
      .then(write)
      .catch((err: unknown) =>
        this.log.warn(
          { err, reason, kind: obj.kind, name: obj.metadata.name, namespace: obj.metadata.namespace },
          'failed to record event',
        ),
      );
    this.chains.set(key, run);
    this.pending.add(run);
    void run.finally(() => {
      this.pending.delete(run);
      if (this.chains.get(key) === run) this.chains.delete(key);
    });
  }

  /** One PATCH for every repeat of `key` seen in the next {@link SERIES_FLUSH_MS}. */
  private scheduleSeriesWrite(key: string, entry: SeriesEntry, obj: KObject): void {
    if (entry.timer) return;
    entry.timer = setTimeout(() => {
      entry.timer = undefined;
      this.enqueue(key, obj, 'series', () => this.writeSeries(key, entry, obj));
    }, SERIES_FLUSH_MS);
    entry.timer.unref();
  }

  /** Resolves when every event recorded so far has been written (or has failed and been logged). */
  async flush(): Promise<void> {
    for (const [key, entry] of this.series.entries()) {
      if (!entry.timer) continue;
      clearTimeout(entry.timer);
      entry.timer = undefined;
      this.enqueue(key, { metadata: {} }, 'series', () => this.writeSeries(key, entry, undefined));
    }
    while (this.pending.size) await Promise.allSettled([...this.pending]);
  }

  /** Writes the repeats counted since the last write; recreates the Event when it expired (TTL). */
  private async writeSeries(key: string, entry: SeriesEntry, obj: KObject | undefined): Promise<void> {
    if (entry.count <= entry.written || !entry.name) return; // its create failed: nothing to update
    const count = entry.count;
    const at = new Date(entry.lastSeen);
    try {
      await this.client.mergePatch(Resources.Event, entry.name, entry.namespace, {
        count,
        lastTimestamp: rfc3339(at),
        series: { count, lastObservedTime: microTime(at) },
        ...(entry.note.startsWith(COMBINED_PREFIX) ? { message: entry.note } : {}),
      });
      entry.written = count;
    } catch (err) {
      // Deleted meanwhile (Events have a TTL, 1 h by default): forget it; the next repeat starts anew.
      if (!(err instanceof ApiError && err.status === 404)) throw err;
      this.series.forget(key, entry);
      if (obj) this.log.debug({ name: entry.name }, 'event expired before its series update');
    }
  }

  private async create(
    key: string,
    entry: SeriesEntry,
    obj: KObject,
    type: EventType,
    reason: string,
    at: Date,
    action: string,
  ): Promise<void> {
    const m = obj.metadata;
    const name = `${m.name!.slice(0, 200)}.${Date.now().toString(16)}${randomBytes(3).toString('hex')}`;
    const count = entry.count;
    const created = this.client.create(Resources.Event, {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { name, namespace: entry.namespace },
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
      message: entry.note,
      action,
      eventTime: microTime(at),
      firstTimestamp: rfc3339(at),
      lastTimestamp: rfc3339(at),
      count,
      ...(count > 1 ? { series: { count, lastObservedTime: microTime(at) } } : {}),
      source: { component: this.component },
      reportingComponent: this.component,
      reportingInstance: this.instance,
    });
    try {
      await created;
    } catch (err) {
      this.series.forget(key, entry); // the next occurrence tries a new Event
      throw err;
    }
    entry.name = name;
    entry.written = count;
  }
}
