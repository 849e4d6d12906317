/**
 * The ServerClaim's one status writer: {@link ClaimStatusWriter.save} merges the changes of one
 * reconcile (the boot bookkeeping replaced as a whole, conditions set by type, the phase) into one
 * merge patch of the status subresource, guarded by the claim's resourceVersion (a concurrent write
 * gets 409 and the reconcile retries), and skips the request when nothing changed. Every condition
 * the controller owns is re-stamped with the claim's generation in the same write, so `kubectl wait`
 * after an edit sees the edit observed (Kubernetes API conventions, `observedGeneration`).
 * Errors: the API server's, as ApiError (409 on a stale resourceVersion).
 */
import { isDeepStrictEqual } from 'node:util';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import { ConditionType } from '../../api/vocabulary.js';
import type { KubeClient } from '../../runtime/client.js';
import { setCondition } from '../../runtime/conditions.js';
import { Resources } from '../../runtime/resource.js';
import type { Boot, CondInput } from './claim-context.js';

/** Claim conditions this controller owns; each write re-stamps them with the claim's generation. */
const OWN_CONDITIONS = new Set<string>([
  ConditionType.Bound,
  ConditionType.BootConfigurationReady,
  ConditionType.Booted,
]);

/** Writes a claim's status: one request per reconcile, or none. */
export class ClaimStatusWriter {
  constructor(private readonly o: { client: KubeClient }) {}

  /**
   * Writes status changes (boot replaced as a whole, conditions set by type, phase) guarded by the
   * claim's resourceVersion; returns the stored claim, or `claim` itself when nothing changed.
   */
  async save(
    claim: ServerClaim,
    changes: { boot?: Boot | null; phase?: string; conditions?: CondInput[] },
  ): Promise<ServerClaim> {
    const now = new Date();
    const generation = claim.metadata.generation ?? 0;
    let conditions = claim.status?.conditions ?? [];
    let changed = false;
    const given = new Set((changes.conditions ?? []).map((c) => c.type));
    // Every condition this reconcile evaluated carries its generation (`kubectl wait` after an edit).
    const restamp = conditions.filter(
      (c) => OWN_CONDITIONS.has(c.type) && !given.has(c.type) && (c.observedGeneration ?? 0) < generation,
    );
    for (const c of [
      ...(changes.conditions ?? []),
      ...restamp.map((c) => ({ ...c, observedGeneration: generation })),
    ]) {
      const r = setCondition(
        conditions,
        { ...c, observedGeneration: c.observedGeneration ?? generation },
        now,
      );
      conditions = r.conditions;
      changed ||= r.changed;
    }
    const status: Record<string, unknown> = {};
    if (changed) status.conditions = conditions;
    if (changes.phase !== undefined && changes.phase !== claim.status?.phase) status.phase = changes.phase;
    if (changes.boot !== undefined && !isDeepStrictEqual(changes.boot ?? undefined, claim.status?.boot)) {
      status.boot = changes.boot === null ? null : bootPatch(changes.boot);
    }
    if (Object.keys(status).length === 0) return claim;
    return this.o.client.mergePatch<ServerClaim>(
      Resources.ServerClaim,
      claim.metadata.name ?? '',
      claim.metadata.namespace,
      { metadata: { resourceVersion: claim.metadata.resourceVersion }, status },
      { subresource: 'status' },
    );
  }
}

/** A whole `status.boot` for a merge patch: fields it does not have are deleted (null). */
function bootPatch(b: Boot): Record<string, unknown> {
  const keys = [
    'attempt',
    'phase',
    'series',
    'firstAttempt',
    'attemptStartedAt',
    'poweredOnAt',
    'netbootDeadline',
    'deadline',
    'completedAt',
    'adoptedAt',
    'lastFailure',
    'history',
  ] as const;
  return Object.fromEntries(keys.map((k) => [k, b[k] ?? null]));
}
