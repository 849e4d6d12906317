/**
 * Table tests of the boot-attempt engine (src/controllers/boot-attempt/): every phase of `phaseOf`,
 * the step of every handler, the series decision (incl. adoption after status loss), the history,
 * and the runner's commit point against an in-memory BMC. Pure: no control plane, milliseconds.
 * Also the defects of issue 14 item 5 that live in pure code: the 500-on-Reset classification, the
 * Retry-After cap, the work-queue timer clamp and the claim's duration bounds.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { BootedReason, EventReason } from '../../src/api/vocabulary.js';
import type { PowerState } from '../../src/bmc/bmc.js';
import {
  HttpBootUriNotSupportedError,
  RedfishBudgetExceededError,
  RedfishHttpError,
} from '../../src/bmc/errors.js';
import { bmcRetryDelay, stableFailureMessage } from '../../src/controllers/bmc/bmc.js';
import {
  type BmcFailure,
  classifyBmcFailure,
  MAX_BMC_RETRY_AFTER_MS,
} from '../../src/controllers/bmc-actions/bmc-connections.js';
import type { BootActionResult } from '../../src/controllers/bmc-actions/power.js';
import {
  type AttemptBook,
  type AttemptPower,
  type AttemptView,
  carryOut,
  closeRecord,
  deadlinesOf,
  endsOnDeadline,
  type FreshRead,
  type HandlerInput,
  HISTORY_LIMIT,
  needsPowerRead,
  phaseOf,
  recheckDeadline,
  recordProgress,
  refusedStep,
  seriesDecision,
  stepFor,
  type Wording,
} from '../../src/controllers/boot-attempt/index.js';
import { DEFAULT_CONTROLLER_CONFIG } from '../../src/controllers/common/config.js';
import { claimBootSettings } from '../../src/controllers/serverclaim/serverclaim.js';
import { WorkQueue } from '../../src/runtime/queue.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const iso = (ms: number) => new Date(ms).toISOString();
const settings = {
  completion: ['BootStateReceived'],
  timeoutMs: 600_000,
  netbootTimeoutMs: 120_000,
  maxAttempts: 3,
};
const ready = { ready: true, reason: 'Ready', message: 'ok' };
const wording: Wording = {
  attempt: (b, max) => `attempt ${b.attempt}/${max}`,
  timeoutPrefix: '',
  signalOrder: ['IPXEScriptFetched', 'IgnitionDataFetched', 'BootStateReceived'],
};

function view(o: Partial<AttemptView> & { book: AttemptBook }): AttemptView {
  return {
    settings,
    readiness: ready,
    signals: { arrived: [], missing: ['BootStateReceived'] },
    netbootSeen: false,
    now: T0,
    ...o,
  };
}
const input = (v: AttemptView, seen: string[] = []): HandlerInput => ({ ...v, wording, seen });
const on = { attempt: 1, firstAttempt: 1, poweredOnAt: iso(T0), deadline: iso(T0 + 600_000) };

describe('phaseOf', () => {
  const table: [string, AttemptView, string, Record<string, unknown>?][] = [
    ['wants Off', view({ book: on, wantOff: true }), 'PoweredOff'],
    ['booted', view({ book: { ...on, completedAt: iso(T0) } }), 'Completed', { booted: true }],
    ['exhausted', view({ book: { ...on, phase: 'Exhausted' } }), 'Exhausted'],
    [
      'SBC not Ready',
      view({ book: { attempt: 1 }, readiness: { ready: false, reason: 'ImageNotFound', message: 'x' } }),
      'WaitingForConfiguration',
      { reason: 'ImageNotFound' },
    ],
    ['SBC Ready, not powered on', view({ book: { attempt: 1 } }), 'ReadyToPowerOn'],
    [
      'powered on, no fetch yet',
      view({ book: on, now: T0 + 1_000 }),
      'AwaitingNetboot',
      { until: T0 + 120_000 },
    ],
    [
      'no fetch by netbootTimeout',
      view({ book: on, now: T0 + 120_000 }),
      'DeadlineReached',
      { which: 'netboot', last: false },
    ],
    [
      'script fetched, waiting for the callback',
      view({ book: on, netbootSeen: true, now: T0 + 130_000 }),
      'AwaitingSignals',
      { until: T0 + 600_000 },
    ],
    [
      'full deadline passed',
      view({ book: on, netbootSeen: true, now: T0 + 600_000 }),
      'DeadlineReached',
      { which: 'completion', last: false },
    ],
    [
      'last attempt of the series',
      view({ book: { ...on, attempt: 5, firstAttempt: 3 }, netbootSeen: true, now: T0 + 600_000 }),
      'DeadlineReached',
      { last: true },
    ],
    [
      'all completion signals arrived',
      view({ book: on, netbootSeen: true, signals: { arrived: ['BootStateReceived'], missing: [] } }),
      'Completed',
      { booted: false },
    ],
    [
      'discovery: signal without the stored registration',
      view({
        book: on,
        netbootSeen: true,
        signals: { arrived: ['RegistrationReceived'], missing: [] },
        completionEvidence: false,
        now: T0 + 1,
      }),
      'AwaitingSignals',
    ],
    [
      'netboot deadline not before the full deadline: none of its own',
      view({ book: on, settings: { ...settings, netbootTimeoutMs: 900_000 }, now: T0 + 300_000 }),
      'AwaitingNetboot',
      { until: T0 + 600_000 },
    ],
  ];
  for (const [what, v, kind, fields] of table) {
    it(what, () => {
      const p = phaseOf(v);
      assert.equal(p.kind, kind);
      for (const [k, val] of Object.entries(fields ?? {}))
        assert.deepEqual((p as Record<string, unknown>)[k], val, k);
    });
  }
});

describe('handlers', () => {
  it('ReadyToPowerOn: intent with both deadlines and one boot action', () => {
    const v = view({ book: { attempt: 1, firstAttempt: 1 } });
    const s = stepFor(phaseOf(v), input(v));
    assert.deepEqual(s.action, { kind: 'boot' });
    assert.equal(s.book.poweredOnAt, iso(T0));
    assert.equal(s.book.netbootDeadline, iso(T0 + 120_000));
    assert.equal(s.book.deadline, iso(T0 + 600_000));
    assert.equal(s.phase, 'AwaitingNetboot');
    assert.equal(s.requeueAfterMs, 120_050);
    assert.equal(s.events[0]?.reason, EventReason.BootAttemptStarted);
  });
  it('netboot deadline: next attempt at once, NetbootNotObserved naming the last and the missing signal', () => {
    const v = view({ book: on, now: T0 + 120_000 });
    const s = stepFor(phaseOf(v), input(v));
    assert.equal(s.book.attempt, 2);
    assert.equal(s.book.poweredOnAt, undefined, 'the next attempt powers on again');
    assert.equal(s.outcome?.reason, BootedReason.NetbootNotObserved);
    assert.match(
      s.outcome!.message,
      /attempt 1\/3 saw no network boot after 2m0s: arrived \[\], missing \[BootStateReceived\]; starting attempt 2\/3; last signal none, next expected IPXEScriptFetched/,
    );
    assert.equal(s.events[0]?.reason, EventReason.NetbootNotObserved);
    assert.deepEqual(s.counts, { timedOut: true, attemptStarted: true });
    assert.equal(s.book.history?.[0]?.result, BootedReason.NetbootNotObserved);
  });
  it('full deadline: TimedOut names the last signal seen and the missing one', () => {
    const v = view({ book: on, netbootSeen: true, now: T0 + 600_000 });
    const s = stepFor(phaseOf(v), input(v, ['IPXEScriptFetched', 'IgnitionDataFetched']));
    assert.equal(s.outcome?.reason, BootedReason.TimedOut);
    assert.match(
      s.outcome!.message,
      /timed out after 10m0s: arrived \[IPXEScriptFetched, IgnitionDataFetched\], missing \[BootStateReceived\]; starting attempt 2\/3; last signal IgnitionDataFetched, next expected BootStateReceived/,
    );
  });
  it('last attempt: Exhausted, a Warning, no action', () => {
    const v = view({ book: { ...on, attempt: 3 }, netbootSeen: true, now: T0 + 600_000 });
    const s = stepFor(phaseOf(v), input(v));
    assert.equal(s.phase, 'Exhausted');
    assert.equal(s.outcome?.reason, BootedReason.AttemptsExhausted);
    assert.equal(s.action, undefined);
    assert.equal(s.events[0]?.type, 'Warning');
    assert.equal(stepFor(phaseOf(view({ book: s.book })), input(view({ book: s.book }))).action, undefined);
  });
  it('endsOnDeadline: the steps a deadline ends (next attempt, exhausted), and none other', () => {
    const at = (book: AttemptBook, now: number, netbootSeen = false) => {
      const v = view({ book, netbootSeen, now });
      return stepFor(phaseOf(v), input(v));
    };
    assert.ok(endsOnDeadline(at(on, T0 + 120_000)), 'netboot deadline');
    assert.ok(endsOnDeadline(at(on, T0 + 600_000, true)), 'full deadline');
    assert.ok(
      endsOnDeadline(at({ ...on, attempt: 3 }, T0 + 600_000, true)),
      'exhausted by the last deadline',
    );
    assert.ok(!endsOnDeadline(at(on, T0 + 60_000)), 'awaiting netboot');
    assert.ok(!endsOnDeadline(at(on, T0 + 300_000, true)), 'awaiting signals');
    assert.ok(!endsOnDeadline(at({ attempt: 1, firstAttempt: 1 }, T0)), 'the power-on');
  });
  it('recheckDeadline: no read unless a deadline ends the attempt; stands, averted, deferred', async () => {
    const at = (book: AttemptBook, now: number, netbootSeen = false) => {
      const v = view({ book, netbootSeen, now });
      return { step: stepFor(phaseOf(v), input(v)) };
    };
    const late = at(on, T0 + 120_000); // the netboot deadline passed on the cached view
    const run = async (read: FreshRead<number> | undefined, decided = late) => {
      const counted: string[] = [];
      let reads = 0;
      const r = await recheckDeadline({
        cached: { view: 0, decided },
        read: async () => {
          reads++;
          return read!;
        },
        // View 1: the fresh SBC shows the netboot; the netboot deadline no longer applies.
        decide: (v: number) => (v === 1 ? at(on, T0 + 120_000, true) : late),
        count: (c) => counted.push(c),
      });
      return { r, counted, reads };
    };
    const waiting = await run(undefined, at(on, T0 + 60_000));
    assert.deepEqual([waiting.reads, waiting.counted], [0, []], 'awaiting netboot: no read');
    assert.deepEqual((await run({ kind: 'current' })).counted, ['stands']);
    const moved = await run({ kind: 'moved' });
    assert.deepEqual([moved.r, moved.counted], ['deferred', ['deferred']]);
    const newer = await run({ kind: 'newer', view: 1 });
    assert.deepEqual(newer.counted, ['averted']);
    assert.ok(newer.r !== 'deferred' && newer.r.view === 1 && !endsOnDeadline(newer.r.decided.step));
    assert.deepEqual(
      (await run({ kind: 'newer', view: 2 })).counted,
      ['stands'],
      'newer, deadline still passed',
    );
  });
  it('Completed: completedAt, BootCompleted, the history closed; then kept On', () => {
    const v = view({
      book: on,
      netbootSeen: true,
      signals: { arrived: ['BootStateReceived'], missing: [] },
      now: T0 + 5_000,
    });
    const s = stepFor(phaseOf(v), input(v));
    assert.equal(s.book.completedAt, iso(T0 + 5_000));
    assert.equal(s.outcome?.status, 'True');
    assert.equal(s.book.history?.at(-1)?.result, BootedReason.BootCompleted);
    const again = view({ book: s.book });
    assert.deepEqual(stepFor(phaseOf(again), input(again)).action, { kind: 'ensure', goal: 'On' });
  });
  it('PoweredOff: power Off, the attempt forgotten unless booted', () => {
    const v = view({ book: on, wantOff: true });
    const s = stepFor(phaseOf(v), input(v));
    assert.deepEqual(s.action, { kind: 'ensure', goal: 'Off' });
    assert.equal(s.book.poweredOnAt, undefined);
    // Not "Booting": nothing boots until power On (issue 36 item 11).
    assert.equal(s.outcome?.reason, BootedReason.PoweredOff);
  });
  it('a TimedOut reason stays while the next attempt waits, prefaced by the stored summary', () => {
    const book = { attempt: 2, lastFailure: 'attempt 1/3 timed out after 10m: x' };
    const v = view({ book, readiness: { ready: false, reason: 'Pending', message: 'p' } });
    const prev = {
      status: 'False' as const,
      reason: 'TimedOut',
      message: 'attempt 1/3 timed out after 10m: x; starting attempt 2/3',
    };
    const s = stepFor(phaseOf(v), { ...input(v), previous: prev });
    assert.equal(s.outcome?.reason, 'TimedOut');
    assert.match(
      s.outcome!.message,
      /^attempt 1\/3 timed out after 10m: x; attempt 2\/3: waiting for the boot configuration/,
    );
    // The deadline's step stores the summary the next attempt's condition prefaces.
    const late = view({ book: { attempt: 1, poweredOnAt: iso(T0), deadline: iso(T0 + 1) }, now: T0 + 2 });
    const timedOut = stepFor(phaseOf(late), input(late));
    assert.match(timedOut.book.lastFailure ?? '', /^attempt 1\/3 timed out after .*: arrived \[/);
    assert.equal(timedOut.book.attempt, 2);
  });
});

describe('series decision and adoption', () => {
  const base = {
    wantOff: false,
    retryAsked: false,
    exhausted: false,
    claimChanged: false,
    configChanged: false,
    policy: 'NetBootAlways' as 'NetBootAlways' | 'NetBootOnce',
    timeoutMs: 600_000,
    now: T0,
  };
  it('first boot: series 1, attempt 1', () => {
    const d = seriesDecision({ ...base, book: undefined });
    assert.equal(d.kind, 'start');
    assert.deepEqual(d.kind === 'start' && [d.why, d.book.series, d.book.attempt], ['first boot', 1, 1]);
  });
  it('status lost, server On, SBC completed: adopted as Booted, no power action', () => {
    const d = seriesDecision({ ...base, book: undefined, sbc: { attempt: 4, completed: true }, power: 'On' });
    assert.equal(d.kind, 'adopt');
    assert.ok(
      d.kind === 'adopt' && d.booted && d.book.completedAt && d.book.adoptedAt && d.book.attempt === 4,
    );
  });
  it('status lost, server On, boot not complete: adopted as the running attempt', () => {
    const d = seriesDecision({
      ...base,
      book: undefined,
      sbc: { attempt: 2, completed: false },
      power: 'On',
    });
    assert.ok(d.kind === 'adopt' && !d.booted && d.book.poweredOnAt && d.book.deadline === iso(T0 + 600_000));
  });
  it("status lost, server Off: a new attempt after the SBC's (numbers never go back)", () => {
    const d = seriesDecision({
      ...base,
      book: undefined,
      sbc: { attempt: 4, completed: true },
      power: 'Off',
    });
    assert.ok(d.kind === 'start' && d.book.attempt === 5);
  });
  it('no status, own SBC that served nothing (a first series not stored yet): its attempt, never adopted', () => {
    for (const power of ['On', 'Off'] as const) {
      const sbc = { attempt: 1, completed: false, served: false };
      const d = seriesDecision({ ...base, book: undefined, sbc, power });
      assert.ok(d.kind === 'start' && d.book.attempt === 1 && d.book.series === 1, `power ${power}`);
    }
    assert.equal(
      needsPowerRead({ ...base, book: undefined, sbc: { attempt: 1, completed: false, served: false } }),
      false,
      'no BMC read: nothing booted from it',
    );
    const served = seriesDecision({
      ...base,
      book: undefined,
      sbc: { attempt: 1, completed: false, served: true },
      power: 'On',
    });
    assert.equal(served.kind, 'adopt', 'served: the running attempt is adopted');
  });
  const booted: AttemptBook = {
    series: 1,
    attempt: 3,
    firstAttempt: 1,
    poweredOnAt: iso(T0),
    completedAt: iso(T0),
  };
  const cases: [string, Partial<typeof base> & Record<string, unknown>, string | undefined][] = [
    ['booted, NetBootAlways, still On', { power: 'On' }, undefined],
    ['booted, NetBootAlways, found Off', { power: 'Off' }, 'power on (NetBootAlways)'],
    ['booted, NetBootOnce, found Off', { power: 'Off', policy: 'NetBootOnce' }, undefined],
    ['retry annotation', { retryAsked: true }, 'retry requested'],
    ['exhausted, claim changed', { exhausted: true, claimChanged: true }, 'claim changed'],
    ['image changed', { configChanged: true }, 'boot configuration changed'],
    ['wants Off', { wantOff: true, retryAsked: true }, undefined],
  ];
  for (const [what, f, why] of cases) {
    it(what, () => {
      const d = seriesDecision({ ...base, book: booted, ...f } as Parameters<typeof seriesDecision>[0]);
      assert.equal(d.kind === 'start' ? d.why : undefined, why);
      if (d.kind === 'start')
        assert.deepEqual([d.book.series, d.book.attempt, d.book.firstAttempt], [2, 4, 4]);
    });
  }
});

describe('history', () => {
  it('records each signal once, with the first-seen time when the condition is older than the attempt', () => {
    const book: AttemptBook = { attempt: 2, attemptStartedAt: iso(T0), poweredOnAt: iso(T0 + 1_000) };
    const h1 = recordProgress(book, { IPXEScriptFetched: iso(T0 - 60_000) }, T0 + 5_000);
    assert.deepEqual(h1?.[0]?.signals, { IPXEScriptFetched: iso(T0 + 5_000) });
    const h2 = recordProgress(
      { ...book, history: h1 },
      { IPXEScriptFetched: iso(T0 + 2_000), BootStateReceived: iso(T0 + 9_000) },
      T0 + 10_000,
    );
    assert.deepEqual(h2?.[0]?.signals, {
      IPXEScriptFetched: iso(T0 + 5_000),
      BootStateReceived: iso(T0 + 9_000),
    });
    const same = recordProgress(
      { ...book, history: h2 },
      { BootStateReceived: iso(T0 + 9_000) },
      T0 + 11_000,
    );
    assert.equal(same, h2, 'nothing new: the same array, so nothing is written');
  });
  it('an ended record is immutable: a later power-on of the same attempt rewrites nothing (issue 36 item 7)', () => {
    const book: AttemptBook = { attempt: 1, attemptStartedAt: iso(T0), poweredOnAt: iso(T0 + 1_000) };
    const done = closeRecord(book, T0 + 30_000, 'BootCompleted');
    const again = { ...book, poweredOnAt: iso(T0 + 60_000), history: done };
    assert.equal(recordProgress(again, { BootStateReceived: iso(T0 + 61_000) }, T0 + 62_000), done);
    assert.equal(closeRecord(again, T0 + 70_000, 'BootCompleted'), done);
    assert.equal(done[0]?.poweredOnAt, iso(T0 + 1_000));
    assert.equal(done[0]?.endedAt, iso(T0 + 30_000));
  });
  it(`keeps the last ${HISTORY_LIMIT} attempts`, () => {
    let book: AttemptBook = { attempt: 1 };
    for (let a = 1; a <= 15; a++)
      book = { attempt: a + 1, history: closeRecord({ ...book, attempt: a }, T0 + a, 'TimedOut') };
    assert.equal(book.history?.length, HISTORY_LIMIT);
    assert.equal(book.history?.[0]?.attempt, 6);
  });
});

/** An in-memory BMC behind the runner's power seam: records the order of writes and actions. */
function memoryPower(log: string[], o: { state?: PowerState; boot?: BootActionResult } = {}): AttemptPower {
  return {
    observe: async () => {
      log.push('observe');
      return o.state ?? 'Off';
    },
    boot: async () => {
      log.push('boot');
      return o.boot ?? { ok: true, sent: 'On', overrideSet: true };
    },
    ensure: async (goal) => {
      log.push(`ensure ${goal}`);
      return { reached: true, state: goal };
    },
  };
}

describe('runner', () => {
  const v = view({ book: { attempt: 1, firstAttempt: 1 } });
  const step = stepFor(phaseOf(v), input(v));
  const pending = (detail: string) => ({ status: 'False' as const, reason: 'Booting', message: detail });
  it('writes the intent before the BMC is asked, once', async () => {
    const log: string[] = [];
    const r = await carryOut({
      step,
      before: v.book,
      power: memoryPower(log),
      pending,
      write: async (b) => void log.push(`write ${b.poweredOnAt ? 'intent' : 'none'}`),
    });
    assert.deepEqual(log, ['observe', 'write intent', 'boot']);
    assert.equal(r.events.length, 1);
  });
  const failure = (maybeApplied: boolean): BootActionResult => ({
    ok: false,
    failure: { reason: 'BMCUnavailable', message: 'x', retryAfterMs: 2_000, maybeApplied },
  });
  it('rolls the intent back when the BMC certainly did not act', async () => {
    const books: AttemptBook[] = [];
    await carryOut({
      step,
      before: v.book,
      power: memoryPower([], { boot: failure(false) }),
      pending,
      write: async (b) => void books.push(b),
    });
    assert.equal(books.at(-1)?.poweredOnAt, undefined);
  });
  it('keeps the intent (the attempt counts) when the BMC may have acted', async () => {
    const books: AttemptBook[] = [];
    await carryOut({
      step,
      before: v.book,
      power: memoryPower([], { boot: failure(true) }),
      pending,
      write: async (b) => void books.push(b),
    });
    assert.equal(books.at(-1)?.poweredOnAt, iso(T0));
  });
  it('waits for a transition without writing an intent', async () => {
    const log: string[] = [];
    const r = await carryOut({
      step,
      before: v.book,
      power: memoryPower(log, { state: 'PoweringOn' }),
      pending,
      write: async (b) => void log.push(`write ${b.poweredOnAt ? 'intent' : 'none'}`),
    });
    assert.deepEqual(log, ['observe', 'write none']);
    assert.equal(r.requeueAfterMs, 2_000);
  });
});

describe('defects of the attempt lifecycle (issue 14 item 5)', () => {
  const info = { messageIds: [], message: '', code: undefined } as unknown as ConstructorParameters<
    typeof RedfishHttpError
  >[3];
  it('a 500, 502 or 504 on Reset may have been applied; only 503 and 429 were not', () => {
    for (const status of [500, 502, 504])
      assert.equal(
        classifyBmcFailure(new RedfishHttpError('POST', '/r', status, info)).maybeApplied,
        true,
        String(status),
      );
    for (const status of [503, 429, 400, 404])
      assert.equal(
        classifyBmcFailure(new RedfishHttpError('POST', '/r', status, info)).maybeApplied,
        false,
        String(status),
      );
    const wrapped = new RedfishBudgetExceededError('POST', '/r', 3, 8_000, undefined, {
      cause: new RedfishHttpError('POST', '/r', 500, info),
    });
    assert.equal(classifyBmcFailure(wrapped).maybeApplied, true);
  });
  it('a BMC Retry-After of 3000000 s is capped', () => {
    const f = classifyBmcFailure(new RedfishHttpError('GET', '/s', 503, info, 3_000_000_000));
    assert.equal(f.retryAfterMs, MAX_BMC_RETRY_AFTER_MS);
  });
  it('the work queue clamps delays above 2^31-1 ms instead of firing after 1 ms', async () => {
    const q = new WorkQueue({ name: 'clamp' });
    q.addAfter('k', 600 * 3_600_000 * 1_000);
    q.addAfter('n', Number.NaN);
    const got = await Promise.race([q.get(), new Promise((ok) => setTimeout(() => ok('nothing'), 100))]);
    assert.equal(got, 'nothing');
    await q.shutDown();
  });
  it('claim durations are kept within 1s..24h and completion conditions within the signals', () => {
    const claim = {
      metadata: {},
      spec: {
        power: 'On',
        image: 'i',
        bootCompletion: {
          timeout: '600h',
          netbootTimeout: '1ms',
          conditions: ['Ready', 'IPXEScriptFetched'],
        },
      },
    } as unknown as ServerClaim;
    const s = claimBootSettings(claim, DEFAULT_CONTROLLER_CONFIG);
    assert.equal(s.timeoutMs, 24 * 3_600_000);
    assert.equal(s.netbootTimeoutMs, 1_000);
    assert.deepEqual(s.completion, ['IPXEScriptFetched']);
  });
});

describe('BMC refusals (issue 30)', () => {
  const v = view({ book: { attempt: 1, firstAttempt: 1 } });
  const step = stepFor(phaseOf(v), input(v));
  const pending = (detail: string) => ({ status: 'False' as const, reason: 'Booting', message: detail });
  const refusal = (f: Partial<BmcFailure>): BootActionResult => ({
    ok: false,
    failure: { reason: 'BMCUnavailable', message: 'x', retryAfterMs: 2_000, maybeApplied: false, ...f },
  });

  it('a refused power-on keeps the deadline of its first request, and reaches it without poweredOnAt', async () => {
    const books: AttemptBook[] = [];
    const r = await carryOut({
      step,
      before: v.book,
      power: memoryPower([], { boot: refusal({}) }),
      pending,
      write: async (b) => void books.push(b),
    });
    const kept = books.at(-1)!;
    assert.equal(kept.poweredOnAt, undefined);
    assert.equal(kept.deadline, iso(T0 + settings.timeoutMs), 'the deadline runs from the first request');
    assert.equal(r.failed, true, 'the caller backs off');
    // Retried later: the new intent keeps the stored deadline.
    const later = view({ book: kept, now: T0 + 60_000 });
    const again = stepFor(phaseOf(later), input(later));
    assert.equal(again.book.deadline, kept.deadline);
    // At the deadline the attempt ends like a timed-out one, never powered on.
    const late = view({ book: kept, now: T0 + settings.timeoutMs });
    const p = phaseOf(late);
    assert.deepEqual(p, { kind: 'DeadlineReached', which: 'completion', last: false });
    const end = stepFor(p, input(late));
    assert.equal(end.outcome?.reason, BootedReason.TimedOut);
    assert.match(end.outcome!.message, /never accepted its power-on/);
    assert.equal(end.book.attempt, 2);
  });

  it('a permanent refusal ends the series: Refused, BootMethodUnsupported, one Warning, no intent kept', async () => {
    const books: AttemptBook[] = [];
    const r = await carryOut({
      step,
      before: v.book,
      power: memoryPower([], { boot: refusal({ reason: 'BMCUnsupported', permanent: 'unsupported' }) }),
      pending,
      write: async (b) => void books.push(b),
      refused: (x) => refusedStep(v.book, x, T0, wording, settings.maxAttempts),
    });
    const ended = books.at(-1)!;
    assert.equal(ended.phase, 'Refused');
    assert.equal(ended.poweredOnAt, undefined);
    assert.equal(ended.deadline, undefined);
    assert.equal(ended.history?.at(-1)?.result, BootedReason.BootMethodUnsupported);
    assert.equal(r.ended?.outcome?.reason, BootedReason.BootMethodUnsupported);
    assert.deepEqual(
      r.events.map((e) => [e.type, e.reason]),
      [['Warning', EventReason.BootMethodUnsupported]],
    );
    assert.equal(r.requeueAfterMs, undefined, 'nothing to look at again');
    // Afterwards: no action, whatever the time.
    const after = view({ book: ended, now: T0 + 10 * settings.timeoutMs });
    const s2 = stepFor(phaseOf(after), input(after));
    assert.equal(s2.action, undefined);
    assert.equal(s2.phase, 'Refused');
    // Without a refusal handler (discovery) the same failure is retried like any other.
    const retried: AttemptBook[] = [];
    const r2 = await carryOut({
      step,
      before: v.book,
      power: memoryPower([], { boot: refusal({ permanent: 'unsupported' }) }),
      pending,
      write: async (b) => void retried.push(b),
    });
    assert.equal(r2.failed, true);
    assert.equal(retried.at(-1)?.phase, 'ReadyToPowerOn', 'retried: the power-on is pending');
  });

  it('classifies permanent refusals: no HttpBootUri, non-transient 4xx; not 409, 412, 429, 503', () => {
    assert.equal(classifyBmcFailure(new HttpBootUriNotSupportedError('/s/1')).permanent, 'unsupported');
    const http = (status: number) =>
      new RedfishHttpError('PATCH', '/s/1', status, { code: undefined, message: undefined, messageIds: [] });
    assert.equal(classifyBmcFailure(http(400)).permanent, 'refused');
    assert.equal(classifyBmcFailure(http(405)).permanent, 'refused');
    for (const status of [409, 412, 429, 503, 500])
      assert.equal(classifyBmcFailure(http(status)).permanent, undefined, `HTTP ${status}`);
  });

  it("the work queue grows a failed dependency's delay per key, doubling to the cap, reset by forget", () => {
    const q = new WorkQueue({ maxRequeueBackoffMs: 20_000 });
    const seq = Array.from({ length: 6 }, () => q.backoffDelayMs('k', 2_000));
    assert.deepEqual(seq, [2_000, 4_000, 8_000, 16_000, 20_000, 20_000]);
    assert.equal(q.backoffDelayMs('other', 2_000), 2_000, 'per key');
    q.forget('k');
    assert.equal(q.backoffDelayMs('k', 2_000), 2_000);
    assert.equal(q.backoffDelayMs('big', 60_000), 60_000, "never below the dependency's own delay");
    void q.shutDown();
  });

  it('a claim that shortens its timeout gets a netboot deadline of its own: min(--netboot-timeout, timeout/2)', () => {
    const claim = (bootCompletion: object) =>
      ({ metadata: {}, spec: { power: 'On', image: 'i', bootCompletion } }) as unknown as ServerClaim;
    const cfg = DEFAULT_CONTROLLER_CONFIG; // --boot-timeout 15m, --netboot-timeout 5m
    assert.equal(claimBootSettings(claim({ timeout: '2m' }), cfg).netbootTimeoutMs, 60_000);
    assert.equal(claimBootSettings(claim({ timeout: '1h' }), cfg).netbootTimeoutMs, 5 * 60_000);
    assert.equal(
      claimBootSettings(claim({ timeout: '2m', netbootTimeout: '90s' }), cfg).netbootTimeoutMs,
      90_000,
    );
    assert.equal(
      claimBootSettings(claim({}), cfg).netbootTimeoutMs,
      5 * 60_000,
      'the manager default otherwise',
    );
    // The early deadline exists: 1 min after power-on, before the 2 min one.
    const s = claimBootSettings(claim({ timeout: '2m' }), cfg);
    assert.equal(deadlinesOf(T0, s).netboot, T0 + 60_000);
  });
});

describe('a failing BMC (issue 36 item 9)', () => {
  it('is retried after 5 s, 10 s, 20 s, … capped at 2 min, never before its Retry-After', () => {
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6, 7, 50].map((n) => bmcRetryDelay(n, 0)),
      [5_000, 10_000, 20_000, 40_000, 80_000, 120_000, 120_000, 120_000],
    );
    assert.equal(bmcRetryDelay(1, 30_000), 30_000);
  });
  it('names no elapsed time in its message (Events aggregate)', () => {
    const m = 'GET /redfish/v1/Managers: gave up after 3 attempt(s) in 8123 ms: connect ECONNREFUSED';
    assert.equal(stableFailureMessage(m), 'GET /redfish/v1/Managers: gave up: connect ECONNREFUSED');
  });
});
