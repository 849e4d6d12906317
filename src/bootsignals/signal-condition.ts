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
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import type { KubeClient } from '../runtime/client.js';
import { applyCondition } from '../runtime/condition-writer.js';
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
  try {
    return await applyCondition(
      client,
      Resources.ServerBootConfiguration,
      sbc,
      cond,
      `${component}-${cond.type}`,
      now,
    );
  } catch (err) {
    apiFailure(err, `recording ${cond.type}`);
  }
}
