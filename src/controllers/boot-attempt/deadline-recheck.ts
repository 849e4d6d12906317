/**
 * The one step the adapters do not decide on informer caches alone: a step that ends an attempt
 * because a deadline passed. It gives up on a boot that may have happened (the next attempt's
 * power-on follows, or exhaustion powers off), and a cache can lag (an API server restart, a watch
 * listing again), so a signal stored just before the deadline must end the attempt as completed, not
 * be lost to a second boot (docs/BOOT-ATTEMPTS.md). {@link recheckDeadline} holds the rule; the
 * adapters hand in how they read their objects from the API server and how they decide on them.
 */
import type { Step } from './handlers.js';

/** Whether `step` ends an attempt because one of its deadlines passed (next attempt, or exhausted). */
export function endsOnDeadline(step: Step): boolean {
  return step.counts?.timedOut === true;
}

/**
 * What the fresh read before an {@link endsOnDeadline} step found (metric
 * `metal_boot_deadline_rechecks_total{result}`): `stands` — decided on the objects as stored (the
 * cache's, when they were current), the deadline still ends the attempt; `averted` — newer objects
 * of the same attempt (signals the cache had not delivered) turned the step into another (completed,
 * or waiting past the netboot deadline); `deferred` — the objects moved on (another attempt or
 * state, gone): nothing is done until the cache has caught up, looked at again after
 * {@link FRESH_LOOK_MS} (growing per key).
 */
export type DeadlineRecheck = 'stands' | 'averted' | 'deferred';

/** The first look again after a `deferred` recheck, ms (the controller's per-key backoff grows it). */
export const FRESH_LOOK_MS = 1_000;

/** What an adapter's read from the API server found, for {@link recheckDeadline}. */
export type FreshRead<V> =
  /** The cached objects are the stored ones. */
  | { kind: 'current' }
  /** Newer objects of the same attempt of the same flow. */
  | { kind: 'newer'; view: V }
  /** Gone, replaced, another attempt or another state. */
  | { kind: 'moved' };

/**
 * Returns `cached` when its step does not end on a deadline (no read) or the stored objects are the
 * cached ones; the decision made again on newer objects of the same attempt; `deferred` when they
 * moved on (the caller returns `{ requeueAfterMs: FRESH_LOOK_MS, backoff: true }`). `V`: what the
 * adapter decides on; `D`: its decision (a step, and whatever else the adapter keeps with it).
 * `count` is told the outcome of every read. Errors of `read` propagate (the reconcile retries).
 */
export async function recheckDeadline<V, D extends { step: Step }>(o: {
  cached: { view: V; decided: D };
  read: () => Promise<FreshRead<V>>;
  decide: (view: V) => D;
  count: (result: DeadlineRecheck) => void;
}): Promise<{ view: V; decided: D } | 'deferred'> {
  if (!endsOnDeadline(o.cached.decided.step)) return o.cached;
  const fresh = await o.read();
  if (fresh.kind === 'current') {
    o.count('stands');
    return o.cached;
  }
  if (fresh.kind === 'moved') {
    o.count('deferred');
    return 'deferred';
  }
  const decided = o.decide(fresh.view);
  o.count(endsOnDeadline(decided.step) ? 'stands' : 'averted');
  return { view: fresh.view, decided };
}
