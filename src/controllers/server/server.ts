/**
 * Server controller: the life of one machine outside a claim.
 *
 * States (`status.state`): Initial → Discovery → Available ⇄ Reserved; Error; Maintenance (left
 * alone; entered and left through the taint `metal.ironcore.dev/maintenance`, see taints.ts). A
 * Server whose system UUID another Server owns is left alone entirely (system-ownership.ts).
 * - Initial: a discovery SBC (namespace `managerNamespace`, image `probeImage`, owned by the Server)
 *   (its callback token derived, nothing stored); `spec.bootConfigurationRef` points at it. Once the SBC is Ready: the
 *   system read from the BMC (manufacturer, model, serial, power state) and, in the same status
 *   write, state Discovery with the first attempt's power-on intent; then one-time network boot
 *   override and power on (a power cycle when already on). The SBC's boot method is
 *   `--discovery-boot-method` (netboot-via.ts `managerBootMethod`): PXE, or VirtualMedia (the
 *   attempt's ISO inserted first, override `Cd`; the CD ejected when discovery completed or gave up).
 * - Discovery: the attempts on that SBC (a timed-out attempt bumps its `spec.bootAttempt`). Done when
 *   `RegistrationReceived` is True for the current attempt and `status.registration` exists: hardware
 *   copied into the status, state Available, the SBC deleted, the reference cleared, powered off.
 *   Each attempt has a deadline in `status.discovery` (so a restarted manager continues where it
 *   was); after `discoveryMaxAttempts` timed-out attempts: state Error, condition `Discovered`
 *   False `DiscoveryAttemptsExhausted`. The annotation `metal.ironcore.dev/operation: retry` on a
 *   Server in Error starts discovery again.
 * - Available: kept powered off.
 * - Cleaning: after a release, when the cleanup boot applies (cleanup.ts): Available only after the
 *   cleanup image reported completion; exhausted attempts: state Error (`Cleaned=False`).
 * - Parked, and the operation annotation (ignore, park/unpark, power operations): server-operations.ts,
 *   handled before everything below.
 * - Reserved: while `spec.serverClaimRef` is set; the ServerClaim controller drives power. The
 *   claim controller acts only after it sees Reserved, which this controller writes in a reconcile
 *   of its own: so an Available-state power-off can never race a claim's power-on.
 */

import { isDeepStrictEqual } from 'node:util';
import type pino from 'pino';
import { discoveryBootConfigurationName } from '../../api/boot-configuration-names.js';
import { OPERATION_ANNOTATION, OPERATION_RETRY } from '../../api/v1alpha1/boot-policy.js';
import type { Server, ServerState } from '../../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import {
  BootedReason,
  BootSignal,
  ConditionType,
  DISCOVERY_SIGNALS,
  DiscoveredReason,
  EventReason,
  NETBOOT_SIGNALS,
} from '../../api/vocabulary.js';
import type { BMC as BmcSeam, EthernetInterfaceInfo, PowerState } from '../../bmc/bmc.js';
import { RedfishHttpError } from '../../bmc/errors.js';
import {
  type BmcNetworkInterface,
  bmcNetworkInterfaces,
  nicInventoryCondition,
} from '../../inventory/machine-identity.js';
import { ApiError, type KubeClient } from '../../runtime/client.js';
import { conditionTransition } from '../../runtime/condition-writer.js';
import { type Condition, findCondition } from '../../runtime/conditions.js';
import { Controller, type Request, type Result } from '../../runtime/controller.js';
import type { EventRecorder } from '../../runtime/events.js';
import { addFinalizer, hasFinalizer, removeFinalizer } from '../../runtime/finalizers.js';
import type { Informer } from '../../runtime/informer.js';
import type { RuntimeMetrics } from '../../runtime/metrics.js';
import { Resources } from '../../runtime/resource.js';
import { type BmcConnections, classifyBmcFailure } from '../bmc-actions/bmc-connections.js';
import {
  ejectAfterVirtualMedia,
  managerBootMethod,
  netbootViaOrFailure,
} from '../bmc-actions/netboot-via.js';
import { type PowerActions, powerRetry } from '../bmc-actions/power.js';
import {
  type AttemptBook,
  AttemptPhase,
  type AttemptSettings,
  carryOut,
  decide,
  type Outcome,
  resultOf,
  type Step,
  type Wording,
} from '../boot-attempt/index.js';
import {
  type BootConfigurations,
  bootConfigurationReadiness,
  NOT_EVALUATED,
} from '../common/boot-configuration.js';
import type { ControllerConfig } from '../common/config.js';
import type { BootMetrics } from '../common/metrics.js';
import { applyOwnedCondition, type OwnedCondition } from '../common/owned-conditions.js';
import { CleanupActions, cleanupPending } from './cleanup.js';
import type { DuplicateServers } from './duplicate-servers.js';
import { hardwareFromRegistration } from './registration.js';
import { ServerOperations } from './server-operations.js';
import { TaintActions } from './taints.js';

export const DISCOVERED_CONDITION = ConditionType.Discovered;
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
}

type Discovery = NonNullable<NonNullable<Server['status']>['discovery']>;

const eventObject = (s: Server) => ({ ...s, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'Server' });

/** The Server controller's reconciler: one method per state, none of them long. */
class ServerReconciler {
  private readonly cfg: ControllerConfig;
  private readonly baseLog: pino.Logger;
  private readonly taints: TaintActions;
  private readonly cleanup: CleanupActions;
  /** uids of deleted, still claimed Servers whose held deletion was told (one Event each). */
  private readonly deletionHeld = new Set<string>();
  private readonly operations: ServerOperations;

  constructor(private readonly o: ServerControllerOptions) {
    this.taints = new TaintActions(o);
    this.operations = new ServerOperations({ ...o, patchStatus: (s, status) => this.patchStatus(s, status) });
    this.cleanup = new CleanupActions({
      ...o,
      patchStatus: (s, status, cond) => this.patchStatus(s, status, cond),
    });
    this.cfg = o.config;
    this.baseLog = o.log.child({ controller: 'server' });
  }

  /**
   * Writes status fields (null deletes) on the condition that `state` and `discovery` are still what
   * the decision was made on: JSON-patch `test` ops, because other writers (power state, conditions,
   * the registry's registration) change the resourceVersion all the time without invalidating the
   * decision. A failed precondition surfaces as a 409, which the controller retries quietly.
   */
  private async patchStatus(
    s: Server,
    status: Record<string, unknown>,
    cond?: OwnedCondition,
    /** A second condition riding in the same write (the Initial pass's `MachineIdentity`). */
    also?: OwnedCondition,
  ): Promise<Server> {
    // The first write is a merge patch guarded by the resourceVersion: the condition rides in the
    // whole list (the version pins what the other writers' entries are).
    if ((cond || also) && firstWrite(s)) {
      const first = cond ? conditionsWith(s, cond) : undefined;
      const base = first ? { ...s, status: { ...s.status, conditions: first } } : s;
      const conditions = (also && conditionsWith(base, also)) ?? first;
      return this.patchStatusOps(s, conditions ? { ...status, conditions } : status, []);
    }
    const together = cond ? this.conditionOps(s, cond) : [];
    if (cond && !together) {
      // Not stored yet: its own server-side apply, first, as the other writers do.
      await applyOwnedCondition(this.o.client, Resources.Server, s, cond);
    }
    const second = also ? this.conditionOps(s, also) : [];
    if (also && !second) await applyOwnedCondition(this.o.client, Resources.Server, s, also);
    return this.patchStatusOps(s, status, [...(together ?? []), ...(second ?? [])]);
  }

  /**
   * JSON-patch ops replacing the stored condition of `cond.type` in place (a `test` of its type at
   * that index guards against concurrent list changes): the condition rides in the status write of
   * the same reconcile instead of a request of its own. `[]` when the stored one already says the
   * same; undefined when there is none (the caller applies it on its own).
   */
  private conditionOps(s: Server, cond: OwnedCondition): unknown[] | undefined {
    const conds = s.status?.conditions ?? [];
    const i = conds.findIndex((c) => c.type === cond.type);
    if (i < 0) return undefined;
    const generation = s.metadata.generation ?? 0;
    const lastTransitionTime = conditionTransition(conds, cond, generation, new Date());
    if (lastTransitionTime === undefined) return [];
    return [
      { op: 'test', path: `/status/conditions/${i}/type`, value: cond.type },
      {
        op: 'replace',
        path: `/status/conditions/${i}`,
        value: { ...cond, observedGeneration: generation, lastTransitionTime },
      },
    ];
  }

  private async patchStatusOps(
    s: Server,
    status: Record<string, unknown>,
    extra: unknown[],
  ): Promise<Server> {
    const name = s.metadata.name ?? '';
    const cur = (s.status ?? {}) as Record<string, unknown>;
    if (firstWrite(s)) {
      // First write: nothing to test against, the resourceVersion is the guard.
      return this.o.client.mergePatch<Server>(
        Resources.Server,
        name,
        undefined,
        { metadata: { resourceVersion: s.metadata.resourceVersion }, status },
        { subresource: 'status' },
      );
    }
    const ops: unknown[] = [{ op: 'test', path: '/status/state', value: cur.state }];
    if (cur.discovery !== undefined)
      ops.push({ op: 'test', path: '/status/discovery', value: cur.discovery });
    if (cur.cleanup !== undefined) ops.push({ op: 'test', path: '/status/cleanup', value: cur.cleanup });
    for (const [k, v] of Object.entries(status)) {
      if (v === null) {
        if (cur[k] !== undefined) ops.push({ op: 'remove', path: `/status/${k}` });
      } else ops.push({ op: 'add', path: `/status/${k}`, value: v });
    }
    ops.push(...extra);
    try {
      return await this.o.client.jsonPatch<Server>(Resources.Server, name, undefined, ops, {
        subresource: 'status',
      });
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) {
        throw new ApiError(`Server ${name}: status changed since it was read (${err.message})`, 409, {
          reason: 'Conflict',
          cause: err,
        });
      }
      throw err;
    }
  }

  private discovered(s: Server, status: 'True' | 'False', reason: string, message: string): Promise<boolean> {
    return applyOwnedCondition(this.o.client, Resources.Server, s, {
      type: DISCOVERED_CONDITION,
      status,
      reason,
      message,
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
        return this.initial(server, log);
      case 'Discovery':
        return this.discovery(server, log);
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
    this.o.events.event(
      eventObject(server),
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
      this.o.events.event(eventObject(server), 'Warning', EventReason.ServerDeletionHeld, message);
    }
    return undefined;
  }

  private async reserved(server: Server, state: ServerState, log: pino.Logger): Promise<Result | undefined> {
    // Bound before the claim controller put the finalizer into its binding write (an upgrade).
    server = await addFinalizer(this.o.client, Resources.Server, server, CLAIMED_SERVER_FINALIZER);
    if (state !== 'Reserved') {
      await this.patchStatus(server, { state: 'Reserved' });
      const ref = server.spec.serverClaimRef;
      // No Event of its own (upstream records none either): the claim's binding Event (`Bound`, or
      // its first `BootAttemptStarted`) names this Server, and `spec.serverClaimRef` the claim.
      log.info({ claim: `${ref?.namespace}/${ref?.name}` }, 'reserved');
      return undefined;
    }
    await this.removeDiscoveryConfiguration(server);
    await this.cleanup.removeConfiguration(server);
    return undefined;
  }

  private async retry(server: Server, state: ServerState, log: pino.Logger): Promise<Result | undefined> {
    if (state === 'Error' && cleanupPending(server)) {
      await this.cleanup.retry(server, log);
    } else if (state === 'Error' || state === 'Discovery') {
      await this.removeDiscoveryConfiguration(server);
      await this.patchStatus(server, { state: 'Initial', discovery: null });
      log.info('retry requested: discovery starts again');
      this.o.events.event(
        eventObject(server),
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

  /**
   * State Initial: the discovery SBC first; once the SBC controller has evaluated it, the system's
   * facts from the BMC and one status write (state Discovery, the facts, the attempt's power-on
   * intent and `Discovered`) right before the power-on. While the SBC is merely pending nothing is
   * written: its status change brings the next pass (upstream, too, makes the boot configuration in
   * Initial). A pending that lasts is said: after {@link INITIAL_SILENT_WAIT_MS} the attempt is
   * written with its WaitingForBootConfiguration condition.
   */
  private async initial(server: Server, log: pino.Logger): Promise<Result | undefined> {
    const synced = await this.syncDiscoveryConfiguration(server, 1);
    const startedAt = synced.sbc.metadata.creationTimestamp ?? new Date().toISOString();
    const waited = Math.max(0, Date.now() - Date.parse(startedAt));
    const readiness = bootConfigurationReadiness(synced.sbc);
    if (readiness.reason === NOT_EVALUATED.reason && waited < INITIAL_SILENT_WAIT_MS)
      return { requeueAfterMs: INITIAL_SILENT_WAIT_MS - waited };
    let facts: Record<string, unknown>;
    let nics: BmcNetworkInterface[];
    try {
      const h = this.o.connections.forServer(server);
      const sys = await h.bmc.getSystem(h.systemUri);
      // The machine's NICs before its first power-on: a registration is checked against them.
      nics = bmcNetworkInterfaces(await readEthernetInterfaces(h.bmc, h.systemUri));
      facts = {
        ...(sys.manufacturer ? { manufacturer: sys.manufacturer } : {}),
        ...(sys.model ? { model: sys.model } : {}),
        ...(sys.serialNumber ? { serialNumber: sys.serialNumber } : {}),
        powerState: sys.powerState,
        bmcNetworkInterfaces: nics,
      };
    } catch (err) {
      const f = classifyBmcFailure(err);
      log.warn({ reason: f.reason, error: f.message }, 'cannot read the system');
      await this.discovered(server, 'False', f.reason, `reading the system from its BMC: ${f.message}`);
      return { requeueAfterMs: f.retryAfterMs, backoff: true };
    }
    this.o.bootMetrics.attempts.inc({ flow: 'discovery' });
    // No Event of its own: the attempt's power-on Event (BootStarted) names the discovery attempt.
    log.info({ attempt: 1 }, 'discovery started');
    const d: Discovery = { attempt: 1, attemptStartedAt: startedAt };
    if (nics.length === 0)
      log.warn('the BMC reports no NIC: registrations and boot files go unchecked by MAC');
    // The MachineIdentity condition rides in the attempt's first write (writeAttempt).
    return this.runAttempt(synced.server, d, synced.sbc, log, { ...facts, state: 'Discovery' });
  }

  /** Discovery through the boot-attempt engine; the bookkeeping lives in `status.discovery`. */
  private async discovery(server: Server, log: pino.Logger): Promise<Result | undefined> {
    const d = server.status?.discovery;
    if (!d) {
      await this.patchStatus(server, {
        discovery: { attempt: 1, attemptStartedAt: new Date().toISOString() },
      });
      return undefined;
    }
    const synced = await this.syncDiscoveryConfiguration(server, d.attempt);
    return this.runAttempt(synced.server, d, synced.sbc, log);
  }

  /**
   * One engine step of discovery attempt `d`. `start`: status fields of the Initial pass (state
   * Discovery, the BMC facts) that ride in the step's first write.
   */
  private async runAttempt(
    server: Server,
    d: Discovery,
    sbc: ServerBootConfiguration,
    log: pino.Logger,
    start?: Record<string, unknown>,
  ): Promise<Result | undefined> {
    const { step } = decide({
      book: bookOf(d, this.cfg.discoveryTimeoutMs),
      sbc,
      readiness: bootConfigurationReadiness(sbc),
      settings: discoverySettings(this.cfg),
      wording: discoveryWording,
      netbootSignals: NETBOOT_SIGNALS,
      completionEvidence: !!server.status?.registration,
      now: Date.now(),
    });
    if (step.phase === AttemptPhase.Completed) return this.complete(server, sbc, d, log);
    if (step.phase === AttemptPhase.Exhausted) return this.exhaust(server, step, sbc, log);
    let current = server;
    let first = start;
    const purpose = `discovery ${discoveryWording.attempt(step.book, this.cfg.discoveryMaxAttempts)}`;
    const carried = await carryOut({
      step,
      before: bookOf(d, this.cfg.discoveryTimeoutMs),
      // The Initial pass read the power state with the facts: no second read, no write of its own.
      observed: start?.powerState as PowerState | undefined,
      power: {
        observe: () => this.o.power.observe(current),
        // Attempt 1's power-on is told by the Discovered Event (or the timeout's Warning): one Event
        // per discovery, not per step; a retry's power-on is news and keeps its BootStarted.
        boot: async (observed) => {
          const path = await netbootViaOrFailure(current, sbc, this.cfg, this.o.bootConfigs);
          if (!path.ok) return path;
          const via = path.via;
          // Once, also for VirtualMedia: a lasting `Cd` override would boot the drive emptied after
          // discovery; every attempt inserts its own ISO and sets the override again.
          return this.o.power.boot(current, {
            netboot: true,
            observed,
            via,
            purpose,
            event: step.book.attempt > 1,
          });
        },
        ensure: (goal, observed) => this.o.power.ensure(current, goal, observed),
      },
      pending: (detail) => ({
        status: 'False',
        reason: DiscoveredReason.Discovering,
        message: `${discoveryWording.attempt(step.book, this.cfg.discoveryMaxAttempts)}: ${detail}`,
      }),
      write: async (book, outcome) => {
        const extra = first;
        first = undefined;
        current = await this.writeAttempt(current, step, book, outcome, extra);
      },
    });
    for (const e of carried.events) {
      const reason = DISCOVERY_EVENT[e.reason];
      if (reason) this.o.events.event(eventObject(current), e.type, reason, `discovery ${e.message}`);
    }
    if (step.counts?.attemptStarted) this.o.bootMetrics.attempts.inc({ flow: 'discovery' });
    if (step.counts?.timedOut) this.o.bootMetrics.timeouts.inc({ flow: 'discovery' });
    if (carried.events.length) log.info({ attempt: step.book.attempt, phase: step.phase }, 'discovery step');
    return resultOf(carried);
  }

  /**
   * The status write of a discovery step: bookkeeping and `Discovered` in one request where the
   * condition is stored already; with `start` (the Initial pass) always a write. Returns the Server
   * as stored afterwards.
   */
  private async writeAttempt(
    current: Server,
    step: Step,
    book: AttemptBook,
    outcome: Outcome | undefined,
    start: Record<string, unknown> | undefined,
  ): Promise<Server> {
    const next = discoveryOf(book);
    if (start) {
      const cond = outcome && discoveredCondition(step, outcome);
      const nics = start.bmcNetworkInterfaces as BmcNetworkInterface[] | undefined;
      return this.patchStatus(
        current,
        { ...start, discovery: next },
        cond,
        nics && nicInventoryCondition(nics),
      );
    }
    // The phase alone is no reason to write: it rides along with the next real change.
    const stored = current.status?.discovery;
    const cur = findCondition(current.status?.conditions, DISCOVERED_CONDITION);
    const waiting =
      step.phase === AttemptPhase.AwaitingNetboot || step.phase === AttemptPhase.AwaitingSignals;
    if (waiting && cur?.reason === DiscoveredReason.Discovering) outcome = undefined; // said at power-on
    let cond = outcome && discoveredCondition(step, outcome);
    // Said already: not again just because a bootConfigurationRef patch moved the generation.
    if (step.phase === AttemptPhase.WaitingForConfiguration && sameWords(cur, cond)) cond = undefined;
    if (!isDeepStrictEqual({ ...next, phase: undefined }, { ...stored, phase: undefined }))
      return this.patchStatus(current, { discovery: next }, cond);
    if (cond) await this.discovered(current, cond.status, cond.reason, cond.message);
    return current;
  }

  /**
   * The discovery SBC of attempt `attempt` (`spec.bootAttempt` = the attempt), and the reference to
   * it; returns the SBC and the Server as stored after the reference patch.
   */
  private async syncDiscoveryConfiguration(
    server: Server,
    attempt: number,
  ): Promise<{ sbc: ServerBootConfiguration; server: Server }> {
    const name = server.metadata.name ?? '';
    const sbcName = discoveryBootConfigurationName(name);
    const sbc = await this.o.bootConfigs.sync({
      name: sbcName,
      namespace: this.cfg.managerNamespace,
      owner: { obj: server, rt: Resources.Server },
      serverName: name,
      image: this.cfg.probeImage,
      bootPolicy: 'NetBootAlways',
      bootMethod: managerBootMethod(this.cfg),
      attemptKey: `d${attempt}`,
      bootAttempt: attempt,
      labels: this.cfg.scopeLabels,
    });
    const ref = server.spec.bootConfigurationRef;
    if (ref?.name !== sbcName || ref.namespace !== this.cfg.managerNamespace) {
      const updated = await this.o.client.mergePatch<Server>(Resources.Server, name, undefined, {
        spec: { bootConfigurationRef: { name: sbcName, namespace: this.cfg.managerNamespace } },
      });
      return { sbc, server: updated };
    }
    return { sbc, server };
  }

  /** The last attempt timed out: state Error, a reason, no boot configuration, powered off. */
  private async exhaust(
    server: Server,
    step: Step,
    sbc: ServerBootConfiguration,
    log: pino.Logger,
  ): Promise<Result | undefined> {
    const { deadline: _, netbootDeadline: _n, ...rest } = discoveryOf(step.book);
    const what = step.outcome?.message ?? 'discovery attempts exhausted';
    const updated = await this.patchStatus(
      server,
      { state: 'Error', discovery: rest },
      {
        type: DISCOVERED_CONDITION,
        status: 'False',
        reason: DiscoveredReason.DiscoveryAttemptsExhausted,
        message: what,
      },
    );
    this.o.bootMetrics.timeouts.inc({ flow: 'discovery' });
    this.o.bootMetrics.exhausted.inc({ flow: 'discovery' });
    log.warn({ attempts: step.book.attempt }, 'discovery failed: attempts exhausted');
    this.o.events.event(
      eventObject(server),
      'Warning',
      EventReason.DiscoveryAttemptsExhausted,
      `${what}; giving up (state Error)`,
    );
    await this.removeDiscoveryConfiguration(updated);
    await ejectAfterVirtualMedia(this.o.power, updated, sbc, log, 'discovery');
    const p = await this.o.power.ensure(updated, 'Off');
    return p.reached ? undefined : powerRetry(p);
  }

  private async complete(
    server: Server,
    sbc: ServerBootConfiguration,
    d: Discovery,
    log: pino.Logger,
  ): Promise<Result | undefined> {
    const hw = hardwareFromRegistration(server.status?.registration?.data);
    // Off before the state says Available, so the one status write carries the PowerState after
    // the ForceOff. Safe to repeat: a Server in Discovery is nobody's (no claim binds it), and a
    // pass after a failed write finds it Off and sends nothing.
    const off = await this.o.power.offForStatusWrite(server);
    // Condition with the state (or first): whoever sees Available also sees why.
    const updated = await this.patchStatus(
      server,
      {
        ...hw,
        ...off.status,
        state: 'Available',
        discovery: { ...withoutDeadline(d), phase: AttemptPhase.Completed },
      },
      {
        type: DISCOVERED_CONDITION,
        status: 'True',
        reason: DiscoveredReason.Registered,
        message: `registration received in attempt ${d.attempt}`,
      },
    );
    if (d.deadline) {
      const poweredOn = Date.parse(d.deadline) - this.cfg.discoveryTimeoutMs;
      this.o.bootMetrics.completionSeconds.observe(
        { flow: 'discovery' },
        Math.max(0, Date.now() - poweredOn) / 1000,
      );
      this.o.bootMetrics.observeSignals(
        'discovery',
        `${sbc.metadata.uid}/${sbc.spec.bootAttempt}`,
        [BootSignal.RegistrationReceived],
        poweredOn,
      );
    }
    log.info(
      { attempt: d.attempt, nics: hw.networkInterfaces?.length ?? 0, memory: hw.totalSystemMemory },
      'discovered: Available',
    );
    this.o.events.event(
      eventObject(server),
      'Normal',
      EventReason.Discovered,
      `registration received in attempt ${d.attempt}${sincePowerOn(d)}; Available, ${off.words}`,
    );
    await this.removeDiscoveryConfiguration(updated);
    await ejectAfterVirtualMedia(this.o.power, updated, sbc, log, 'discovery');
    // The status change brings the Available pass (which sees a power-off through).
    return undefined;
  }

  private async available(server: Server): Promise<Result | undefined> {
    await this.removeDiscoveryConfiguration(server);
    await this.cleanup.removeConfiguration(server);
    const p = await this.o.power.ensure(server, 'Off');
    return p.reached ? { requeueAfterMs: this.cfg.serverResyncMs } : powerRetry(p);
  }

  /** Deletes the discovery SBC and clears a reference to it (idempotent, cheap when already gone). */
  private async removeDiscoveryConfiguration(server: Server): Promise<void> {
    const name = discoveryBootConfigurationName(server.metadata.name ?? '');
    const ref = server.spec.bootConfigurationRef;
    if (ref?.name === name && ref.namespace === this.cfg.managerNamespace) {
      await this.o.client.mergePatch(Resources.Server, server.metadata.name ?? '', undefined, {
        spec: { bootConfigurationRef: null },
      });
    }
    if (this.o.bootConfigs.cached(name, this.cfg.managerNamespace))
      await this.o.bootConfigs.delete(name, this.cfg.managerNamespace);
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
  // The owner of a UUID is gone: a duplicate of it may now be the owner.
  o.servers.on('delete', (gone) => {
    for (const s of o.duplicates.sameUuid(gone)) c.enqueue({ name: s.metadata.name ?? '' });
  });
  return c;
}

/** Discovery's effective attempt settings. */
function discoverySettings(cfg: ControllerConfig): AttemptSettings {
  return {
    completion: [BootSignal.RegistrationReceived],
    timeoutMs: cfg.discoveryTimeoutMs,
    netbootTimeoutMs: cfg.netbootTimeoutMs,
    maxAttempts: cfg.discoveryMaxAttempts,
  };
}

const discoveryWording: Wording = {
  attempt: (b, max) => `attempt ${b.attempt}/${max}`,
  timeoutPrefix: 'discovery ',
  signalOrder: DISCOVERY_SIGNALS,
};

type DiscoveredCondition = { type: string; status: 'True' | 'False'; reason: string; message: string };

/** The `Discovered` condition saying what an engine step's outcome says. */
function discoveredCondition(step: Step, outcome: Outcome): DiscoveredCondition {
  return {
    type: DISCOVERED_CONDITION,
    status: outcome.status === 'True' ? 'True' : 'False',
    reason: discoveryReason(step, outcome),
    message: outcome.message,
  };
}

function sameWords(stored: Condition | undefined, cond: DiscoveredCondition | undefined): boolean {
  return (
    !!stored &&
    !!cond &&
    stored.status === cond.status &&
    stored.reason === cond.reason &&
    stored.message === cond.message
  );
}

/**
 * `s`'s conditions with `cond` in place of the stored entry of its type (appended when there is
 * none), stamped with the generation; undefined when the stored one already says the same.
 */
function conditionsWith(s: Server, cond: OwnedCondition): Condition[] | undefined {
  const conds = s.status?.conditions ?? [];
  const generation = s.metadata.generation ?? 0;
  const lastTransitionTime = conditionTransition(conds, cond, generation, new Date());
  if (lastTransitionTime === undefined) return undefined;
  const entry = { ...cond, observedGeneration: generation, lastTransitionTime };
  const i = conds.findIndex((c) => c.type === cond.type);
  return i < 0 ? [...conds, entry] : conds.map((c, j) => (j === i ? entry : c));
}

/** Engine outcome reasons → the `Discovered` condition's reasons. */
function discoveryReason(step: Step, outcome: Outcome): string {
  if (outcome.reason === BootedReason.TimedOut) return DiscoveredReason.DiscoveryTimedOut;
  if (outcome.reason === BootedReason.NetbootNotObserved) return DiscoveredReason.NetbootNotObserved;
  if (outcome.reason !== BootedReason.Booting) return outcome.reason;
  return step.phase === AttemptPhase.WaitingForConfiguration
    ? DiscoveredReason.WaitingForBootConfiguration
    : DiscoveredReason.Discovering;
}

/** Engine Event reasons → discovery's Event reasons (others are not recorded for discovery). */
const DISCOVERY_EVENT: Record<string, string> = {
  [EventReason.BootTimedOut]: EventReason.DiscoveryTimedOut,
  [EventReason.NetbootNotObserved]: EventReason.NetbootNotObserved,
};

/** `status.discovery` as engine bookkeeping (older objects have only a deadline: power-on = deadline - timeout). */
function bookOf(d: Discovery, timeoutMs: number): AttemptBook {
  const legacyOn =
    d.deadline && !d.poweredOnAt && d.phase !== AttemptPhase.ReadyToPowerOn
      ? new Date(Date.parse(d.deadline) - timeoutMs).toISOString()
      : undefined;
  return { ...d, ...(legacyOn ? { poweredOnAt: legacyOn } : {}) };
}

/** Engine bookkeeping as `status.discovery` (no series, no history). */
function discoveryOf(b: AttemptBook): Discovery {
  const keys = [
    'attempt',
    'attemptStartedAt',
    'poweredOnAt',
    'netbootDeadline',
    'deadline',
    'phase',
  ] as const;
  const out: Record<string, unknown> = {};
  for (const k of keys) if (b[k] !== undefined) out[k] = b[k];
  return out as Discovery;
}

/** ` (12.3 s after power-on)` when the attempt's power-on time is stored, else ''. */
function sincePowerOn(d: Discovery): string {
  const on = d.poweredOnAt ? Date.parse(d.poweredOnAt) : Number.NaN;
  return Number.isFinite(on) ? ` (${(Math.max(0, Date.now() - on) / 1000).toFixed(1)} s after power-on)` : '';
}

function withoutDeadline(d: Discovery): Discovery {
  const { deadline: _, netbootDeadline: _n, ...rest } = d;
  return rest;
}

/**
 * Whether no controller has written the Server's status yet: `state` absent (stored before the CRD
 * defaulted it) or the CRD's default `Initial` with nothing else of discovery's. Such a write is a
 * merge patch guarded by the resourceVersion, carrying its conditions in the same request.
 */
function firstWrite(s: Server): boolean {
  const st = s.status;
  return (
    st?.state === undefined ||
    (st.state === 'Initial' && st.discovery === undefined && !st.conditions?.length)
  );
}

/**
 * How long a new discovery SBC may stay unevaluated before the Initial pass says so (state
 * Discovery, `Discovered=False WaitingForBootConfiguration`): the SBC controller usually answers in
 * milliseconds, and a status write for that moment would be one request per Server for nothing.
 */
const INITIAL_SILENT_WAIT_MS = 5_000;

/**
 * The system's NICs from its BMC; `[]` when the service has no EthernetInterfaces collection (404):
 * that BMC reports none. Other failures propagate (the Initial pass retries them as a failed read).
 */
async function readEthernetInterfaces(bmc: BmcSeam, systemUri: string): Promise<EthernetInterfaceInfo[]> {
  try {
    return await bmc.ethernetInterfaces(systemUri);
  } catch (err) {
    if (err instanceof RedfishHttpError && err.status === 404) return [];
    throw err;
  }
}
