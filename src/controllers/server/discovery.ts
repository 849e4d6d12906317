/**
 * Discovery: the Server's first boot, of the manager's probe image, until the probe agent's
 * registration arrives (server.ts says where it sits among the states).
 *
 * - Initial: the discovery SBC (`discoveryBootConfigurationName`, image `--probe-image`, attempt key
 *   `d<n>`); once the SBC controller evaluated it, the system's facts from the BMC (manufacturer,
 *   model, serial, power state, NICs) and, in the same status write, state Discovery with the first
 *   attempt's power-on intent and `MachineIdentity`; then the network boot. While the SBC is merely
 *   pending nothing is written for {@link INITIAL_SILENT_WAIT_MS}.
 * - Discovery: the attempts through {@link ServerBootFlow} (`status.discovery`, condition
 *   `Discovered`). Done when the registry's record (`status.registration`) answers the current
 *   attempt of the current SBC — the record is the signal, no SBC condition is written for it: the
 *   record's hardware mapping copied into upstream's status fields and dropped from the record (the
 *   Server carries it once), state Available, powered off. A record of an earlier release counts
 *   with the SBC's `RegistrationReceived`, as then.
 *   After `--discovery-max-attempts` timed-out attempts: state Error, `Discovered=False
 *   DiscoveryAttemptsExhausted`.
 * A failed BMC read is the condition's reason (BMC failure classes, bmc-connections.ts) and a retry
 * with backoff; API errors propagate to the controller.
 */
import type pino from 'pino';
import { discoveryBootConfigurationName } from '../../api/boot-configuration-names.js';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import {
  BootSignal,
  ConditionType,
  currentAttemptCondition,
  DISCOVERY_SIGNALS,
  DiscoveredReason,
  EventReason,
} from '../../api/vocabulary.js';
import type { BMC as BmcSeam, EthernetInterfaceInfo, PowerState } from '../../bmc/bmc.js';
import { RedfishHttpError } from '../../bmc/errors.js';
import {
  type BmcNetworkInterface,
  bmcNetworkInterfaces,
  nicInventoryCondition,
} from '../../inventory/machine-identity.js';
import { registrationAnswers, registrationRecord } from '../../inventory/registration-record.js';
import type { Result } from '../../runtime/controller.js';
import { Resources } from '../../runtime/resource.js';
import { type BmcConnections, classifyBmcFailure } from '../bmc-actions/bmc-connections.js';
import { AttemptPhase } from '../boot-attempt/index.js';
import { bootConfigurationReadiness, NOT_EVALUATED } from '../common/boot-configuration.js';
import { applyOwnedCondition } from '../common/owned-conditions.js';
import {
  type BootFlowSpec,
  type ServerBootBook,
  ServerBootFlow,
  type ServerBootFlowOptions,
  TIMEOUT_EVENTS,
  withoutDeadline,
} from './server-boot-flow.js';

export const DISCOVERED_CONDITION = ConditionType.Discovered;

/** Discovery as a Server-side boot flow. */
export const DISCOVERY_FLOW: BootFlowSpec = {
  flow: 'discovery',
  bookKey: 'discovery',
  conditionType: DISCOVERED_CONDITION,
  sbcName: discoveryBootConfigurationName,
  attemptKeyPrefix: 'd',
  settings: (cfg) => ({
    // The registration record is the completion evidence (DiscoveryActions.run), not a condition.
    completion: [],
    timeoutMs: cfg.discoveryTimeoutMs,
    netbootTimeoutMs: cfg.netbootTimeoutMs,
    maxAttempts: cfg.discoveryMaxAttempts,
  }),
  wording: {
    attempt: (b, max) => `attempt ${b.attempt}/${max}`,
    timeoutPrefix: 'discovery ',
    signalOrder: DISCOVERY_SIGNALS,
  },
  reasons: {
    booting: DiscoveredReason.Discovering,
    waitingForConfiguration: DiscoveredReason.WaitingForBootConfiguration,
    timedOut: DiscoveredReason.DiscoveryTimedOut,
    netbootNotObserved: DiscoveredReason.NetbootNotObserved,
    exhausted: DiscoveredReason.DiscoveryAttemptsExhausted,
  },
  events: TIMEOUT_EVENTS(EventReason.DiscoveryTimedOut),
  eventPrefix: 'discovery ',
  // Attempt 1's power-on is told by the Discovered Event (or the timeout's Warning): one Event per
  // discovery, not per step; a retry's power-on is news and keeps its BootStarted.
  powerOnEvent: (step) => step.book.attempt > 1,
  bootPurpose: true,
  pendingPrefix: '',
  legacyPowerOn: true,
  exhausted: {
    event: EventReason.DiscoveryAttemptsExhausted,
    condition: (what) => what,
    words: (what) => `${what}; giving up (state Error)`,
  },
};

/**
 * How long a new discovery SBC may stay unevaluated before the Initial pass says so (state
 * Discovery, `Discovered=False WaitingForBootConfiguration`): the SBC controller usually answers in
 * milliseconds, and a status write for that moment would be one request per Server for nothing.
 */
const INITIAL_SILENT_WAIT_MS = 5_000;

export interface DiscoveryOptions extends ServerBootFlowOptions {
  connections: BmcConnections;
}

/** The Server controller's discovery passes (see the file comment). */
export class DiscoveryActions {
  readonly flow: ServerBootFlow;

  constructor(private readonly o: DiscoveryOptions) {
    this.flow = new ServerBootFlow(DISCOVERY_FLOW, o);
  }

  /** State Initial: the SBC, then the system's facts and the first attempt's power-on. */
  async initial(server: Server, log: pino.Logger): Promise<Result | undefined> {
    const synced = await this.flow.syncConfiguration(server, 1, this.o.config.probeImage);
    const startedAt = synced.sbc.metadata.creationTimestamp ?? new Date().toISOString();
    const waited = Math.max(0, Date.now() - Date.parse(startedAt));
    const readiness = bootConfigurationReadiness(synced.sbc);
    if (readiness.reason === NOT_EVALUATED.reason && waited < INITIAL_SILENT_WAIT_MS)
      return { requeueAfterMs: INITIAL_SILENT_WAIT_MS - waited };
    const read = await this.readSystem(server, log);
    if ('retry' in read) return read.retry;
    this.o.bootMetrics.attempts.inc({ flow: 'discovery' });
    // No Event of its own: the attempt's power-on Event (BootStarted) names the discovery attempt.
    log.info({ attempt: 1 }, 'discovery started');
    if (read.nics.length === 0)
      log.warn('the BMC reports no NIC: registrations and boot files go unchecked by MAC');
    const d: ServerBootBook = { attempt: 1, attemptStartedAt: startedAt };
    // The MachineIdentity condition rides in the attempt's first write.
    const first = { status: { ...read.facts, state: 'Discovery' }, also: nicInventoryCondition(read.nics) };
    // The power state was read with the facts: no second read, no write of its own.
    return this.run(
      synced.server,
      d,
      synced.sbc,
      log,
      first,
      read.facts.powerState as PowerState | undefined,
    );
  }

  /**
   * The system's facts from its BMC, read before the first power-on (a registration is checked
   * against its NICs); a failed read is said on `Discovered` and retried with backoff.
   */
  private async readSystem(
    server: Server,
    log: pino.Logger,
  ): Promise<{ facts: Record<string, unknown>; nics: BmcNetworkInterface[] } | { retry: Result }> {
    try {
      const h = this.o.connections.forServer(server);
      const sys = await h.bmc.getSystem(h.systemUri);
      const nics = bmcNetworkInterfaces(await readEthernetInterfaces(h.bmc, h.systemUri));
      const facts = {
        ...(sys.manufacturer ? { manufacturer: sys.manufacturer } : {}),
        ...(sys.model ? { model: sys.model } : {}),
        ...(sys.serialNumber ? { serialNumber: sys.serialNumber } : {}),
        powerState: sys.powerState,
        bmcNetworkInterfaces: nics,
      };
      return { facts, nics };
    } catch (err) {
      const f = classifyBmcFailure(err);
      log.warn({ reason: f.reason, error: f.message }, 'cannot read the system');
      await applyOwnedCondition(this.o.client, Resources.Server, server, {
        type: DISCOVERED_CONDITION,
        status: 'False',
        reason: f.reason,
        message: `reading the system from its BMC: ${f.message}`,
      });
      return { retry: { requeueAfterMs: f.retryAfterMs, backoff: true } };
    }
  }

  /** State Discovery: one engine step of the stored attempt. */
  async discovery(server: Server, log: pino.Logger): Promise<Result | undefined> {
    const d = server.status?.discovery;
    if (!d) {
      await this.o.patchStatus(server, {
        discovery: { attempt: 1, attemptStartedAt: new Date().toISOString() },
      });
      return undefined;
    }
    const synced = await this.flow.syncConfiguration(server, d.attempt, this.o.config.probeImage);
    return this.run(synced.server, d, synced.sbc, log);
  }

  /** One engine step; `first` and `observed`: what the Initial pass read and writes with it. */
  private async run(
    cachedServer: Server,
    cachedBook: ServerBootBook,
    cachedSbc: ServerBootConfiguration,
    log: pino.Logger,
    first?: { status: Record<string, unknown>; also?: ReturnType<typeof nicInventoryCondition> },
    observed?: PowerState,
  ): Promise<Result | undefined> {
    const decideOn = (srv: Server, book: ServerBootBook, s: ServerBootConfiguration) =>
      this.flow.decide(
        book,
        s,
        registrationAnswers(
          registrationRecord(srv),
          book.attempt,
          s.metadata.uid,
          !!currentAttemptCondition(s, BootSignal.RegistrationReceived),
        ),
      );
    // A deadline: a registration the cache has not delivered yet must not be lost to a power cycle.
    const r = await this.flow.recheck(
      {
        server: cachedServer,
        sbc: cachedSbc,
        book: cachedBook,
        step: decideOn(cachedServer, cachedBook, cachedSbc),
      },
      (srv) => (srv.status?.state === 'Discovery' ? srv.status.discovery : undefined),
      decideOn,
    );
    if ('later' in r) return r.later;
    const { server, sbc, book: d, step } = r.go;
    if (step.phase === AttemptPhase.Completed) return this.complete(server, sbc, d, log);
    if (step.phase === AttemptPhase.Exhausted) return this.flow.exhaust(server, step, sbc, log);
    return this.flow.advance(server, step, d, sbc, log, {
      ...(observed !== undefined ? { observed } : {}),
      // The Initial pass's fields belong to the objects it read, never to a step decided again on fresh ones.
      ...(first && server === cachedServer ? { first } : {}),
    });
  }

  private complete(
    server: Server,
    sbc: ServerBootConfiguration,
    d: ServerBootBook,
    log: pino.Logger,
  ): Promise<undefined> {
    const { hardware: hw = {}, data: _legacy, ...record } = registrationRecord(server) ?? { receivedAt: '' };
    return this.flow.complete(
      server,
      sbc,
      d,
      {
        // The hardware moves from the record into upstream's fields: stored once. A record of an
        // earlier release is left as stored (its payload is nowhere else). The record is replaced
        // whole (the status write's ops are per top-level field): a registration landing between
        // the read and this write is overwritten by the older record, whose digest then no longer
        // matches the ConfigMap, so the agent's next identical registration is stored again.
        status: { ...hw, ...(record.payload ? { registration: record } : {}) },
        book: { ...withoutDeadline(d), phase: AttemptPhase.Completed },
        reason: DiscoveredReason.Registered,
        message: `registration received in attempt ${d.attempt}`,
        event: {
          reason: EventReason.Discovered,
          message: (off) =>
            `registration received in attempt ${d.attempt}${sincePowerOn(d)}; Available, ${off}`,
        },
        log: {
          fields: {
            attempt: d.attempt,
            nics: hw.networkInterfaces?.length ?? 0,
            memory: hw.totalSystemMemory,
          },
          msg: 'discovered: Available',
        },
        signal: BootSignal.RegistrationReceived,
      },
      log,
    );
  }
}

/** ` (12.3 s after power-on)` when the attempt's power-on time is stored, else ''. */
function sincePowerOn(d: ServerBootBook): string {
  const on = d.poweredOnAt ? Date.parse(d.poweredOnAt) : Number.NaN;
  return Number.isFinite(on) ? ` (${(Math.max(0, Date.now() - on) / 1000).toFixed(1)} s after power-on)` : '';
}

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
