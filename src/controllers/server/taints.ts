/**
 * What Server taints do besides blocking a bind (server-selection.ts), and the one documented way
 * into and out of `Maintenance`.
 *
 * - Effect `Evict` (upstream metal-operator's enum: `NoBind`, `Evict`): a bound claim that does not
 *   tolerate it is released, as a Kubernetes `NoExecute` taint evicts a pod: the Server is powered
 *   off and its claim reference, power and boot configuration are cleared, the claim's SBC is
 *   deleted, the claim reads `Bound=False` / `Booted=False` with reason `Evicted` naming the taint,
 *   and a Warning Event `Evicted` goes to the claim and to the Server. `spec.serverRef` is immutable
 *   once set (upstream's CRD rule), so the claim waits for that Server: it binds again once the
 *   taint is gone or tolerated (then `Booted` starts a new series).
 * - The taint {@link MAINTENANCE_TAINT_KEY} (any value, any effect; what `metalctl cordon` sets): an
 *   unclaimed Server in Available, Error or just released goes to state `Maintenance`, where nothing
 *   is powered, discovered or bound; without the taint (`metalctl uncordon`) it returns to
 *   `Available` (or `Initial` when it was never discovered, `Cleaning` when a cleanup boot is still
 *   owed, cleanup.ts). A claimed Server stays with its claim
 *   until released, unless the effect is `Evict`.
 */
import type pino from 'pino';
import type { Server, ServerState } from '../../api/v1alpha1/server.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import { ConditionType, TaintReason } from '../../api/vocabulary.js';
import { findCondition } from '../../runtime/conditions.js';
import type { Result } from '../../runtime/controller.js';
import type { EventRecorder } from '../../runtime/events.js';
import { Resources } from '../../runtime/resource.js';
import { MAINTENANCE_TAINT_KEY, maintenanceTaint, taintText, tolerates } from '../common/server-selection.js';
import { cleanupPending } from './cleanup.js';

export { taintText };

type Taint = NonNullable<Server['spec']['taints']>[number];

// Defined beside the other taint helpers (server-selection.ts) so cleanup.ts can read it without
// importing this file, which imports cleanup.ts.
export { MAINTENANCE_TAINT_KEY, maintenanceTaint };
/** Condition reason and Event reason of a claim released by an `Evict` taint. */
export const EVICTED_REASON = TaintReason.Evicted;
export const MAINTENANCE_STARTED_REASON = TaintReason.MaintenanceStarted;
export const MAINTENANCE_ENDED_REASON = TaintReason.MaintenanceEnded;

/** The first `Evict` taint of `server` that `claim` does not tolerate, or undefined. */
export function evictingTaint(claim: ServerClaim, server: Server): Taint | undefined {
  return (server.spec.taints ?? []).find(
    (t) => (t.effect ?? 'NoBind') === 'Evict' && !tolerates(claim.spec.tolerations, t),
  );
}

/**
 * Where an unclaimed Server's state goes because of the maintenance taint: `Maintenance`, back to
 * `Available`/`Initial`, or undefined (no change). Initial and Discovery finish first.
 */
export function maintenanceTransition(server: Server, state: ServerState): ServerState | undefined {
  if (server.spec.serverClaimRef) return undefined;
  const tainted = !!maintenanceTaint(server);
  if (tainted && (state === 'Available' || state === 'Error' || state === 'Reserved')) return 'Maintenance';
  if (!tainted && state === 'Maintenance') {
    const discovered = findCondition(server.status?.conditions, ConditionType.Discovered)?.status === 'True';
    if (!discovered && !server.status?.registration) return 'Initial';
    return cleanupPending(server) ? 'Cleaning' : 'Available';
  }
  return undefined;
}

/**
 * `taints` with the maintenance taint set to `reason` and `effect` (replacing an earlier one), or
 * without it (`cordon === false`). Pure: what `metalctl cordon|uncordon` writes.
 */
export function withMaintenanceTaint(
  taints: readonly Taint[] | undefined,
  cordon: boolean,
  opts: { reason?: string; effect?: 'NoBind' | 'Evict' } = {},
): Taint[] {
  const rest = (taints ?? []).filter((t) => t.key !== MAINTENANCE_TAINT_KEY);
  if (!cordon) return rest;
  return [
    ...rest,
    {
      key: MAINTENANCE_TAINT_KEY,
      ...(opts.reason ? { value: opts.reason } : {}),
      effect: opts.effect ?? 'NoBind',
    },
  ];
}

export interface TaintActionsOptions {
  events: EventRecorder;
  /** The Server controller's guarded status write (server.ts): tests the state it was decided on. */
  patchStatus(s: Server, status: Record<string, unknown>): Promise<Server>;
}

/** The Server side of the rules above: into and out of Maintenance. The claim side: serverclaim/claim-eviction.ts. */
export class TaintActions {
  constructor(private readonly o: TaintActionsOptions) {}

  /**
   * Applies {@link maintenanceTransition} to an unclaimed Server: resolves a result when the state
   * was changed here (the caller returns it), undefined when nothing is to be done. The state write
   * is the Server controller's guarded write (a `test` of the state it was decided on: 409, retried).
   */
  async maintenance(server: Server, state: ServerState, log: pino.Logger): Promise<Result | undefined> {
    const next = maintenanceTransition(server, state);
    if (!next) return undefined;
    await this.o.patchStatus(server, { state: next });
    const t = maintenanceTaint(server);
    const reason = next === 'Maintenance' ? MAINTENANCE_STARTED_REASON : MAINTENANCE_ENDED_REASON;
    const message =
      next === 'Maintenance'
        ? `taint ${t ? taintText(t) : MAINTENANCE_TAINT_KEY}: state Maintenance (no power actions, no discovery, not claimable)`
        : `taint ${MAINTENANCE_TAINT_KEY} removed: state ${next}`;
    log.info({ from: state, to: next }, 'maintenance');
    this.o.events.record(Resources.Server, server, 'Normal', reason, message);
    return {};
  }
}
