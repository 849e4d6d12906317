/**
 * Server controller: the life of one machine outside a claim.
 *
 * States (`status.state`): Initial → Discovery → Available ⇄ Reserved; Error; Maintenance (left
 * alone; entered and left through the taint `metal.ironcore.dev/maintenance`, see taints.ts). A
 * Server whose system UUID another Server owns is left alone entirely (system-ownership.ts).
 * - Initial, Discovery: discovery.ts (the probe image's boot until its registration arrives; state
 *   Error after `discoveryMaxAttempts` timed-out attempts). The annotation
 *   `metal.ironcore.dev/operation: retry` on a Server in Error starts it again.
 * - Available: kept powered off.
 * - Cleaning: after a release, when the cleanup boot applies (cleanup.ts): Available only after the
 *   cleanup image reported completion; exhausted attempts: state Error (`Cleaned=False`).
 *   Discovery and cleanup are one boot flow through the engine (server-boot-flow.ts), configured twice.
 * - Parked, and the operation annotation (ignore, park/unpark, power operations): server-operations.ts,
 *   handled before everything below.
 * - Reserved: while `spec.serverClaimRef` is set; the ServerClaim controller drives power. The
 *   claim controller acts only after it sees Reserved, which this controller writes in a reconcile
 *   of its own: so an Available-state power-off can never race a claim's power-on.
 */

import type pino from 'pino';
import { discoveryBootConfigurationName } from '../../api/boot-configuration-names.js';
import { OPERATION_ANNOTATION, OPERATION_RETRY } from '../../api/v1alpha1/boot-policy.js';
import type { Server, ServerState } from '../../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import { BootedReason, ConditionType, EventReason } from '../../api/vocabulary.js';
import type { KubeClient } from '../../runtime/client.js';
import { findCondition } from '../../runtime/conditions.js';
import { Controller, type Request, type Result } from '../../runtime/controller.js';
import type { EventRecorder } from '../../runtime/events.js';
import { addFinalizer, hasFinalizer, removeFinalizer } from '../../runtime/finalizers.js';
import type { Informer } from '../../runtime/informer.js';
import type { RuntimeMetrics } from '../../runtime/metrics.js';
import { Resources } from '../../runtime/resource.js';
import { StatusPatch } from '../../runtime/status-patch.js';
import type { BmcConnections } from '../bmc-actions/bmc-connections.js';
import { type PowerActions, powerRetry } from '../bmc-actions/power.js';
import type { BootConfigurations } from '../common/boot-configuration.js';
import type { ControllerConfig } from '../common/config.js';
import type { BootMetrics } from '../common/metrics.js';
import type { OwnedCondition } from '../common/owned-conditions.js';
import { CleanupActions, cleanupPending } from './cleanup.js';
import { DiscoveryActions } from './discovery.js';
import type { DuplicateServers } from './duplicate-servers.js';
import { ServerOperations } from './server-operations.js';
import { TaintActions } from './taints.js';

export { DISCOVERED_CONDITION } from './discovery.js';
/**
 * Finalizer on a claimed Server (written with the binding, removed once it is released): a
 * `kubectl delete server` of a claimed machine waits for the release instead of letting the BMC
 * controller re-create it for discovery under the running tenant.
 */
export const CLAIMED_SERVER_FINALIZER = 'metal.ironcore.dev/claimed-server';

/** Name of a Server's discovery SBC (in the manager namespace). */
export { discoveryBootConfigurationName };

export interface ServerControllerOptions {
  client: KubeClient;
  servers: Informer<Server>;
  sbcs: Informer<ServerBootConfiguration>;
  bootConfigs: BootConfigurations;
  power: PowerActions;
  connections: BmcConnections;
  events: EventRecorder;
  log: pino.Logger;
  metrics?: RuntimeMetrics;
  bootMetrics: BootMetrics;
  config: ControllerConfig;
  /** Servers whose UUID another Server owns are left alone (system-ownership.ts). */
  duplicates: DuplicateServers;
  /** Claims, read when reserving (whether the claim boots at all); without it the Reserved write carries no `Booted`. */
  claims?: Informer<ServerClaim>;
}

/** The Server controller's reconciler: one method per state, none of them long. */
class ServerReconciler {
  private readonly cfg: ControllerConfig;
  private readonly baseLog: pino.Logger;
  private readonly taints: TaintActions;
  private readonly cleanup: CleanupActions;
  private readonly discovery: DiscoveryActions;
  /** uids of deleted, still claimed Servers whose held deletion was told (one Event each). */
  private readonly deletionHeld = new Set<string>();
  private readonly operations: ServerOperations;

  constructor(private readonly o: ServerControllerOptions) {
    this.taints = new TaintActions({
      events: o.events,
      patchStatus: (s, status) => this.patchStatus(s, status),
    });
    this.operations = new ServerOperations({ ...o, patchStatus: (s, status) => this.patchStatus(s, status) });
    const flowOptions = { ...o, patchStatus: this.patchStatus.bind(this) };
    this.cleanup = new CleanupActions(flowOptions);
    this.discovery = new DiscoveryActions(flowOptions);
    this.cfg = o.config;
    this.baseLog = o.log.child({ controller: 'server' });
  }

  /**
   * Writes status fields (null deletes) and up to two conditions in one request, on the condition
   * that `state`, `discovery` and `cleanup` are still what the decision was made on (see
   * {@link statusPatch}). A failed precondition surfaces as a 409, which the controller retries quietly.
   */
  private patchStatus(
    s: Server,
    status: Record<string, unknown>,
    cond?: OwnedCondition,
    /** A second condition riding in the same write (the Initial pass's `MachineIdentity`). */
    also?: OwnedCondition,
  ): Promise<Server> {
    const patch = this.statusPatch(s).set(status);
    if (cond) patch.setCondition(cond);
    if (also) patch.setCondition(also);
    return patch.commit();
  }

  /**
   * A patch of the Server's status guarded by JSON-patch `test` ops on `state` and the boot
   * bookkeeping (runtime/status-patch.ts): other writers (power state, conditions, the registry's
   * registration record) change the resourceVersion all the time without invalidating the decision.
   * The first write ({@link firstWrite}) is guarded by the resourceVersion instead.
   */
  private statusPatch(s: Server): StatusPatch<Server> {
    return new StatusPatch(this.o.client, Resources.Server, s, {
      test: ['state', 'discovery', 'cleanup'],
      resourceVersionWhen: firstWrite,
    });
  }

  /**
   * Sets the Server's `Booted` to False `Booting` for the claim it is being reserved for, riding in
   * the Reserved write: the claim's own first `Booted` (Booting) then finds it said and
   * server-boot-condition.ts writes nothing, one Server write fewer per claim, and a re-claimed
   * Server stops showing the last tenant's `Booted=True` as soon as it is Reserved. Nothing when the
   * claim is not in the cache or does not ask for power On (its `Booted` will not be Booting), or
   * the Server already says so. An entry added concurrently by another writer makes the patch
   * invalid (the list is a map keyed by type: 422, a conflict to the caller), never a duplicate.
   */
  private setBooting(patch: StatusPatch<Server>, s: Server): void {
    const ref = s.spec.serverClaimRef;
    const claim = ref ? this.o.claims?.get(ref.name, ref.namespace) : undefined;
    if (!ref || !claim || claim.spec.power !== 'On') return;
    const stored = findCondition(s.status?.conditions, ConditionType.Booted);
    if (stored?.status === 'False' && stored.reason === BootedReason.Booting) return;
    patch.setCondition({
      type: ConditionType.Booted,
      status: 'False',
      reason: BootedReason.Booting,
      message: `ServerClaim ${ref.namespace}/${ref.name}: reserved for this claim; its boot has not started yet`,
    });
  }

  async reconcile(req: Request): Promise<Result | undefined> {
    const server = this.o.servers.get(req.name);
    if (!server) {
      this.o.power.forget(req.name);
      return undefined;
    }
    const log = this.baseLog.child({ name: req.name, systemUUID: server.spec.systemUUID });
    if (server.metadata.deletionTimestamp) return this.deleting(server, log);
    const state = (server.status?.state || 'Initial') as ServerState;

    if (await this.o.duplicates.check(server)) return undefined;
    // The operation annotation first (ignore, park/unpark, power operations): server-operations.ts.
    const operation = await this.operations.handle(server, state, log);
    if (operation) return operation.result;
    if (server.spec.power !== undefined) return this.clearDeprecatedPower(server, log);
    if (server.spec.serverClaimRef) return this.reserved(server, state, log);
    if (hasFinalizer(server, CLAIMED_SERVER_FINALIZER))
      await removeFinalizer(this.o.client, Resources.Server, server, CLAIMED_SERVER_FINALIZER);
    // Released by its claim (which cleared serverClaimRef and bootConfigurationRef): before the
    // maintenance rule, so a cordon cannot skip the cleanup boot.
    if (state === 'Reserved') return this.cleanup.release(server, log);
    const maintenance = await this.taints.maintenance(server, state, log);
    if (maintenance) return maintenance;
    if (state === 'Maintenance') return undefined;
    if (server.metadata.annotations?.[OPERATION_ANNOTATION] === OPERATION_RETRY)
      return this.retry(server, state, log);

    switch (state) {
      case 'Initial':
        return this.discovery.initial(server, log);
      case 'Discovery':
        return this.discovery.discovery(server, log);
      case 'Cleaning':
        return this.cleanup.run(server, log);
      case 'Available':
        return this.available(server);
      default:
        return this.error(server); // Error: stays until the retry annotation
    }
  }

  /**
   * `spec.power` on a Server is deprecated upstream, whose Server controller clears it: power follows
   * the claim's `spec.power` and the operation annotations. A value left in place would read as a
   * promise nobody keeps, so it is removed (a merge patch; the watch brings the next pass) with one
   * Warning saying what to use instead.
   */
  private async clearDeprecatedPower(server: Server, log: pino.Logger): Promise<undefined> {
    const value = server.spec.power;
    await this.o.client.mergePatch(Resources.Server, server.metadata.name ?? '', undefined, {
      spec: { power: null },
    });
    log.info({ power: value }, 'cleared the deprecated spec.power');
    this.o.events.record(
      Resources.Server,
      server,
      'Warning',
      EventReason.DeprecatedPowerCleared,
      `spec.power ${JSON.stringify(value)} is deprecated and was not applied; it was removed. Power a claimed Server through its ServerClaim's spec.power, any Server through the ${OPERATION_ANNOTATION} annotation (e.g. force-off-server)`,
    );
    return undefined;
  }

  /**
   * State Error: nothing is started, but the power-off sent on the way here (exhausted discovery or
   * cleanup) is seen through, so `PowerActionPending` does not stay True after the BMC reports Off.
   */
  private async error(server: Server): Promise<Result | undefined> {
    if (findCondition(server.status?.conditions, ConditionType.PowerActionPending)?.status !== 'True')
      return undefined;
    const p = await this.o.power.ensure(server, 'Off');
    return p.reached ? undefined : powerRetry(p);
  }

  /**
   * A deleted Server: held by {@link CLAIMED_SERVER_FINALIZER} while a claim holds it (deleted, the
   * BMC controller would re-create it and discovery would power-cycle the tenant's machine), with a
   * Warning Event once per process; released, the finalizer goes and the deletion completes.
   */
  private async deleting(server: Server, log: pino.Logger): Promise<Result | undefined> {
    if (!hasFinalizer(server, CLAIMED_SERVER_FINALIZER)) return undefined;
    const ref = server.spec.serverClaimRef;
    if (!ref) {
      await removeFinalizer(this.o.client, Resources.Server, server, CLAIMED_SERVER_FINALIZER);
      return undefined;
    }
    const uid = server.metadata.uid ?? '';
    if (!this.deletionHeld.has(uid)) {
      if (this.deletionHeld.size >= 10_000) this.deletionHeld.clear();
      this.deletionHeld.add(uid);
      const message = `deletion waits until ServerClaim ${ref.namespace}/${ref.name} releases this Server (delete the claim; the machine keeps running meanwhile)`;
      log.warn({ claim: `${ref.namespace}/${ref.name}` }, 'deletion of a claimed server held');
      this.o.events.record(Resources.Server, server, 'Warning', EventReason.ServerDeletionHeld, message);
    }
    return undefined;
  }

  private async reserved(server: Server, state: ServerState, log: pino.Logger): Promise<Result | undefined> {
    // Bound before the claim controller put the finalizer into its binding write (an upgrade).
    server = await addFinalizer(this.o.client, Resources.Server, server, CLAIMED_SERVER_FINALIZER);
    if (state !== 'Reserved') {
      const patch = this.statusPatch(server).set({ state: 'Reserved' });
      this.setBooting(patch, server);
      await patch.commit();
      const ref = server.spec.serverClaimRef;
      // No Event of its own (upstream records none either): the claim's binding Event (`Bound`, or
      // its first `BootAttemptStarted`) names this Server, and `spec.serverClaimRef` the claim.
      log.info({ claim: `${ref?.namespace}/${ref?.name}` }, 'reserved');
      return undefined;
    }
    await this.discovery.flow.removeConfiguration(server);
    await this.cleanup.removeConfiguration(server);
    return undefined;
  }

  private async retry(server: Server, state: ServerState, log: pino.Logger): Promise<Result | undefined> {
    if (state === 'Error' && cleanupPending(server)) {
      await this.cleanup.retry(server, log);
    } else if (state === 'Error' || state === 'Discovery') {
      await this.discovery.flow.removeConfiguration(server);
      await this.patchStatus(server, { state: 'Initial', discovery: null });
      log.info('retry requested: discovery starts again');
      this.o.events.record(
        Resources.Server,
        server,
        'Normal',
        EventReason.DiscoveryRetry,
        'operation annotation retry: discovery starts again',
      );
    }
    await this.o.client.mergePatch(Resources.Server, server.metadata.name ?? '', undefined, {
      metadata: { annotations: { [OPERATION_ANNOTATION]: null } },
    });
    return undefined;
  }

  private async available(server: Server): Promise<Result | undefined> {
    await this.discovery.flow.removeConfiguration(server);
    await this.cleanup.removeConfiguration(server);
    const p = await this.o.power.ensure(server, 'Off');
    return p.reached ? { requeueAfterMs: this.cfg.serverResyncMs } : powerRetry(p);
  }
}

export function newServerController(o: ServerControllerOptions): Controller {
  const r = new ServerReconciler(o);
  const c = new Controller('server', {
    reconcile: (req) => r.reconcile(req),
    workers: o.config.workers,
    log: o.log,
    metrics: o.metrics,
  });
  c.watches(o.servers);
  c.owns(o.sbcs, 'Server');
  // A UUID's owner went away, is being deleted or changed UUID: a duplicate may own one now, or
  // an owner become a duplicate. Without this the condition would wait for the rival's resync.
  const recheck = (obj: Server, old: Server | undefined, deleted: boolean) => {
    for (const s of o.duplicates.rivalsAffected(obj, old, deleted))
      c.enqueue({ name: s.metadata.name ?? '' });
  };
  o.servers.on('update', (obj, old) => recheck(obj, old, false));
  o.servers.on('delete', (gone) => recheck(gone, undefined, true));
  return c;
}

/**
 * Whether no controller has written the Server's status yet: `state` absent (stored before the CRD
 * defaulted it) or the CRD's default `Initial` with nothing else of discovery's. Such a write is a
 * merge patch guarded by the resourceVersion, carrying its conditions in the same request.
 */
function firstWrite(st: { state?: unknown; discovery?: unknown; conditions?: unknown[] }): boolean {
  return (
    st.state === undefined || (st.state === 'Initial' && st.discovery === undefined && !st.conditions?.length)
  );
}
