/**
 * Carries out one {@link Step}: its BMC action (at most one) and its status write. Snapshot → decide →
 * one patch: the caller's `write` is called once per reconcile — except for the deliberate commit
 * point of a network boot, where the intent (`poweredOnAt`, deadlines) is written BEFORE the BMC is
 * asked, so a restart between the two never powers on twice, and a second write after a failed BMC
 * call rolls the intent back when the BMC certainly did not act (`maybeApplied` false).
 */
import type { PowerState } from '../../bmc/bmc.js';
import { isTransitionalPowerState } from '../../bmc/bmc.js';
import { classifyBmcFailure } from '../bmc-actions/bmc-connections.js';
import type { BootActionResult, PowerProgress } from '../bmc-actions/power.js';
import type { AttemptEvent, Outcome, PermanentRefusal, Step, StoredOutcome } from './handlers.js';
import { type AttemptBook, AttemptPhase } from './phase.js';

/** The BMC of the attempt's server, as the runner uses it. */
export interface AttemptPower {
  /** One PowerState read. Throws BMC errors. */
  observe(): Promise<PowerState>;
  /** Network boot: override, then On (when Off) or a power cycle (when On). Never throws BMC errors. */
  boot(observed: PowerState): Promise<BootActionResult>;
  /** Towards `goal` without waiting; `observed` saves a read. Never throws BMC errors. */
  ensure(goal: 'On' | 'Off', observed?: PowerState): Promise<PowerProgress>;
}

export interface CarryOut {
  step: Step;
  /** The bookkeeping before the step (kept when a boot could not be started). */
  before: AttemptBook;
  power: AttemptPower;
  /** A power state read earlier in this reconcile. */
  observed?: PowerState;
  /** The attempt condition saying a power action is pending (`detail`: why); its kind is `booting`. */
  pending(detail: string): StoredOutcome;
  /** Writes bookkeeping and outcome: the reconcile's status write. */
  write(book: AttemptBook, outcome: Outcome | undefined): Promise<void>;
  /**
   * The step ending the series on a permanent refusal of the network boot (handlers.ts
   * `refusedStep`); without it such a refusal is retried like any other (discovery).
   */
  refused?(r: PermanentRefusal): Step;
}

export interface Carried {
  /** Events to record now (after the writes succeeded). */
  events: AttemptEvent[];
  requeueAfterMs?: number;
  /** The step took effect (a boot was started, or no action was needed). */
  done: boolean;
  /** A BMC call failed: `requeueAfterMs` is its retry delay, to be grown per key (Result.backoff). */
  failed?: boolean;
  /** With `failed`: the latest the next look may come (the attempt's deadline), ms from now. */
  latestMs?: number;
  /** The series ended on a permanent refusal (this step, with its events, replaced the planned one). */
  ended?: Step;
}

/** Runs `c.step`; API errors propagate (the reconcile retries), BMC failures become outcomes. */
export async function carryOut(c: CarryOut): Promise<Carried> {
  const { step } = c;
  if (step.action?.kind === 'boot') return boot(c);
  if (step.action?.kind === 'ensure') {
    const p = await c.power.ensure(step.action.goal, c.observed);
    const book =
      step.action.goal === 'On' && p.reached && !step.book.poweredOnAt
        ? { ...step.book, poweredOnAt: new Date().toISOString() }
        : step.book;
    await c.write(book, step.outcome);
    return {
      events: step.events,
      requeueAfterMs: p.reached ? step.requeueAfterMs : p.requeueAfterMs,
      done: p.reached,
      ...(p.failed ? { failed: true } : {}),
    };
  }
  await c.write(step.book, step.outcome);
  return { events: step.events, requeueAfterMs: step.requeueAfterMs, done: true };
}

async function boot(c: CarryOut): Promise<Carried> {
  // While the power-on is not accepted the attempt's deadline (set by the first request) runs on.
  // Phase ReadyToPowerOn says so in status (and tells this from a legacy discovery record, whose
  // deadline without poweredOnAt meant "powered on at deadline - timeout").
  const waiting: AttemptBook = {
    ...c.before,
    phase: AttemptPhase.ReadyToPowerOn,
    deadline: c.before.deadline ?? c.step.book.deadline,
  };
  const latestMs = Math.max(0, Date.parse(waiting.deadline ?? '') - Date.now() + 50);
  const retry = (requeueAfterMs: number): Carried => ({
    events: [],
    requeueAfterMs,
    done: false,
    failed: true,
    ...(Number.isFinite(latestMs) ? { latestMs } : {}),
  });
  let observed = c.observed;
  if (observed === undefined) {
    try {
      observed = await c.power.observe();
    } catch (err) {
      const f = classifyBmcFailure(err);
      await c.write(waiting, pending(c, `power-on pending: ${f.reason}: ${f.message}`));
      return retry(f.retryAfterMs);
    }
  }
  if (isTransitionalPowerState(observed)) {
    await c.write(waiting, pending(c, `power-on pending: BMC reports ${observed}`));
    return { ...retry(2_000), failed: false };
  }
  // Commit point: the intent is stored before the BMC is asked.
  await c.write(c.step.book, c.step.outcome);
  const res = await c.power.boot(observed);
  if (!res.ok) {
    const f = res.failure;
    if (f.permanent && !f.maybeApplied && c.refused) {
      const ended = c.refused({ kind: f.permanent, reason: f.reason, message: f.message });
      await c.write(ended.book, ended.outcome);
      return { events: ended.events, done: false, ended };
    }
    await c.write(
      f.maybeApplied ? c.step.book : waiting,
      pending(c, `power-on pending: ${f.reason}: ${f.message}`),
    );
    return retry(f.retryAfterMs);
  }
  return { events: c.step.events, requeueAfterMs: c.step.requeueAfterMs, done: true };
}

/** The adapter's power-pending words as an outcome: still booting, whatever the flow calls it. */
function pending(c: CarryOut, detail: string): Outcome {
  return { ...c.pending(detail), kind: 'booting' };
}

/**
 * The controller Result of a carried-out step: its requeue, grown per key while BMC calls fail
 * (runtime Result.backoff), never later than the attempt's deadline.
 */
export function resultOf(
  carried: Carried,
): { requeueAfterMs: number; backoff?: boolean; latestMs?: number } | undefined {
  if (carried.requeueAfterMs === undefined) return undefined;
  if (!carried.failed) return { requeueAfterMs: carried.requeueAfterMs };
  return {
    requeueAfterMs: carried.requeueAfterMs,
    backoff: true,
    ...(carried.latestMs !== undefined ? { latestMs: carried.latestMs } : {}),
  };
}
