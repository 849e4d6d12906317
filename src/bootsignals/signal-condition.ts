/**
 * Writes one boot-signal condition on a ServerBootConfiguration's status, guarded.
 *
 * Each writer owns only its own condition types (docs/ARCHITECTURE.md, 'A boot attempt'): the write is a server-side
 * apply of `status.conditions` with exactly one entry and a field manager per condition type, so
 * the API server merges it into the map list keyed by `type` and no writer can drop another's
 * condition. `observedGeneration` is the SBC generation the writer acted on (Kubernetes API
 * conventions); `lastTransitionTime` moves only when `status` changes.
 *
 * The apply carries the `metadata.resourceVersion` of the SBC the decision was made on, so the API
 * server refuses it (409) when the SBC changed since — a compare-and-swap (security review S12, S3):
 * a late callback read from a lagging cache can never lower another attempt's `observedGeneration`,
 * a repeat cannot move `lastTransitionTime` because its stale view lacked the first write, and of
 * two clients racing for a pinned script only one write succeeds. On 409 the SBC is read again: a
 * different `spec.bootAttempt` answers 409 `StaleToken` (the request belongs to an earlier
 * attempt), otherwise the decision is made again on the fresh object (at most 4 rounds, then 503).
 */
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { ApiError, type KubeClient } from '../runtime/client.js';
import { conditionTransition } from '../runtime/condition-writer.js';
import { apiVersionOf, Resources } from '../runtime/resource.js';
import { apiFailure } from './boot-target.js';
import { HttpError, unavailable } from './http-error.js';

export interface SignalCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
}

export interface SignalGuard {
  /**
   * Called with the SBC each round (the given one, then fresh reads after a conflict) before the
   * write is decided; throws an `HttpError` to refuse (e.g. 403 when a script is pinned to another
   * client).
   */
  check?: (sbc: ServerBootConfiguration) => void;
  now?: Date;
}

const MAX_ROUNDS = 4;

/**
 * Applies `cond` to `sbc` with field manager `${component}-${cond.type}`, preconditioned on
 * `sbc.metadata.resourceVersion`. Resolves `false` when the stored condition already says the same
 * for this generation (nothing written). Throws `HttpError`: whatever `guard.check` throws, 409
 * `StaleToken` when the SBC moved to another attempt, 404 `NotFound` when it was deleted, 503 when
 * the API server is unavailable or writes keep conflicting.
 */
export async function recordSignal(
  client: KubeClient,
  component: string,
  sbc: ServerBootConfiguration,
  cond: SignalCondition,
  guard: SignalGuard = {},
): Promise<boolean> {
  const attempt = sbc.spec.bootAttempt ?? 1;
  const now = guard.now ?? new Date();
  let current = sbc;
  for (let round = 0; round < MAX_ROUNDS; round++) {
    guard.check?.(current);
    const body = conditionApply(current, cond, now);
    if (!body) return false;
    try {
      await client.apply(Resources.ServerBootConfiguration, body, {
        subresource: 'status',
        fieldManager: `${component}-${cond.type}`,
        force: true,
      });
      return true;
    } catch (err) {
      if (!(err instanceof ApiError && err.conflict)) apiFailure(err, `recording ${cond.type}`);
    }
    let fresh: ServerBootConfiguration | undefined;
    try {
      fresh = await client.get<ServerBootConfiguration>(
        Resources.ServerBootConfiguration,
        sbc.metadata.name!,
        sbc.metadata.namespace,
      );
    } catch (err) {
      apiFailure(err, `re-reading the boot configuration for ${cond.type}`);
    }
    if (!fresh || fresh.metadata.uid !== sbc.metadata.uid)
      throw new HttpError(404, 'NotFound', 'the boot configuration was deleted');
    if ((fresh.spec.bootAttempt ?? 1) !== attempt)
      throw new HttpError(409, 'StaleToken', 'the boot attempt changed while the request was answered');
    current = fresh;
  }
  throw unavailable(`${cond.type}: concurrent writes to the boot configuration`, 1);
}

/** The apply body for `cond` on `sbc`, or undefined when the stored condition already says the same. */
function conditionApply(sbc: ServerBootConfiguration, cond: SignalCondition, now: Date) {
  const observedGeneration = sbc.metadata.generation ?? 0;
  const lastTransitionTime = conditionTransition(sbc.status?.conditions, cond, observedGeneration, now);
  if (lastTransitionTime === undefined) return undefined;
  return {
    apiVersion: apiVersionOf(Resources.ServerBootConfiguration),
    kind: 'ServerBootConfiguration',
    metadata: {
      name: sbc.metadata.name,
      namespace: sbc.metadata.namespace,
      resourceVersion: sbc.metadata.resourceVersion,
      uid: sbc.metadata.uid,
    },
    status: {
      conditions: [
        {
          type: cond.type,
          status: cond.status,
          reason: cond.reason,
          message: cond.message,
          observedGeneration,
          lastTransitionTime,
        },
      ],
    },
  };
}
