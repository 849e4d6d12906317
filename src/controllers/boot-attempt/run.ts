/**
 * Carries out one {@link Step}: its BMC action (at most one) and its status write. Snapshot → decide →
 * one patch: the caller's `write` is called once per reconcile — except for the deliberate commit
 * point of a network boot, where the intent (`poweredOnAt`, deadlines) is written BEFORE the BMC is
 * asked, so a restart between the two never powers on twice, and a second write after a failed BMC
 * call rolls the intent back when the BMC certainly did not act (`maybeApplied` false).
 */
import type { PowerState } from '../../bmc/bmc.js';
import { isTransitionalPowerState } from '../../bmc/bmc.js';
import { classifyBmcFailure } from '../bmc-connections.js';
import type { BootActionResult, PowerProgress } from '../power.js';
import type { AttemptEvent, Outcome, Step } from './handlers.js';
import type { AttemptBook } from './phase.js';

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
  /** The attempt condition saying a power action is pending (`detail`: why). */
  pending(detail: string): Outcome;
  /** Writes bookkeeping and outcome: the reconcile's status write. */
  write(book: AttemptBook, outcome: Outcome | undefined): Promise<void>;
}

export interface Carried {
  /** Events to record now (after the writes succeeded). */
  events: AttemptEvent[];
  requeueAfterMs?: number;
  /** The step took effect (a boot was started, or no action was needed). */
  done: boolean;
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
    };
  }
  await c.write(step.book, step.outcome);
  return { events: step.events, requeueAfterMs: step.requeueAfterMs, done: true };
}

async function boot(c: CarryOut): Promise<Carried> {
  let observed = c.observed;
  if (observed === undefined) {
    try {
      observed = await c.power.observe();
    } catch (err) {
      const f = classifyBmcFailure(err);
      await c.write(c.before, c.pending(`power-on pending: ${f.reason}: ${f.message}`));
      return { events: [], requeueAfterMs: f.retryAfterMs, done: false };
    }
  }
  if (isTransitionalPowerState(observed)) {
    await c.write(c.before, c.pending(`power-on pending: BMC reports ${observed}`));
    return { events: [], requeueAfterMs: 2_000, done: false };
  }
  // Commit point: the intent is stored before the BMC is asked.
  await c.write(c.step.book, c.step.outcome);
  const res = await c.power.boot(observed);
  if (!res.ok) {
    const f = res.failure;
    await c.write(
      f.maybeApplied ? c.step.book : c.before,
      c.pending(`power-on pending: ${f.reason}: ${f.message}`),
    );
    return { events: [], requeueAfterMs: f.retryAfterMs, done: false };
  }
  return { events: c.step.events, requeueAfterMs: c.step.requeueAfterMs, done: true };
}
