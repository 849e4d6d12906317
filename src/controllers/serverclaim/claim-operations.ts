/**
 * The operation annotation as the ServerClaim controller reads it, on the claim and on its Server
 * (upstream metal-operator `ServerClaimReconciler`: `shouldIgnoreReconciliation`,
 * `isServerParkingOrParked`):
 *
 * - On the claim: `ignore` skips reconciling it (its deletion still runs, as upstream); `retry`
 *   starts a new boot series (serverclaim.ts); any other value: Warning `UnsupportedOperation`,
 *   removed (upstream leaves other values on a claim in place, unused).
 * - On the bound Server: parked or asked to park (server-operations.ts), or `ignore`: the claim
 *   controller stands down — no power action, no boot, no status write — and the claim stays Bound.
 *   A deletion of the claim waits (`Released=False` `ServerParked` / `ServerIgnored`) instead of
 *   powering the Server off: released after `unpark` or once `ignore` is removed.
 */
import type pino from 'pino';
import {
  OPERATION_ANNOTATION,
  OPERATION_IGNORE,
  OPERATION_PARK,
  OPERATION_RETRY,
  PARKED_ANNOTATION,
} from '../../api/v1alpha1/operations.js';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import { EventReason, ReleaseReason } from '../../api/vocabulary.js';
import type { KubeClient } from '../../runtime/client.js';
import type { EventRecorder } from '../../runtime/events.js';
import { Resources } from '../../runtime/resource.js';

/** What the claim's own annotation asks: skip it, reject an unknown value, or nothing here. Pure. */
export function claimOperation(
  claim: ServerClaim,
): { kind: 'ignore' } | { kind: 'unsupported'; op: string } | undefined {
  const op = claim.metadata.annotations?.[OPERATION_ANNOTATION];
  if (!op || op === OPERATION_RETRY) return undefined;
  return op === OPERATION_IGNORE ? { kind: 'ignore' } : { kind: 'unsupported', op };
}

/** Why the claim controller must leave `server` alone now, or undefined. Pure. */
export function serverHold(server: Server): { reason: string; message: string } | undefined {
  const ann = server.metadata.annotations ?? {};
  const name = server.metadata.name;
  if (PARKED_ANNOTATION in ann || ann[OPERATION_ANNOTATION] === OPERATION_PARK)
    return {
      reason: ReleaseReason.ServerParked,
      message: `Server ${name} is parked (${PARKED_ANNOTATION}); released after unpark`,
    };
  if (ann[OPERATION_ANNOTATION] === OPERATION_IGNORE)
    return {
      reason: ReleaseReason.ServerIgnored,
      message: `Server ${name} carries ${OPERATION_ANNOTATION}: ignore; released once it is removed`,
    };
  return undefined;
}

/** Removes an unsupported operation value from a claim, with a Warning (guarded by the resourceVersion). */
export async function rejectClaimOperation(
  o: { client: KubeClient; events: EventRecorder },
  claim: ServerClaim,
  op: string,
  log: pino.Logger,
): Promise<void> {
  await o.client.mergePatch(Resources.ServerClaim, claim.metadata.name ?? '', claim.metadata.namespace, {
    metadata: {
      resourceVersion: claim.metadata.resourceVersion,
      annotations: { [OPERATION_ANNOTATION]: null },
    },
  });
  log.warn({ operation: op }, 'unsupported operation annotation removed');
  o.events.record(
    Resources.ServerClaim,
    claim,
    'Warning',
    EventReason.UnsupportedOperation,
    `Unsupported operation annotation "${op}" (a ServerClaim takes ${OPERATION_IGNORE} and ${OPERATION_RETRY})`,
  );
}
