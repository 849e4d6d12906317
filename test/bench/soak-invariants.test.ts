/**
 * Unit tests of the soak's pure invariant checker (bench/soak-invariants.ts): a clean claim cycle
 * yields nothing, and each invariant, broken on synthetic claims, Servers and BMC requests, is found
 * once.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type InvariantConfig, SoakInvariants, systemOfPath } from '../../bench/soak-invariants.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';

const T0 = Date.parse('2026-12-02T10:00:00Z');
const iso = (ms: number) => new Date(T0 + ms).toISOString();
const UUID = '11111111-2222-3333-4444-555555555555';
const CFG: InvariantConfig = {
  maxAttempts: 2,
  bootTimeoutMs: 30_000,
  seriesSlackMs: 10_000,
  bmcRequestsPerMinute: 20,
  writesPerMinute: 10,
  settleMs: 5_000,
};

interface Attempt {
  attempt: number;
  start: number;
  end?: number;
}
let rv = 0;
function claim(
  o: {
    phase?: string;
    attempt?: number;
    history?: Attempt[];
    booted?: [string, string];
    timeout?: string;
    maxAttempts?: number;
    name?: string;
  } = {},
): ServerClaim {
  return {
    metadata: {
      name: o.name ?? 'c1',
      namespace: 'default',
      uid: `uid-${o.name ?? 'c1'}`,
      resourceVersion: String(++rv),
    },
    spec: {
      power: 'On',
      serverRef: { name: 's1' },
      ...(o.timeout || o.maxAttempts
        ? {
            bootCompletion: {
              ...(o.timeout ? { timeout: o.timeout } : {}),
              ...(o.maxAttempts ? { maxAttempts: o.maxAttempts } : {}),
            },
          }
        : {}),
    },
    status: {
      ...(o.booted
        ? {
            conditions: [
              {
                type: 'Booted',
                status: o.booted[0],
                reason: o.booted[1],
                message: '',
                lastTransitionTime: iso(0),
              },
            ],
          }
        : {}),
      ...(o.phase
        ? {
            boot: {
              attempt: o.attempt ?? 1,
              firstAttempt: 1,
              phase: o.phase,
              history: (o.history ?? []).map((h) => ({
                attempt: h.attempt,
                startedAt: iso(h.start),
                ...(h.end !== undefined ? { endedAt: iso(h.end) } : {}),
              })),
            },
          }
        : {}),
    },
  } as unknown as ServerClaim;
}
const reset = (at: number, type = 'On') => ({
  at: T0 + at,
  method: 'POST',
  path: `/redfish/v1/Systems/${UUID}/Actions/ComputerSystem.Reset`,
  status: 204,
  body: { ResetType: type },
});
const names = (f: { invariant: string }[]) => f.map((x) => x.invariant);

/** One normal cycle: bound, attempt 1 powered on at +1 s, Booted at +3 s, deleted at +4 s. */
function cleanCycle(inv: SoakInvariants, name = 'c1', offset = 0): void {
  inv.observeClaim(claim({ name }), T0 + offset, UUID);
  inv.observeClaim(
    claim({ name, phase: 'AwaitingNetboot', history: [{ attempt: 1, start: offset + 500 }] }),
    T0 + offset + 600,
    UUID,
  );
  inv.observeBmcRequest(UUID, reset(offset + 1_000));
  const done = claim({
    name,
    phase: 'Completed',
    booted: ['True', 'BootCompleted'],
    history: [{ attempt: 1, start: offset + 500, end: offset + 3_000 }],
  });
  inv.observeClaim(done, T0 + offset + 3_000, UUID);
  inv.claimDeleted(done, T0 + offset + 4_000);
}

describe('soak invariants', () => {
  it('a clean cycle, a discovery power-on and a refused series find nothing', () => {
    const inv = new SoakInvariants(CFG);
    cleanCycle(inv);
    // Discovery powers the system on in its Server's own attempt.
    inv.observeServer(
      {
        metadata: { name: 's1', resourceVersion: '1' },
        spec: { systemUUID: UUID },
        status: { discovery: { attempt: 1, attemptStartedAt: iso(-60_000), deadline: iso(-30_000) } },
      } as unknown as Server,
      T0 - 60_000,
    );
    inv.observeBmcRequest(UUID, reset(-59_000));
    inv.observeClaim(
      claim({ name: 'c2', phase: 'Refused', booted: ['False', 'BootRefused'] }),
      T0 + 10_000,
      UUID,
    );
    assert.deepEqual(inv.check(T0 + 120_000), []);
    assert.equal(inv.counts.powerOnsInClaims, 1);
    assert.equal(inv.counts.powerOnsInServerAttempts, 1);
  });

  it('a power-on just after one claim ended belongs to the next claim’s attempt, begun before it', () => {
    const inv = new SoakInvariants(CFG);
    cleanCycle(inv, 'c1'); // attempt 500..3000 ms, deleted at 4000
    // The next claim starts its attempt at 3.2 s and powers on at 3.5 s: within c1's window + grace.
    inv.observeClaim(
      claim({ name: 'c2', phase: 'AwaitingNetboot', history: [{ attempt: 1, start: 3_200 }] }),
      T0 + 3_300,
      UUID,
    );
    inv.observeBmcRequest(UUID, reset(3_500));
    assert.deepEqual(inv.check(T0 + 20_000), []);
    assert.equal(inv.counts.powerOnsInClaims, 2);
  });

  it('power-outside-attempt: a power-on after the attempt ended (judged once settled)', () => {
    const inv = new SoakInvariants(CFG);
    cleanCycle(inv);
    inv.observeBmcRequest(UUID, reset(5_000, 'ForceRestart'));
    assert.deepEqual(inv.check(T0 + 9_000), [], 'not judged before settleMs');
    const f = inv.check(T0 + 11_000);
    assert.deepEqual(names(f), ['power-outside-attempt']);
    assert.match(f[0]!.detail, /ForceRestart/);
    // A refused Reset (4xx) or a power-off is no power action to judge.
    inv.observeBmcRequest(UUID, { ...reset(20_000), status: 400 });
    inv.observeBmcRequest(UUID, reset(20_000, 'ForceOff'));
    assert.deepEqual(inv.check(T0 + 60_000), []);
  });

  it('power-outside-attempt: a power-on after its Server’s discovery was seen Completed, before the deadline', () => {
    const inv = new SoakInvariants(CFG);
    inv.observeServer(
      {
        metadata: { name: 's1', resourceVersion: '7' },
        spec: { systemUUID: UUID },
        status: {
          discovery: {
            attempt: 1,
            attemptStartedAt: iso(-60_000),
            deadline: iso(600_000),
            phase: 'Completed',
          },
        },
      } as unknown as Server,
      T0,
    );
    inv.observeBmcRequest(UUID, reset(-59_000)); // during discovery
    inv.observeBmcRequest(UUID, reset(5_000)); // after it, before its deadline
    assert.deepEqual(names(inv.check(T0 + 20_000)), ['power-outside-attempt']);
    assert.equal(inv.counts.powerOnsInServerAttempts, 1);
  });

  it('power-ons-exceed-attempts: two accepted power-ons in one attempt', () => {
    const inv = new SoakInvariants(CFG);
    inv.observeClaim(
      claim({ phase: 'AwaitingSignals', history: [{ attempt: 1, start: 0 }] }),
      T0 + 100,
      UUID,
    );
    inv.observeBmcRequest(UUID, reset(1_000));
    assert.deepEqual(inv.check(T0 + 6_500), []);
    inv.observeBmcRequest(UUID, reset(2_000, 'ForceRestart'));
    const found = inv.check(T0 + 7_500);
    assert.deepEqual(names(found), ['power-ons-exceed-attempts']);
    // The finding says what the checker knew: both power-ons it counted and the claim's attempt window.
    assert.match(found[0]!.detail, /\(On@\S+, ForceRestart@\S+\)/);
    assert.match(found[0]!.detail, /known claims claim \S+ \[1: \S+–open\]/);
  });

  it('power-ons-exceed-attempts: a power-on inside one claim’s attempt is not charged to the next claim begun within the grace after it', () => {
    // The 2026-12-02 soak's soak-5-32 / soak-4-34 on one pair Server: attempt windows 0–886 ms and
    // 1064–1840 ms; the power-ons at 114 ms (the first claim's) and 1102 ms (the second's).
    const inv = new SoakInvariants(CFG);
    inv.observeClaim(
      claim({ name: 'first', phase: 'Completed', history: [{ attempt: 1, start: 0, end: 886 }] }),
      T0 + 900,
      UUID,
    );
    inv.observeClaim(
      claim({ name: 'second', phase: 'Completed', history: [{ attempt: 1, start: 1_064, end: 1_840 }] }),
      T0 + 1_900,
      UUID,
    );
    inv.observeBmcRequest(UUID, reset(114));
    inv.observeBmcRequest(UUID, reset(1_102));
    assert.deepEqual(inv.check(T0 + 20_000), []);
    assert.equal(inv.counts.powerOnsInClaims, 2);
  });

  it('series-unbounded: open past maxAttempts × timeout + slack, or ended too late; the claim’s own timeout counts', () => {
    const inv = new SoakInvariants(CFG); // bound 2 × 30 s + 10 s = 70 s
    inv.observeClaim(claim({ phase: 'AwaitingSignals', history: [{ attempt: 1, start: 0 }] }), T0, UUID);
    assert.deepEqual(inv.check(T0 + 70_000), []);
    assert.deepEqual(names(inv.check(T0 + 72_000)), ['series-unbounded']);
    assert.deepEqual(inv.check(T0 + 90_000), [], 'reported once');
    // Own timeout 5 s, 1 attempt: bound 15 s; ending at +20 s is late.
    const late = new SoakInvariants(CFG);
    late.observeClaim(
      claim({ phase: 'AwaitingSignals', timeout: '5s', maxAttempts: 1, history: [{ attempt: 1, start: 0 }] }),
      T0,
      UUID,
    );
    late.observeClaim(
      claim({
        phase: 'Exhausted',
        timeout: '5s',
        maxAttempts: 1,
        booted: ['False', 'AttemptsExhausted'],
        history: [{ attempt: 1, start: 0, end: 19_000 }],
      }),
      T0 + 20_000,
      UUID,
    );
    assert.deepEqual(names(late.check(T0 + 20_000)), ['series-unbounded']);
  });

  it('bmc-requests-per-minute: more than the bound for one system in 60 s, not spread over minutes', () => {
    const inv = new SoakInvariants(CFG);
    const get = (at: number) => ({
      at: T0 + at,
      method: 'GET',
      path: `/redfish/v1/Systems/${UUID}`,
      status: 200,
    });
    for (let i = 0; i < 40; i++) inv.observeBmcRequest(UUID, get(i * 4_000)); // 15 per minute
    inv.observeBmcRequest(undefined, get(0)); // service-wide: no per-system bound
    assert.deepEqual(inv.check(T0 + 200_000), []);
    for (let i = 0; i < 21; i++) inv.observeBmcRequest(UUID, get(200_000 + i));
    assert.deepEqual(names(inv.check(T0 + 201_000)), ['bmc-requests-per-minute']);
  });

  it('writes-per-minute: more versions of one claim in 60 s than the bound; a repeated version is not a write', () => {
    const inv = new SoakInvariants(CFG);
    const c = claim();
    for (let i = 0; i < 20; i++) inv.observeClaim(c, T0 + i, UUID); // one version seen 20 times
    assert.deepEqual(inv.check(T0 + 100), []);
    for (let i = 0; i < 11; i++) inv.observeClaim(claim(), T0 + 1_000 + i, UUID);
    const f = inv.check(T0 + 2_000);
    assert.deepEqual(names(f), ['writes-per-minute']);
    assert.equal(f[0]!.subject, 'claim default/c1');
  });

  it('claim-without-history: an attempt ran (or Booted) but no history entry for it', () => {
    const inv = new SoakInvariants(CFG);
    inv.observeClaim(claim({ phase: 'WaitingForConfiguration' }), T0, UUID);
    assert.deepEqual(inv.check(T0), []);
    inv.observeClaim(
      claim({ phase: 'Completed', booted: ['True', 'BootCompleted'], history: [] }),
      T0 + 1,
      UUID,
    );
    assert.deepEqual(names(inv.check(T0 + 2)), ['claim-without-history']);
  });

  it('systemOfPath maps a system path to its UUID, service-wide paths to none', () => {
    const ids = new Map([[UUID, UUID]]);
    assert.equal(
      systemOfPath(`/redfish/v1/Systems/${UUID.toUpperCase()}/Actions/ComputerSystem.Reset`, ids),
      UUID,
    );
    assert.equal(systemOfPath('/redfish/v1/SessionService/Sessions', ids), undefined);
    assert.equal(systemOfPath('/redfish/v1/Systems/%zz', ids), undefined);
  });
});
