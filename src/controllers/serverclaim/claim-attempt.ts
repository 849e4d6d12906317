/**
 * A bound claim's boot: the series decision (boot-attempt/series.ts), the SBC of the current attempt,
 * and the engine's step carried out with the claim's `status.boot` as its bookkeeping (commit point
 * "series": a new series is stored before anything acts on it; commit point "power-on": the intent
 * before the BMC is asked, boot-attempt/run.ts). Also the claim's effective boot settings and wording.
 * Events, metrics and the NetBootOnce marker follow a carried-out step; a virtual-media ISO is
 * ejected after completion, an InsertMedia refusal backs off (5 s doubling to 60 s).
 */
import type pino from 'pino';
import type { BootMethod } from '../../api/v1alpha1/boot-method.js';
import { type BootPolicy, OPERATION_ANNOTATION, OPERATION_RETRY } from '../../api/v1alpha1/boot-policy.js';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import {
  BmcFailureReason,
  BootConfigurationReason,
  BootedReason,
  EventReason,
  HTTP_BOOT_SIGNALS,
  isCompletionSignal,
  NETBOOT_SIGNALS,
  OS_BOOT_SIGNALS,
  VIRTUAL_MEDIA_BOOT_SIGNALS,
} from '../../api/vocabulary.js';
import type { PowerState } from '../../bmc/bmc.js';
import { findCondition } from '../../runtime/conditions.js';
import type { Result } from '../../runtime/controller.js';
import { isControlledBy } from '../../runtime/ownerrefs.js';
import { Resources } from '../../runtime/resource.js';
import { netbootViaOrFailure } from '../bmc-actions/netboot-via.js';
import type { BootActionResult } from '../bmc-actions/power.js';
import {
  AttemptPhase,
  type AttemptPower,
  type AttemptSettings,
  attemptsUsed,
  type Carried,
  carryOut,
  conditionFields,
  type Decision,
  decide,
  FRESH_LOOK_MS,
  type FreshRead,
  needsPowerRead,
  type Outcome,
  onlyProgress,
  recheckDeadline,
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
  bootConfigurationReadiness,
  NOT_EVALUATED,
  type Readiness,
  servedAnything,
} from '../common/boot-configuration.js';
import type { ControllerConfig } from '../common/config.js';
import { parseDuration } from '../common/duration.js';
import { type ClaimBinding, desiredServerSpec } from './claim-binding.js';
import {
  BOOT_CONFIGURATION_READY_CONDITION,
  BOOTED_CONDITION,
  type Boot,
  type CondInput,
  type ServerClaimControllerOptions,
} from './claim-context.js';
import { bootInputsDiffer, bootsTheSame } from './claim-edits.js';
import type { ClaimStatusWriter } from './claim-status.js';

/** Completed virtual-media attempts remembered as ejected; beyond it the set starts again (one more eject check each). */
const MAX_EJECTED_REMEMBERED = 10_000;

/**
 * How long a fresh claim's first status write is held while its Server is being reserved and its
 * SBC evaluated, ms: within it the series rides in the write that precedes the power-on (one
 * request where there were two); past it the claim says what it waits for.
 */
export const FIRST_WRITE_HOLD_MS = 2_000;

/** Claims whose first write is held, remembered; beyond it the map starts again (a held write is then made). */
const MAX_HELD_REMEMBERED = 10_000;

/** Longest wait between boots of an attempt whose ISO the BMC keeps refusing, ms. */
const MAX_INSERT_BACKOFF_MS = 60_000;

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

interface AttemptContext {
  claim: ServerClaim;
  server: Server;
  sbc: ServerBootConfiguration | undefined;
  book: Boot;
  s: ClaimBootSettings;
  readiness: Readiness;
  /** The claim's `Bound` condition, written with every status write of the step. */
  bound: CondInput;
  observed?: PowerState;
  log: pino.Logger;
  /** A first series not stored yet (why it starts): its book rides in the first write of the step. */
  firstSeries?: string;
}

/** The boot of a bound claim (see the file comment). */
export class ClaimAttempts {
  private readonly cfg: ControllerConfig;

  /**
   * `sbc uid/attempt` → when a boot may be tried again after the BMC refused the attempt's ISO, and
   * how many refusals in a row (backoff 5 s doubling to 60 s). Bounded by {@link MAX_EJECTED_REMEMBERED}.
   */
  private readonly insertRefused = new Map<string, { until: number; failures: number }>();
  /** `sbc uid/attempt` of completed virtual-media attempts whose CD was ejected (see ejectAfterCompletion). */
  private readonly ejected = new Set<string>();
  /** Claim uid → when its first status write was first held (see {@link FIRST_WRITE_HOLD_MS}). */
  private readonly held = new Map<string, number>();

  constructor(
    private readonly o: ServerClaimControllerOptions,
    private readonly status: ClaimStatusWriter,
    private readonly binding: ClaimBinding,
  ) {
    this.cfg = o.config;
  }

  /**
   * The status of a claim whose Server is not Reserved yet: Bound, and for a fresh claim (power On, no
   * bookkeeping, no SBC of its name, no retry asked) its first series too, worded exactly as the first
   * reconcile after Reserved words it (that reconcile then has nothing to write): binding and series
   * in one status write. While the write is held, the series' SBC is made already, so its evaluation
   * runs beside the Server controller's reserving (the SBC serves nothing before the power-on intent
   * is recorded: bootsignals/power-intent.ts); the power waits for Reserved.
   */
  async saveUnreserved(
    claim: ServerClaim,
    server: Server,
    bound: CondInput,
    log: pino.Logger,
  ): Promise<number | undefined> {
    const s = claimBootSettings(claim, this.cfg);
    const facts = this.claimFacts(claim, s);
    const decision = this.binding.isFresh(claim) ? seriesDecision({ ...facts, now: Date.now() }) : undefined;
    if (decision?.kind !== 'start') {
      await this.status.save(claim, { phase: 'Bound', conditions: [bound] });
      return undefined;
    }
    const hold = this.holdFirstWrite(claim);
    if (hold !== undefined) {
      await this.syncConfiguration(claim, server, decision.book, s);
      return hold;
    }
    await this.status.save(claim, {
      boot: decision.book,
      phase: 'Bound',
      conditions: seriesConditions(decision, s, bound),
    });
    this.held.delete(claim.metadata.uid ?? '');
    this.announceSeries(claim, decision.book, decision.why, s, log);
    return undefined;
  }

  /**
   * Ms left of a fresh claim's first-write hold ({@link FIRST_WRITE_HOLD_MS}, counted from its first
   * call), or `undefined` once it is over: then the write is made.
   */
  private holdFirstWrite(claim: ServerClaim): number | undefined {
    const uid = claim.metadata.uid ?? '';
    const now = Date.now();
    let since = this.held.get(uid);
    if (since === undefined) {
      if (this.held.size >= MAX_HELD_REMEMBERED) this.held.clear();
      since = now;
      this.held.set(uid, since);
    }
    const left = since + FIRST_WRITE_HOLD_MS - now;
    return left > 0 ? left : undefined;
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
            served: servedAnything(own),
          }
        : undefined,
      timeoutMs: s.timeoutMs,
    };
  }

  /**
   * Provisioning of a Reserved Server: series decision, the SBC of the current attempt, then the
   * engine's step, carried out with one status write (see boot-attempt/).
   */
  async provision(
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
      await this.status.save(claim, { phase: 'Bound', conditions: [bound, invalid] });
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
    if (decision.kind === 'start' && !facts.book && !facts.retryAsked) {
      // The first series is stored with the step's first write (the power-on intent when the SBC is
      // Ready by then), not on its own: a stale cache repeats only this decision, on the same SBC
      // attempt (an unserved SBC keeps its attempt: series.ts), and the guarded write lets one through.
      const book = decision.book;
      const sbc = await this.syncConfiguration(claim, server, book, s);
      const readiness = bootConfigurationReadiness(sbc);
      return this.runAttempt({
        ...{ claim, server, sbc, book, s, readiness, bound, observed, log },
        firstSeries: decision.why,
      });
    }
    if (decision.kind !== 'continue')
      return this.beginSeries({ claim, server, bound, decision, facts, s, log });
    if (facts.retryAsked) claim = await this.consumeRetry(claim);
    let book: Boot = facts.book ?? { attempt: 0, phase: AttemptPhase.PoweredOff }; // Off before any boot
    const sbc = await this.syncConfiguration(claim, server, book, s);
    if (sbc && book.attempt > 0 && book.attempt !== (sbc.spec.bootAttempt ?? 1))
      book = { ...book, attempt: sbc.spec.bootAttempt ?? 1 }; // one numbering: the SBC's
    const readiness = sbc ? bootConfigurationReadiness(sbc) : PENDING;
    return this.runAttempt({ claim, server, sbc, book, s, readiness, bound, observed, log });
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
    claim = await this.status.save(claim, {
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
    this.o.events.record(
      Resources.ServerClaim,
      claim,
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
    this.o.events.record(Resources.ServerClaim, claim, 'Normal', EventReason.Adopted, what);
  }

  /**
   * The rule for a step that ends an attempt on a deadline (boot-attempt `endsOnDeadline`): the
   * signals are read from the SBC as stored (a GET), not from the cache, so a signal the cache has
   * not delivered yet is not lost to a power cycle. Returns the context and decision to carry out
   * (the given ones, or decided again on the fresh SBC of the same attempt), or `later` when the SBC
   * moved on (gone, another attempt): nothing until the cache shows where to. Any other decision is
   * returned as given, without a request. Throws `ApiError` (the reconcile retries).
   */
  private async confirmDeadline(
    x: AttemptContext,
    decision: Decision,
    decideOn: (c: AttemptContext) => Decision,
  ): Promise<{ x: AttemptContext; decision: Decision } | { later: Result }> {
    const sbc = x.sbc;
    if (!sbc) return { x, decision };
    const r = await recheckDeadline({
      cached: { view: x, decided: decision },
      read: async (): Promise<FreshRead<AttemptContext>> => {
        const fresh = await this.o.bootConfigs.read(sbc);
        if (fresh?.metadata.resourceVersion === sbc.metadata.resourceVersion) return { kind: 'current' };
        if (!fresh || (fresh.spec.bootAttempt ?? 1) !== (sbc.spec.bootAttempt ?? 1)) return { kind: 'moved' };
        return { kind: 'newer', view: { ...x, sbc: fresh, readiness: bootConfigurationReadiness(fresh) } };
      },
      decide: decideOn,
      count: (result) => this.o.bootMetrics.deadlineRechecks.inc({ flow: 'claim', result }),
    });
    return r === 'deferred'
      ? { later: { requeueAfterMs: FRESH_LOOK_MS, backoff: true } }
      : { x: r.view, decision: r.decided };
  }

  /** The engine's step for the claim, carried out with the claim's status as its bookkeeping. */
  private async runAttempt(context: AttemptContext): Promise<Result | undefined> {
    let x = context;
    const bootedCond = findCondition(x.claim.status?.conditions, BOOTED_CONDITION);
    const decideOn = (c: AttemptContext) =>
      decide({
        book: c.book,
        sbc: c.sbc,
        readiness: c.readiness,
        settings: c.s,
        wording: claimWordingOf(c.sbc),
        netbootSignals: NETBOOT_SIGNALS,
        wantOff: c.claim.spec.power === 'Off',
        previous: bootedCond,
        now: Date.now(),
      });
    const rechecked = await this.confirmDeadline(x, decideOn(x), decideOn);
    if ('later' in rechecked) return rechecked.later;
    x = rechecked.x;
    const { step, seen } = rechecked.decision;
    const base = [x.bound, readinessCondition(x.readiness)];
    const refusalKey = `${x.sbc?.metadata.uid}/${x.sbc?.spec.bootAttempt ?? 1}`;
    const refused = this.insertRefused.get(refusalKey);
    if (step.action?.kind === 'boot' && refused && refused.until > Date.now()) {
      // The BMC refused this attempt's ISO a moment ago: wait out the backoff without writing (a
      // write would wake this reconcile again at once).
      return { requeueAfterMs: refused.until - Date.now() };
    }
    let claim = x.claim;
    let held: number | undefined;
    const outcomeOf = (out: Outcome | undefined): CondInput[] =>
      out ? [{ type: BOOTED_CONDITION, ...conditionFields(out) }] : [];
    const carried = await carryOut({
      step,
      before: x.book,
      observed: x.observed,
      power: this.attemptPower(x, refusalKey),
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
        // A first series waiting for its SBC, within the hold: nothing to say yet that the power-on
        // intent will not say a moment later.
        if (x.firstSeries && !stored && !step.action) {
          held = this.holdFirstWrite(claim);
          if (held !== undefined) return;
        }
        claim = await this.status.save(claim, {
          boot: book,
          phase: 'Bound',
          conditions: [...base, ...outcomeOf(outcome)],
        });
        if (x.firstSeries && !stored) {
          this.held.delete(claim.metadata.uid ?? '');
          this.announceSeries(claim, book, x.firstSeries, x.s, x.log);
        }
      },
    });
    if (held !== undefined) return { requeueAfterMs: held };
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

  /**
   * The claim's BMC as the engine uses it: a network boot by the SBC's method (a persistent override
   * for NetBootAlways, not for virtual media), with the ISO-refusal backoff noted per attempt.
   */
  private attemptPower(x: AttemptContext, refusalKey: string): AttemptPower {
    return {
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
    };
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
      this.o.events.record(Resources.ServerClaim, claim, e.type, e.reason, message);
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

/** The claim's `BootConfigurationReady` for a readiness of its SBC. */
function readinessCondition(readiness: Readiness): CondInput {
  return {
    type: BOOT_CONFIGURATION_READY_CONDITION,
    status: readiness.ready ? 'True' : 'False',
    reason: readiness.reason,
    message: readiness.message,
  };
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
