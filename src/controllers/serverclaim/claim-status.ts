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
import { Resources } from '../../runtime/resource.js';
import { StatusPatch } from '../../runtime/status-patch.js';
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
   * claim's resourceVersion (runtime/status-patch.ts); returns the stored claim, or `claim` itself
   * when nothing changed.
   */
  async save(
    claim: ServerClaim,
    changes: { boot?: Boot | null; phase?: string; conditions?: CondInput[] },
  ): Promise<ServerClaim> {
    const now = new Date();
    const generation = claim.metadata.generation ?? 0;
    const patch = new StatusPatch(this.o.client, Resources.ServerClaim, claim);
    const given = new Set((changes.conditions ?? []).map((c) => c.type));
    for (const c of changes.conditions ?? []) patch.setCondition(c, now);
    // Every condition this reconcile evaluated carries its generation (`kubectl wait` after an edit).
    for (const c of claim.status?.conditions ?? []) {
      if (OWN_CONDITIONS.has(c.type) && !given.has(c.type) && (c.observedGeneration ?? 0) < generation)
        patch.setCondition({ ...c, observedGeneration: generation }, now);
    }
    if (changes.phase !== undefined) patch.set({ phase: changes.phase });
    if (changes.boot !== undefined && !isDeepStrictEqual(changes.boot ?? undefined, claim.status?.boot))
      patch.set({ boot: changes.boot });
    return patch.commit();
  }
}
