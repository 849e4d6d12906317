/**
 * ServerClaim controller: binds a Server, provisions it through a ServerBootConfiguration, and knows
 * whether the boot completed.
 *
 * Binding (race-safe): an eligible Server (see server-selection.ts) is bound by writing
 * `Server.spec.serverClaimRef` with the resourceVersion it was chosen on; of several claims racing for
 * one Server exactly one write succeeds (the others get 409 and try the next candidate), and the CRD
 * makes the reference immutable once set. Then the claim records `spec.serverRef`.
 *
 * Provisioning: an SBC named like the claim (owned by it; image, ignition, boot policy, callback
 * Secret), referenced by `Server.spec.bootConfigurationRef`. Nothing is powered on before the SBC is
 * Ready, and not before the Server controller has marked the Server Reserved (boot-flow case C05).
 *
 * Attempts (`status.boot`, stored so a restarted manager continues): a series of at most
 * `maxAttempts` attempts, each with a fresh token (SBC `bootAttempt` bumped) and a deadline that starts
 * at power-on. An attempt completes when every condition of `bootCompletion.conditions` is True for
 * it; at the deadline the claim records which signals arrived and which are missing (condition
 * message and Event, C07) and power-cycles into the next attempt; after the last one,
 * `Booted=False, AttemptsExhausted`, a Warning Event, and no further power actions (C08) until the
 * claim's spec changes or it carries `metal.ironcore.dev/operation: retry` (consumed, fresh series).
 * The intent (`poweredOnAt`, `deadline`) is written before the BMC is asked, so a restart between
 * the two never acts twice.
 *
 * Boot policy: NetBootAlways sets a one-time network boot override before every power-on, and a
 * power-on after `power: Off` starts a new series (the image boots again). NetBootOnce sets it only
 * until the claim is Booted; then the SBC's `BootCompleted` condition makes the boot server answer
 * with a local-boot script, and `Off` → `On` just powers on (C06).
 *
 * Deleting a claim powers the Server off, deletes the SBC and its Secret, and clears the Server's
 * references; the Server controller then makes it Available.
 */

import { isDeepStrictEqual } from 'node:util';
import type pino from 'pino';
import { type BootMethod, httpBootFileUrl } from '../api/v1alpha1/boot-method.js';
import { type BootPolicy, OPERATION_ANNOTATION, OPERATION_RETRY } from '../api/v1alpha1/boot-policy.js';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import {
  BootConfigurationReason,
  BootedReason,
  BoundReason,
  ConditionType,
  EventReason,
  HTTP_BOOT_SIGNALS,
  OS_BOOT_SIGNALS,
} from '../api/vocabulary.js';
import { ApiError, type KubeClient } from '../runtime/client.js';
import { type Condition, findCondition, setCondition } from '../runtime/conditions.js';
import { Controller, type Request, type Result } from '../runtime/controller.js';
import type { EventRecorder } from '../runtime/events.js';
import { addFinalizer, hasFinalizer, removeFinalizer } from '../runtime/finalizers.js';
import type { Informer } from '../runtime/informer.js';
import type { RuntimeMetrics } from '../runtime/metrics.js';
import { Resources } from '../runtime/resource.js';
import { classifyBmcFailure } from './bmc-connections.js';
import { attemptSignals, type BootConfigurations, bootConfigurationReadiness } from './boot-configuration.js';
import type { ControllerConfig } from './config.js';
import { formatDuration, parseDuration } from './duration.js';
import type { BootMetrics } from './metrics.js';
import type { NetbootVia, PowerActions } from './power.js';
import { candidates, ineligibility, selectionRefusal } from './server-selection.js';

export const CLAIM_FINALIZER = 'metal.ironcore.dev/serverclaim';
export const BOUND_CONDITION = ConditionType.Bound;
export const BOOT_CONFIGURATION_READY_CONDITION = ConditionType.BootConfigurationReady;
export const BOOTED_CONDITION = ConditionType.Booted;

/** Informer index of Servers by the claim (`namespace/name`) in `spec.serverClaimRef`. */
export const SERVER_BY_CLAIM_INDEX = 'serverClaim';
export const serverByClaimIndexer = (s: Server): string[] => {
  const r = s.spec?.serverClaimRef;
  return r ? [`${r.namespace}/${r.name}`] : [];
};

/** Every signal the boot server and registry set during an OS boot (for the per-signal metrics). */
/** The signals an OS boot of `sbc` produces: its network boot step depends on the boot method. */
const osSignals = (sbc: ServerBootConfiguration) =>
  sbc.spec.bootMethod === 'HTTPBoot' ? HTTP_BOOT_SIGNALS : OS_BOOT_SIGNALS;
/** How often an unbound claim looks again even without a Server event, ms. */
const UNBOUND_RECHECK_MS = 30_000;

type Boot = NonNullable<NonNullable<ServerClaim['status']>['boot']>;
type CondInput = Omit<Condition, 'lastTransitionTime' | 'observedGeneration'> & {
  observedGeneration?: number;
};

export interface ServerClaimControllerOptions {
  client: KubeClient;
  claims: Informer<ServerClaim>;
  servers: Informer<Server>;
  sbcs: Informer<ServerBootConfiguration>;
  bootConfigs: BootConfigurations;
  power: PowerActions;
  events: EventRecorder;
  log: pino.Logger;
  metrics?: RuntimeMetrics;
  bootMetrics: BootMetrics;
  config: ControllerConfig;
}

/** The effective boot settings of a claim: its own, or the manager's defaults. */
export interface ClaimBootSettings {
  policy: BootPolicy;
  method: BootMethod;
  completion: string[];
  timeoutMs: number;
  maxAttempts: number;
}

export function claimBootSettings(claim: ServerClaim, cfg: ControllerConfig): ClaimBootSettings {
  const bc = claim.spec.bootCompletion;
  let timeoutMs = cfg.bootTimeoutMs;
  if (bc?.timeout) {
    try {
      timeoutMs = parseDuration(bc.timeout);
    } catch {
      // The CRD validates the pattern; an unparsable value falls back to the default.
    }
  }
  return {
    policy: claim.spec.bootPolicy ?? cfg.defaultBootPolicy,
    method: claim.spec.bootMethod ?? cfg.defaultBootMethod,
    completion: bc?.conditions?.length ? [...bc.conditions] : [...cfg.bootCompletionConditions],
    timeoutMs,
    maxAttempts: bc?.maxAttempts ?? cfg.bootMaxAttempts,
  };
}

export function newServerClaimController(o: ServerClaimControllerOptions): Controller {
  const cfg = o.config;
  const baseLog = o.log.child({ controller: 'serverclaim' });
  const eventObject = (c: ServerClaim) => ({
    ...c,
    apiVersion: 'metal.ironcore.dev/v1alpha1',
    kind: 'ServerClaim',
  });
  /**
   * Claims bound in this process whose binding the Server cache may not show yet (claim key → Server
   * name). Without it, a reconcile running before the cache caught up could bind a second Server.
   */
  const recentBinds = new Map<string, string>();

  /**
   * Writes status changes (boot replaced as a whole, conditions set by type, phase) guarded by the
   * claim's resourceVersion; returns the stored claim, or `claim` itself when nothing changed.
   */
  async function save(
    claim: ServerClaim,
    changes: { boot?: Boot | null; phase?: string; conditions?: CondInput[] },
  ): Promise<ServerClaim> {
    const now = new Date();
    let conditions = claim.status?.conditions ?? [];
    let changed = false;
    for (const c of changes.conditions ?? []) {
      const r = setCondition(
        conditions,
        { ...c, observedGeneration: c.observedGeneration ?? claim.metadata.generation ?? 0 },
        now,
      );
      conditions = r.conditions;
      changed ||= r.changed;
    }
    const status: Record<string, unknown> = {};
    if (changed) status.conditions = conditions;
    if (changes.phase !== undefined && changes.phase !== claim.status?.phase) status.phase = changes.phase;
    if (changes.boot !== undefined && !isDeepStrictEqual(changes.boot ?? undefined, claim.status?.boot)) {
      status.boot = changes.boot === null ? null : bootPatch(changes.boot);
    }
    if (Object.keys(status).length === 0) return claim;
    return o.client.mergePatch<ServerClaim>(
      Resources.ServerClaim,
      claim.metadata.name ?? '',
      claim.metadata.namespace,
      { metadata: { resourceVersion: claim.metadata.resourceVersion }, status },
      { subresource: 'status' },
    );
  }

  /** The Server bound to `claim`: from the index, or — right after binding, before the cache caught up — read fresh. */
  async function boundServer(claim: ServerClaim): Promise<Server | undefined> {
    const key = `${claim.metadata.namespace}/${claim.metadata.name}`;
    const [indexed] = o.servers.byIndex(SERVER_BY_CLAIM_INDEX, key);
    if (indexed) {
      recentBinds.delete(key);
      return indexed;
    }
    const ref = recentBinds.get(key) ?? claim.spec.serverRef?.name;
    if (!ref) return undefined;
    const fresh = await o.client.get<Server>(Resources.Server, ref);
    const r = fresh?.spec.serverClaimRef;
    if (r && `${r.namespace}/${r.name}` === key) return fresh;
    recentBinds.delete(key);
    return undefined;
  }

  async function bind(claim: ServerClaim, log: pino.Logger): Promise<Server | undefined> {
    const refused = selectionRefusal(claim, cfg.requireServerSelection);
    if (refused) {
      await save(claim, {
        phase: 'Unbound',
        conditions: [{ type: BOUND_CONDITION, status: 'False', ...refused }],
      });
      return undefined;
    }
    const list = candidates(claim, o.servers.list());
    for (const s of list) {
      try {
        const bound = await o.client.mergePatch<Server>(Resources.Server, s.metadata.name ?? '', undefined, {
          metadata: { resourceVersion: s.metadata.resourceVersion },
          spec: { serverClaimRef: { name: claim.metadata.name, namespace: claim.metadata.namespace } },
        });
        recentBinds.set(`${claim.metadata.namespace}/${claim.metadata.name}`, s.metadata.name ?? '');
        log.info({ server: s.metadata.name, systemUUID: s.spec.systemUUID }, 'bound');
        o.events.event(eventObject(claim), 'Normal', EventReason.Bound, `bound Server ${s.metadata.name}`);
        return bound;
      } catch (err) {
        // 409: someone else bound it first (or it changed); 422: the CRD refused a second claim reference.
        if (err instanceof ApiError && (err.status === 409 || err.status === 422)) continue;
        throw err;
      }
    }
    const want = claim.spec.serverRef?.name;
    let reason: string = BoundReason.NoServerAvailable;
    let message = `no Available Server matches (${list.length} candidate(s) were taken meanwhile)`;
    if (want) {
      const s = o.servers.get(want);
      reason = s ? BoundReason.ServerNotAvailable : BoundReason.ServerNotFound;
      message = s
        ? `Server ${want} is ${ineligibility(claim, s) ?? 'taken'}`
        : `Server ${want} does not exist`;
    } else if (list.length === 0) {
      message = 'no Available Server matches the selector, is unclaimed and tolerated';
    }
    await save(claim, {
      phase: 'Unbound',
      conditions: [{ type: BOUND_CONDITION, status: 'False', reason, message }],
    });
    return undefined;
  }

  async function finalize(claim: ServerClaim, log: pino.Logger): Promise<Result | undefined> {
    if (!hasFinalizer(claim, CLAIM_FINALIZER)) return undefined;
    const server = await boundServer(claim);
    if (server) {
      const p = await o.power.ensure(server, 'Off');
      if (p.state === undefined)
        log.warn(
          { pending: p.pending },
          'could not power the server off; the Server controller keeps trying',
        );
      const ref = server.spec.bootConfigurationRef;
      const mine = ref?.name === claim.metadata.name && ref?.namespace === claim.metadata.namespace;
      await o.client.mergePatch(Resources.Server, server.metadata.name ?? '', undefined, {
        spec: { serverClaimRef: null, power: null, ...(mine ? { bootConfigurationRef: null } : {}) },
      });
      log.info({ server: server.metadata.name }, 'released');
      o.events.event(
        eventObject(claim),
        'Normal',
        EventReason.Released,
        `Server ${server.metadata.name} released`,
      );
    }
    await o.bootConfigs.delete(claim.metadata.name ?? '', claim.metadata.namespace ?? '');
    await removeFinalizer(o.client, Resources.ServerClaim, claim, CLAIM_FINALIZER);
    return undefined;
  }

  async function reconcile(req: Request): Promise<Result | undefined> {
    let claim = o.claims.get(req.name, req.namespace);
    if (!claim) return undefined;
    let log = baseLog.child({ namespace: req.namespace, name: req.name });
    if (claim.metadata.deletionTimestamp) return finalize(claim, log);
    claim = await addFinalizer(o.client, Resources.ServerClaim, claim, CLAIM_FINALIZER);

    const server = (await boundServer(claim)) ?? (await bind(claim, log));
    if (!server) return { requeueAfterMs: UNBOUND_RECHECK_MS };
    const serverName = server.metadata.name ?? '';
    log = log.child({ server: serverName, systemUUID: server.spec.systemUUID });
    if (!claim.spec.serverRef?.name) {
      claim = await o.client.mergePatch<ServerClaim>(Resources.ServerClaim, req.name, req.namespace, {
        spec: { serverRef: { name: serverName } },
      });
    }
    const bound: CondInput = {
      type: BOUND_CONDITION,
      status: 'True',
      reason: BoundReason.ServerBound,
      message: `bound to Server ${serverName}`,
    };
    if (server.status?.state !== 'Reserved') {
      // The Server controller marks it Reserved first; only then may this controller drive its power.
      await save(claim, { phase: 'Bound', conditions: [bound] });
      return undefined;
    }
    return provision(claim, server, bound, log);
  }

  /**
   * Whether the BMC reports the system Off. A NetBootAlways claim that finds its booted server off
   * (powered off and on again faster than a reconcile, or by hand) boots the image again.
   */
  async function foundOff(server: Server): Promise<boolean> {
    try {
      return (await o.power.observe(server)) === 'Off';
    } catch {
      return false; // unknown: the power-on path below reports BMC trouble
    }
  }

  async function provision(
    claim: ServerClaim,
    server: Server,
    bound: CondInput,
    log: pino.Logger,
  ): Promise<Result | undefined> {
    const s = claimBootSettings(claim, cfg);
    const serverName = server.metadata.name ?? '';
    const name = claim.metadata.name ?? '';
    const namespace = claim.metadata.namespace ?? '';
    const generation = claim.metadata.generation ?? 0;
    const powerOff = claim.spec.power === 'Off';
    let boot = claim.status?.boot;
    const bootedCond = findCondition(claim.status?.conditions, BOOTED_CONDITION);
    let booted = bootedCond?.status === 'True' && !!boot?.completedAt;
    let exhausted = bootedCond?.reason === BootedReason.AttemptsExhausted;
    const retryAsked = claim.metadata.annotations?.[OPERATION_ANNOTATION] === OPERATION_RETRY;
    const existing = o.sbcs.get(name, namespace);
    const drift =
      !!existing &&
      (existing.spec.image !== claim.spec.image ||
        (existing.spec.ignitionSecretRef?.name || undefined) !==
          (claim.spec.ignitionSecretRef?.name || undefined) ||
        existing.spec.bootPolicy !== s.policy);

    // 1. Does a fresh series of attempts begin?
    let seriesNote = '';
    if (!powerOff) {
      const why = !boot
        ? 'first boot'
        : boot.attempt === 0
          ? 'power on'
          : retryAsked
            ? 'retry requested'
            : exhausted && generation > (bootedCond?.observedGeneration ?? 0)
              ? 'claim changed'
              : drift
                ? 'boot configuration changed'
                : booted && s.policy === 'NetBootAlways' && (!boot.poweredOnAt || (await foundOff(server)))
                  ? 'power on (NetBootAlways)'
                  : undefined;
      if (why) {
        const series = (boot?.series ?? 0) + 1;
        boot = { series, attempt: 1, attemptStartedAt: new Date().toISOString() };
        seriesNote = why;
        booted = false;
        exhausted = false;
        claim = await save(claim, {
          boot,
          conditions: [
            {
              type: BOOTED_CONDITION,
              status: 'False',
              reason: BootedReason.Booting,
              message: `attempt 1/${s.maxAttempts} (${why}): preparing`,
            },
          ],
        });
        o.bootMetrics.attempts.inc({ flow: 'claim' });
        log.info({ series, reason: why }, 'boot series started');
        o.events.event(
          eventObject(claim),
          'Normal',
          EventReason.BootSeriesStarted,
          `series ${series} (${why}): attempt 1/${s.maxAttempts}`,
        );
      }
    }
    if (retryAsked) {
      claim = await o.client.mergePatch<ServerClaim>(Resources.ServerClaim, name, namespace, {
        metadata: { annotations: { [OPERATION_ANNOTATION]: null } },
      });
      if (powerOff && boot && !booted) boot = { series: boot.series, attempt: 0 };
    }

    // 2. The boot configuration of the current attempt, and the Server pointing at it.
    const attemptKey = `s${boot?.series ?? 0}a${boot?.attempt ?? 0}`;
    const sbc = await o.bootConfigs.sync({
      name,
      namespace,
      owner: { obj: claim, rt: Resources.ServerClaim },
      serverName,
      image: claim.spec.image,
      ignitionSecretName: claim.spec.ignitionSecretRef?.name,
      bootPolicy: s.policy,
      bootMethod: s.method,
      attemptKey,
      labels: cfg.scopeLabels,
    });
    if (seriesNote && s.policy === 'NetBootOnce')
      await o.bootConfigs.setBootCompleted(sbc, false, `series ${boot?.series} provisioning`);
    const ref = server.spec.bootConfigurationRef;
    if (ref?.name !== name || ref.namespace !== namespace || server.spec.power !== claim.spec.power) {
      await o.client.mergePatch(Resources.Server, serverName, undefined, {
        spec: { bootConfigurationRef: { name, namespace }, power: claim.spec.power },
      });
    }
    const readiness = bootConfigurationReadiness(sbc);
    const configReady: CondInput = readiness.ready
      ? {
          type: BOOT_CONFIGURATION_READY_CONDITION,
          status: 'True',
          reason: BootConfigurationReason.Ready,
          message: readiness.message,
        }
      : {
          type: BOOT_CONFIGURATION_READY_CONDITION,
          status: 'False',
          reason: readiness.reason,
          message: readiness.message,
        };
    const base = [bound, configReady];
    const phase = 'Bound';
    const attemptText = `attempt ${boot?.attempt ?? 0}/${s.maxAttempts}`;
    const bootingReason =
      bootedCond?.reason === BootedReason.TimedOut && !seriesNote
        ? BootedReason.TimedOut
        : BootedReason.Booting;
    /** Booted=False for the attempt in progress; a TimedOut reason stays until the next outcome (C07). */
    const booting = (message: string): CondInput => ({
      type: BOOTED_CONDITION,
      status: 'False',
      reason: bootingReason,
      message:
        bootingReason === BootedReason.TimedOut
          ? `${timedOutPrefix(bootedCond?.message)}${message}`
          : message,
    });

    // 3. Power off.
    if (powerOff) {
      const p = await o.power.ensure(server, 'Off');
      const next: Boot | undefined = !boot
        ? undefined
        : booted
          ? withoutKeys(boot, ['poweredOnAt', 'deadline'])
          : { series: boot.series, attempt: 0 };
      const conds = booted
        ? base
        : [
            ...base,
            {
              type: BOOTED_CONDITION,
              status: 'False' as const,
              reason: BootedReason.Booting,
              message: 'power is Off; a new series of attempts begins at power On',
            },
          ];
      await save(claim, { boot: next ?? null, phase, conditions: conds });
      return p.reached ? undefined : { requeueAfterMs: p.requeueAfterMs };
    }
    if (!boot) return undefined; // unreachable: a series began above

    // 4. Booted: keep it on; NetBootOnce boots from disk (no override).
    if (booted) {
      if (s.policy === 'NetBootOnce')
        await o.bootConfigs.setBootCompleted(sbc, true, `claim booted in attempt ${boot.attempt}`);
      const p = await o.power.ensure(server, 'On');
      const next = p.reached && !boot.poweredOnAt ? { ...boot, poweredOnAt: new Date().toISOString() } : boot;
      await save(claim, { boot: next, phase, conditions: base });
      return p.reached ? { requeueAfterMs: cfg.serverResyncMs } : { requeueAfterMs: p.requeueAfterMs };
    }

    // 5. Exhausted: no power actions until the claim changes or a retry is asked for.
    if (exhausted) {
      await save(claim, { phase, conditions: base });
      return undefined;
    }

    // 6. Not Ready: never power on (C05).
    if (!readiness.ready) {
      await save(claim, {
        phase,
        conditions: [
          ...base,
          booting(
            `${attemptText}: waiting for the boot configuration (${readiness.reason}: ${readiness.message})`,
          ),
        ],
      });
      return undefined; // the SBC's next change brings us back
    }

    // 7. Power on for the attempt: intent first, then override + On / power cycle.
    if (!boot.poweredOnAt) {
      let observed: Awaited<ReturnType<PowerActions['observe']>>;
      try {
        observed = await o.power.observe(server);
      } catch (err) {
        const f = classifyBmcFailure(err);
        await save(claim, {
          phase,
          conditions: [...base, booting(`${attemptText}: power-on pending: ${f.reason}: ${f.message}`)],
        });
        return { requeueAfterMs: f.retryAfterMs };
      }
      if (observed === 'PoweringOn' || observed === 'PoweringOff') {
        await save(claim, {
          phase,
          conditions: [...base, booting(`${attemptText}: power-on pending: BMC reports ${observed}`)],
        });
        return { requeueAfterMs: 2_000 };
      }
      const now = Date.now();
      const deadline = new Date(now + s.timeoutMs).toISOString();
      const intent: Boot = { ...boot, poweredOnAt: new Date(now).toISOString(), deadline };
      claim = await save(claim, {
        boot: intent,
        phase,
        conditions: [
          ...base,
          booting(
            `${attemptText}: network boot started; waiting for ${s.completion.join(', ')} until ${deadline}`,
          ),
        ],
      });
      const res = await o.power.boot(server, { netboot: true, observed, via: netbootVia(server, sbc, cfg) });
      if (!res.ok) {
        const f = res.failure;
        const pending = `${attemptText}: power-on pending: ${f.reason}: ${f.message}`;
        await save(claim, {
          boot: f.maybeApplied ? intent : withoutKeys(intent, ['poweredOnAt', 'deadline']),
          conditions: [booting(pending)],
        });
        return { requeueAfterMs: f.retryAfterMs };
      }
      log.info(
        {
          series: boot.series,
          attempt: boot.attempt,
          sbcAttempt: sbc.spec.bootAttempt,
          deadline,
          sent: res.sent,
        },
        'boot attempt started',
      );
      o.events.event(
        eventObject(claim),
        'Normal',
        EventReason.BootAttemptStarted,
        `${attemptText}: ${res.sent ?? 'no'} power action with network boot override; deadline ${deadline}`,
      );
      return { requeueAfterMs: s.timeoutMs + 50 };
    }

    // 8. Completion, or the deadline.
    const poweredOnAt = Date.parse(boot.poweredOnAt);
    o.bootMetrics.observeSignals(
      'claim',
      `${sbc.metadata.uid}/${sbc.spec.bootAttempt}`,
      attemptSignals(sbc, osSignals(sbc)).arrived,
      poweredOnAt,
    );
    const sig = attemptSignals(sbc, s.completion);
    if (sig.missing.length === 0) {
      await save(claim, {
        boot: { ...boot, completedAt: new Date().toISOString() },
        phase,
        conditions: [
          ...base,
          {
            type: BOOTED_CONDITION,
            status: 'True',
            reason: BootedReason.BootCompleted,
            message: `${attemptText} completed: ${sig.arrived.join(', ')}`,
          },
        ],
      });
      if (s.policy === 'NetBootOnce')
        await o.bootConfigs.setBootCompleted(sbc, true, `claim booted in attempt ${boot.attempt}`);
      o.bootMetrics.completionSeconds.observe(
        { flow: 'claim' },
        Math.max(0, Date.now() - poweredOnAt) / 1000,
      );
      log.info({ series: boot.series, attempt: boot.attempt, signals: sig.arrived }, 'booted');
      o.events.event(
        eventObject(claim),
        'Normal',
        EventReason.BootCompleted,
        `${attemptText} completed (${sig.arrived.join(', ')})`,
      );
      return { requeueAfterMs: cfg.serverResyncMs };
    }
    const all = attemptSignals(sbc, [...new Set([...osSignals(sbc), ...s.completion])]);
    const left = Date.parse(boot.deadline ?? '') - Date.now();
    if (Number.isFinite(left) && left > 0) {
      await save(claim, {
        phase,
        conditions: [
          ...base,
          booting(
            `${attemptText}: arrived [${all.arrived.join(', ')}]; waiting for ${sig.missing.join(', ')} until ${boot.deadline}`,
          ),
        ],
      });
      return { requeueAfterMs: left + 50 };
    }
    const what = `attempt ${boot.attempt}/${s.maxAttempts} timed out after ${formatDuration(s.timeoutMs)}: arrived [${all.arrived.join(', ')}], missing [${sig.missing.join(', ')}]`;
    o.bootMetrics.timeouts.inc({ flow: 'claim' });
    if (boot.attempt < s.maxAttempts) {
      const next = boot.attempt + 1;
      await save(claim, {
        boot: { series: boot.series, attempt: next, attemptStartedAt: new Date().toISOString() },
        phase,
        conditions: [
          ...base,
          {
            type: BOOTED_CONDITION,
            status: 'False',
            reason: BootedReason.TimedOut,
            message: `${what}; starting attempt ${next}/${s.maxAttempts}`,
          },
        ],
      });
      o.bootMetrics.attempts.inc({ flow: 'claim' });
      log.warn(
        { attempt: boot.attempt, arrived: all.arrived, missing: sig.missing },
        'boot attempt timed out; retrying',
      );
      o.events.event(
        eventObject(claim),
        'Warning',
        EventReason.BootTimedOut,
        `${what}; starting attempt ${next}/${s.maxAttempts}`,
      );
      return undefined;
    }
    await save(claim, {
      phase,
      conditions: [
        ...base,
        {
          type: BOOTED_CONDITION,
          status: 'False',
          reason: BootedReason.AttemptsExhausted,
          message: `${what}; all ${s.maxAttempts} attempt(s) used, no further power actions`,
        },
      ],
    });
    o.bootMetrics.exhausted.inc({ flow: 'claim' });
    log.warn({ attempts: boot.attempt, missing: sig.missing }, 'boot attempts exhausted');
    o.events.event(
      eventObject(claim),
      'Warning',
      EventReason.AttemptsExhausted,
      `${what}; no attempts left, no further power actions until the claim changes or is annotated ${OPERATION_ANNOTATION}=${OPERATION_RETRY}`,
    );
    return undefined;
  }

  const c = new Controller('serverclaim', {
    reconcile,
    workers: o.config.workers,
    log: o.log,
    metrics: o.metrics,
  });
  c.watches(o.claims);
  c.owns(o.sbcs, 'ServerClaim');
  c.watches(o.servers, (server) => {
    const r = server.spec?.serverClaimRef;
    if (r) return [{ name: r.name, namespace: r.namespace }];
    if (server.status?.state !== 'Available' || server.spec?.unclaimable) return [];
    // A Server became available: every claim still waiting may now bind.
    return o.claims
      .list()
      .filter((cl) => cl.status?.phase !== 'Bound' && !cl.metadata.deletionTimestamp)
      .map((cl) => ({ name: cl.metadata.name ?? '', namespace: cl.metadata.namespace }));
  });
  return c;
}

/** A whole `status.boot` for a merge patch: fields it does not have are deleted (null). */
function bootPatch(b: Boot): Record<string, unknown> {
  const keys = ['attempt', 'attemptStartedAt', 'poweredOnAt', 'deadline', 'completedAt', 'series'] as const;
  return Object.fromEntries(keys.map((k) => [k, b[k] ?? null]));
}

function withoutKeys(b: Boot, keys: (keyof Boot)[]): Boot {
  const out = { ...b };
  for (const k of keys) delete out[k];
  return out;
}

/** The "attempt n/N timed out …" part of a TimedOut message, kept while the next attempt runs. */
function timedOutPrefix(message: string | undefined): string {
  const m = message ? /^(attempt \d+\/\d+ timed out[^;]*);/.exec(message) : null;
  return m ? `${m[1]}; ` : '';
}

/**
 * The BMC override of a network boot of `sbc`: `Pxe`, or for `HTTPBoot` `UefiHttp` with
 * `Boot.HttpBootUri` at the attempt's boot file on the boot server.
 */
function netbootVia(server: Server, sbc: ServerBootConfiguration, cfg: ControllerConfig): NetbootVia {
  if (sbc.spec.bootMethod !== 'HTTPBoot') return { target: 'Pxe' };
  const attempt = sbc.spec.bootAttempt ?? 1;
  return {
    target: 'UefiHttp',
    httpBootUri: httpBootFileUrl(cfg.bootServerUrl, server.spec.systemUUID, attempt),
  };
}
