/**
 * One small handler per attempt phase (docs/ARCHITECTURE.md): each returns a {@link Step} — the bookkeeping
 * to store, the attempt's condition (a claim's `Booted`, a Server's `Discovered`), the Events, at most
 * one BMC action and when to look again. Pure: no I/O, `now` comes from the view. The runner
 * (run.ts) carries a step out; the controllers say where its bookkeeping lives.
 */
import { BootedReason, EventReason } from '../../api/vocabulary.js';
import { formatDuration } from '../common/duration.js';
import { closeRecord } from './history.js';
import {
  type AttemptBook,
  AttemptPhase,
  type AttemptPhaseName,
  type AttemptView,
  attemptsUsed,
  deadlinesOf,
  type Phase,
} from './phase.js';

/**
 * What an outcome means, independent of any flow's wording: an adapter maps a kind to its own
 * condition reason (discovery's `DiscoveryTimedOut`, cleanup's `CleanupTimedOut`) instead of reading
 * the engine's reason or message.
 */
export type OutcomeKind =
  | 'booting'
  | 'waitingForConfiguration'
  | 'timedOut'
  | 'netbootNotObserved'
  | 'exhausted'
  | 'completed'
  | 'poweredOff'
  | 'refused';

/** An attempt condition as the engine words it; `kind` says what it means (not stored). */
export interface Outcome {
  status: 'True' | 'False' | 'Unknown';
  kind: OutcomeKind;
  /** The engine's reason (the claim's `Booted` reasons, api/vocabulary.ts BootedReason). */
  reason: string;
  message: string;
}

/** A condition as stored: what the engine reads back from an earlier step. */
export type StoredOutcome = Pick<Outcome, 'status' | 'reason' | 'message'>;

/** An outcome as a condition's fields (the kind is the engine's, not the API's). */
export function conditionFields(o: Outcome): StoredOutcome {
  return { status: o.status, reason: o.reason, message: o.message };
}

export interface AttemptEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

/** The one BMC action of a step: a network boot (override + On / power cycle), or a power goal. */
export type BmcAction = { kind: 'boot' } | { kind: 'ensure'; goal: 'On' | 'Off' };

export interface Step {
  phase: AttemptPhaseName;
  book: AttemptBook;
  /** The attempt's condition; `undefined` keeps the stored one (re-stamped for the generation). */
  outcome?: Outcome;
  events: AttemptEvent[];
  action?: BmcAction;
  requeueAfterMs?: number;
  /** What the step means for the boot metrics. */
  counts?: { attemptStarted?: boolean; timedOut?: boolean; exhausted?: boolean; completed?: boolean };
}

/** How a flow words its messages (claims: `attempt 2/3`; discovery: `discovery attempt 2/3`). */
export interface Wording {
  /** `attempt 2/3`, `attempt 5 (2/3 of series 2)`. */
  attempt(book: AttemptBook, max: number): string;
  /** Prefix of timeout messages (`''` or `'discovery '`). */
  timeoutPrefix: string;
  /** All signals of the flow, in boot order, for "arrived / missing" messages. */
  signalOrder: readonly string[];
}

/** Everything a handler reads: the view, the phase's own data, and the flow's wording. */
export interface HandlerInput extends AttemptView {
  wording: Wording;
  /** Signals of {@link Wording.signalOrder} that count for the current attempt. */
  seen: string[];
  /** The stored attempt condition (a TimedOut reason is kept while the next attempt runs). */
  previous?: StoredOutcome;
}

const booting = (
  i: HandlerInput,
  message: string,
  kind: 'booting' | 'waitingForConfiguration' = 'booting',
): Outcome => {
  const keep =
    i.previous?.reason === BootedReason.TimedOut || i.previous?.reason === BootedReason.NetbootNotObserved;
  if (keep && i.book.lastFailure) {
    const netboot = i.previous?.reason === BootedReason.NetbootNotObserved;
    return {
      status: 'False',
      kind: netboot ? 'netbootNotObserved' : 'timedOut',
      reason: i.previous?.reason ?? BootedReason.TimedOut,
      message: `${i.book.lastFailure}; ${message}`,
    };
  }
  return { status: 'False', kind, reason: BootedReason.Booting, message };
};

const text = (i: HandlerInput) => i.wording.attempt(i.book, i.settings.maxAttempts);

function waitingForConfiguration(
  i: HandlerInput,
  p: Extract<Phase, { kind: 'WaitingForConfiguration' }>,
): Step {
  return {
    phase: AttemptPhase.WaitingForConfiguration,
    book: { ...i.book, phase: AttemptPhase.WaitingForConfiguration },
    outcome: booting(
      i,
      `${text(i)}: waiting for the boot configuration (${p.reason}: ${p.message})`,
      'waitingForConfiguration',
    ),
    events: [],
  };
}

function readyToPowerOn(i: HandlerInput): Step {
  const d = deadlinesOf(i.now, i.settings);
  // A deadline stored by an earlier, refused power-on request of this attempt keeps running.
  const kept = Date.parse(i.book.deadline ?? '');
  if (Number.isFinite(kept)) d.completion = kept;
  if (d.netboot !== undefined && d.netboot >= d.completion) d.netboot = undefined;
  const deadline = new Date(d.completion).toISOString();
  const book: AttemptBook = {
    ...i.book,
    poweredOnAt: new Date(i.now).toISOString(),
    deadline,
    phase: AttemptPhase.AwaitingNetboot,
  };
  if (d.netboot !== undefined) book.netbootDeadline = new Date(d.netboot).toISOString();
  else delete book.netbootDeadline;
  return {
    phase: AttemptPhase.AwaitingNetboot,
    book,
    // The words of the AwaitingNetboot step that follows, so the next reconcile has nothing to write.
    outcome: awaiting({ ...i, seen: [] }, { kind: 'AwaitingNetboot', until: d.netboot ?? d.completion })
      .outcome,
    events: [
      {
        type: 'Normal',
        reason: EventReason.BootAttemptStarted,
        message: `${text(i)}: power action with network boot override; deadline ${deadline}`,
      },
    ],
    action: { kind: 'boot' },
    requeueAfterMs: (d.netboot ?? d.completion) - i.now + 50,
  };
}

function awaiting(i: HandlerInput, p: Extract<Phase, { kind: 'AwaitingNetboot' | 'AwaitingSignals' }>): Step {
  const until = new Date(p.until).toISOString();
  const what =
    p.kind === 'AwaitingNetboot'
      ? `waiting for the network boot (${i.wording.signalOrder[0]}) until ${until}`
      : `waiting for ${i.signals.missing.join(', ')} until ${until}`;
  return {
    phase: p.kind,
    book: { ...i.book, phase: p.kind },
    outcome: booting(i, `${text(i)}: arrived [${i.seen.join(', ')}]; ${what}`),
    events: [],
    requeueAfterMs: p.until - i.now + 50,
  };
}

function deadlineReached(i: HandlerInput, p: Extract<Phase, { kind: 'DeadlineReached' }>): Step {
  const netboot = p.which === 'netboot';
  const reason = netboot ? BootedReason.NetbootNotObserved : BootedReason.TimedOut;
  const after = netboot ? i.settings.netbootTimeoutMs : i.settings.timeoutMs;
  const expected = i.wording.signalOrder.find((s) => !i.seen.includes(s)) ?? i.signals.missing[0] ?? 'none';
  const last = i.seen.length ? i.seen[i.seen.length - 1] : 'none';
  const refused = !i.book.poweredOnAt ? ' (the BMC never accepted its power-on)' : '';
  const what =
    `${i.wording.timeoutPrefix}${text(i)} ${netboot ? 'saw no network boot' : 'timed out'} after ${formatDuration(after)}${refused}: ` +
    `arrived [${i.seen.join(', ')}], missing [${i.signals.missing.join(', ')}]`;
  const clue = `last signal ${last}, next expected ${expected}`;
  const history = closeRecord(i.book, i.now, reason);
  if (!p.last) {
    const next: AttemptBook = {
      attempt: i.book.attempt + 1,
      ...(i.book.series !== undefined ? { series: i.book.series } : {}),
      ...(i.book.firstAttempt !== undefined ? { firstAttempt: i.book.firstAttempt } : {}),
      attemptStartedAt: new Date(i.now).toISOString(),
      phase: AttemptPhase.WaitingForConfiguration,
      lastFailure: what,
      history,
    };
    const nextText = i.wording.attempt(next, i.settings.maxAttempts);
    return {
      phase: AttemptPhase.DeadlineReached,
      book: next,
      outcome: {
        status: 'False',
        kind: netboot ? 'netbootNotObserved' : 'timedOut',
        reason,
        message: `${what}; starting ${nextText}; ${clue}`,
      },
      events: [
        {
          type: 'Warning',
          reason: netboot ? EventReason.NetbootNotObserved : EventReason.BootTimedOut,
          message: `${what}; starting ${nextText}; ${clue}`,
        },
      ],
      counts: { timedOut: true, attemptStarted: true },
    };
  }
  return {
    phase: AttemptPhase.Exhausted,
    book: { ...withoutLastFailure(i.book), phase: AttemptPhase.Exhausted, history },
    outcome: {
      status: 'False',
      kind: 'exhausted',
      reason: BootedReason.AttemptsExhausted,
      message: `${what}; all ${i.settings.maxAttempts} attempt(s) used, no further power actions; ${clue}`,
    },
    events: [
      {
        type: 'Warning',
        reason: EventReason.AttemptsExhausted,
        message: `${what}; no attempts left after ${attemptsUsed(i.book)} attempt(s), no further power actions; ${clue}`,
      },
    ],
    counts: { timedOut: true, exhausted: true },
  };
}

function completed(i: HandlerInput, p: Extract<Phase, { kind: 'Completed' }>): Step {
  if (p.booted) {
    return {
      phase: AttemptPhase.Completed,
      book: { ...i.book, phase: AttemptPhase.Completed },
      events: [],
      action: { kind: 'ensure', goal: 'On' },
    };
  }
  const arrived = i.signals.arrived.join(', ');
  return {
    phase: AttemptPhase.Completed,
    book: {
      ...withoutLastFailure(i.book),
      completedAt: new Date(i.now).toISOString(),
      phase: AttemptPhase.Completed,
      history: closeRecord(i.book, i.now, BootedReason.BootCompleted),
    },
    outcome: {
      status: 'True',
      kind: 'completed',
      reason: BootedReason.BootCompleted,
      message: `${text(i)} completed: ${arrived}`,
    },
    events: [
      { type: 'Normal', reason: EventReason.BootCompleted, message: `${text(i)} completed (${arrived})` },
    ],
    counts: { completed: true },
  };
}

function poweredOff(i: HandlerInput): Step {
  const { poweredOnAt: _p, deadline: _d, netbootDeadline: _n, ...rest } = i.book;
  const booted = !!i.book.completedAt;
  return {
    phase: AttemptPhase.PoweredOff,
    book: { ...rest, phase: AttemptPhase.PoweredOff },
    outcome: booted
      ? undefined
      : {
          status: 'False',
          kind: 'poweredOff',
          reason: BootedReason.PoweredOff,
          message: 'power is Off; a new series of attempts begins at power On',
        },
    events: [],
    action: { kind: 'ensure', goal: 'Off' },
  };
}

function exhausted(i: HandlerInput): Step {
  const phase = i.book.phase === AttemptPhase.Refused ? AttemptPhase.Refused : AttemptPhase.Exhausted;
  return { phase, book: i.book, events: [] };
}

/** A BMC refusal that asking again does not change (see BmcFailure.permanent). */
export interface PermanentRefusal {
  kind: 'unsupported' | 'refused';
  /** The BMC failure reason (BMCUnsupported, BMCRejected). */
  reason: string;
  message: string;
}

/**
 * The step that ends a series on a permanent refusal of the power-on of `book`'s attempt (the
 * bookkeeping before the refused request: no `poweredOnAt`): phase Refused, `Booted=False
 * BootMethodUnsupported` or `BootRefused`, one Warning, no power action, no further attempt. The
 * attempt's history record ends with that reason and has no `poweredOnAt`.
 */
export function refusedStep(
  book: AttemptBook,
  r: PermanentRefusal,
  now: number,
  wording: Wording,
  maxAttempts: number,
): Step {
  const reason = r.kind === 'unsupported' ? BootedReason.BootMethodUnsupported : BootedReason.BootRefused;
  const { deadline: _d, netbootDeadline: _n, ...rest } = book;
  const message =
    `${wording.attempt(book, maxAttempts)}: the BMC refused the network boot for good (${r.reason}: ${r.message}); ` +
    'no power action, no further attempts until the claim changes or is annotated metal.ironcore.dev/operation=retry';
  return {
    phase: AttemptPhase.Refused,
    book: { ...rest, phase: AttemptPhase.Refused, history: closeRecord(book, now, reason) },
    outcome: { status: 'False', kind: 'refused', reason, message },
    events: [
      {
        type: 'Warning',
        reason: r.kind === 'unsupported' ? EventReason.BootMethodUnsupported : EventReason.BootRefused,
        message,
      },
    ],
  };
}

/** The step of phase `p` (one handler per phase). */
export function stepFor(p: Phase, i: HandlerInput): Step {
  switch (p.kind) {
    case 'PoweredOff':
      return poweredOff(i);
    case 'WaitingForConfiguration':
      return waitingForConfiguration(i, p);
    case 'ReadyToPowerOn':
      return readyToPowerOn(i);
    case 'AwaitingNetboot':
    case 'AwaitingSignals':
      return awaiting(i, p);
    case 'DeadlineReached':
      return deadlineReached(i, p);
    case 'Completed':
      return completed(i, p);
    case 'Exhausted':
      return exhausted(i);
  }
}

/** The book without {@link AttemptBook.lastFailure}: once the series ended, no attempt runs that it could preface. */
function withoutLastFailure(book: AttemptBook): AttemptBook {
  const { lastFailure: _, ...rest } = book;
  return rest;
}
