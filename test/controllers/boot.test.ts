import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { attemptSignals } from '../../src/controllers/common/boot-configuration.js';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  cond,
  createClaim,
  eventually,
  getClaim,
  getSbc,
  hostOf,
  setSimFaults,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

test('a claim is Booted only after BootStateReceived of the current attempt', {
  timeout: 60_000,
}, async () => {
  // The OS posts /bootstate 1.5 s after its kernel starts: a window in which the script and the
  // ignition were fetched but the boot is not complete.
  await withStack('booted', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    setSimFaults(s, { callbackDelayMs: 1_500 });
    await createClaim(s, 'os', { serverRef: srv!.metadata.name!, timeout: '20s' });
    const early = await eventually('ignition fetched for the attempt', 15_000, async () => {
      const sbc = await getSbc(s, 'os');
      return sbc && attemptSignals(sbc, ['IgnitionDataFetched']).missing.length === 0 ? sbc : undefined;
    });
    assert.deepEqual(attemptSignals(early, ['BootStateReceived']).missing, ['BootStateReceived']);
    const claimEarly = await getClaim(s, 'os');
    assert.notEqual(
      cond(claimEarly, 'Booted')?.status,
      'True',
      'script + ignition alone are not a booted OS',
    );
    assert.equal(cond(claimEarly, 'Booted')?.reason, 'Booting');

    const booted = await eventually('Booted=True', 15_000, async () => {
      const c = await getClaim(s, 'os');
      return cond(c, 'Booted')?.status === 'True' ? c : undefined;
    });
    assert.equal(cond(booted, 'Booted')?.reason, 'BootCompleted');
    assert.ok(booted.status?.boot?.completedAt);
    const sbc = (await getSbc(s, 'os'))!;
    assert.deepEqual(attemptSignals(sbc, ['BootStateReceived']).arrived, ['BootStateReceived']);
    assert.ok(Date.parse(booted.status!.boot!.completedAt!) >= Date.parse(booted.status!.boot!.poweredOnAt!));

    // Power off and on again (NetBootAlways): a new attempt whose completion needs a new callback.
    // The old BootStateReceived (True, earlier generation) must not count.
    await s.client.mergePatch(Resources.ServerClaim, 'os', s.ns, { spec: { power: 'Off' } });
    await eventually('host off', 10_000, () => hostOf(s, srv!).powerState() === 'Off');
    await s.client.mergePatch(Resources.ServerClaim, 'os', s.ns, { spec: { power: 'On' } });
    const next = await eventually('next attempt begun', 10_000, async () => {
      const b = await getSbc(s, 'os');
      return b &&
        (b.spec.bootAttempt ?? 1) > (sbc.spec.bootAttempt ?? 1) &&
        (b.status?.attemptGeneration ?? 0) >= (b.metadata.generation ?? 0)
        ? b
        : undefined;
    });
    assert.equal(
      cond(next, 'BootStateReceived')?.status,
      'True',
      'the earlier attempt signal is still there',
    );
    assert.deepEqual(attemptSignals(next, ['BootStateReceived']).missing, ['BootStateReceived']);
    const during = await getClaim(s, 'os');
    assert.equal(
      cond(during, 'Booted')?.status,
      'False',
      'a signal of an earlier attempt does not complete this one',
    );
    await eventually(
      'Booted=True again',
      15_000,
      async () => cond(await getClaim(s, 'os'), 'Booted')?.status === 'True',
    );

    // The boot metrics on the manager's /metrics.
    const metrics = await (await fetch(`http://127.0.0.1:${s.op!.metricsPort}/metrics`)).text();
    assert.match(metrics, /^metal_boot_completion_seconds_count\{flow="claim"\} 2$/m);
    assert.match(metrics, /^metal_boot_signal_seconds_count\{flow="claim",signal="BootStateReceived"\} 2$/m);
    assert.match(metrics, /^metal_boot_attempts_total\{flow="claim"\} 2$/m);
    assert.match(metrics, /^metal_servers\{state="Reserved"\} 1$/m);
  });
});

test('with bootCompletion.conditions [IPXEScriptFetched] the claim completes as soon as the script was fetched', {
  timeout: 60_000,
}, async () => {
  await withStack('script', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    setSimFaults(s, { neverCallBack: true });
    await createClaim(s, 'fetch', {
      serverRef: srv!.metadata.name!,
      completion: ['IPXEScriptFetched'],
      timeout: '20s',
    });
    const c = await eventually('Booted=True', 15_000, async () => {
      const x = await getClaim(s, 'fetch');
      return cond(x, 'Booted')?.status === 'True' ? x : undefined;
    });
    assert.match(cond(c, 'Booted')!.message, /IPXEScriptFetched/);
    const sbc = (await getSbc(s, 'fetch'))!;
    assert.deepEqual(attemptSignals(sbc, ['IPXEScriptFetched']).arrived, ['IPXEScriptFetched']);
    assert.equal(cond(sbc, 'BootStateReceived'), undefined, 'no /bootstate was ever posted');
    assert.equal(c.status?.boot?.attempt, 1);
  });
});
