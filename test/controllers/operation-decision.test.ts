/**
 * The pure decision of the Server operation annotation (src/controllers/server/server-operations.ts) and
 * the claim side's (claim-operations.ts): every value in every state, no control plane.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import {
  claimPower,
  decideOperation,
  needsClaim,
  type OperationFacts,
} from '../../src/controllers/server/server-operations.js';
import { claimOperation, serverHold } from '../../src/controllers/serverclaim/claim-operations.js';

const f = (x: Partial<OperationFacts>): OperationFacts => ({
  op: undefined,
  parked: false,
  interrupted: undefined,
  state: 'Available',
  claimed: false,
  ...x,
});

describe('decideOperation', () => {
  it('ignore wins over everything, even a parked Server and an interrupted operation', () => {
    assert.deepEqual(decideOperation(f({ op: 'ignore', parked: true, interrupted: 'x' })), {
      kind: 'ignore',
    });
  });
  it('no annotation and not parked: the state machine runs', () => {
    assert.deepEqual(decideOperation(f({})), { kind: 'none' });
  });
  it('park only from Available or Reserved; elsewhere deferred', () => {
    assert.equal(decideOperation(f({ op: 'park' })).kind, 'park');
    assert.equal(decideOperation(f({ op: 'park', state: 'Reserved', claimed: true })).kind, 'park');
    for (const state of ['Initial', 'Discovery', 'Error', 'Maintenance', 'Cleaning'] as const)
      assert.equal(decideOperation(f({ op: 'park', state })).kind, 'park-deferred', state);
  });
  it('parked: stays parked; power operations and retry dropped; unknown values unsupported; unpark unparks', () => {
    assert.deepEqual(decideOperation(f({ parked: true })), { kind: 'stay-parked' });
    assert.deepEqual(decideOperation(f({ parked: true, op: 'park' })), { kind: 'stay-parked' });
    assert.deepEqual(decideOperation(f({ parked: true, op: 'hard-restart-server' })), {
      kind: 'stay-parked',
      drop: 'hard-restart-server',
    });
    assert.deepEqual(decideOperation(f({ parked: true, op: 'retry' })), {
      kind: 'stay-parked',
      drop: 'retry',
    });
    assert.deepEqual(decideOperation(f({ parked: true, op: 'nope' })), { kind: 'unsupported', op: 'nope' });
    assert.deepEqual(decideOperation(f({ parked: true, op: 'unpark' })), { kind: 'unpark', parked: true });
  });
  it('state Parked without the marker resumes to Reserved (claimed) or Available', () => {
    assert.deepEqual(decideOperation(f({ state: 'Parked', claimed: true })), {
      kind: 'resume',
      to: 'Reserved',
    });
    assert.deepEqual(decideOperation(f({ state: 'Parked' })), { kind: 'resume', to: 'Available' });
  });
  it('power operations are refused while a boot attempt owns the power', () => {
    for (const state of ['Initial', 'Discovery', 'Cleaning'] as const)
      assert.equal(decideOperation(f({ op: 'force-off-server', state })).kind, 'refuse', state);
    const busy = { name: 'ns/c', wants: 'On', attemptPhase: 'AwaitingSignals' };
    const d = decideOperation(
      f({ op: 'hard-restart-server', state: 'Reserved', claimed: true, claim: busy }),
    );
    assert.equal(d.kind, 'refuse');
    assert.match((d as { why: string }).why, /ServerClaim ns\/c owns the power \(phase AwaitingSignals\)/);
  });
  it('power operations the state machine would undo are refused; the others apply', () => {
    assert.equal(decideOperation(f({ op: 'force-on-server' })).kind, 'refuse');
    assert.equal(decideOperation(f({ op: 'force-off-server' })).kind, 'power');
    const booted = { name: 'ns/c', wants: 'On', attemptPhase: 'Completed' };
    const reserved = { state: 'Reserved' as const, claimed: true, claim: booted };
    assert.equal(decideOperation(f({ op: 'force-off-server', ...reserved })).kind, 'refuse');
    assert.equal(decideOperation(f({ op: 'hard-restart-server', ...reserved })).kind, 'power');
    const off = { ...reserved, claim: { ...booted, wants: 'Off', attemptPhase: 'PoweredOff' } };
    assert.equal(decideOperation(f({ op: 'force-on-server', ...off })).kind, 'refuse');
    assert.equal(decideOperation(f({ op: 'force-off-server', ...off })).kind, 'power');
    for (const state of ['Maintenance', 'Error'] as const)
      assert.equal(decideOperation(f({ op: 'power-cycle-server', state })).kind, 'power', state);
    // A BMC restart does not touch the host's power: allowed even during an attempt.
    assert.equal(decideOperation(f({ op: 'graceful-restart-bmc', state: 'Discovery' })).kind, 'power');
  });
  it('retry belongs to Error and Discovery; elsewhere refused, naming the claim route on a Reserved Server', () => {
    assert.equal(decideOperation(f({ op: 'retry', state: 'Error' })).kind, 'none');
    assert.equal(decideOperation(f({ op: 'retry', state: 'Discovery' })).kind, 'none');
    const d = decideOperation(f({ op: 'retry', state: 'Reserved', claimed: true }));
    assert.equal(d.kind, 'refuse');
    assert.match((d as { why: string }).why, /metalctl retry/);
  });
  it('an interrupted operation is reported before anything else but ignore', () => {
    assert.deepEqual(decideOperation(f({ interrupted: 'power-cycle-server t', op: 'park' })), {
      kind: 'interrupted',
      what: 'power-cycle-server t',
    });
  });
  it('unknown values are unsupported', () => {
    assert.deepEqual(decideOperation(f({ op: 'reboot' })), { kind: 'unsupported', op: 'reboot' });
  });
  it('the claim is read only for a system power operation on a Reserved, claimed Server', () => {
    assert.equal(needsClaim(f({ op: 'force-off-server', state: 'Reserved', claimed: true })), true);
    assert.equal(needsClaim(f({ op: 'graceful-restart-bmc', state: 'Reserved', claimed: true })), false);
    assert.equal(needsClaim(f({ op: 'park', state: 'Reserved', claimed: true })), false);
  });
  it('a claim without a series yet that wants On is busy', () => {
    const c = { metadata: { name: 'c', namespace: 'ns' }, spec: { power: 'On' } } as unknown as ServerClaim;
    assert.deepEqual(claimPower(c), { name: 'ns/c', wants: 'On', attemptPhase: 'WaitingForConfiguration' });
  });
});

describe('claim side', () => {
  const claim = (op?: string) =>
    ({
      metadata: { name: 'c', annotations: op ? { 'metal.ironcore.dev/operation': op } : {} },
    }) as ServerClaim;
  const server = (a: Record<string, string>) =>
    ({ metadata: { name: 's', annotations: a } }) as unknown as Server;
  it('ignore skips, retry is the series decision, other values are unsupported', () => {
    assert.deepEqual(claimOperation(claim('ignore')), { kind: 'ignore' });
    assert.equal(claimOperation(claim('retry')), undefined);
    assert.equal(claimOperation(claim()), undefined);
    assert.deepEqual(claimOperation(claim('park')), { kind: 'unsupported', op: 'park' });
  });
  it('a parked, parking or ignored Server holds the claim controller', () => {
    assert.equal(serverHold(server({ 'metal.ironcore.dev/parked': 'true' }))?.reason, 'ServerParked');
    assert.equal(serverHold(server({ 'metal.ironcore.dev/operation': 'park' }))?.reason, 'ServerParked');
    assert.equal(serverHold(server({ 'metal.ironcore.dev/operation': 'ignore' }))?.reason, 'ServerIgnored');
    assert.equal(serverHold(server({ 'metal.ironcore.dev/operation': 'retry' })), undefined);
  });
});
