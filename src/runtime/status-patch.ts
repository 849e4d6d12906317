/**
 * The controllers' status writer, in the manner of cluster-api's patch helper: take a snapshot of
 * an object's `status`, mutate a draft of it, and {@link StatusPatch.commit} writes the difference in
 * one request (or none when nothing changed).
 *
 * The guard says what the write is conditional on — the one choice a writer makes:
 * - `resourceVersion` (default): a JSON merge patch (RFC 7386) of the changed fields, carrying
 *   `metadata.resourceVersion`, so the API server refuses it with 409 when the object moved since
 *   the snapshot; the conditions list, when it changed, rides whole (the version pins every entry).
 *   For status this controller alone writes (BMC, BMCUser, ServerClaim).
 * - `{ test: fields }`: a JSON patch (RFC 6902) whose `test` ops pin the named top-level status
 *   fields to the snapshot's values and whose condition ops touch only the entries this write
 *   changes (each replace preceded by a `test` of the type at that index; a new entry appended, the
 *   CRD's list-map key refusing a concurrent duplicate). For status several writers share (the
 *   Server: power, signals, the claim controller), where the resourceVersion moves all the time
 *   without invalidating the decision. A failed `test` (422) is raised as 409, like a stale version.
 *   A snapshot without a conditions list, or one `resourceVersionWhen` names, falls back to the
 *   resourceVersion guard (there is nothing to test against).
 * - `none`: a merge patch without precondition, for what this writer alone writes (the observed
 *   `powerState` of a Server; a BMCUser's status, conditions included, whose controller writes it
 *   more than once in a pass): the last write wins, and a conditions list rides whole, so it is
 *   only for lists nobody else writes.
 *
 * Conditions (Kubernetes API conventions): `lastTransitionTime` moves only when `status` changes,
 * `observedGeneration` defaults to the object's generation, and an entry that already says the same
 * for that generation or a later one is not rewritten (runtime/condition-writer.ts
 * `conditionTransition`). Conditions whose list several processes write by server-side apply (the
 * SBC's signals) keep `applyCondition` there.
 * Errors: the API server's, as ApiError (409 on a failed precondition).
 */
import { isDeepStrictEqual } from 'node:util';
import { ApiError, type KubeClient } from './client.js';
import { type ConditionUpdate, conditionTransition } from './condition-writer.js';
import type { Condition } from './conditions.js';
import type { KObject, ResourceType } from './resource.js';

type Status = Record<string, unknown> & { conditions?: Condition[] };
type WithStatus = KObject & { status?: object };

/** What the write is conditional on (see the file comment). */
export type StatusGuard =
  | 'resourceVersion'
  | 'none'
  | { test: readonly string[]; resourceVersionWhen?: (snapshot: Status) => boolean };

/** The one request a patch makes: its content type's body, ready to send. */
export type StatusPatchPlan =
  | { type: 'merge'; body: { metadata?: { resourceVersion?: string }; status: Record<string, unknown> } }
  | { type: 'json'; ops: Record<string, unknown>[] };

/** The request that turns `before` into `after` under `guard` (pure); undefined when they are equal. */
export function planStatusPatch(
  before: Status,
  after: Status,
  guard: StatusGuard,
  resourceVersion: string | undefined,
): StatusPatchPlan | undefined {
  const fields = [...new Set([...Object.keys(before), ...Object.keys(after)])].filter(
    (k) => k !== 'conditions' && !isDeepStrictEqual(before[k], after[k]),
  );
  const conditionsChanged = !isDeepStrictEqual(before.conditions ?? [], after.conditions ?? []);
  if (!fields.length && !conditionsChanged) return undefined;
  const testable =
    typeof guard === 'object' &&
    !(conditionsChanged && before.conditions === undefined) &&
    !guard.resourceVersionWhen?.(before);
  if (typeof guard === 'object' && testable)
    return jsonPlan(before, after, fields, guard.test, conditionsChanged);
  const status: Record<string, unknown> = {};
  for (const k of fields) status[k] = mergeDiff(before[k], after[k]);
  if (conditionsChanged) status.conditions = after.conditions ?? null;
  return {
    type: 'merge',
    body: guard === 'none' ? { status } : { metadata: { resourceVersion }, status },
  };
}

/** RFC 7386 diff of two values: objects recurse (a removed key is `null`), everything else whole. */
function mergeDiff(a: unknown, b: unknown): unknown {
  if (b === undefined) return null;
  if (!isPlainObject(a) || !isPlainObject(b)) return b;
  const out: Record<string, unknown> = {};
  for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
    if (!isDeepStrictEqual(a[k], b[k])) out[k] = mergeDiff(a[k], b[k]);
  }
  return out;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** JSON-patch ops: the guard's tests, the changed fields, then the changed condition entries. */
function jsonPlan(
  before: Status,
  after: Status,
  fields: string[],
  tested: readonly string[],
  conditionsChanged: boolean,
): StatusPatchPlan {
  const ops: Record<string, unknown>[] = [];
  for (const k of tested) {
    if (before[k] !== undefined) ops.push({ op: 'test', path: `/status/${k}`, value: before[k] });
  }
  for (const k of fields) {
    if (after[k] === undefined) ops.push({ op: 'remove', path: `/status/${k}` });
    else ops.push({ op: 'add', path: `/status/${k}`, value: after[k] });
  }
  if (conditionsChanged) ops.push(...conditionOps(before.conditions ?? [], after.conditions ?? []));
  return { type: 'json', ops };
}

/**
 * Ops for the entries that differ: replaced in place (a `test` of the type at that index first),
 * removed from the highest index down (so earlier indices hold), new ones appended.
 */
function conditionOps(before: Condition[], after: Condition[]): Record<string, unknown>[] {
  const ops: Record<string, unknown>[] = [];
  const removed: number[] = [];
  before.forEach((c, i) => {
    const next = after.find((x) => x.type === c.type);
    const at = { op: 'test', path: `/status/conditions/${i}/type`, value: c.type };
    if (!next) removed.push(i);
    else if (!isDeepStrictEqual(c, next))
      ops.push(at, { op: 'replace', path: `/status/conditions/${i}`, value: next });
  });
  for (const i of removed.reverse()) {
    ops.push(
      { op: 'test', path: `/status/conditions/${i}/type`, value: before[i]?.type },
      { op: 'remove', path: `/status/conditions/${i}` },
    );
  }
  for (const c of after) {
    if (!before.some((x) => x.type === c.type))
      ops.push({ op: 'add', path: '/status/conditions/-', value: c });
  }
  return ops;
}

/** One object's status: a snapshot, a draft to mutate, one write of the difference. */
export class StatusPatch<T extends WithStatus> {
  /** The draft: mutate it (assign, delete keys) or use the helpers below. */
  readonly status: Status;
  private readonly before: Status;

  constructor(
    private readonly client: KubeClient,
    private readonly rt: ResourceType,
    private readonly obj: T,
    private readonly guard: StatusGuard = 'resourceVersion',
  ) {
    this.before = structuredClone((obj.status ?? {}) as Status);
    this.status = structuredClone(this.before);
  }

  /**
   * Sets fields; a `null` value deletes the field, an `undefined` one leaves it as it is. Values are
   * stored as JSON would carry them (nested `undefined` keys dropped), so an unchanged value
   * compares equal to the stored one.
   */
  set(fields: Record<string, unknown>): this {
    for (const [k, v] of Object.entries(fields)) {
      if (v === undefined) continue;
      if (v === null) delete this.status[k];
      else this.status[k] = JSON.parse(JSON.stringify(v));
    }
    return this;
  }

  /**
   * Sets condition `cond.type` (appended when absent), stamped with `observedGeneration` (default:
   * the object's generation) and a `lastTransitionTime` that moves only with `status`; a stored
   * entry that already says the same for that generation or a later one is left untouched.
   */
  setCondition(cond: ConditionUpdate, now = new Date()): this {
    const list = this.status.conditions ?? [];
    const observedGeneration = cond.observedGeneration ?? this.obj.metadata.generation ?? 0;
    const lastTransitionTime = conditionTransition(list, cond, observedGeneration, now);
    if (lastTransitionTime === undefined) return this;
    const entry: Condition = {
      type: cond.type,
      status: cond.status,
      reason: cond.reason,
      message: cond.message,
      observedGeneration,
      lastTransitionTime,
    };
    const i = list.findIndex((c) => c.type === cond.type);
    this.status.conditions = i < 0 ? [...list, entry] : list.map((c, j) => (j === i ? entry : c));
    return this;
  }

  /** Removes condition `type` (nothing when absent). */
  removeCondition(type: string): this {
    if (this.status.conditions?.some((c) => c.type === type))
      this.status.conditions = this.status.conditions.filter((c) => c.type !== type);
    return this;
  }

  /** The request {@link commit} would send; undefined when the draft equals the snapshot. */
  plan(): StatusPatchPlan | undefined {
    return planStatusPatch(this.before, this.status, this.guard, this.obj.metadata.resourceVersion);
  }

  /**
   * Writes the difference to the status subresource in one request. Resolves the stored object, or
   * the snapshot's object itself when nothing changed (no request). Throws ApiError: 409 when the
   * guard no longer holds (a failed `test` is raised as 409 `Conflict`), others as the API server said.
   */
  async commit(): Promise<T> {
    const plan = this.plan();
    if (!plan) return this.obj;
    const { name = '', namespace } = this.obj.metadata;
    if (plan.type === 'merge')
      return this.client.mergePatch<T>(this.rt, name, namespace, plan.body, { subresource: 'status' });
    try {
      return await this.client.jsonPatch<T>(this.rt, name, namespace, plan.ops, { subresource: 'status' });
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) {
        throw new ApiError(
          `${this.rt.kind} ${name}: status changed since it was read (${err.message})`,
          409,
          {
            reason: 'Conflict',
            cause: err,
          },
        );
      }
      throw err;
    }
  }
}
