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
 * Boot policy: NetBootAlways sets a persistent network boot override (`Continuous`; `Once` where the
 * BMC refuses it) before every power-on, so a reset made at the BMC boots the image again, and a
 * power-on after `power: Off` starts a new series. NetBootOnce sets it only
 * until the claim is Booted; then the SBC's `BootCompleted` condition makes the boot server answer
 * with a local-boot script, and `Off` → `On` just powers on (C06).
 *
 * Deleting a claim powers the Server off, deletes the SBC and its Secret, and clears the Server's
 * references; the Server controller then makes it Available. The operation annotation (`ignore` on
 * the claim; a parked or ignored Server, where this controller stands down): claim-operations.ts.
 */
import { isDeepStrictEqual } from 'node:util';
import type pino from 'pino';
import type { BootMethod } from '../../api/v1alpha1/boot-method.js';
import {
  type BootPolicy,
  FORCE_RELEASE_ANNOTATION,
  OPERATION_ANNOTATION,
  OPERATION_RETRY,
} from '../../api/v1alpha1/boot-policy.js';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import {
  BmcFailureReason,
  BootConfigurationReason,
  BootedReason,
  BoundReason,
  ConditionType,
  EventReason,
  HTTP_BOOT_SIGNALS,
  isCompletionSignal,
  NETBOOT_SIGNALS,
  OS_BOOT_SIGNALS,
  ReleaseReason,
  VIRTUAL_MEDIA_BOOT_SIGNALS,
} from '../../api/vocabulary.js';
import type { PowerState } from '../../bmc/bmc.js';
import { SERVER_UUID_INDEX, serverUUIDIndexer } from '../../inventory/server-index.js';
import type { BootImages } from '../../oci/boot-images.js';
import { ApiError, type KubeClient } from '../../runtime/client.js';
import { type Condition, findCondition, setCondition } from '../../runtime/conditions.js';
import { Controller, type Request, type Result } from '../../runtime/controller.js';
import type { EventRecorder } from '../../runtime/events.js';
import { addFinalizer, hasFinalizer, removeFinalizer } from '../../runtime/finalizers.js';
import type { Informer } from '../../runtime/informer.js';
import type { RuntimeMetrics } from '../../runtime/metrics.js';
import { isControlledBy } from '../../runtime/ownerrefs.js';
import { Resources } from '../../runtime/resource.js';
import { netbootViaOrFailure } from '../bmc-actions/netboot-via.js';
import {
  type BootActionResult,
  type PowerActions,
  type PowerProgress,
  powerRetry,
} from '../bmc-actions/power.js';
import {
  AttemptPhase,
  type AttemptSettings,
  attemptsUsed,
  type Carried,
  carryOut,
  conditionFields,
  decide,
  needsPowerRead,
  type Outcome,
  onlyProgress,
  refusedStep,
  resultOf,
  type SeriesDecision,
  type SeriesFacts,
  type Step,
  seriesDecision,
  type Wording,
} from '../boot-attempt/index.js';
import {
  ATTEMPT_KEY_ANNOTATION,
  attemptSignals,
  type BootConfigurations,
  bootConfigurationReadiness,
  NOT_EVALUATED,
  type Readiness,
} from '../common/boot-configuration.js';
import type { ControllerConfig } from '../common/config.js';
import { formatDuration, parseDuration } from '../common/duration.js';
import type { BootMetrics } from '../common/metrics.js';
import { candidates, selectionRefusal, unboundExplanation } from '../common/server-selection.js';
import { CLAIMED_SERVER_FINALIZER } from '../server/server.js';
import { evictingTaint, TaintActions } from '../server/taints.js';
import { bootInputsDiffer, bootsTheSame } from './claim-edits.js';
import { claimOperation, rejectClaimOperation, serverHold } from './claim-operations.js';

export const CLAIM_FINALIZER = 'metal.ironcore.dev/serverclaim';
/** Completed virtual-media attempts remembered as ejected; beyond it the set starts again (one more eject check each). */
const MAX_EJECTED_REMEMBERED = 10_000;
/** Longest wait between boots of an attempt whose ISO the BMC keeps refusing, ms. */
const MAX_INSERT_BACKOFF_MS = 60_000;
export const BOUND_CONDITION = ConditionType.Bound;
export const BOOT_CONFIGURATION_READY_CONDITION = ConditionType.BootConfigurationReady;
export const BOOTED_CONDITION = ConditionType.Booted;

/** Informer index of Servers by the claim (`namespace/name`) in `spec.serverClaimRef`. */
export const SERVER_BY_CLAIM_INDEX = 'serverClaim';
export const serverByClaimIndexer = (s: Server): string[] => {
  const r = s.spec?.serverClaimRef;
  return r ? [`${r.namespace}/${r.name}`] : [];
};

/** Claim conditions this controller owns; each write re-stamps them with the claim's generation. */
const OWN_CONDITIONS = new Set<string>([
  ConditionType.Bound,
  ConditionType.BootConfigurationReady,
  ConditionType.Booted,
]);
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
  /** OCI resolution: an image edit that resolves to the booted manifest does not re-provision. */
  images?: BootImages;
}

/** The effective boot settings of a claim: its own, or the manager's defaults. */
export interface ClaimBootSettings extends AttemptSettings {
  policy: BootPolicy;
  method: BootMethod;
  completion: string[];
}

/** Per-attempt durations are kept within what the CRD allows (objects stored before its bounds). */
const MIN_ATTEMPT_MS = 1_000;
const MAX_ATTEMPT_MS = 24 * 3_600_000;

function durationOr(text: string | undefined, fallback: number): number {
  if (!text) return fallback;
  try {
    return Math.min(MAX_ATTEMPT_MS, Math.max(MIN_ATTEMPT_MS, parseDuration(text)));
  } catch {
    return fallback; // the CRD validates the pattern; an unparsable value falls back to the default
  }
}

export function claimBootSettings(claim: ServerClaim, cfg: ControllerConfig): ClaimBootSettings {
  const bc = claim.spec.bootCompletion;
  const own = bc?.conditions?.filter(isCompletionSignal) ?? [];
  const timeoutMs = durationOr(bc?.timeout, cfg.bootTimeoutMs);
  // A claim that sets its own timeout without a netbootTimeout keeps an early netboot signal: the
  // manager's --netboot-timeout, but at most half the claim's timeout (a deadline at or after the
  // full one would be none of its own).
  const defaultNetboot = bc?.timeout
    ? Math.max(MIN_ATTEMPT_MS, Math.min(cfg.netbootTimeoutMs, Math.floor(timeoutMs / 2)))
    : cfg.netbootTimeoutMs;
  return {
    policy: claim.spec.bootPolicy ?? cfg.defaultBootPolicy,
    method: claim.spec.bootMethod ?? cfg.defaultBootMethod,
    completion: own.length ? own : [...cfg.bootCompletionConditions],
    timeoutMs,
    netbootTimeoutMs: durationOr(bc?.netbootTimeout, defaultNetboot),
    maxAttempts: bc?.maxAttempts ?? cfg.bootMaxAttempts,
  };
}

/** How claim messages name an attempt: `attempt 2/3`, or `attempt 5 (2/3 of series 2)` in later series. */
export const claimWording: Wording = {
  attempt: (b, max) =>
    (b.firstAttempt ?? 1) === 1
      ? `attempt ${b.attempt}/${max}`
      : `attempt ${b.attempt} (${attemptsUsed(b)}/${max} of series ${b.series ?? 1})`,
  timeoutPrefix: '',
  signalOrder: OS_BOOT_SIGNALS,
};

/** The claim wording of an attempt of `sbc`: its signal order depends on the boot method. */
function claimWordingOf(sbc: ServerBootConfiguration | undefined): Wording {
  if (sbc?.spec.bootMethod === 'VirtualMedia')
    return { ...claimWording, signalOrder: VIRTUAL_MEDIA_BOOT_SIGNALS };
  return sbc?.spec.bootMethod === 'HTTPBoot'
    ? { ...claimWording, signalOrder: HTTP_BOOT_SIGNALS }
    : claimWording;
}

const PENDING: Readiness = {
  ready: false,
  reason: BootConfigurationReason.Pending,
  message: 'the boot configuration has not been created yet',
};

const eventObject = (c: ServerClaim) => ({
  ...c,
  apiVersion: 'metal.ironcore.dev/v1alpha1',
  kind: 'ServerClaim',
});

interface AttemptContext {
  claim: ServerClaim;
  server: Server;
  sbc: ServerBootConfiguration | undefined;
  book: Boot;
  s: ClaimBootSettings;
  readiness: Readiness;
  base: CondInput[];
  observed?: PowerState;
  log: pino.Logger;
}

/** The claim controller's reconciler: one method per concern, none of them long. */
class ServerClaimReconciler {
  private readonly cfg: ControllerConfig;
  private readonly baseLog: pino.Logger;
  /** How long a deleted claim waits for its Server to be observed Off before saying so loudly, ms. */
  private readonly releaseTimeoutMs: number;
  /**
   * `sbc uid/attempt` → when a boot may be tried again after the BMC refused the attempt's ISO, and
   * how many refusals in a row (backoff 5 s doubling to 60 s). Bounded by {@link MAX_EJECTED_REMEMBERED}.
   */
  private readonly insertRefused = new Map<string, { until: number; failures: number }>();
  /** `sbc uid/attempt` of completed virtual-media attempts whose CD was ejected (see ejectAfterCompletion). */
  private readonly ejected = new Set<string>();
  /**
   * Claims bound in this process whose binding the Server cache may not show yet (claim key → Server
   * name). Without it, a reconcile running before the cache caught up could bind a second Server.
   */
  private readonly recentBinds = new Map<string, string>();
  private readonly taints: TaintActions;
  /** `claim uid/server uid` of held Server deletions told on the claim. */
  private readonly deletionHeld = new Set<string>();

  constructor(private readonly o: ServerClaimControllerOptions) {
    this.taints = new TaintActions(o);
    this.cfg = o.config;
    this.baseLog = o.log.child({ controller: 'serverclaim' });
    this.releaseTimeoutMs = Math.max(o.config.powerActionResendMs * 2, 60_000);
  }

  /**
   * Writes status changes (boot replaced as a whole, conditions set by type, phase) guarded by the
   * claim's resourceVersion; returns the stored claim, or `claim` itself when nothing changed.
   */
  private async save(
    claim: ServerClaim,
    changes: { boot?: Boot | null; phase?: string; conditions?: CondInput[] },
  ): Promise<ServerClaim> {
    const now = new Date();
    const generation = claim.metadata.generation ?? 0;
    let conditions = claim.status?.conditions ?? [];
    let changed = false;
    const given = new Set((changes.conditions ?? []).map((c) => c.type));
    // Every condition this reconcile evaluated carries its generation (`kubectl wait` after an edit).
    const restamp = conditions.filter(
      (c) => OWN_CONDITIONS.has(c.type) && !given.has(c.type) && (c.observedGeneration ?? 0) < generation,
    );
    for (const c of [
      ...(changes.conditions ?? []),
      ...restamp.map((c) => ({ ...c, observedGeneration: generation })),
    ]) {
      const r = setCondition(
        conditions,
        { ...c, observedGeneration: c.observedGeneration ?? generation },
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
    return this.o.client.mergePatch<ServerClaim>(
      Resources.ServerClaim,
      claim.metadata.name ?? '',
      claim.metadata.namespace,
      { metadata: { resourceVersion: claim.metadata.resourceVersion }, status },
      { subresource: 'status' },
    );
  }

  /** The Server bound to `claim`: from the index, else from the informer (its own-write view shows a binding made right now), else read fresh. */
  private async boundServer(claim: ServerClaim): Promise<Server | undefined> {
    const key = `${claim.metadata.namespace}/${claim.metadata.name}`;
    const [indexed] = this.o.servers.byIndex(SERVER_BY_CLAIM_INDEX, key);
    if (indexed) {
      this.recentBinds.delete(key);
      return indexed;
    }
    const ref = this.recentBinds.get(key) ?? claim.spec.serverRef?.name;
    if (!ref) return undefined;
    // The informer's get() has this process's own binding write even while the watch lags it (and
    // bindings of an earlier leader came with the first list): only a Server it lacks is read.
    const known = this.o.servers.get(ref);
    if (known) {
      const k = known.spec.serverClaimRef;
      if (k && `${k.namespace}/${k.name}` === key) return known;
      this.recentBinds.delete(key);
      return undefined;
    }
    const fresh = await this.o.client.get<Server>(Resources.Server, ref);
    const r = fresh?.spec.serverClaimRef;
    if (r && `${r.namespace}/${r.name}` === key) return fresh;
    this.recentBinds.delete(key);
    return undefined;
  }

  /**
   * The Servers selection reads: for a claim naming its Server, that Server and every cached Server
   * with its system UUID (the ownership rule compares them), found through the UUID index; else
   * every cached Server. Why: a fleet of claims with `serverRef` would otherwise scan the whole
   * cache once per claim (quadratic in the fleet).
   */
  private selectionPool(claim: ServerClaim): Server[] {
    const want = claim.spec.serverRef?.name;
    if (!want) return this.o.servers.list();
    const named = this.o.servers.get(want);
    if (!named) return [];
    const [uuid] = serverUUIDIndexer(named);
    const same = uuid ? this.o.servers.byIndex(SERVER_UUID_INDEX, uuid) : [];
    return [named, ...same.filter((s) => s.metadata.name !== want)];
  }

  private async bind(claim: ServerClaim, log: pino.Logger): Promise<Server | undefined> {
    const refused = selectionRefusal(claim, this.cfg.requireServerSelection);
    if (refused) {
      await this.save(claim, {
        phase: 'Unbound',
        conditions: [{ type: BOUND_CONDITION, status: 'False', ...refused }],
      });
      return undefined;
    }
    const pool = this.selectionPool(claim);
    const list = candidates(claim, pool);
    for (const s of list) {
      try {
        // One write: the binding (guarded by the resourceVersion the Server was chosen on) and the
        // desired state the claim wants of it (its SBC's name, power). Desired state only: nothing
        // acts on it before the Server controller has marked the Server Reserved.
        const bound = await this.o.client.mergePatch<Server>(
          Resources.Server,
          s.metadata.name ?? '',
          undefined,
          {
            metadata: {
              resourceVersion: s.metadata.resourceVersion,
              // Held while claimed (server.ts): guarded by the resourceVersion, as the list is replaced.
              finalizers: [
                ...(s.metadata.finalizers ?? []).filter((f) => f !== CLAIMED_SERVER_FINALIZER),
                CLAIMED_SERVER_FINALIZER,
              ],
            },
            spec: {
              serverClaimRef: { name: claim.metadata.name, namespace: claim.metadata.namespace },
              ...desiredServerSpec(claim),
            },
          },
        );
        this.recentBinds.set(`${claim.metadata.namespace}/${claim.metadata.name}`, s.metadata.name ?? '');
        log.info({ server: s.metadata.name, systemUUID: s.spec.systemUUID }, 'bound');
        // A fresh claim's opening attempt is told, with the binding, by the Event that ends it;
        // any other claim gets its Bound Event now.
        if (!this.isFresh(claim))
          this.o.events.event(
            eventObject(claim),
            'Normal',
            EventReason.Bound,
            `bound Server ${s.metadata.name}`,
          );
        return bound;
      } catch (err) {
        // 409: someone else bound it first (or it changed); 422: the CRD refused a second claim reference.
        if (err instanceof ApiError && (err.status === 409 || err.status === 422)) continue;
        throw err;
      }
    }
    const { reason, message } = unboundExplanation(claim, pool, list.length);
    const before = findCondition(claim.status?.conditions, BOUND_CONDITION);
    await this.save(claim, {
      phase: 'Unbound',
      conditions: [{ type: BOUND_CONDITION, status: 'False', reason, message }],
    });
    // Once per change of the explanation, as the scheduler's FailedScheduling.
    if (before?.message !== message) this.o.events.event(eventObject(claim), 'Warning', reason, message);
    return undefined;
  }

  /**
   * Deletion: the Server is released only once the BMC reports it Off, so the next tenant never gets
   * a machine the previous OS still runs on. While it waits, the claim's `Released` condition says why.
   */
  private async finalize(claim: ServerClaim, log: pino.Logger): Promise<Result | undefined> {
    if (!hasFinalizer(claim, CLAIM_FINALIZER)) return undefined;
    const server = await this.boundServer(claim);
    const hold = server && serverHold(server);
    if (server && hold) return this.holdRelease(claim, hold, log);
    if (server) {
      const p = await this.o.power.ensure(server, 'Off');
      const forced = !p.reached && claim.metadata.annotations?.[FORCE_RELEASE_ANNOTATION] === 'true';
      if (!p.reached && !forced) return this.waitForOff(claim, server, p, log);
      if (forced) this.tellForcedRelease(claim, server, p, log);
      const ref = server.spec.bootConfigurationRef;
      const mine = ref?.name === claim.metadata.name && ref?.namespace === claim.metadata.namespace;
      await this.o.client.mergePatch(Resources.Server, server.metadata.name ?? '', undefined, {
        spec: { serverClaimRef: null, power: null, ...(mine ? { bootConfigurationRef: null } : {}) },
      });
      log.info({ server: server.metadata.name }, 'released');
      this.o.events.event(
        eventObject(claim),
        'Normal',
        EventReason.Released,
        `Server ${server.metadata.name} released`,
      );
    }
    await this.o.bootConfigs.delete(claim.metadata.name ?? '', claim.metadata.namespace ?? '');
    await removeFinalizer(this.o.client, Resources.ServerClaim, claim, CLAIM_FINALIZER);
    return undefined;
  }

  /**
   * A release without power Off observed, asked for by {@link FORCE_RELEASE_ANNOTATION}: recorded as
   * a Warning Event on the claim and on the Server (which outlives the claim), and at warn.
   */
  private tellForcedRelease(claim: ServerClaim, server: Server, p: PowerProgress, log: pino.Logger): void {
    const why = p.pending ?? `PowerState ${p.state}`;
    const risk = `the BMC never confirmed power Off (${why}): the machine may still run the previous tenant's OS until the BMC powers it off`;
    const claimName = `${claim.metadata.namespace}/${claim.metadata.name}`;
    log.warn(
      { server: server.metadata.name, pending: p.pending },
      'released without power off (force-release)',
    );
    this.o.events.event(
      eventObject(claim),
      'Warning',
      EventReason.ForcedRelease,
      `Server ${server.metadata.name} released by ${FORCE_RELEASE_ANNOTATION}; ${risk}`,
    );
    this.o.events.event(
      { ...server, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'Server' },
      'Warning',
      EventReason.ForcedRelease,
      `released by ServerClaim ${claimName} with ${FORCE_RELEASE_ANNOTATION}; ${risk}`,
    );
  }

  /** A deleted claim whose Server is parked or ignored: nothing is powered; `Released=False` says why. */
  private async holdRelease(
    claim: ServerClaim,
    hold: { reason: string; message: string },
    log: pino.Logger,
  ): Promise<Result> {
    const prior = findCondition(claim.status?.conditions, ConditionType.Released);
    await this.save(claim, { conditions: [{ type: ConditionType.Released, status: 'False', ...hold }] });
    if (prior?.reason !== hold.reason) {
      log.warn(hold, 'release held');
      this.o.events.event(eventObject(claim), 'Warning', EventReason.ReleaseHeld, hold.message);
    }
    return { requeueAfterMs: 30_000 };
  }

  private async waitForOff(
    claim: ServerClaim,
    server: Server,
    p: PowerProgress,
    log: pino.Logger,
  ): Promise<Result> {
    const waited = Date.now() - Date.parse(claim.metadata.deletionTimestamp ?? '');
    const late = Number.isFinite(waited) && waited > this.releaseTimeoutMs;
    const reason = late ? ReleaseReason.PowerOffTimedOut : ReleaseReason.WaitingForPowerOff;
    const message = `Server ${server.metadata.name} is released once the BMC reports it Off (${p.pending ?? `PowerState ${p.state}`})${late ? `; still not Off after ${formatDuration(waited)}; to release without it: metalctl release --force (annotation ${FORCE_RELEASE_ANNOTATION}=true)` : ''}`;
    const prior = findCondition(claim.status?.conditions, ConditionType.Released);
    await this.save(claim, {
      conditions: [{ type: ConditionType.Released, status: 'False', reason, message }],
    });
    if (prior?.reason !== reason) {
      log.warn({ pending: p.pending }, 'waiting for power off before releasing the server');
      this.o.events.event(
        eventObject(claim),
        late ? 'Warning' : 'Normal',
        EventReason.WaitingForPowerOff,
        message,
      );
    }
    return powerRetry(p);
  }

  async reconcile(req: Request): Promise<Result | undefined> {
    let claim = this.o.claims.get(req.name, req.namespace);
    if (!claim) return undefined;
    let log = this.baseLog.child({ namespace: req.namespace, name: req.name });
    if (claim.metadata.deletionTimestamp) return this.finalize(claim, log);
    const operation = claimOperation(claim);
    if (operation?.kind === 'ignore') return undefined;
    if (operation) return void (await rejectClaimOperation(this.o, claim, operation.op, log));
    claim = await addFinalizer(this.o.client, Resources.ServerClaim, claim, CLAIM_FINALIZER);

    const server = (await this.boundServer(claim)) ?? (await this.bind(claim, log));
    if (!server) return { requeueAfterMs: UNBOUND_RECHECK_MS };
    if (serverHold(server)) return undefined; // parked or ignored: claim-operations.ts
    if (server.metadata.deletionTimestamp) this.tellDeletionHeld(claim, server, log);
    const evicting = evictingTaint(claim, server);
    if (evicting) return this.taints.evict(claim, server, evicting, log);
    const serverName = server.metadata.name ?? '';
    log = log.child({ server: serverName, systemUUID: server.spec.systemUUID });
    if (!claim.spec.serverRef?.name) {
      claim = await this.o.client.mergePatch<ServerClaim>(Resources.ServerClaim, req.name, req.namespace, {
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
      await this.saveUnreserved(claim, bound, log);
      return undefined;
    }
    return this.provision(claim, server, bound, log);
  }

  /**
   * The bound Server was deleted: its finalizer holds it until this claim releases it, and the claim
   * goes on as before (no re-discovery, no power action). Told once per process on the claim too,
   * as a Warning (the tenant reads the claim, not the Server).
   */
  private tellDeletionHeld(claim: ServerClaim, server: Server, log: pino.Logger): void {
    const key = `${claim.metadata.uid}/${server.metadata.uid}`;
    if (this.deletionHeld.has(key)) return;
    if (this.deletionHeld.size >= 10_000) this.deletionHeld.clear();
    this.deletionHeld.add(key);
    log.warn({ server: server.metadata.name }, 'bound server deleted; held until this claim releases it');
    this.o.events.event(
      eventObject(claim),
      'Warning',
      EventReason.ServerDeletionHeld,
      `Server ${server.metadata.name} was deleted; its deletion waits until this claim is deleted, and the machine keeps running`,
    );
  }

  /**
   * The status of a claim whose Server is not Reserved yet: Bound, and for a fresh claim (power On, no
   * bookkeeping, no SBC of its name, no retry asked) its first series too, worded exactly as the first
   * reconcile after Reserved words it (that reconcile then has nothing to write): binding and series
   * in one status write. Storing the series is no action; its SBC and power wait for Reserved.
   */
  private async saveUnreserved(claim: ServerClaim, bound: CondInput, log: pino.Logger): Promise<void> {
    const s = claimBootSettings(claim, this.cfg);
    const facts = this.claimFacts(claim, s);
    const decision = this.isFresh(claim) ? seriesDecision({ ...facts, now: Date.now() }) : undefined;
    if (decision?.kind !== 'start') {
      await this.save(claim, { phase: 'Bound', conditions: [bound] });
      return;
    }
    await this.save(claim, {
      boot: decision.book,
      phase: 'Bound',
      conditions: seriesConditions(decision, s, bound),
    });
    this.announceSeries(claim, decision.book, decision.why, s, log);
  }

  /**
   * A claim about to begin its first series (power On, no bookkeeping, no SBC of its name, no retry
   * asked): its binding is stored with the series, and told by the Event that ends its first attempt.
   */
  private isFresh(claim: ServerClaim): boolean {
    return (
      claim.spec.power === 'On' &&
      !claim.status?.boot &&
      claim.metadata.annotations?.[OPERATION_ANNOTATION] !== OPERATION_RETRY &&
      !this.o.sbcs.get(claim.metadata.name ?? '', claim.metadata.namespace)
    );
  }

  /** One PowerState read for the series decision; `undefined` when the BMC cannot be read now. */
  private async readPower(server: Server): Promise<PowerState | undefined> {
    try {
      return await this.o.power.observe(server);
    } catch {
      return undefined; // the power action of the step reports BMC trouble
    }
  }

  /** The stored facts of a claim the series decision reads (see boot-attempt/series.ts). */
  private claimFacts(claim: ServerClaim, s: ClaimBootSettings): Omit<SeriesFacts, 'power' | 'now'> {
    const name = claim.metadata.name ?? '';
    const existing = this.o.sbcs.get(name, claim.metadata.namespace);
    const bootedCond = findCondition(claim.status?.conditions, BOOTED_CONDITION);
    const book = claim.status?.boot;
    const own = existing && isControlledBy(existing, claim) ? existing : undefined;
    return {
      book,
      wantOff: claim.spec.power === 'Off',
      retryAsked: claim.metadata.annotations?.[OPERATION_ANNOTATION] === OPERATION_RETRY,
      // A series that ended: out of attempts, or refused for good by the BMC (BootMethodUnsupported).
      exhausted:
        book?.phase === AttemptPhase.Exhausted ||
        book?.phase === AttemptPhase.Refused ||
        bootedCond?.reason === BootedReason.AttemptsExhausted,
      claimChanged: (claim.metadata.generation ?? 0) > (bootedCond?.observedGeneration ?? 0),
      // By name here; provision() asks whether what would boot differs (claim-edits.ts). The boot
      // policy is never a change of configuration: it decides only what the next power-on does.
      configChanged: !!existing && bootInputsDiffer(existing, claim),
      policy: s.policy,
      sbc: own
        ? {
            attempt: own.spec.bootAttempt ?? 1,
            completed: attemptSignals(own, s.completion).missing.length === 0,
          }
        : undefined,
      timeoutMs: s.timeoutMs,
    };
  }

  /**
   * Provisioning of a Reserved Server: series decision, the SBC of the current attempt, then the
   * engine's step, carried out with one status write (see boot-attempt/).
   */
  private async provision(
    claim: ServerClaim,
    server: Server,
    bound: CondInput,
    log: pino.Logger,
  ): Promise<Result | undefined> {
    if (claim.spec.power !== 'On' && claim.spec.power !== 'Off') {
      const message = `spec.power must be On or Off, not ${JSON.stringify(claim.spec.power)}; nothing is powered`;
      const invalid: CondInput = {
        type: BOOTED_CONDITION,
        status: 'False',
        reason: BootedReason.InvalidPower,
        message,
      };
      await this.save(claim, { phase: 'Bound', conditions: [bound, invalid] });
      return undefined;
    }
    const s = claimBootSettings(claim, this.cfg);
    const facts = this.claimFacts(claim, s);
    const own = this.o.sbcs.get(claim.metadata.name ?? '', claim.metadata.namespace);
    if (facts.configChanged && own && (await bootsTheSame(own, claim, this.o))) {
      facts.configChanged = false; // edited in place by syncConfiguration, within the attempt
      log.info(
        { image: claim.spec.image, ignition: claim.spec.ignitionSecretRef?.name },
        'image or ignition edited; it boots the same, so the server is not re-provisioned',
      );
    }
    const observed = needsPowerRead(facts) ? await this.readPower(server) : undefined;
    const decision = seriesDecision({ ...facts, power: observed, now: Date.now() });
    if (decision.kind !== 'continue')
      return this.beginSeries({ claim, server, bound, decision, facts, s, log });
    if (facts.retryAsked) claim = await this.consumeRetry(claim);
    let book: Boot = facts.book ?? { attempt: 0, phase: AttemptPhase.PoweredOff }; // Off before any boot
    const sbc = await this.syncConfiguration(claim, server, book, s);
    if (sbc && book.attempt > 0 && book.attempt !== (sbc.spec.bootAttempt ?? 1))
      book = { ...book, attempt: sbc.spec.bootAttempt ?? 1 }; // one numbering: the SBC's
    const readiness = sbc ? bootConfigurationReadiness(sbc) : PENDING;
    const configReady: CondInput = {
      type: BOOT_CONFIGURATION_READY_CONDITION,
      status: readiness.ready ? 'True' : 'False',
      reason: readiness.reason,
      message: readiness.message,
    };
    const base = [bound, configReady];
    return this.runAttempt({ claim, server, sbc, book, s, readiness, base, observed, log });
  }

  /**
   * Commit point "series": a new series (or an adoption) is stored before anything acts on it, guarded
   * by the claim's resourceVersion, so a reconcile on a stale cache can never start it twice; the
   * write brings the next reconcile, which syncs the SBC for the new attempt.
   */
  private async beginSeries(x: {
    claim: ServerClaim;
    server: Server;
    bound: CondInput;
    decision: Exclude<SeriesDecision, { kind: 'continue' }>;
    facts: Omit<SeriesFacts, 'power' | 'now'>;
    s: ClaimBootSettings;
    log: pino.Logger;
  }): Promise<Result | undefined> {
    const { decision, s, log } = x;
    let claim = x.claim;
    const book = decision.book;
    claim = await this.save(claim, {
      boot: book,
      phase: 'Bound',
      conditions: seriesConditions(decision, s, x.bound),
    });
    if (x.facts.retryAsked) claim = await this.consumeRetry(claim);
    if (decision.kind === 'adopt') {
      this.announceAdoption(claim, book, decision.booted, log);
      return undefined;
    }
    this.announceSeries(claim, book, decision.why, s, log);
    // The stored series is the guard: its first attempt begins on the SBC now.
    const sbc = await this.syncConfiguration(claim, x.server, book, s);
    if (s.policy === 'NetBootOnce' && sbc)
      await this.o.bootConfigs.setBootCompleted(sbc, false, `series ${book.series} provisioning`);
    return undefined;
  }

  /** Removes the retry operation annotation (it was acted on). */
  private consumeRetry(claim: ServerClaim): Promise<ServerClaim> {
    return this.o.client.mergePatch<ServerClaim>(
      Resources.ServerClaim,
      claim.metadata.name ?? '',
      claim.metadata.namespace,
      {
        metadata: { annotations: { [OPERATION_ANNOTATION]: null } },
      },
    );
  }

  /** The SBC of the book's attempt, and the Server pointing at it; none while Off before any boot. */
  private async syncConfiguration(
    claim: ServerClaim,
    server: Server,
    book: Boot,
    s: ClaimBootSettings,
  ): Promise<ServerBootConfiguration> {
    const name = claim.metadata.name ?? '';
    const namespace = claim.metadata.namespace ?? '';
    const ref = server.spec.bootConfigurationRef;
    if (ref?.name !== name || ref.namespace !== namespace) {
      await this.o.client.mergePatch(Resources.Server, server.metadata.name ?? '', undefined, {
        spec: desiredServerSpec(claim),
      });
    }
    const existing = this.o.sbcs.get(name, namespace);
    // The SBC's own key while it already is this attempt: adopting never starts an attempt.
    const sameAttempt = existing && (existing.spec.bootAttempt ?? 1) === book.attempt;
    return this.o.bootConfigs.sync({
      name,
      namespace,
      owner: { obj: claim, rt: Resources.ServerClaim },
      serverName: server.metadata.name ?? '',
      image: claim.spec.image,
      ignitionSecretName: claim.spec.ignitionSecretRef?.name,
      bootPolicy: s.policy,
      bootMethod: s.method,
      attemptKey:
        (sameAttempt && existing.metadata.annotations?.[ATTEMPT_KEY_ANNOTATION]) || `a${book.attempt}`,
      bootAttempt: book.attempt,
      labels: this.cfg.scopeLabels,
    });
  }

  private announceSeries(
    claim: ServerClaim,
    book: Boot,
    why: string,
    s: ClaimBootSettings,
    log: pino.Logger,
  ): void {
    this.o.bootMetrics.attempts.inc({ flow: 'claim' });
    log.info({ series: book.series, attempt: book.attempt, reason: why }, 'boot series started');
    // The first series follows Bound and the Event ending its first attempt says the rest: an Event
    // only for a later series, whose reason (retry, changed configuration, power on) is news.
    if ((book.series ?? 1) <= 1) return;
    this.o.events.event(
      eventObject(claim),
      'Normal',
      EventReason.BootSeriesStarted,
      `series ${book.series} (${why}): ${claimWording.attempt(book, s.maxAttempts)}`,
    );
  }

  private announceAdoption(claim: ServerClaim, book: Boot, booted: boolean, log: pino.Logger): void {
    const what = booted
      ? `attempt ${book.attempt} had completed and the server is On: adopted as Booted, no new boot`
      : `attempt ${book.attempt} is running (server On): adopted, deadline ${book.deadline}, no power action`;
    log.warn({ attempt: book.attempt, booted }, 'claim without boot bookkeeping adopted');
    this.o.events.event(eventObject(claim), 'Normal', EventReason.Adopted, what);
  }

  /** The engine's step for the claim, carried out with the claim's status as its bookkeeping. */
  private async runAttempt(x: AttemptContext): Promise<Result | undefined> {
    const bootedCond = findCondition(x.claim.status?.conditions, BOOTED_CONDITION);
    const { step, seen } = decide({
      book: x.book,
      sbc: x.sbc,
      readiness: x.readiness,
      settings: x.s,
      wording: claimWordingOf(x.sbc),
      netbootSignals: NETBOOT_SIGNALS,
      wantOff: x.claim.spec.power === 'Off',
      previous: bootedCond,
      now: Date.now(),
    });
    const refusalKey = `${x.sbc?.metadata.uid}/${x.sbc?.spec.bootAttempt ?? 1}`;
    const refused = this.insertRefused.get(refusalKey);
    if (step.action?.kind === 'boot' && refused && refused.until > Date.now()) {
      // The BMC refused this attempt's ISO a moment ago: wait out the backoff without writing (a
      // write would wake this reconcile again at once).
      return { requeueAfterMs: refused.until - Date.now() };
    }
    let claim = x.claim;
    const outcomeOf = (out: Outcome | undefined): CondInput[] =>
      out ? [{ type: BOOTED_CONDITION, ...conditionFields(out) }] : [];
    const carried = await carryOut({
      step,
      before: x.book,
      observed: x.observed,
      power: {
        observe: () => this.o.power.observe(x.server),
        boot: async (observed) => {
          const path = await netbootViaOrFailure(x.server, x.sbc, this.cfg, this.o.bootConfigs);
          if (!path.ok) return path;
          const via = path.via;
          const res = await this.o.power.boot(x.server, {
            netboot: true,
            observed,
            via,
            // NetBootAlways: every boot of the tenant's machine is a network boot, also a reset made
            // at the BMC (web UI, watchdog, in-band reboot), where the BMC supports `Continuous`.
            // Not for virtual media: its ISO is ejected after completion, so a lasting `Cd` override
            // would boot an empty drive; each power-on the operator makes inserts and sets it again.
            persistent: x.s.policy === 'NetBootAlways' && via.target !== 'Cd',
            // The claim's BootAttemptStarted records this power-on (the tenant reads the claim).
            event: false,
          });
          this.noteInsertOutcome(refusalKey, res);
          return res;
        },
        ensure: (goal, observed) => this.o.power.ensure(x.server, goal, observed),
      },
      pending: (detail) => ({
        status: 'False',
        reason: BootedReason.Booting,
        message: `${claimWording.attempt(x.book, x.s.maxAttempts)}: ${detail}`,
      }),
      refused: (r) => refusedStep(x.book, r, Date.now(), claimWordingOf(x.sbc), x.s.maxAttempts),
      write: async (book, outcome) => {
        const stored = claim.status?.boot;
        if (stored && onlyProgress(step, stored, book, bootedCond, outcome)) {
          book = stored; // the signals are on the SBC; the history gets their times at the next phase
          outcome = undefined;
        }
        claim = await this.save(claim, {
          boot: book,
          phase: 'Bound',
          conditions: [...x.base, ...outcomeOf(outcome)],
        });
      },
    });
    if (x.sbc && x.book.poweredOnAt)
      this.o.bootMetrics.observeSignals(
        'claim',
        `${x.sbc.metadata.uid}/${x.sbc.spec.bootAttempt}`,
        seen,
        Date.parse(x.book.poweredOnAt),
      );
    await this.afterStep(claim, x, step, carried);
    // A failed BMC call is retried with a per-key growing delay, never past the attempt's deadline.
    if (step.phase === AttemptPhase.Completed)
      return resultOf({ ...carried, requeueAfterMs: carried.requeueAfterMs ?? this.cfg.serverResyncMs });
    return resultOf(carried);
  }

  /** Records a refused InsertMedia (backoff for {@link insertRefused}) or forgets it after a started boot. */
  private noteInsertOutcome(key: string, res: BootActionResult): void {
    if (res.ok) {
      this.insertRefused.delete(key);
      return;
    }
    if (res.failure.reason !== BmcFailureReason.VirtualMediaInsertRefused) return;
    const failures = (this.insertRefused.get(key)?.failures ?? 0) + 1;
    const delay = Math.min(MAX_INSERT_BACKOFF_MS, res.failure.retryAfterMs * 2 ** (failures - 1));
    if (this.insertRefused.size >= MAX_EJECTED_REMEMBERED) this.insertRefused.clear();
    this.insertRefused.set(key, { until: Date.now() + delay, failures });
    res.failure.retryAfterMs = delay;
  }

  /**
   * Ejects the virtual CD once the attempt completed, so the next power-on boots the disk (the ISO's
   * command line also carries a token that is spent by now). Once per attempt and process (an
   * eject after a restart finds the drive empty and posts nothing); a failed eject is tried again at
   * the next reconcile.
   */
  private async ejectAfterCompletion(x: AttemptContext): Promise<void> {
    const key = `${x.sbc?.metadata.uid}/${x.sbc?.spec.bootAttempt ?? 1}`;
    if (this.ejected.has(key)) return;
    const res = await this.o.power.ejectMedia(x.server);
    if (!res.ok) return;
    if (this.ejected.size >= MAX_EJECTED_REMEMBERED) this.ejected.clear();
    this.ejected.add(key);
    if (res.ejected) x.log.info({ attempt: x.book.attempt }, 'virtual media ejected after completion');
  }

  /** Events, metrics, logs and the NetBootOnce marker of a carried-out step. */
  private async afterStep(
    claim: ServerClaim,
    x: AttemptContext,
    step: Step,
    carried: Carried,
  ): Promise<void> {
    // The claim's opening attempt (first of the first series) is told by the Event that ends it,
    // with the binding and the power-on (a fresh claim has no Bound Event): one Event for bind,
    // power-on and outcome; meanwhile the Booted condition and BootPhase say how far it got.
    const opening = (x.book.series ?? 1) === 1 && x.book.attempt === (x.book.firstAttempt ?? 1);
    for (const e of carried.events) {
      if (opening && e.reason === EventReason.BootAttemptStarted) continue;
      const on = x.book.poweredOnAt ? `powered on ${x.book.poweredOnAt}; ` : '';
      const message = opening ? `bound Server ${x.server.metadata.name}; ${on}${e.message}` : e.message;
      this.o.events.event(eventObject(claim), e.type, e.reason, message);
    }
    if (step.phase === AttemptPhase.Completed && x.sbc?.spec.bootMethod === 'VirtualMedia')
      await this.ejectAfterCompletion(x);
    const booted = step.phase === AttemptPhase.Completed && x.sbc && x.s.policy === 'NetBootOnce';
    if (booted && x.sbc)
      await this.o.bootConfigs.setBootCompleted(x.sbc, true, `claim booted in attempt ${step.book.attempt}`);
    const c = step.counts ?? {};
    if (c.attemptStarted) this.o.bootMetrics.attempts.inc({ flow: 'claim' });
    if (c.timedOut) this.o.bootMetrics.timeouts.inc({ flow: 'claim' });
    if (c.exhausted) this.o.bootMetrics.exhausted.inc({ flow: 'claim' });
    if (c.completed && x.book.poweredOnAt)
      this.o.bootMetrics.completionSeconds.observe(
        { flow: 'claim' },
        Math.max(0, Date.now() - Date.parse(x.book.poweredOnAt)) / 1000,
      );
    if (carried.events.length)
      x.log.info(
        { attempt: step.book.attempt, phase: step.phase, events: carried.events.map((e) => e.reason) },
        'boot attempt step',
      );
  }
}

export function newServerClaimController(o: ServerClaimControllerOptions): Controller {
  const r = new ServerClaimReconciler(o);
  const c = new Controller('serverclaim', {
    reconcile: (req) => r.reconcile(req),
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

/** The claim conditions stored with a new series (or an adoption). */
function seriesConditions(
  decision: Exclude<SeriesDecision, { kind: 'continue' }>,
  s: ClaimBootSettings,
  bound: CondInput,
): CondInput[] {
  const book = decision.book;
  const text = claimWording.attempt(book, s.maxAttempts);
  if (decision.kind === 'adopt') {
    const booted: CondInput = decision.booted
      ? {
          type: BOOTED_CONDITION,
          status: 'True',
          reason: BootedReason.Adopted,
          message: `found the server On with attempt ${book.attempt} completed; adopted without a new boot`,
        }
      : {
          type: BOOTED_CONDITION,
          status: 'False',
          reason: BootedReason.Booting,
          message: `${text}: found running (server On) without bookkeeping; adopted, waiting for ${s.completion.join(', ')} until ${book.deadline}`,
        };
    return [bound, booted];
  }
  const configReady: CondInput = {
    type: BOOT_CONFIGURATION_READY_CONDITION,
    status: 'False',
    reason: NOT_EVALUATED.reason,
    message: NOT_EVALUATED.message,
  };
  const booted: CondInput = {
    type: BOOTED_CONDITION,
    status: 'False',
    reason: BootedReason.Booting,
    // The words the next reconcile uses while the new attempt's SBC is evaluated: no second write.
    message: `${text}: waiting for the boot configuration (${NOT_EVALUATED.reason}: ${NOT_EVALUATED.message})`,
  };
  return [bound, configReady, booted];
}

/**
 * The Server spec fields a claim owns besides `serverClaimRef`. Not `spec.power`: upstream deprecated
 * it (its Server controller clears it, as server.ts does); the claim's own `spec.power` decides.
 */
function desiredServerSpec(claim: ServerClaim): Pick<Server['spec'], 'bootConfigurationRef'> {
  return {
    bootConfigurationRef: { name: claim.metadata.name ?? '', namespace: claim.metadata.namespace ?? '' },
  };
}

/** A whole `status.boot` for a merge patch: fields it does not have are deleted (null). */
function bootPatch(b: Boot): Record<string, unknown> {
  const keys = [
    'attempt',
    'phase',
    'series',
    'firstAttempt',
    'attemptStartedAt',
    'poweredOnAt',
    'netbootDeadline',
    'deadline',
    'completedAt',
    'adoptedAt',
    'history',
  ] as const;
  return Object.fromEntries(keys.map((k) => [k, b[k] ?? null]));
}
