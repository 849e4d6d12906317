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
import type pino from 'pino';
import { BOOT_PURPOSE_CLEANUP, BOOT_PURPOSE_LABEL } from '../../api/v1alpha1/boot-policy.js';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import {
  BootSignal,
  CleanedReason,
  ConditionType,
  EventReason,
  OS_BOOT_SIGNALS,
} from '../../api/vocabulary.js';
import { findCondition } from '../../runtime/conditions.js';
import type { Result } from '../../runtime/controller.js';
import { Resources } from '../../runtime/resource.js';
import { powerRetry } from '../bmc-actions/power.js';
import { AttemptPhase } from '../boot-attempt/index.js';
import type { ControllerConfig } from '../common/config.js';
import { applyOwnedCondition } from '../common/owned-conditions.js';
import { maintenanceTaint, taintText } from '../common/server-selection.js';
import {
  type BootFlowSpec,
  type ServerBootBook,
  ServerBootFlow,
  type ServerBootFlowOptions,
  TIMEOUT_EVENTS,
  withoutDeadline,
} from './server-boot-flow.js';

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

type Cleanup = ServerBootBook;

/** Cleanup as a Server-side boot flow: the image's `/bootstate` is its completion. */
export const CLEANUP_FLOW: BootFlowSpec = {
  flow: 'cleanup',
  bookKey: 'cleanup',
  conditionType: CLEANED_CONDITION,
  sbcName: cleanupBootConfigurationName,
  attemptKeyPrefix: 'c',
  labels: { [BOOT_PURPOSE_LABEL]: BOOT_PURPOSE_CLEANUP },
  settings: (cfg) => ({
    completion: [BootSignal.BootStateReceived],
    timeoutMs: cfg.cleanupTimeoutMs,
    netbootTimeoutMs: cfg.netbootTimeoutMs,
    maxAttempts: cfg.cleanupMaxAttempts,
  }),
  wording: {
    attempt: (b, max) => `attempt ${b.attempt}/${max}`,
    timeoutPrefix: 'cleanup ',
    signalOrder: OS_BOOT_SIGNALS,
  },
  reasons: {
    booting: CleanedReason.Cleaning,
    waitingForConfiguration: CleanedReason.WaitingForBootConfiguration,
    timedOut: CleanedReason.CleanupTimedOut,
    netbootNotObserved: CleanedReason.NetbootNotObserved,
    exhausted: CleanedReason.CleanupAttemptsExhausted,
  },
  events: TIMEOUT_EVENTS(EventReason.CleanupTimedOut),
  eventPrefix: '',
  powerOnEvent: () => true,
  pendingPrefix: 'cleanup ',
  exhausted: {
    event: EventReason.CleanupAttemptsExhausted,
    condition: (what) => `${what}; not claimable`,
    words: (what) =>
      `${what}; state Error, not claimable (annotate metal.ironcore.dev/operation=retry to clean again)`,
  },
};

/** The Server controller's cleanup steps (see the file comment). */
export class CleanupActions {
  private readonly cfg: ControllerConfig;
  readonly flow: ServerBootFlow;

  constructor(private readonly o: ServerBootFlowOptions) {
    this.cfg = o.config;
    this.flow = new ServerBootFlow(CLEANUP_FLOW, o);
  }

  private cleaned(s: Server, status: 'True' | 'False', reason: string, message: string): Promise<boolean> {
    return applyOwnedCondition(this.o.client, Resources.Server, s, {
      type: CLEANED_CONDITION,
      status,
      reason,
      message,
    });
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
    this.o.events.record(
      Resources.Server,
      server,
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
    // A stale `Cleaned` rides in the Available write (one request).
    await this.o.patchStatus(
      server,
      { state: 'Available' },
      c && c.reason !== CleanedReason.CleanupDisabled
        ? {
            type: CLEANED_CONDITION,
            status: 'False',
            reason: CleanedReason.CleanupDisabled,
            message:
              'released without a cleanup boot (automatedCleaningMode disabled, or no --cleanup-image): disks as the last tenant left them',
          }
        : undefined,
    );
    // Evicted by the maintenance taint (`metalctl cordon --evict`), the Server goes on to Maintenance
    // at once (taints.ts): the Event says so rather than promising a claimable Server (issue 36).
    const t = maintenanceTaint(server);
    const next = t ? `Available, then Maintenance (taint ${taintText(t)}): not claimable` : 'Available';
    log.info(`${why}: ${next}`);
    this.o.events.record(Resources.Server, server, 'Normal', EventReason.Released, `${why}; ${next}`);
    return undefined;
  }

  /** State Error after exhausted cleanup + the retry annotation: a fresh cleanup series. */
  async retry(server: Server, log: pino.Logger): Promise<void> {
    await this.removeConfiguration(server);
    await this.o.patchStatus(server, { state: 'Cleaning', cleanup: null });
    log.info('retry requested: cleanup starts again');
    this.o.events.record(
      Resources.Server,
      server,
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
    const synced = await this.flow.syncConfiguration(server, c.attempt, plan.image);
    // A deadline: a completion the cache has not delivered yet must not be lost to a power cycle.
    const r = await this.flow.recheck(
      { server: synced.server, sbc: synced.sbc, book: c, step: this.flow.decide(c, synced.sbc) },
      (srv) => (srv.status?.state === 'Cleaning' ? srv.status.cleanup : undefined),
      (_srv, book, sbc) => this.flow.decide(book, sbc),
    );
    if ('later' in r) return r.later;
    const { server: current, sbc, book, step } = r.go;
    if (step.phase === AttemptPhase.Completed) return this.complete(current, sbc, book, plan.image, log);
    if (step.phase === AttemptPhase.Exhausted) return this.flow.exhaust(current, step, sbc, log);
    return this.flow.advance(current, step, book, sbc, log);
  }

  private complete(
    server: Server,
    sbc: ServerBootConfiguration,
    c: Cleanup,
    image: string,
    log: pino.Logger,
  ): Promise<undefined> {
    const what = `cleanup image ${image} reported completion (${BootSignal.BootStateReceived}) in attempt ${c.attempt}`;
    return this.flow.complete(
      server,
      sbc,
      c,
      {
        status: {},
        book: { ...withoutDeadline(c), completedAt: new Date().toISOString(), phase: AttemptPhase.Completed },
        reason: CleanedReason.CleanupCompleted,
        message: what,
        event: { reason: EventReason.CleanupCompleted, message: (off) => `${what}; Available, ${off}` },
        log: { fields: { attempt: c.attempt, image }, msg: 'cleaned: Available' },
        signal: BootSignal.BootStateReceived,
      },
      log,
    );
  }

  /** Deletes the cleanup SBC and clears a reference to it (idempotent, cheap when already gone). */
  removeConfiguration(server: Server): Promise<void> {
    return this.flow.removeConfiguration(server);
  }
}

function freshCleanup(image: string): Cleanup {
  return { attempt: 1, attemptStartedAt: new Date().toISOString(), ...(image ? { image } : {}) };
}
