/**
 * Writes one boot-signal condition on a ServerBootConfiguration's status.
 *
 * Each writer owns only its own condition types (DESIGN.md section 3): the write is a server-side
 * apply of `status.conditions` with exactly one entry and a field manager per condition type, so
 * the API server merges it into the map list keyed by `type` and no writer can drop another's
 * condition. The condition's `observedGeneration` is the SBC generation the writer acted on
 * (Kubernetes API conventions); `lastTransitionTime` moves only when `status` changes, and an
 * identical condition is not written again (repeating a callback is harmless).
 */
import { API_VERSION } from '../api/v1alpha1/schema.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import type { KubeClient } from '../runtime/client.js';
import { findCondition } from '../runtime/conditions.js';
import { Resources } from '../runtime/resource.js';
import { apiFailure } from './boot-target.js';

export interface SignalCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
}

/**
 * Applies `cond` to `sbc` with field manager `${component}-${cond.type}`. Resolves `false` when the
 * stored condition was already identical (nothing written). Throws `HttpError` 503 when the API
 * server is unavailable; other API errors propagate.
 */
export async function recordSignal(
  client: KubeClient,
  component: string,
  sbc: ServerBootConfiguration,
  cond: SignalCondition,
  now = new Date(),
): Promise<boolean> {
  const generation = sbc.metadata.generation ?? 0;
  const existing = findCondition(sbc.status?.conditions, cond.type);
  if (
    existing &&
    existing.status === cond.status &&
    existing.reason === cond.reason &&
    existing.message === cond.message &&
    (existing.observedGeneration ?? 0) >= generation
  ) {
    return false;
  }
  const lastTransitionTime =
    existing && existing.status === cond.status
      ? existing.lastTransitionTime
      : now.toISOString().replace(/\.\d+Z$/, 'Z');
  try {
    await client.apply(
      Resources.ServerBootConfiguration,
      {
        apiVersion: API_VERSION,
        kind: 'ServerBootConfiguration',
        metadata: { name: sbc.metadata.name, namespace: sbc.metadata.namespace },
        status: { conditions: [{ ...cond, observedGeneration: generation, lastTransitionTime }] },
      },
      { subresource: 'status', fieldManager: `${component}-${cond.type}`, force: true },
    );
  } catch (err) {
    apiFailure(err, `recording ${cond.type}`);
  }
  return true;
}
