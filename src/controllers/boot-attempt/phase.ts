/**
 * The phase of a boot attempt, named from what is stored (docs/ARCHITECTURE.md): a pure function of the
 * attempt bookkeeping (a claim's `status.boot` or a Server's `status.discovery`), the SBC's readiness
 * and signals for the current attempt, the effective settings, the observed power state (when the
 * caller read it) and the time. No I/O, no clock: `now` is an input, so every transition is a table
 * test (test/controllers/boot-attempt.test.ts).
 *
 * Two deadlines per attempt (README, "A claim's boot attempts"): the netboot deadline (`netbootTimeout` after power-on, a
 * fetch of this attempt must have arrived: the firmware took the override) and the full deadline
 * (`timeout` after power-on, every completion signal). A netboot deadline at or after the full
 * deadline is no deadline of its own. The full deadline is set at the first power-on request and
 * kept while the BMC refuses it (`deadline` without `poweredOnAt`): time spent in BMC refusals
 * counts against the attempt, so an attempt always ends within `timeout` of its first power-on try.
 */
import type { PowerState } from '../../bmc/bmc.js';

/** Names of the phases, as stored in `status.boot.phase` / `status.discovery.phase`. */
export const AttemptPhase = {
  PoweredOff: 'PoweredOff',
  WaitingForConfiguration: 'WaitingForConfiguration',
  ReadyToPowerOn: 'ReadyToPowerOn',
  AwaitingNetboot: 'AwaitingNetboot',
  AwaitingSignals: 'AwaitingSignals',
  DeadlineReached: 'DeadlineReached',
  Completed: 'Completed',
  Exhausted: 'Exhausted',
  /** The series ended on a permanent BMC refusal (BootMethodUnsupported, BootRefused): no power action. */
  Refused: 'Refused',
} as const;
export type AttemptPhaseName = (typeof AttemptPhase)[keyof typeof AttemptPhase];

/** One attempt as recorded in `history` (times RFC 3339; `signals`: first seen True for this attempt). */
export interface AttemptRecord {
  attempt: number;
  startedAt?: string;
  poweredOnAt?: string;
  signals?: Record<string, string>;
  endedAt?: string;
  /** How the attempt ended: a `BootedReason` (BootCompleted, TimedOut, NetbootNotObserved, …). */
  result?: string;
}

/** Attempt bookkeeping shared by claims (`status.boot`) and discovery (`status.discovery`). */
export interface AttemptBook {
  /** The attempt number, equal to the SBC's `spec.bootAttempt`. */
  attempt: number;
  /** Claims: series of attempts (a retry or a NetBootAlways power-on starts a new one). */
  series?: number;
  /** Claims: the first attempt number of the current series. */
  firstAttempt?: number;
  attemptStartedAt?: string;
  poweredOnAt?: string;
  netbootDeadline?: string;
  deadline?: string;
  completedAt?: string;
  /** Set when the engine found a booted server without bookkeeping and adopted it. */
  adoptedAt?: string;
  phase?: string;
  /**
   * How the previous attempt of this series ended, in words (its deadline's summary: arrived and
   * missing signals), kept while this attempt runs so its condition can still say it.
   */
  lastFailure?: string;
  /** The last attempts, oldest first, at most {@link HISTORY_LIMIT}. */
  history?: AttemptRecord[];
}

export const HISTORY_LIMIT = 10;

/** Effective settings of an attempt series, durations in ms. */
export interface AttemptSettings {
  completion: readonly string[];
  timeoutMs: number;
  netbootTimeoutMs: number;
  maxAttempts: number;
}

/** What {@link phaseOf} reads. */
export interface AttemptView {
  book: AttemptBook;
  settings: AttemptSettings;
  /** The SBC is Ready for its current generation; otherwise why not. */
  readiness: { ready: boolean; reason: string; message: string };
  /** Completion signals of `settings.completion` that count for the current attempt, and the rest. */
  signals: { arrived: string[]; missing: string[] };
  /** A fetch of the current attempt arrived (the firmware took the network boot). */
  netbootSeen: boolean;
  /** The caller wants the server off (claim `spec.power: Off`). */
  wantOff?: boolean;
  /** Extra completion evidence beyond signals (discovery: the registration is stored). */
  completionEvidence?: boolean;
  /** The observed power state, when the caller read it. */
  power?: PowerState;
  now: number;
}

export type Phase =
  | { kind: 'PoweredOff' }
  | { kind: 'WaitingForConfiguration'; reason: string; message: string }
  | { kind: 'ReadyToPowerOn' }
  | { kind: 'AwaitingNetboot'; until: number }
  | { kind: 'AwaitingSignals'; until: number }
  | { kind: 'DeadlineReached'; which: 'netboot' | 'completion'; last: boolean }
  | { kind: 'Completed'; booted: boolean }
  | { kind: 'Exhausted' };

/** Attempts used in the current series (1-based). */
export function attemptsUsed(book: AttemptBook): number {
  return book.attempt - (book.firstAttempt ?? 1) + 1;
}

/** The two deadlines of an attempt powered on at `poweredOnAt`, ms since the epoch. */
export function deadlinesOf(
  poweredOnAt: number,
  s: AttemptSettings,
): { netboot: number | undefined; completion: number } {
  const completion = poweredOnAt + s.timeoutMs;
  const netboot = poweredOnAt + s.netbootTimeoutMs;
  return { netboot: netboot < completion ? netboot : undefined, completion };
}

/** Names the phase of the attempt in `v` (see the module comment). */
export function phaseOf(v: AttemptView): Phase {
  const b = v.book;
  if (v.wantOff) return { kind: 'PoweredOff' };
  if (b.completedAt) return { kind: 'Completed', booted: true };
  if (b.phase === AttemptPhase.Exhausted || b.phase === AttemptPhase.Refused) return { kind: 'Exhausted' };
  const done = v.signals.missing.length === 0 && (v.completionEvidence ?? true);
  if (!b.poweredOnAt) {
    // A power-on was requested and refused (or its result not seen) until the attempt's deadline.
    const refusedUntil = Date.parse(b.deadline ?? '');
    if (Number.isFinite(refusedUntil) && v.now >= refusedUntil)
      return {
        kind: 'DeadlineReached',
        which: 'completion',
        last: attemptsUsed(b) >= v.settings.maxAttempts,
      };
    if (!v.readiness.ready)
      return { kind: 'WaitingForConfiguration', reason: v.readiness.reason, message: v.readiness.message };
    return { kind: 'ReadyToPowerOn' };
  }
  if (done) return { kind: 'Completed', booted: false };
  const on = Date.parse(b.poweredOnAt);
  const stored = Date.parse(b.deadline ?? '');
  const d = deadlinesOf(on, v.settings);
  const completion = Number.isFinite(stored) ? stored : d.completion;
  const last = attemptsUsed(b) >= v.settings.maxAttempts;
  const storedNetboot = Date.parse(b.netbootDeadline ?? '');
  const netboot = Number.isFinite(storedNetboot) ? storedNetboot : d.netboot;
  if (!v.netbootSeen && netboot !== undefined && netboot < completion) {
    if (v.now >= netboot) return { kind: 'DeadlineReached', which: 'netboot', last };
    return { kind: 'AwaitingNetboot', until: netboot };
  }
  if (v.now >= completion) return { kind: 'DeadlineReached', which: 'completion', last };
  return v.netbootSeen
    ? { kind: 'AwaitingSignals', until: completion }
    : { kind: 'AwaitingNetboot', until: completion };
}
