/**
 * The FakeBmc's own promises (src/testing/fake-bmc.ts) that the controller tables lean on: rules
 * count down and add up, a refused call changes nothing, a delayed call honours its signal, and the
 * optional parts of the BMC seam are absent when turned off.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RedfishHttpError } from '../../src/bmc/errors.js';
import { FakeBmc } from '../../src/testing/fake-bmc.js';

const SYS = '/redfish/v1/Systems/1';

test('FakeBmc: a refusal for one call is recorded, changes nothing, and the next call acts', async () => {
  const bmc = new FakeBmc().refuse('powerOn', 409, { times: 1 });
  await assert.rejects(bmc.powerOn(SYS), (e) => e instanceof RedfishHttpError && e.status === 409);
  assert.equal(bmc.system(SYS).powerState, 'Off', 'the refused call changed nothing');
  assert.deepEqual(await bmc.powerOn(SYS), { observed: 'Off', sent: 'On', skipped: undefined });
  assert.deepEqual(await bmc.powerOn(SYS), { observed: 'On', sent: undefined, skipped: 'already' });
  assert.equal(bmc.callsOf('powerOn').length, 3);
});

test('FakeBmc: a delayed call is aborted by its signal; a delay and a failure add up', async () => {
  const bmc = new FakeBmc().delay('powerState', 5_000);
  const ac = new AbortController();
  const started = Date.now();
  setTimeout(() => ac.abort(new Error('budget')), 20);
  await assert.rejects(bmc.powerState(SYS, { signal: ac.signal }), { message: 'budget' });
  assert.ok(Date.now() - started < 2_000, 'not the whole delay');
  bmc
    .heal()
    .delay('forceOff', 30, 1)
    .fail('forceOff', () => new Error('late and broken'), 1);
  const t0 = Date.now();
  await assert.rejects(bmc.forceOff(SYS), { message: 'late and broken' });
  assert.ok(Date.now() - t0 >= 25, 'the delay applied before the failure');
  assert.deepEqual((await bmc.forceOff(SYS)).skipped, 'already', 'both rules used up');
});

test('FakeBmc: without virtual media or accounts those methods are absent; an account policy is enforced', async () => {
  const bare = new FakeBmc({ virtualMedia: false, accounts: false });
  assert.equal(bare.insertMedia, undefined);
  assert.equal(bare.createAccount, undefined);
  const bmc = new FakeBmc({ accountPolicy: { minPasswordLength: 12 } });
  await assert.rejects(
    bmc.createAccount!({ userName: 'metal', password: 'short', roleId: 'Operator', enabled: true }),
    (e) => e instanceof RedfishHttpError && e.status === 400,
  );
  const a = await bmc.createAccount!({
    userName: 'metal',
    password: 'long-enough-pw',
    roleId: 'Operator',
    enabled: true,
  });
  assert.deepEqual(
    (await bmc.listAccounts!()).map((x) => x.userName),
    ['metal'],
  );
  assert.equal((await bmc.getAccount!(a.uri)).roleId, 'Operator');
  assert.ok(!JSON.stringify(bmc.calls).includes('long-enough-pw'), 'passwords are not recorded');
});
