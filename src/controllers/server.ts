/**
 * Server controller: the life of one machine outside a claim.
 *
 * States (`status.state`): Initial → Discovery → Available ⇄ Reserved; Error; Maintenance (left alone).
 * - Initial: read the system from the BMC (manufacturer, model, serial, power state) and begin discovery.
 * - Discovery: a discovery SBC (namespace `managerNamespace`, image `probeImage`, owned by the Server)
 *   with its callback Secret; `spec.bootConfigurationRef` points at it. Once the SBC is Ready: one-time
 *   network boot override and power on (a power cycle when already on). Done when
 *   `RegistrationReceived` is True for the current attempt and `status.registration` exists: hardware
 *   copied into the status, state Available, the SBC deleted, the reference cleared, powered off.
 *   Each attempt has a deadline in `status.discovery` (so a restarted manager continues where it
 *   was); after `discoveryMaxAttempts` timed-out attempts: state Error, condition `Discovered`
 *   False `DiscoveryAttemptsExhausted`. The annotation `metal.ironcore.dev/operation: retry` on a
 *   Server in Error starts discovery again.
 * - Available: kept powered off.
 * - Reserved: while `spec.serverClaimRef` is set; the ServerClaim controller drives power. The
 *   claim controller acts only after it sees Reserved, which this controller writes in a reconcile
 *   of its own: so an Available-state power-off can never race a claim's power-on.
 */
import type pino from 'pino';
import { discoveryAttemptKey, OPERATION_ANNOTATION, OPERATION_RETRY } from '../api/v1alpha1/boot-policy.js';
import type { Server, ServerState } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { BootSignal, ConditionType, DiscoveredReason, EventReason } from '../api/vocabulary.js';
import { ApiError, type KubeClient } from '../runtime/client.js';
import { Controller, type Request, type Result } from '../runtime/controller.js';
import type { EventRecorder } from '../runtime/events.js';
import type { Informer } from '../runtime/informer.js';
import type { RuntimeMetrics } from '../runtime/metrics.js';
import { Resources } from '../runtime/resource.js';
import { type BmcConnections, classifyBmcFailure } from './bmc-connections.js';
import { attemptSignals, type BootConfigurations, bootConfigurationReadiness } from './boot-configuration.js';
import type { ControllerConfig } from './config.js';
import { formatDuration } from './duration.js';
import type { BootMetrics } from './metrics.js';
import { applyOwnedCondition } from './owned-conditions.js';
import type { PowerActions } from './power.js';
import { hardwareFromRegistration } from './registration.js';

export const DISCOVERED_CONDITION = ConditionType.Discovered;

/** Name of a Server's discovery SBC (in the manager namespace). */
export function discoveryBootConfigurationName(server: string): string {
  return `discovery-${server}`.slice(0, 240);
}

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
}

type Discovery = NonNullable<NonNullable<Server['status']>['discovery']>;

export function newServerController(o: ServerControllerOptions): Controller {
  const cfg = o.config;
  const baseLog = o.log.child({ controller: 'server' });
  const eventObject = (s: Server) => ({ ...s, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'Server' });

  /**
   * Writes status fields (null deletes) on the condition that `state` and `discovery` are still what
   * the decision was made on: JSON-patch `test` ops, because other writers (power state, conditions,
   * the registry's registration) change the resourceVersion all the time without invalidating the
   * decision. A failed precondition surfaces as a 409, which the controller retries quietly.
   */
  async function patchStatus(s: Server, status: Record<string, unknown>): Promise<Server> {
    const name = s.metadata.name ?? '';
    const cur = (s.status ?? {}) as Record<string, unknown>;
    if (cur.state === undefined) {
      // First write: nothing to test against, the resourceVersion is the guard.
      return o.client.mergePatch<Server>(
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
    for (const [k, v] of Object.entries(status)) {
      if (v === null) {
        if (cur[k] !== undefined) ops.push({ op: 'remove', path: `/status/${k}` });
      } else ops.push({ op: 'add', path: `/status/${k}`, value: v });
    }
    try {
      return await o.client.jsonPatch<Server>(Resources.Server, name, undefined, ops, {
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

  function discovered(
    s: Server,
    status: 'True' | 'False',
    reason: string,
    message: string,
  ): Promise<boolean> {
    return applyOwnedCondition(o.client, Resources.Server, s, {
      type: DISCOVERED_CONDITION,
      status,
      reason,
      message,
    });
  }

  async function reconcile(req: Request): Promise<Result | undefined> {
    const server = o.servers.get(req.name);
    if (!server) {
      o.power.forget(req.name);
      return undefined;
    }
    if (server.metadata.deletionTimestamp) return undefined;
    const log = baseLog.child({ name: req.name, systemUUID: server.spec.systemUUID });
    const state = (server.status?.state || 'Initial') as ServerState;

    if (server.spec.serverClaimRef) return reserved(server, state, log);
    if (state === 'Maintenance') return undefined;
    if (server.metadata.annotations?.[OPERATION_ANNOTATION] === OPERATION_RETRY)
      return retry(server, state, log);

    switch (state) {
      case 'Initial':
        return initial(server, log);
      case 'Discovery':
        return discovery(server, log);
      case 'Reserved': {
        // Released by its claim (which cleared serverClaimRef and bootConfigurationRef).
        await patchStatus(server, { state: 'Available' });
        log.info('released by its claim: Available');
        o.events.event(eventObject(server), 'Normal', EventReason.Released, 'no longer claimed; Available');
        return undefined;
      }
      case 'Available':
        return available(server);
      default:
        return undefined; // Error: stays until the retry annotation
    }
  }

  async function reserved(server: Server, state: ServerState, log: pino.Logger): Promise<Result | undefined> {
    if (state !== 'Reserved') {
      await patchStatus(server, { state: 'Reserved' });
      const ref = server.spec.serverClaimRef;
      log.info({ claim: `${ref?.namespace}/${ref?.name}` }, 'reserved');
      o.events.event(
        eventObject(server),
        'Normal',
        EventReason.Reserved,
        `claimed by ${ref?.namespace}/${ref?.name}`,
      );
      return undefined;
    }
    await removeDiscoveryConfiguration(server);
    return undefined;
  }

  async function retry(server: Server, state: ServerState, log: pino.Logger): Promise<Result | undefined> {
    if (state === 'Error' || state === 'Discovery') {
      await removeDiscoveryConfiguration(server);
      await patchStatus(server, { state: 'Initial', discovery: null });
      log.info('retry requested: discovery starts again');
      o.events.event(
        eventObject(server),
        'Normal',
        EventReason.DiscoveryRetry,
        'operation annotation retry: discovery starts again',
      );
    }
    await o.client.mergePatch(Resources.Server, server.metadata.name ?? '', undefined, {
      metadata: { annotations: { [OPERATION_ANNOTATION]: null } },
    });
    return undefined;
  }

  async function initial(server: Server, log: pino.Logger): Promise<Result | undefined> {
    let facts: Record<string, unknown>;
    try {
      const h = o.connections.forServer(server);
      const sys = await h.bmc.getSystem(h.systemUri);
      facts = {
        ...(sys.manufacturer ? { manufacturer: sys.manufacturer } : {}),
        ...(sys.model ? { model: sys.model } : {}),
        ...(sys.serialNumber ? { serialNumber: sys.serialNumber } : {}),
        powerState: sys.powerState,
      };
    } catch (err) {
      const f = classifyBmcFailure(err);
      log.warn({ reason: f.reason, error: f.message }, 'cannot read the system');
      await discovered(server, 'False', f.reason, `reading the system from its BMC: ${f.message}`);
      return { requeueAfterMs: f.retryAfterMs };
    }
    await patchStatus(server, {
      ...facts,
      state: 'Discovery',
      discovery: { attempt: 1, attemptStartedAt: new Date().toISOString() },
    });
    o.bootMetrics.attempts.inc({ flow: 'discovery' });
    log.info({ attempt: 1 }, 'discovery started');
    o.events.event(
      eventObject(server),
      'Normal',
      EventReason.DiscoveryStarted,
      `discovery attempt 1/${cfg.discoveryMaxAttempts}`,
    );
    return undefined;
  }

  async function discovery(server: Server, log: pino.Logger): Promise<Result | undefined> {
    const d: Discovery = server.status?.discovery ?? { attempt: 1 };
    if (!server.status?.discovery) {
      await patchStatus(server, { discovery: { attempt: 1, attemptStartedAt: new Date().toISOString() } });
      return undefined;
    }
    const name = server.metadata.name ?? '';
    const sbcName = discoveryBootConfigurationName(name);
    const sbc = await o.bootConfigs.sync({
      name: sbcName,
      namespace: cfg.managerNamespace,
      owner: { obj: server, rt: Resources.Server },
      serverName: name,
      image: cfg.probeImage,
      bootPolicy: 'NetBootAlways',
      attemptKey: discoveryAttemptKey(d.attempt),
      labels: cfg.scopeLabels,
    });
    const ref = server.spec.bootConfigurationRef;
    if (ref?.name !== sbcName || ref.namespace !== cfg.managerNamespace) {
      await o.client.mergePatch(Resources.Server, name, undefined, {
        spec: { bootConfigurationRef: { name: sbcName, namespace: cfg.managerNamespace } },
      });
    }
    const attemptText = `attempt ${d.attempt}/${cfg.discoveryMaxAttempts}`;
    const registered = attemptSignals(sbc, [BootSignal.RegistrationReceived]).missing.length === 0;
    if (registered && server.status?.registration) return complete(server, sbc, d, log);

    const deadline = d.deadline ? Date.parse(d.deadline) : undefined;
    if (deadline === undefined) {
      const readiness = bootConfigurationReadiness(sbc);
      if (!readiness.ready) {
        await discovered(
          server,
          'False',
          DiscoveredReason.WaitingForBootConfiguration,
          `${attemptText}: boot configuration ${readiness.reason}: ${readiness.message}`,
        );
        return undefined; // the SBC's next change brings us back
      }
      let observed: Awaited<ReturnType<PowerActions['observe']>>;
      try {
        observed = await o.power.observe(server);
      } catch (err) {
        const f = classifyBmcFailure(err);
        await discovered(server, 'False', f.reason, `${attemptText}: reading the power state: ${f.message}`);
        return { requeueAfterMs: f.retryAfterMs };
      }
      if (observed === 'PoweringOn' || observed === 'PoweringOff') return { requeueAfterMs: 2_000 };
      // The deadline is written before the BMC is asked: a restart in between never powers on twice.
      const at = new Date(Date.now() + cfg.discoveryTimeoutMs).toISOString();
      const updated = await patchStatus(server, { discovery: { ...d, deadline: at } });
      const res = await o.power.boot(updated, { netboot: true, observed });
      if (!res.ok) {
        if (!res.failure.maybeApplied) await patchStatus(updated, { discovery: d });
        await discovered(
          updated,
          'False',
          res.failure.reason,
          `${attemptText}: starting the network boot: ${res.failure.message}`,
        );
        return { requeueAfterMs: res.failure.retryAfterMs };
      }
      log.info({ attempt: d.attempt, deadline: at, sent: res.sent }, 'discovery boot started');
      await discovered(
        updated,
        'False',
        DiscoveredReason.Discovering,
        `${attemptText}: network boot started; waiting for registration until ${at}`,
      );
      return { requeueAfterMs: cfg.discoveryTimeoutMs };
    }
    const left = deadline - Date.now();
    if (left > 0) return { requeueAfterMs: left + 50 };

    o.bootMetrics.timeouts.inc({ flow: 'discovery' });
    const signals = attemptSignals(sbc, [BootSignal.IPXEScriptFetched, BootSignal.RegistrationReceived]);
    const what = `discovery ${attemptText} timed out after ${formatDuration(cfg.discoveryTimeoutMs)}: arrived [${signals.arrived.join(', ')}], missing [${signals.missing.join(', ')}]`;
    if (d.attempt < cfg.discoveryMaxAttempts) {
      await patchStatus(server, {
        discovery: { attempt: d.attempt + 1, attemptStartedAt: new Date().toISOString() },
      });
      o.bootMetrics.attempts.inc({ flow: 'discovery' });
      log.warn({ attempt: d.attempt, missing: signals.missing }, 'discovery attempt timed out; retrying');
      o.events.event(
        eventObject(server),
        'Warning',
        EventReason.DiscoveryTimedOut,
        `${what}; starting attempt ${d.attempt + 1}`,
      );
      await discovered(
        server,
        'False',
        DiscoveredReason.DiscoveryTimedOut,
        `${what}; starting attempt ${d.attempt + 1}`,
      );
      return undefined;
    }
    const updated = await patchStatus(server, { state: 'Error', discovery: withoutDeadline(d) });
    o.bootMetrics.exhausted.inc({ flow: 'discovery' });
    log.warn({ attempts: d.attempt, missing: signals.missing }, 'discovery failed: attempts exhausted');
    o.events.event(
      eventObject(server),
      'Warning',
      EventReason.DiscoveryAttemptsExhausted,
      `${what}; giving up (state Error)`,
    );
    await discovered(
      updated,
      'False',
      DiscoveredReason.DiscoveryAttemptsExhausted,
      `${what}; giving up after ${d.attempt} attempt(s)`,
    );
    await removeDiscoveryConfiguration(updated);
    const p = await o.power.ensure(updated, 'Off');
    return p.reached ? undefined : { requeueAfterMs: p.requeueAfterMs };
  }

  async function complete(
    server: Server,
    sbc: ServerBootConfiguration,
    d: Discovery,
    log: pino.Logger,
  ): Promise<Result | undefined> {
    const hw = hardwareFromRegistration(server.status?.registration?.data);
    // Condition first: whoever sees Available also sees why.
    await discovered(
      server,
      'True',
      DiscoveredReason.Registered,
      `registration received in attempt ${d.attempt}`,
    );
    const updated = await patchStatus(server, { ...hw, state: 'Available', discovery: withoutDeadline(d) });
    if (d.deadline) {
      const poweredOn = Date.parse(d.deadline) - cfg.discoveryTimeoutMs;
      o.bootMetrics.completionSeconds.observe(
        { flow: 'discovery' },
        Math.max(0, Date.now() - poweredOn) / 1000,
      );
      o.bootMetrics.observeSignals(
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
    o.events.event(
      eventObject(server),
      'Normal',
      EventReason.Discovered,
      `registration received in attempt ${d.attempt}; Available`,
    );
    await removeDiscoveryConfiguration(updated);
    return undefined; // the status change brings the Available pass (power off)
  }

  async function available(server: Server): Promise<Result | undefined> {
    await removeDiscoveryConfiguration(server);
    const p = await o.power.ensure(server, 'Off');
    return { requeueAfterMs: p.reached ? cfg.serverResyncMs : (p.requeueAfterMs ?? 5_000) };
  }

  /** Deletes the discovery SBC and clears a reference to it (idempotent, cheap when already gone). */
  async function removeDiscoveryConfiguration(server: Server): Promise<void> {
    const name = discoveryBootConfigurationName(server.metadata.name ?? '');
    const ref = server.spec.bootConfigurationRef;
    if (ref?.name === name && ref.namespace === cfg.managerNamespace) {
      await o.client.mergePatch(Resources.Server, server.metadata.name ?? '', undefined, {
        spec: { bootConfigurationRef: null },
      });
    }
    if (o.sbcs.get(name, cfg.managerNamespace)) await o.bootConfigs.delete(name, cfg.managerNamespace);
  }

  const c = new Controller('server', {
    reconcile,
    workers: o.config.workers,
    log: o.log,
    metrics: o.metrics,
  });
  c.watches(o.servers);
  c.owns(o.sbcs, 'Server');
  return c;
}

function withoutDeadline(d: Discovery): Discovery {
  const { deadline: _, ...rest } = d;
  return rest;
}
