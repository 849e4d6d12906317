/**
 * Writes one condition on an object whose `status.conditions` several writers share.
 *
 * The write is a server-side apply of `status.conditions` holding exactly this entry, with a field
 * manager of its own per condition type: the API server merges it into the list (a map keyed by
 * `type`, see the CRD's `x-kubernetes-list-type: map`), so no writer can drop another's condition.
 * `lastTransitionTime` moves only when `status` changes (Kubernetes API conventions), and a stored
 * condition that already says the same for this generation or a later one is not written again.
 */
import { isDeepStrictEqual } from 'node:util';
import type { KubeClient } from './client.js';
import { type Condition, findCondition } from './conditions.js';
import { apiVersionOf, type KObject, type ResourceType } from './resource.js';
import { rfc3339 } from './time.js';

/**
 * The one rule of every condition writer: undefined when the stored condition of `cond.type`
 * already says the same at an `observedGeneration` at least as new (nothing to write, so a repeated
 * callback is harmless); otherwise the `lastTransitionTime` to write — the stored one while
 * `status` is unchanged, `now` when it changes (Kubernetes API conventions).
 */
export function conditionTransition(
  conditions: readonly Condition[] | undefined,
  cond: { type: string; status: string; reason: string; message: string },
  observedGeneration: number,
  now: Date,
): string | undefined {
  const existing = findCondition(conditions as Condition[] | undefined, cond.type);
  if (
    existing &&
    existing.status === cond.status &&
    existing.reason === cond.reason &&
    existing.message === cond.message &&
    (existing.observedGeneration ?? 0) >= observedGeneration
  ) {
    return undefined;
  }
  return existing && existing.status === cond.status ? existing.lastTransitionTime : rfc3339(now);
}

export interface ConditionUpdate {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  /** Default: the object's `metadata.generation`. */
  observedGeneration?: number;
}

type WithConditions = KObject & { status?: { conditions?: Condition[] } };

/**
 * Applies `cond` on `obj`'s status subresource with `fieldManager` (force: the type is this
 * writer's). `fields`: top-level status fields this field manager owns, sent in the same apply
 * (all of them every time: an apply that leaves one out removes it); they make the write happen
 * when they differ from the stored ones. Resolves `false` without a request when nothing would
 * change. API errors propagate as `ApiError`.
 */
export async function applyCondition(
  client: KubeClient,
  rt: ResourceType,
  obj: WithConditions,
  cond: ConditionUpdate,
  fieldManager: string,
  now = new Date(),
  fields: Record<string, unknown> = {},
): Promise<boolean> {
  const observedGeneration = cond.observedGeneration ?? obj.metadata.generation ?? 0;
  const transition = conditionTransition(obj.status?.conditions, cond, observedGeneration, now);
  const stored = obj.status as Record<string, unknown> | undefined;
  const fieldsChanged = Object.entries(fields).some(([k, v]) => !isDeepStrictEqual(stored?.[k], v));
  if (transition === undefined && !fieldsChanged) return false;
  const prior = findCondition(obj.status?.conditions, cond.type);
  const lastTransitionTime = transition ?? prior?.lastTransitionTime ?? rfc3339(now);
  await client.apply(
    rt,
    {
      apiVersion: apiVersionOf(rt),
      kind: rt.kind,
      metadata: {
        name: obj.metadata.name,
        ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}),
      },
      status: {
        ...fields,
        conditions: [
          {
            type: cond.type,
            status: cond.status,
            reason: cond.reason,
            message: cond.message,
            observedGeneration: Math.max(observedGeneration, prior?.observedGeneration ?? 0),
            lastTransitionTime,
          },
        ],
      },
    },
    { subresource: 'status', fieldManager, force: true },
  );
  return true;
}
