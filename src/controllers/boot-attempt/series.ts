/**
 * Where a series of attempts begins, and adoption (README, "A claim's boot attempts"; issue 14 item
 * 6). Pure: from a claim's stored facts (and the power state, when {@link needsPowerRead} asked for a
 * read) to "continue", "start a series (why)" or "adopt what runs".
 *
 * Status loss never re-provisions: a claim without bookkeeping whose own SBC already exists was
 * provisioned before (a restore from backup drops `status`). When its Server is On, the engine adopts
 * it — as Booted when the SBC's completion signals count for its current attempt, else as that
 * attempt in progress (deadline from now) — and never power-cycles it without evidence that its
 * boot has not happened. A server found Off boots normally. An own SBC that never served anything
 * is evidence enough: nothing booted from it, so the series starts with its attempt, whatever the power.
 */
import type { BootPolicy } from '../../api/v1alpha1/boot-policy.js';
import type { PowerState } from '../../bmc/bmc.js';
import { type AttemptBook, AttemptPhase } from './phase.js';

export interface SeriesFacts {
  book: AttemptBook | undefined;
  wantOff: boolean;
  retryAsked: boolean;
  /** The series ended in AttemptsExhausted. */
  exhausted: boolean;
  /** The claim's generation moved past the one its Booted condition was written for. */
  claimChanged: boolean;
  /** Image, ignition or policy differ from the SBC's. */
  configChanged: boolean;
  policy: BootPolicy;
  /**
   * The claim's own SBC, when it exists: its attempt, whether completion counts for it, and
   * whether anything of it went over the wire (`served`: a signal or refusal condition of any
   * attempt; absent counts as served).
   */
  sbc?: { attempt: number; completed: boolean; served?: boolean };
  timeoutMs: number;
  power?: PowerState;
  now: number;
}

export type SeriesDecision =
  | { kind: 'continue' }
  | { kind: 'start'; why: string; book: AttemptBook }
  | { kind: 'adopt'; booted: boolean; book: AttemptBook };

const booted = (b: AttemptBook | undefined) => !!b?.completedAt;

/** Whether the SBC exists and anything of it was served (see {@link SeriesFacts.sbc}). */
const served = (sbc: SeriesFacts['sbc']) => !!sbc && sbc.served !== false;

/** Whether {@link seriesDecision} needs the power state (a BMC read). */
export function needsPowerRead(f: Omit<SeriesFacts, 'power' | 'now'>): boolean {
  if (f.wantOff) return false;
  if (!f.book) return served(f.sbc);
  return booted(f.book) && f.policy === 'NetBootAlways' && !!f.book.poweredOnAt;
}

/** Why a new series begins now, or `undefined`. */
export function seriesStartReason(f: SeriesFacts): string | undefined {
  const b = f.book;
  if (f.wantOff) return undefined;
  if (!b) return 'first boot';
  if (b.attempt === 0 || (b.phase === AttemptPhase.PoweredOff && !booted(b))) return 'power on';
  if (f.retryAsked) return 'retry requested';
  if (f.exhausted && f.claimChanged) return 'claim changed';
  if (f.configChanged) return 'boot configuration changed';
  if (booted(b) && f.policy === 'NetBootAlways' && (!b.poweredOnAt || f.power === 'Off'))
    return 'power on (NetBootAlways)';
  return undefined;
}

/** The decision for the claim's series (see the module comment). */
export function seriesDecision(f: SeriesFacts): SeriesDecision {
  const at = new Date(f.now).toISOString();
  if (!f.book && !f.wantOff && f.sbc && served(f.sbc) && f.power === 'On') {
    const attempt = f.sbc.attempt;
    const base: AttemptBook = {
      series: 1,
      attempt,
      firstAttempt: attempt,
      attemptStartedAt: at,
      poweredOnAt: at,
      adoptedAt: at,
    };
    return f.sbc.completed
      ? { kind: 'adopt', booted: true, book: { ...base, completedAt: at, phase: AttemptPhase.Completed } }
      : {
          kind: 'adopt',
          booted: false,
          book: {
            ...base,
            deadline: new Date(f.now + f.timeoutMs).toISOString(),
            phase: AttemptPhase.AwaitingSignals,
          },
        };
  }
  const why = seriesStartReason(f);
  if (!why) return { kind: 'continue' };
  // An SBC that never served anything carries the first series' attempt as it is: no client holds
  // its token and no signal of it can count (the first series is stored with its power-on intent,
  // after the SBC was made: claim-attempt.ts).
  const attempt =
    !f.book && f.sbc && !served(f.sbc)
      ? f.sbc.attempt
      : Math.max(f.book?.attempt ?? 0, f.sbc?.attempt ?? 0) + 1;
  return {
    kind: 'start',
    why,
    book: {
      series: (f.book?.series ?? 0) + 1,
      attempt,
      firstAttempt: attempt,
      attemptStartedAt: at,
      phase: AttemptPhase.WaitingForConfiguration,
      ...(f.book?.history ? { history: f.book.history } : {}),
    },
  };
}
