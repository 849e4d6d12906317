/**
 * Whether a waiting step's write would only mirror the SBC (a pure function of the engine's own
 * words, so no adapter reads the engine's messages): no BMC action, a waiting phase, the same
 * bookkeeping apart from the signal history, and the same condition apart from the list of signals
 * that arrived. Such a write can be left out: every signal is on the SBC with its time, and the
 * history records those times from the SBC's conditions with the attempt's next phase change
 * (netboot observed, completion, timeout), which is written.
 */
import { isDeepStrictEqual } from 'node:util';
import type { Outcome, Step, StoredOutcome } from './handlers.js';
import { type AttemptBook, AttemptPhase } from './phase.js';

/** The signal list of a waiting step's message (handlers.ts `awaiting`: `arrived [a, b]`). */
const ARRIVED_LIST = /arrived \[[^\]]*\]/;

/**
 * True when writing `book` and `outcome` over `stored` and `previous` (the condition as stored)
 * would record nothing but newly arrived signals.
 */
export function onlyProgress(
  step: Step,
  stored: AttemptBook,
  book: AttemptBook,
  previous: StoredOutcome | undefined,
  outcome: Outcome | undefined,
): boolean {
  // A step with a BMC action (the power-on) writes its intent and any pending-power message.
  if (step.action) return false;
  if (step.phase !== AttemptPhase.AwaitingNetboot && step.phase !== AttemptPhase.AwaitingSignals)
    return false;
  if (!previous || !outcome || previous.status !== outcome.status || previous.reason !== outcome.reason)
    return false;
  if (previous.message.replace(ARRIVED_LIST, '') !== outcome.message.replace(ARRIVED_LIST, '')) return false;
  return isDeepStrictEqual({ ...book, history: undefined }, { ...stored, history: undefined });
}
