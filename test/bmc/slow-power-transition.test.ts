/**
 * The Redfish client's part of boot-flow case C09 (the whole case, with the manager and its
 * workers, is `C09` in test/controllers/cases.test.ts), scaled down: the real case has PowerState staying On for 90 s; here 3 s, with a
 * per-request timeout of 500 ms and a call budget of 2.5 s, so the proportions hold: the transition is
 * longer than any single call may take.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PowerState } from '../../src/bmc/bmc.js';
import { RedfishBudgetExceededError } from '../../src/bmc/errors.js';
import { type Fixture, startFixture } from './fixture.js';

const TRANSITION_MS = 3_000;
const REQUEST_TIMEOUT_MS = 500;
const BUDGET_MS = 2_500;

async function c09Fixture(): Promise<Fixture> {
  return startFixture({
    client: {
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
      budgetMs: BUDGET_MS,
      backoffInitialMs: 50,
      backoffMaxMs: 400,
    },
  });
}

describe('Redfish client against a slow and failing BMC (client part of C09)', () => {
  it('Reset returns 204 but PowerState stays On for 3 s; 503s with Retry-After and timed-out calls are retried within the budget, and no call blocks for the transition', async (t) => {
    const f = await c09Fixture();
    try {
      const uri = f.uri();
      await f.bmc.powerOn(uri);
      f.vbmc.setFaults({ powerTransitionMs: TRANSITION_MS });

      const calls: Array<{ what: string; ms: number }> = [];
      const call = async <T>(what: string, p: Promise<T>): Promise<T> => {
        const started = performance.now();
        try {
          return await p;
        } finally {
          calls.push({ what, ms: performance.now() - started });
        }
      };

      // The action meets a 503 with Retry-After: 1 and is retried after that second.
      f.vbmc.setFaults({ unavailableRequests: 1, retryAfterSeconds: 1 });
      const first = await call('forceOff', f.bmc.forceOff(uri));
      const resetAt = performance.now();
      assert.equal(first.sent, 'ForceOff');
      assert.equal(first.observed, 'On');

      // Accepted, yet the BMC keeps reporting On.
      assert.equal(await call('powerState', f.bmc.powerState(uri)), 'On');

      // One answer comes 1.5 s late: the request times out after 500 ms and is retried.
      f.vbmc.setFaults({ slowRequests: 1, slowResponseMs: 1_500 });
      assert.equal(await call('powerState', f.bmc.powerState(uri)), 'On');

      // What a reconcile does: requeue, read the state, re-issue the action while it has not taken
      // effect; the BMC meanwhile answers some requests 503 and some too late.
      let state: PowerState = 'On';
      let round = 0;
      let onReadsAfterReset = 0;
      while (state !== 'Off') {
        assert.ok(performance.now() - resetAt < TRANSITION_MS + 3_000, 'the transition never completed');
        await sleep(200);
        round++;
        if (round % 3 === 0) f.vbmc.setFaults({ unavailableRequests: 1, retryAfterSeconds: 0 });
        if (round % 4 === 0) f.vbmc.setFaults({ slowRequests: 1, slowResponseMs: 1_000 });
        state = await call('powerState', f.bmc.powerState(uri));
        if (state === 'On') {
          onReadsAfterReset++;
          const again = await call('forceOff', f.bmc.forceOff(uri));
          assert.equal(again.sent, 'ForceOff');
        }
      }
      const offAfterMs = performance.now() - resetAt;

      assert.ok(
        offAfterMs >= TRANSITION_MS - 50,
        `Off ${offAfterMs} ms after the reset, before the transition ended`,
      );
      assert.ok(
        onReadsAfterReset >= 3,
        `PowerState read On ${onReadsAfterReset} times during the transition`,
      );
      const longest = Math.max(...calls.map((c) => c.ms));
      t.diagnostic(
        `Off ${Math.round(offAfterMs)} ms after the reset was accepted; ${calls.length} calls, longest ${Math.round(longest)} ms, ` +
          `On read ${onReadsAfterReset} times during the transition`,
      );
      assert.ok(
        longest < TRANSITION_MS / 2,
        `longest call took ${Math.round(longest)} ms; a call must not wait for the transition`,
      );
      assert.ok(
        calls.every((c) => c.ms < BUDGET_MS + 100),
        'every call ended within its budget',
      );

      const log = f.vbmc.requests();
      assert.ok(log.filter((r) => r.status === 503).length >= 2, 'some requests were answered 503');
      const resets = log.filter((r) => r.path.endsWith('ComputerSystem.Reset') && r.status === 204);
      assert.ok(resets.length >= 2, 'the action was re-issued while pending');
      assert.equal(f.hosts[0]!.powerState(), 'Off');
      // Re-issuing the pending action did not restart the transition clock.
      assert.ok(offAfterMs < TRANSITION_MS + 2_000, `Off only ${offAfterMs} ms after the reset`);
    } finally {
      await f.close();
    }
  });

  it('a Retry-After longer than the call budget ends the call at once and hands the delay to the requeue', async () => {
    const f = await c09Fixture();
    try {
      f.vbmc.setFaults({ unavailableRequests: 1, retryAfterSeconds: 90 });
      const started = performance.now();
      await assert.rejects(
        f.bmc.powerOn(f.uri()),
        (err: unknown) => err instanceof RedfishBudgetExceededError && err.retryAfterMs === 90_000,
      );
      assert.ok(
        performance.now() - started < REQUEST_TIMEOUT_MS,
        'did not sleep on a Retry-After it cannot honour',
      );
      assert.equal(f.hosts[0]!.powerState(), 'Off');
    } finally {
      await f.close();
    }
  });

  it('with transitional states reported, a pending power-on reads PoweringOn and is not re-sent', async () => {
    const f = await c09Fixture();
    try {
      f.vbmc.setFaults({ powerTransitionMs: 400, reportTransitionalState: true });
      assert.equal((await f.bmc.powerOn(f.uri())).sent, 'On');
      assert.equal(await f.bmc.powerState(f.uri()), 'PoweringOn');
      assert.deepEqual(await f.bmc.powerOn(f.uri()), {
        observed: 'PoweringOn',
        sent: undefined,
        skipped: 'in-progress',
      });
      // The transition ends 400 ms after the request: wait for On (bounded), then count the resets.
      let state: PowerState | undefined;
      for (const end = performance.now() + 10_000; performance.now() < end; await sleep(50)) {
        state = await f.bmc.powerState(f.uri());
        if (state === 'On') break;
      }
      assert.equal(state, 'On');
      assert.equal(f.vbmc.requests().filter((r) => r.path.endsWith('ComputerSystem.Reset')).length, 1);
    } finally {
      await f.close();
    }
  });
});
