/**
 * One Server-side boot series through the boot-attempt engine, configured once for discovery
 * (server.ts) and once for cleanup (cleanup.ts): the two flows differ in what they boot, what
 * counts as done and how they word it ({@link BootFlowSpec}), not in how an attempt runs.
 *
 * Contract: the series' bookkeeping lives in `status.<bookKey>` (one schema for both,
 * api/v1alpha1/server.ts `bootProgress`); its condition is `spec.conditionType`, whose reasons the
 * flow maps from the engine's outcome kinds. Every status write goes through the Server
 * controller's guarded writer (`patchStatus`: JSON-patch `test` ops on state and bookkeeping, the
 * condition riding in the same request where it is stored already). The SBC of attempt n is
 * `spec.sbcName(server)` in the manager namespace with attempt key `<prefix><n>`, owned by the
 * Server, referenced from `spec.bootConfigurationRef` while it runs and deleted when the series
 * ends (completed or exhausted); a virtual-media ISO is ejected then. Exhausted: state Error, the
 * condition False `reasons.exhausted`, one Warning, powered off. Errors of the API server and the
 * BMC propagate (the controller retries with backoff); power goals not yet reached requeue.
 */
import { isDeepStrictEqual } from 'node:util';
import type pino from 'pino';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import { EventReason, NETBOOT_SIGNALS } from '../../api/vocabulary.js';
import type { PowerState } from '../../bmc/bmc.js';
import type { KubeClient } from '../../runtime/client.js';
import { type Condition, findCondition } from '../../runtime/conditions.js';
import type { Result } from '../../runtime/controller.js';
import type { EventRecorder } from '../../runtime/events.js';
import { Resources } from '../../runtime/resource.js';
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
  FRESH_LOOK_MS,
  type FreshRead,
  type Outcome,
  type OutcomeKind,
  recheckDeadline,
  resultOf,
  type Step,
  type Wording,
} from '../boot-attempt/index.js';
import { type BootConfigurations, bootConfigurationReadiness } from '../common/boot-configuration.js';
import type { ControllerConfig } from '../common/config.js';
import type { BootMetrics } from '../common/metrics.js';
import { applyOwnedCondition, type OwnedCondition } from '../common/owned-conditions.js';

/** `status.discovery` or `status.cleanup`: the same shape (cleanup adds image and completedAt). */
export type ServerBootBook = NonNullable<NonNullable<Server['status']>['cleanup']>;

/** What makes a Server-side series discovery or cleanup. */
export interface BootFlowSpec {
  /** The metrics label and the flow's word in logs (`flow` of metal_boot_*). */
  readonly flow: 'discovery' | 'cleanup';
  /** The status field holding the series' bookkeeping. */
  readonly bookKey: 'discovery' | 'cleanup';
  /** The Server condition that says how the series goes (Discovered, Cleaned). */
  readonly conditionType: string;
  /** The series' SBC name for a Server name. */
  readonly sbcName: (server: string) => string;
  /** Prefix of the SBC's attempt key (`d1`, `c2`): a new attempt is a new key, a new token. */
  readonly attemptKeyPrefix: string;
  /** Labels of the SBC beyond the manager's scope labels. */
  readonly labels?: Record<string, string>;
  readonly settings: (cfg: ControllerConfig) => AttemptSettings;
  readonly wording: Wording;
  /** The condition's reason for each engine outcome kind the flow names on its own. */
  readonly reasons: Partial<Record<OutcomeKind, string>> & { booting: string; exhausted: string };
  /** Engine Event reasons → the flow's (an engine Event not listed is not recorded). */
  readonly events: Readonly<Record<string, string>>;
  /** Leads the message of a recorded engine Event (`discovery `). */
  readonly eventPrefix: string;
  /** Whether the power-on of this step records its own BootStarted Event. */
  readonly powerOnEvent: (step: Step) => boolean;
  /** Whether the power-on Event's message leads with the attempt (`discovery attempt 1/3`). */
  readonly bootPurpose?: boolean;
  /** Leads the power-pending condition message (`cleanup `). */
  readonly pendingPrefix: string;
  /** Whether `status.<bookKey>` of older objects may lack `poweredOnAt` (derived from the deadline). */
  readonly legacyPowerOn?: boolean;
  /** The Event reason and words of an exhausted series (`what`: the engine's message). */
  readonly exhausted: { event: string; condition: (what: string) => string; words: (what: string) => string };
}

export interface ServerBootFlowOptions {
  client: KubeClient;
  bootConfigs: BootConfigurations;
  power: PowerActions;
  events: EventRecorder;
  bootMetrics: BootMetrics;
  config: ControllerConfig;
  /** The Server controller's guarded status write (server.ts `patchStatus`). */
  patchStatus(
    s: Server,
    status: Record<string, unknown>,
    cond?: OwnedCondition,
    also?: OwnedCondition,
  ): Promise<Server>;
}

/** Status fields and a second condition riding in the first write of a step (the Initial pass). */
export interface FirstWrite {
  status: Record<string, unknown>;
  also?: OwnedCondition;
}

/** How a completed series is told (the flow's own words and status fields). */
export interface Completion {
  /** Status fields beyond state, power and bookkeeping (discovery's hardware). */
  status: Record<string, unknown>;
  /** The bookkeeping stored with the completion. */
  book: ServerBootBook;
  /** The condition's True reason and message. */
  reason: string;
  message: string;
  /** The Normal Event: its reason and message (`off`: how the power-off went). */
  event: { reason: string; message: (off: string) => string };
  log: { fields: Record<string, unknown>; msg: string };
  /** The signal whose arrival completed the series (for the per-signal latency metric). */
  signal: string;
}

const BOOK_KEYS = [
  'attempt',
  'attemptStartedAt',
  'poweredOnAt',
  'netbootDeadline',
  'deadline',
  'lastFailure',
  'phase',
] as const;

/** A step and what it was decided on. */
export interface Decided {
  server: Server;
  sbc: ServerBootConfiguration;
  book: ServerBootBook;
  step: Step;
}

/** The engine adapter of one Server-side flow (see the file comment). */
export class ServerBootFlow {
  private readonly cfg: ControllerConfig;

  constructor(
    readonly spec: BootFlowSpec,
    private readonly o: ServerBootFlowOptions,
  ) {
    this.cfg = o.config;
  }

  /** The stored bookkeeping as engine bookkeeping (older discovery objects: power-on = deadline - timeout). */
  bookOf(d: ServerBootBook): AttemptBook {
    if (!this.spec.legacyPowerOn) return d;
    const legacyOn =
      d.deadline && !d.poweredOnAt && d.phase !== AttemptPhase.ReadyToPowerOn
        ? new Date(Date.parse(d.deadline) - this.spec.settings(this.cfg).timeoutMs).toISOString()
        : undefined;
    return { ...d, ...(legacyOn ? { poweredOnAt: legacyOn } : {}) };
  }

  /** Engine bookkeeping as `status.<bookKey>` (no series, no history), keeping the flow's extra fields. */
  statusOf(b: AttemptBook, keep: ServerBootBook | undefined): ServerBootBook {
    const out: Record<string, unknown> = {};
    for (const k of BOOK_KEYS) if (b[k] !== undefined) out[k] = b[k];
    if (keep?.image) out.image = keep.image;
    return out as ServerBootBook;
  }

  /** The condition for an engine outcome: the flow's reason for its kind, the engine's words. */
  condition(outcome: Outcome): OwnedCondition {
    return {
      type: this.spec.conditionType,
      status: outcome.status === 'True' ? 'True' : 'False',
      reason: this.spec.reasons[outcome.kind] ?? outcome.reason,
      message: outcome.message,
    };
  }

  /** The series' SBC for attempt `attempt` and the Server's reference to it (patched when it differs). */
  async syncConfiguration(
    server: Server,
    attempt: number,
    image: string,
  ): Promise<{ sbc: ServerBootConfiguration; server: Server }> {
    const name = server.metadata.name ?? '';
    const sbcName = this.spec.sbcName(name);
    const sbc = await this.o.bootConfigs.sync({
      name: sbcName,
      namespace: this.cfg.managerNamespace,
      owner: { obj: server, rt: Resources.Server },
      serverName: name,
      image,
      bootPolicy: 'NetBootAlways',
      bootMethod: managerBootMethod(this.cfg),
      attemptKey: `${this.spec.attemptKeyPrefix}${attempt}`,
      bootAttempt: attempt,
      labels: { ...this.cfg.scopeLabels, ...this.spec.labels },
    });
    const ref = server.spec.bootConfigurationRef;
    if (ref?.name === sbcName && ref.namespace === this.cfg.managerNamespace) return { sbc, server };
    const updated = await this.o.client.mergePatch<Server>(Resources.Server, name, undefined, {
      spec: { bootConfigurationRef: { name: sbcName, namespace: this.cfg.managerNamespace } },
    });
    return { sbc, server: updated };
  }

  /** Deletes the series' SBC and clears a reference to it (idempotent, cheap when already gone). */
  async removeConfiguration(server: Server): Promise<void> {
    const name = this.spec.sbcName(server.metadata.name ?? '');
    const ref = server.spec.bootConfigurationRef;
    if (ref?.name === name && ref.namespace === this.cfg.managerNamespace) {
      await this.o.client.mergePatch(Resources.Server, server.metadata.name ?? '', undefined, {
        spec: { bootConfigurationRef: null },
      });
    }
    if (this.o.bootConfigs.cached(name, this.cfg.managerNamespace))
      await this.o.bootConfigs.delete(name, this.cfg.managerNamespace);
  }

  /**
   * The rule for a step that ends an attempt on a deadline (boot-attempt `endsOnDeadline`): the
   * Server and the attempt's SBC are read from the API server (two GETs) and the step is decided again
   * on them when they are newer than the cached ones but still this attempt of this flow. Returns what
   * to carry out (`go`: the given objects and step, or the fresh ones), or a Result to return instead
   * (`later`: the objects moved on; look again once the cache caught up). Any other step is returned
   * as given, without a request. `bookIn`: the flow's bookkeeping of a Server still in the flow's
   * state, else undefined. Throws `ApiError` (the reconcile retries).
   */
  async recheck(
    cached: Decided,
    bookIn: (server: Server) => ServerBootBook | undefined,
    decideOn: (server: Server, book: ServerBootBook, sbc: ServerBootConfiguration) => Step,
  ): Promise<{ go: Decided } | { later: Result }> {
    const r = await recheckDeadline({
      cached: { view: cached, decided: cached },
      read: async (): Promise<FreshRead<Decided>> => {
        const got = await this.o.client.get<Server>(Resources.Server, cached.server.metadata.name ?? '');
        const server = got?.metadata.uid === cached.server.metadata.uid ? got : undefined;
        const sbc = await this.o.bootConfigs.read(cached.sbc);
        if (
          server?.metadata.resourceVersion === cached.server.metadata.resourceVersion &&
          sbc?.metadata.resourceVersion === cached.sbc.metadata.resourceVersion
        )
          return { kind: 'current' };
        const book = server ? bookIn(server) : undefined;
        if (!server || !sbc || !book || book.attempt !== cached.book.attempt) return { kind: 'moved' };
        if ((sbc.spec.bootAttempt ?? 1) !== book.attempt) return { kind: 'moved' };
        return { kind: 'newer', view: { server, sbc, book, step: cached.step } };
      },
      decide: (v) => ({ ...v, step: decideOn(v.server, v.book, v.sbc) }),
      count: (result) => this.o.bootMetrics.deadlineRechecks.inc({ flow: this.spec.flow, result }),
    });
    return r === 'deferred' ? { later: { requeueAfterMs: FRESH_LOOK_MS, backoff: true } } : { go: r.decided };
  }

  /** The engine's step for the stored bookkeeping `d` and the attempt's SBC. */
  decide(d: ServerBootBook, sbc: ServerBootConfiguration, completionEvidence?: boolean): Step {
    return decide({
      book: this.bookOf(d),
      sbc,
      readiness: bootConfigurationReadiness(sbc),
      settings: this.spec.settings(this.cfg),
      wording: this.spec.wording,
      netbootSignals: NETBOOT_SIGNALS,
      ...(completionEvidence !== undefined ? { completionEvidence } : {}),
      now: Date.now(),
    }).step;
  }

  /**
   * Carries out a step that neither completed nor exhausted the series: the BMC action (network boot
   * by the SBC's method, or a power goal), then the bookkeeping and condition in one write.
   * `observed`: a power state read in this pass already; `first`: fields of the step's first write.
   */
  async advance(
    server: Server,
    step: Step,
    d: ServerBootBook,
    sbc: ServerBootConfiguration,
    log: pino.Logger,
    opts: { observed?: PowerState; first?: FirstWrite } = {},
  ): Promise<Result | undefined> {
    const s = this.spec;
    const max = s.settings(this.cfg).maxAttempts;
    let current = server;
    let first = opts.first;
    const carried = await carryOut({
      step,
      before: this.bookOf(d),
      ...(opts.observed !== undefined ? { observed: opts.observed } : {}),
      power: {
        observe: () => this.o.power.observe(current),
        boot: async (observed) => {
          const path = await netbootViaOrFailure(current, sbc, this.cfg, this.o.bootConfigs);
          if (!path.ok) return path;
          // Once, also for VirtualMedia: a lasting `Cd` override would boot the drive emptied after
          // the series; every attempt inserts its own ISO and sets the override again.
          return this.o.power.boot(current, {
            netboot: true,
            observed,
            via: path.via,
            ...(s.bootPurpose ? { purpose: `${s.flow} ${s.wording.attempt(step.book, max)}` } : {}),
            event: s.powerOnEvent(step),
          });
        },
        ensure: (goal, observed) => this.o.power.ensure(current, goal, observed),
      },
      pending: (detail) => ({
        status: 'False',
        reason: s.reasons.booting,
        message: `${s.pendingPrefix}${s.wording.attempt(step.book, max)}: ${detail}`,
      }),
      write: async (book, outcome) => {
        const extra = first;
        first = undefined;
        current = await this.write(current, step, book, outcome, extra);
      },
    });
    for (const e of carried.events) {
      const reason = s.events[e.reason];
      if (reason)
        this.o.events.record(Resources.Server, current, e.type, reason, `${s.eventPrefix}${e.message}`);
    }
    if (step.counts?.attemptStarted) this.o.bootMetrics.attempts.inc({ flow: s.flow });
    if (step.counts?.timedOut) this.o.bootMetrics.timeouts.inc({ flow: s.flow });
    if (carried.events.length) log.info({ attempt: step.book.attempt, phase: step.phase }, `${s.flow} step`);
    return resultOf(carried);
  }

  /**
   * The status write of a step: bookkeeping and condition in one request where the condition is
   * stored already; with `first` (the Initial pass) always a write. Returns the Server as stored.
   */
  private async write(
    current: Server,
    step: Step,
    book: AttemptBook,
    outcome: Outcome | undefined,
    first: FirstWrite | undefined,
  ): Promise<Server> {
    const key = this.spec.bookKey;
    const stored = current.status?.[key];
    const next = this.statusOf(book, stored);
    if (first) {
      const cond = outcome && this.condition(outcome);
      return this.o.patchStatus(current, { ...first.status, [key]: next }, cond, first.also);
    }
    const cur = findCondition(current.status?.conditions, this.spec.conditionType);
    const waiting =
      step.phase === AttemptPhase.AwaitingNetboot || step.phase === AttemptPhase.AwaitingSignals;
    // Said at power-on: a waiting step's progress is on the SBC, not worth a write of its own.
    if (waiting && cur?.reason === this.spec.reasons.booting) outcome = undefined;
    let cond = outcome && this.condition(outcome);
    // Said already: not again just because a bootConfigurationRef patch moved the generation.
    if (step.phase === AttemptPhase.WaitingForConfiguration && sameWords(cur, cond)) cond = undefined;
    // The phase alone is no reason to write: it rides along with the next real change.
    if (!isDeepStrictEqual({ ...next, phase: undefined }, { ...stored, phase: undefined }))
      return this.o.patchStatus(current, { [key]: next }, cond);
    if (cond) await applyOwnedCondition(this.o.client, Resources.Server, current, cond);
    return current;
  }

  /**
   * A completed series: powered off first (a Server in the series is nobody's, so safe to repeat),
   * then one write of state Available, the power state, the bookkeeping and the True condition;
   * metrics, the Event, the SBC deleted, a virtual-media ISO ejected. The status change brings the
   * Available pass, which sees a pending power-off through.
   */
  async complete(
    server: Server,
    sbc: ServerBootConfiguration,
    d: ServerBootBook,
    c: Completion,
    log: pino.Logger,
  ): Promise<undefined> {
    const off = await this.o.power.offForStatusWrite(server);
    const updated = await this.o.patchStatus(
      server,
      { ...c.status, ...off.status, state: 'Available', [this.spec.bookKey]: c.book },
      { type: this.spec.conditionType, status: 'True', reason: c.reason, message: c.message },
    );
    const poweredOnAt = this.bookOf(d).poweredOnAt;
    if (poweredOnAt) {
      const poweredOn = Date.parse(poweredOnAt);
      const flow = this.spec.flow;
      this.o.bootMetrics.completionSeconds.observe({ flow }, Math.max(0, Date.now() - poweredOn) / 1000);
      this.o.bootMetrics.observeSignals(
        flow,
        `${sbc.metadata.uid}/${sbc.spec.bootAttempt}`,
        [c.signal],
        poweredOn,
      );
    }
    log.info(c.log.fields, c.log.msg);
    this.o.events.record(Resources.Server, server, 'Normal', c.event.reason, c.event.message(off.words));
    await this.removeConfiguration(updated);
    await ejectAfterVirtualMedia(this.o.power, updated, sbc, log, this.spec.flow);
    return undefined;
  }

  /** The last attempt timed out: state Error with the reason, no boot configuration, powered off. */
  async exhaust(
    server: Server,
    step: Step,
    sbc: ServerBootConfiguration,
    log: pino.Logger,
  ): Promise<Result | undefined> {
    const s = this.spec;
    const {
      deadline: _,
      netbootDeadline: _n,
      ...rest
    } = this.statusOf(step.book, server.status?.[s.bookKey]);
    const what = step.outcome?.message ?? `${s.flow} attempts exhausted`;
    // With the condition (or after it): an Error Server always says why.
    const updated = await this.o.patchStatus(
      server,
      { state: 'Error', [s.bookKey]: rest },
      {
        type: s.conditionType,
        status: 'False',
        reason: s.reasons.exhausted,
        message: s.exhausted.condition(what),
      },
    );
    this.o.bootMetrics.timeouts.inc({ flow: s.flow });
    this.o.bootMetrics.exhausted.inc({ flow: s.flow });
    log.warn({ attempts: step.book.attempt }, `${s.flow} failed: attempts exhausted`);
    this.o.events.record(Resources.Server, server, 'Warning', s.exhausted.event, s.exhausted.words(what));
    await this.removeConfiguration(updated);
    await ejectAfterVirtualMedia(this.o.power, updated, sbc, log, s.flow);
    const p = await this.o.power.ensure(updated, 'Off');
    return p.reached ? undefined : powerRetry(p);
  }
}

/** The bookkeeping without its deadlines (a series that ended has none running). */
export function withoutDeadline(d: ServerBootBook): ServerBootBook {
  const { deadline: _, netbootDeadline: _n, ...rest } = d;
  return rest;
}

function sameWords(stored: Condition | undefined, cond: OwnedCondition | undefined): boolean {
  return (
    !!stored &&
    !!cond &&
    stored.status === cond.status &&
    stored.reason === cond.reason &&
    stored.message === cond.message
  );
}

/** Engine Event reasons every Server-side flow records: timeouts and a netboot that never came. */
export const TIMEOUT_EVENTS = (timedOut: string): Record<string, string> => ({
  [EventReason.BootTimedOut]: timedOut,
  [EventReason.NetbootNotObserved]: EventReason.NetbootNotObserved,
});
