/**
 * Conditions on objects whose `status.conditions` several writers share (SBC: boot server, registry
 * and the controllers; Server: the Server and ServerClaim controllers). Each condition type is
 * written by server-side apply with a field manager of its own, so the API server merges the entry
 * into the list (a map keyed by `type`) and no writer can drop another's condition — the same
 * convention as `recordSignal` in src/bootsignals/signal-condition.ts, for any kind.
 */
import type { Condition } from '../../api/v1alpha1/schema.js';
import type { KubeClient } from '../../runtime/client.js';
import { applyCondition, type ConditionUpdate } from '../../runtime/condition-writer.js';
import type { KObject, ResourceType } from '../../runtime/resource.js';

/** Field-manager prefix of every condition the controllers own. */
export const CONTROLLER_COMPONENT = 'metal-operator';

/** A condition the controllers own (one field manager per type). */
export type OwnedCondition = ConditionUpdate;

type WithConditions = KObject & { status?: { conditions?: Condition[] } };

/**
 * Applies `cond` on `obj`'s status with field manager `metal-operator-<type>` (see
 * `applyCondition`). Resolves `false` without writing when the stored condition is already
 * identical. API errors propagate (a reconcile retries them).
 */
export function applyOwnedCondition(
  client: KubeClient,
  rt: ResourceType,
  obj: WithConditions,
  cond: OwnedCondition,
  now = new Date(),
): Promise<boolean> {
  return applyCondition(client, rt, obj, cond, `${CONTROLLER_COMPONENT}-${cond.type}`, now);
}
