/**
 * The cleanup boot on release (metal3's automated cleaning, MAAS's erase on release): a released
 * Server is not handed to the next tenant until a cleanup image has run on it and said so.
 *
 * When it applies ({@link cleanupPlan}): `spec.automatedCleaningMode: metadata`, or the field unset
 * and the manager started with `--cleanup-image`; `disabled` skips it (metal3's values).
 *
 * - Release (state Reserved, claim reference cleared by the claim controller once the BMC reported
 *   Off): condition `Cleaned=False Cleaning`, state `Cleaning`, `status.cleanup` attempt 1, Event
 *   `CleanupStarted`. Without cleanup: state Available as before (a stale `Cleaned` condition turns
 *   `False CleanupDisabled`: the disks are as the last tenant left them).
 * - Cleaning: the boot-attempt engine, as discovery runs it: an SBC `cleanup-<server>` in the
 *   manager namespace (label `metal.ironcore.dev/boot-purpose: cleanup`, owned by the Server, no
 *   ignition of its own: the served config carries only the boot-state callback), a fresh callback
 *   token per attempt, one-time network boot + On (by `--discovery-boot-method`: PXE, or the
 *   attempt's ISO by virtual media, ejected when the series ended), the netboot and cleanup deadlines
 *   (`--netboot-timeout`, `--cleanup-timeout`), at most `--cleanup-max-attempts` attempts. Done when
 *   `BootStateReceived` counts for the current attempt: the image posts `/bootstate` only after it
 *   erased the disks. Then `Cleaned=True CleanupCompleted`, state Available (powered off there).
 * - Exhausted: state Error, `Cleaned=False CleanupAttemptsExhausted` naming the missing signals,
 *   a Warning Event, SBC deleted, powered off: never claimable until `metal.ironcore.dev/operation:
 *   retry` (a fresh cleanup series), or `automatedCleaningMode: disabled` plus retry (Available as is).
 * - `metadata` without a `--cleanup-image`: stays Cleaning, `Cleaned=False CleanupImageNotConfigured`.
 * - A cordoned Server finishes its cleanup first; leaving Maintenance with a cleanup still owed goes
 *   back to Cleaning (taints.ts), so a cordon cannot launder a dirty Server into Available.
 */
import { isDeepStrictEqual } from 'node:util';
import type pino from 'pino';
import { BOOT_PURPOSE_CLEANUP, BOOT_PURPOSE_LABEL } from '../../api/v1alpha1/boot-policy.js';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import {
  BootedReason,
  BootSignal,
  CleanedReason,
  ConditionType,
  EventReason,
  NETBOOT_SIGNALS,
  OS_BOOT_SIGNALS,
} from '../../api/vocabulary.js';
import type { KubeClient } from '../../runtime/client.js';
import { findCondition } from '../../runtime/conditions.js';
import type { Result } from '../../runtime/controller.js';
import type { EventRecorder } from '../../runtime/events.js';
import type { Informer } from '../../runtime/informer.js';
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
  type Outcome,
  resultOf,
  type Step,
  type Wording,
} from '../boot-attempt/index.js';
import { type BootConfigurations, bootConfigurationReadiness } from '../common/boot-configuration.js';
import type { ControllerConfig } from '../common/config.js';
import type { BootMetrics } from '../common/metrics.js';
import { applyOwnedCondition, type OwnedCondition } from '../common/owned-conditions.js';
import { maintenanceTaint, taintText } from '../common/server-selection.js';

export const CLEANED_CONDITION = ConditionType.Cleaned;

/** Name of a Server's cleanup SBC (in the manager namespace). */
export function cleanupBootConfigurationName(server: string): string {
  return `cleanup-${server}`.slice(0, 240);
}

export type CleanupPlan = { run: false } | { run: true; image: string | undefined };

/** Whether a release of `server` runs a cleanup boot, and its image (undefined: none configured). Pure. */
export function cleanupPlan(server: Server, cfg: Pick<ControllerConfig, 'cleanupImage'>): CleanupPlan {
  const mode = server.spec.automatedCleaningMode;
  if (mode === 'disabled') return { run: false };
  if (mode === 'metadata' || cfg.cleanupImage) return { run: true, image: cfg.cleanupImage };
  return { run: false };
}

/** True when the Server still owes a cleanup boot (`Cleaned=False` for any reason but CleanupDisabled). Pure. */
export function cleanupPending(server: Server): boolean {
  const c = findCondition(server.status?.conditions, CLEANED_CONDITION);
  return c?.status === 'False' && c.reason !== CleanedReason.CleanupDisabled;
}

type Cleanup = NonNullable<NonNullable<Server['status']>['cleanup']>;

export interface CleanupActionsOptions {
  client: KubeClient;
  sbcs: Informer<ServerBootConfiguration>;
  bootConfigs: BootConfigurations;
  power: PowerActions;
  events: EventRecorder;
  bootMetrics: BootMetrics;
  config: ControllerConfig;
  /**
   * The Server controller's guarded status write (tests state and bookkeeping it decided on); `cond`
   * rides in the same request where a condition of its type is stored already.
   */
  patchStatus(s: Server, status: Record<string, unknown>, cond?: OwnedCondition): Promise<Server>;
}

const eventObject = (s: Server) => ({ ...s, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'Server' });

const wording: Wording = {
  attempt: (b, max) => `attempt ${b.attempt}/${max}`,
  timeoutPrefix: 'cleanup ',
  signalOrder: OS_BOOT_SIGNALS,
};

/** The Server controller's cleanup steps (see the file comment). */
export class CleanupActions {
  private readonly cfg: ControllerConfig;

  constructor(private readonly o: CleanupActionsOptions) {
    this.cfg = o.config;
  }

  private cleaned(s: Server, status: 'True' | 'False', reason: string, message: string): Promise<boolean> {
    return applyOwnedCondition(this.o.client, Resources.Server, s, {
      type: CLEANED_CONDITION,
      status,
      reason,
      message,
    });
  }

  private settings(): AttemptSettings {
    return {
      completion: [BootSignal.BootStateReceived],
      timeoutMs: this.cfg.cleanupTimeoutMs,
      netbootTimeoutMs: this.cfg.netbootTimeoutMs,
      maxAttempts: this.cfg.cleanupMaxAttempts,
    };
  }

  /** State Reserved without a claim: Cleaning when cleanup applies, else Available as before. */
  async release(server: Server, log: pino.Logger): Promise<Result | undefined> {
    const plan = cleanupPlan(server, this.cfg);
    if (!plan.run) return this.skip(server, 'no longer claimed', log);
    const image = plan.image ?? '';
    const what = image
      ? `cleanup attempt 1/${this.cfg.cleanupMaxAttempts} with image ${image}`
      : 'cleanup wanted (automatedCleaningMode metadata)';
    // With the condition (or after it): whoever sees Cleaning also sees why.
    await this.o.patchStatus(
      server,
      { state: 'Cleaning', cleanup: freshCleanup(image) },
      {
        type: CLEANED_CONDITION,
        status: 'False',
        reason: CleanedReason.Cleaning,
        message: `released: ${what}; not claimable until it completes`,
      },
    );
    log.info({ image }, 'released: cleanup boot before Available');
    this.o.events.event(
      eventObject(server),
      'Normal',
      EventReason.CleanupStarted,
      `no longer claimed; ${what} before the Server is Available`,
    );
    return undefined;
  }

  /** Available without a cleanup boot; a stale `Cleaned` condition says the disks were not erased. */
  private async skip(server: Server, why: string, log: pino.Logger): Promise<Result | undefined> {
    await this.removeConfiguration(server);
    const c = findCondition(server.status?.conditions, CLEANED_CONDITION);
    if (c && c.reason !== CleanedReason.CleanupDisabled)
      await this.cleaned(
        server,
        'False',
        CleanedReason.CleanupDisabled,
        'released without a cleanup boot (automatedCleaningMode disabled, or no --cleanup-image): disks as the last tenant left them',
      );
    await this.o.patchStatus(server, { state: 'Available' });
    // Evicted by the maintenance taint (`metalctl cordon --evict`), the Server goes on to Maintenance
    // at once (taints.ts): the Event says so rather than promising a claimable Server (issue 36).
    const t = maintenanceTaint(server);
    const next = t ? `Available, then Maintenance (taint ${taintText(t)}): not claimable` : 'Available';
    log.info(`${why}: ${next}`);
    this.o.events.event(eventObject(server), 'Normal', EventReason.Released, `${why}; ${next}`);
    return undefined;
  }

  /** State Error after exhausted cleanup + the retry annotation: a fresh cleanup series. */
  async retry(server: Server, log: pino.Logger): Promise<void> {
    await this.removeConfiguration(server);
    await this.o.patchStatus(server, { state: 'Cleaning', cleanup: null });
    log.info('retry requested: cleanup starts again');
    this.o.events.event(
      eventObject(server),
      'Normal',
      EventReason.CleanupRetry,
      'operation annotation retry: cleanup starts again',
    );
  }

  /** State Cleaning: one engine step of the cleanup boot. */
  async run(server: Server, log: pino.Logger): Promise<Result | undefined> {
    const plan = cleanupPlan(server, this.cfg);
    if (!plan.run) return this.skip(server, 'cleanup disabled', log);
    const c = server.status?.cleanup;
    if (!c || c.completedAt || c.phase === AttemptPhase.Exhausted) {
      // Entered again (retry, end of maintenance): a new series from attempt 1.
      await this.o.patchStatus(server, { cleanup: freshCleanup(plan.image ?? '') });
      return undefined;
    }
    if (!plan.image) {
      await this.cleaned(
        server,
        'False',
        CleanedReason.CleanupImageNotConfigured,
        'automatedCleaningMode is metadata but the manager has no --cleanup-image: not claimable until one is configured or the mode is disabled',
      );
      const p = await this.o.power.ensure(server, 'Off');
      return p.reached ? undefined : powerRetry(p);
    }
    const sbc = await this.syncConfiguration(server, c, plan.image);
    const { step } = decide({
      book: c,
      sbc,
      readiness: bootConfigurationReadiness(sbc),
      settings: this.settings(),
      wording,
      netbootSignals: NETBOOT_SIGNALS,
      now: Date.now(),
    });
    if (step.phase === AttemptPhase.Completed) return this.complete(server, sbc, c, plan.image, log);
    if (step.phase === AttemptPhase.Exhausted) return this.exhaust(server, step, sbc, log);
    return this.advance(server, step, sbc, c, log);
  }

  /** Carries out a step that neither completed nor exhausted the series. */
  private async advance(
    server: Server,
    step: Step,
    sbc: ServerBootConfiguration,
    c: Cleanup,
    log: pino.Logger,
  ): Promise<Result | undefined> {
    let current = server;
    const carried = await carryOut({
      step,
      before: c,
      power: {
        observe: () => this.o.power.observe(current),
        boot: async (observed) => {
          const path = await netbootViaOrFailure(current, sbc, this.cfg, this.o.bootConfigs);
          if (!path.ok) return path;
          const via = path.via;
          // Once, also for VirtualMedia (the drive is emptied after the cleanup: see discovery).
          return this.o.power.boot(current, { netboot: true, observed, via });
        },
        ensure: (goal, observed) => this.o.power.ensure(current, goal, observed),
      },
      pending: (detail) => ({
        status: 'False',
        reason: CleanedReason.Cleaning,
        message: `cleanup ${wording.attempt(step.book, this.cfg.cleanupMaxAttempts)}: ${detail}`,
      }),
      write: async (book, outcome) => {
        const next = cleanupOf(book, c.image);
        const stored = current.status?.cleanup;
        if (!isDeepStrictEqual({ ...next, phase: undefined }, { ...stored, phase: undefined }))
          current = await this.o.patchStatus(current, { cleanup: next });
        const cur = findCondition(current.status?.conditions, CLEANED_CONDITION);
        const waiting =
          step.phase === AttemptPhase.AwaitingNetboot || step.phase === AttemptPhase.AwaitingSignals;
        if (waiting && cur?.reason === CleanedReason.Cleaning) outcome = undefined; // said at power-on
        if (outcome)
          await this.cleaned(
            current,
            outcome.status === 'True' ? 'True' : 'False',
            reasonOf(step, outcome),
            outcome.message,
          );
      },
    });
    for (const e of carried.events) {
      const reason = CLEANUP_EVENT[e.reason];
      if (reason) this.o.events.event(eventObject(current), e.type, reason, e.message);
    }
    if (step.counts?.attemptStarted) this.o.bootMetrics.attempts.inc({ flow: 'cleanup' });
    if (step.counts?.timedOut) this.o.bootMetrics.timeouts.inc({ flow: 'cleanup' });
    if (carried.events.length) log.info({ attempt: step.book.attempt, phase: step.phase }, 'cleanup step');
    return resultOf(carried);
  }

  /** The cleanup SBC of the current attempt, and the Server's reference to it. */
  private async syncConfiguration(
    server: Server,
    c: Cleanup,
    image: string,
  ): Promise<ServerBootConfiguration> {
    const name = server.metadata.name ?? '';
    const sbcName = cleanupBootConfigurationName(name);
    const sbc = await this.o.bootConfigs.sync({
      name: sbcName,
      namespace: this.cfg.managerNamespace,
      owner: { obj: server, rt: Resources.Server },
      serverName: name,
      image,
      bootPolicy: 'NetBootAlways',
      bootMethod: managerBootMethod(this.cfg),
      attemptKey: `c${c.attempt}`,
      bootAttempt: c.attempt,
      labels: { ...this.cfg.scopeLabels, [BOOT_PURPOSE_LABEL]: BOOT_PURPOSE_CLEANUP },
    });
    const ref = server.spec.bootConfigurationRef;
    if (ref?.name !== sbcName || ref.namespace !== this.cfg.managerNamespace) {
      await this.o.client.mergePatch(Resources.Server, name, undefined, {
        spec: { bootConfigurationRef: { name: sbcName, namespace: this.cfg.managerNamespace } },
      });
    }
    return sbc;
  }

  private async complete(
    server: Server,
    sbc: ServerBootConfiguration,
    c: Cleanup,
    image: string,
    log: pino.Logger,
  ): Promise<Result | undefined> {
    const what = `cleanup image ${image} reported completion (${BootSignal.BootStateReceived}) in attempt ${c.attempt}`;
    const { deadline: _d, netbootDeadline: _n, ...rest } = c;
    // Off before the state says Available (a Cleaning Server is nobody's): one write carries the
    // PowerState, the state and the condition saying why.
    const off = await this.o.power.offForStatusWrite(server);
    const updated = await this.o.patchStatus(
      server,
      {
        ...off.status,
        state: 'Available',
        cleanup: { ...rest, completedAt: new Date().toISOString(), phase: AttemptPhase.Completed },
      },
      { type: CLEANED_CONDITION, status: 'True', reason: CleanedReason.CleanupCompleted, message: what },
    );
    if (c.poweredOnAt) {
      const poweredOn = Date.parse(c.poweredOnAt);
      this.o.bootMetrics.completionSeconds.observe(
        { flow: 'cleanup' },
        Math.max(0, Date.now() - poweredOn) / 1000,
      );
      this.o.bootMetrics.observeSignals(
        'cleanup',
        `${sbc.metadata.uid}/${sbc.spec.bootAttempt}`,
        [BootSignal.BootStateReceived],
        poweredOn,
      );
    }
    log.info({ attempt: c.attempt, image }, 'cleaned: Available');
    this.o.events.event(
      eventObject(server),
      'Normal',
      EventReason.CleanupCompleted,
      `${what}; Available, ${off.words}`,
    );
    await this.removeConfiguration(updated);
    await ejectAfterVirtualMedia(this.o.power, updated, sbc, log, 'cleanup');
    return undefined; // the status change brings the Available pass (it sees a pending power-off through)
  }

  /** The last attempt timed out: state Error with the reason, no boot configuration, powered off. */
  private async exhaust(
    server: Server,
    step: Step,
    sbc: ServerBootConfiguration,
    log: pino.Logger,
  ): Promise<Result | undefined> {
    const { deadline: _, netbootDeadline: _n, ...rest } = cleanupOf(step.book, server.status?.cleanup?.image);
    const what = step.outcome?.message ?? 'cleanup attempts exhausted';
    // With the condition (or after it): an Error Server always says why.
    const updated = await this.o.patchStatus(
      server,
      { state: 'Error', cleanup: rest },
      {
        type: CLEANED_CONDITION,
        status: 'False',
        reason: CleanedReason.CleanupAttemptsExhausted,
        message: `${what}; not claimable`,
      },
    );
    this.o.bootMetrics.timeouts.inc({ flow: 'cleanup' });
    this.o.bootMetrics.exhausted.inc({ flow: 'cleanup' });
    log.warn({ attempts: step.book.attempt }, 'cleanup failed: attempts exhausted');
    this.o.events.event(
      eventObject(server),
      'Warning',
      EventReason.CleanupAttemptsExhausted,
      `${what}; state Error, not claimable (annotate metal.ironcore.dev/operation=retry to clean again)`,
    );
    await this.removeConfiguration(updated);
    await ejectAfterVirtualMedia(this.o.power, updated, sbc, log, 'cleanup');
    const p = await this.o.power.ensure(updated, 'Off');
    return p.reached ? undefined : powerRetry(p);
  }

  /** Deletes the cleanup SBC and clears a reference to it (idempotent, cheap when already gone). */
  async removeConfiguration(server: Server): Promise<void> {
    const name = cleanupBootConfigurationName(server.metadata.name ?? '');
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

function freshCleanup(image: string): Cleanup {
  return { attempt: 1, attemptStartedAt: new Date().toISOString(), ...(image ? { image } : {}) };
}

/** Engine bookkeeping as `status.cleanup` (no series, no history). */
function cleanupOf(b: AttemptBook, image: string | undefined): Cleanup {
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
  if (image) out.image = image;
  return out as Cleanup;
}

/** Engine outcome reasons → the `Cleaned` condition's reasons. */
function reasonOf(step: Step, outcome: Outcome): string {
  if (outcome.reason === BootedReason.TimedOut) return CleanedReason.CleanupTimedOut;
  if (outcome.reason === BootedReason.NetbootNotObserved) return CleanedReason.NetbootNotObserved;
  if (outcome.reason !== BootedReason.Booting) return outcome.reason;
  return step.phase === AttemptPhase.WaitingForConfiguration
    ? CleanedReason.WaitingForBootConfiguration
    : CleanedReason.Cleaning;
}

/** Engine Event reasons → cleanup's Event reasons (others are not recorded for cleanup). */
const CLEANUP_EVENT: Record<string, string> = {
  [EventReason.BootTimedOut]: EventReason.CleanupTimedOut,
  [EventReason.NetbootNotObserved]: EventReason.NetbootNotObserved,
};
