/**
 * The boot-attempt engine (docs/ARCHITECTURE.md), one entry point for both flows: {@link decide} reads what
 * is stored (bookkeeping, SBC, settings, power, now), names the phase and returns the phase's step;
 * {@link carryOut} (run.ts) performs it. The claim controller (bookkeeping in `status.boot`) and the
 * Server controller (discovery, `status.discovery`) are adapters: they sync the SBC, hand in the view,
 * and write the step's bookkeeping and condition where their kind keeps them.
 */
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import { currentAttemptCondition } from '../../api/vocabulary.js';
import type { PowerState } from '../../bmc/bmc.js';
import { attemptSignals, type Readiness } from '../common/boot-configuration.js';
import { type HandlerInput, type Step, type StoredOutcome, stepFor, type Wording } from './handlers.js';
import { recordProgress } from './history.js';
import { type AttemptBook, type AttemptSettings, type Phase, phaseOf } from './phase.js';

export * from './deadline-recheck.js';
export * from './handlers.js';
export * from './history.js';
export * from './phase.js';
export * from './progress-only.js';
export * from './run.js';
export * from './series.js';

export interface DecideInput {
  book: AttemptBook;
  sbc: ServerBootConfiguration | undefined;
  readiness: Readiness;
  settings: AttemptSettings;
  wording: Wording;
  /** Signals whose arrival proves the network boot (the netboot deadline). */
  netbootSignals: readonly string[];
  wantOff?: boolean;
  completionEvidence?: boolean;
  previous?: StoredOutcome;
  power?: PowerState;
  now: number;
}

export interface Decision {
  phase: Phase;
  step: Step;
  /** Signals of the flow that count for the current attempt (for logs and metrics). */
  seen: string[];
}

/** Names the phase of `d` and returns its step; signal times are recorded into the book's history first. */
export function decide(d: DecideInput): Decision {
  const order = [...new Set([...d.wording.signalOrder, ...d.settings.completion])];
  const times: Record<string, string> = {};
  const seen: string[] = [];
  for (const type of order) {
    const c = d.sbc ? currentAttemptCondition(d.sbc, type) : undefined;
    if (!c) continue;
    seen.push(type);
    times[type] = c.lastTransitionTime;
  }
  const history = d.sbc ? recordProgress(d.book, times, d.now) : d.book.history;
  const book = history ? { ...d.book, history } : d.book;
  const signals = d.sbc
    ? attemptSignals(d.sbc, d.settings.completion)
    : { arrived: [], missing: [...d.settings.completion] };
  const input: HandlerInput = {
    book,
    settings: d.settings,
    readiness: d.readiness,
    signals,
    netbootSeen: d.netbootSignals.some((s) => seen.includes(s)),
    wantOff: d.wantOff,
    completionEvidence: d.completionEvidence,
    power: d.power,
    now: d.now,
    wording: d.wording,
    seen,
    previous: d.previous,
  };
  const phase = phaseOf(input);
  const step = stepFor(phase, input);
  // The intent write of a power-on carries the attempt's history record (no extra write for it).
  if (d.sbc && step.book.poweredOnAt && !book.poweredOnAt && step.book.attempt === book.attempt) {
    const h = recordProgress(step.book, times, d.now);
    if (h) step.book = { ...step.book, history: h };
  }
  return { phase, step, seen };
}
