/**
 * Per-attempt history in the bookkeeping (`history`, issue 20.4): when each attempt began, was powered
 * on, when each signal was first seen True for it, when and how it ended. Bounded to the last
 * {@link HISTORY_LIMIT} attempts. A signal's time is its condition's `lastTransitionTime` when that
 * lies within the attempt; a condition True across attempts keeps an older `lastTransitionTime`, so
 * then the time the engine first saw it for this attempt is recorded instead. Pure functions.
 *
 * An ended record (`endedAt` set) is never changed again: a later power-on of the same attempt (a
 * NetBootOnce claim powered Off and On, which boots from disk) is not a new boot of it.
 */
import { type AttemptBook, type AttemptRecord, HISTORY_LIMIT } from './phase.js';

/** The record of the book's current attempt (a fresh one when the history has none yet). */
function current(book: AttemptBook): { list: AttemptRecord[]; rec: AttemptRecord } {
  const list = [...(book.history ?? [])];
  const at = list.length - 1;
  const last = list[at];
  if (last && last.attempt === book.attempt) {
    const rec = { ...last, ...(last.signals ? { signals: { ...last.signals } } : {}) };
    list[at] = rec;
    return { list, rec };
  }
  const rec: AttemptRecord = { attempt: book.attempt };
  if (book.attemptStartedAt) rec.startedAt = book.attemptStartedAt;
  list.push(rec);
  return { list, rec };
}

/** The history's record of the book's current attempt has ended already. */
function ended(book: AttemptBook): boolean {
  const last = book.history?.at(-1);
  return !!last && last.attempt === book.attempt && !!last.endedAt;
}

const bounded = (list: AttemptRecord[]) => list.slice(-HISTORY_LIMIT);

/**
 * `book.history` with the current attempt's record updated: `poweredOnAt`, and the signals of `seen`
 * (type → `lastTransitionTime` of a condition that counts for the attempt) not recorded yet.
 * Returns `book.history` itself when nothing is new (so the caller writes nothing).
 */
export function recordProgress(
  book: AttemptBook,
  seen: Record<string, string>,
  now: number,
): AttemptRecord[] | undefined {
  if (!book.poweredOnAt || ended(book)) return book.history;
  const { list, rec } = current(book);
  let changed = rec.poweredOnAt !== book.poweredOnAt || !book.history?.length;
  rec.poweredOnAt = book.poweredOnAt;
  const since = Date.parse(book.poweredOnAt);
  for (const [type, ltt] of Object.entries(seen)) {
    if (rec.signals?.[type]) continue;
    const t = Date.parse(ltt);
    // Second precision on conditions: a transition in the second of power-on belongs to the attempt.
    const at = Number.isFinite(t) && t >= Math.floor(since / 1000) * 1000 ? ltt : new Date(now).toISOString();
    rec.signals = { ...(rec.signals ?? {}), [type]: at };
    changed = true;
  }
  return changed ? bounded(list) : book.history;
}

/** `book.history` with the current attempt ended at `now` with `result`. */
export function closeRecord(book: AttemptBook, now: number, result: string): AttemptRecord[] {
  if (ended(book)) return book.history ?? [];
  const { list, rec } = current(book);
  if (book.poweredOnAt) rec.poweredOnAt = book.poweredOnAt;
  rec.endedAt = new Date(now).toISOString();
  rec.result = result;
  return bounded(list);
}
