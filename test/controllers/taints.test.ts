/**
 * Issue 20 defect 3: taint effect `Evict` releases a claim that does not tolerate it (with an Event
 * naming the taint), and `metalctl cordon|uncordon` (the maintenance taint) is the one way into and
 * out of `Maintenance`. Real API server, sim virtual BMC.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { setCordon } from '../../src/localstack/server-ops.js';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  cond,
  createClaim,
  eventMatching,
  eventsFor,
  eventually,
  getClaim,
  hostOf,
  SCOPE_LABEL,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

const getServer = (s: { client: import('../../src/runtime/client.js').KubeClient }, name: string) =>
  s.client.get<Server>(Resources.Server, name);

test('an Evict taint releases the claim that does not tolerate it; it binds again once the taint is gone', {
  timeout: 120_000,
}, async () => {
  await withStack('evict', { hosts: 2 }, async (s) => {
    await availableServers(s, 2);
    await createClaim(s, 'tenant', { selector: { [SCOPE_LABEL]: s.scope }, timeout: '20s' });
    const first = await eventually('claim Booted', 30_000, async () => {
      const c = await getClaim(s, 'tenant');
      return cond(c, 'Booted')?.status === 'True' ? c : undefined;
    });
    const victim = first.spec.serverRef!.name!;
    await s.client.mergePatch(Resources.Server, victim, undefined, {
      spec: { taints: [{ key: 'gpu-broken', value: 'fan', effect: 'Evict' }] },
    });
    const events = await eventually('Warning Evicted on the claim', 15_000, async () => {
      const ev = await eventsFor(s, 'ServerClaim', 'tenant');
      return ev.some((e) => e.reason === 'Evicted') ? ev : undefined;
    });
    const evicted = events.find((e) => e.reason === 'Evicted')!;
    assert.equal(evicted.type, 'Warning');
    assert.match(evicted.message, new RegExp(`Server ${victim}: taint gpu-broken=fan:Evict not tolerated`));
    const released = await eventually('victim released and off', 15_000, async () => {
      const x = await getServer(s, victim);
      return !x?.spec.serverClaimRef && hostOf(s, x!).powerState() === 'Off' ? x : undefined;
    });
    assert.equal(released.spec.bootConfigurationRef, undefined);
    const claim = await getClaim(s, 'tenant');
    assert.equal(cond(claim, 'Booted')?.status, 'False');
    assert.equal(cond(claim, 'Booted')?.reason, 'Evicted');
    assert.equal(cond(claim, 'Bound')?.status, 'False');
    assert.match(cond(claim, 'Bound')!.message, /gpu-broken/);
    assert.ok(
      (await eventsFor(s, 'Server', victim, 'default')).some((e) => e.reason === 'Evicted'),
      'the Server has the Event too',
    );
    await s.client.mergePatch(Resources.Server, victim, undefined, { spec: { taints: [] } });
    await eventually('claim Booted again once the taint is gone', 40_000, async () => {
      const c = await getClaim(s, 'tenant');
      return cond(c, 'Booted')?.status === 'True';
    });
  });
});

test('a claim tolerating the Evict taint stays', { timeout: 90_000 }, async () => {
  await withStack('evict-tol', { hosts: 2 }, async (s) => {
    const [srv, other] = await availableServers(s, 2);
    await createClaim(s, 'tolerant', { serverRef: srv!.metadata.name!, timeout: '20s' });
    // Positive control: a claim without the toleration, tainted in the same way at the same time.
    await createClaim(s, 'intolerant', { serverRef: other!.metadata.name!, timeout: '20s' });
    for (const name of ['tolerant', 'intolerant'])
      await eventually(
        `claim ${name} Booted`,
        30_000,
        async () => cond(await getClaim(s, name), 'Booted')?.status === 'True',
      );
    await s.client.mergePatch(Resources.ServerClaim, 'tolerant', s.ns, {
      spec: { tolerations: [{ key: 'gpu-broken', operator: 'Exists' }] },
    });
    for (const x of [srv!, other!])
      await s.client.mergePatch(Resources.Server, x.metadata.name!, undefined, {
        spec: { taints: [{ key: 'gpu-broken', effect: 'Evict' }] },
      });
    // Once the manager has evicted the intolerant claim it has seen the taints: the tolerant one
    // must still be bound then (instead of after a fixed 2 s).
    await eventually('the intolerant claim evicted', 15_000, async () =>
      (await eventsFor(s, 'ServerClaim', 'intolerant')).some((e) => e.reason === 'Evicted'),
    );
    const c = await getClaim(s, 'tolerant');
    assert.equal(cond(c, 'Bound')?.status, 'True');
    assert.equal((await getServer(s, srv!.metadata.name!))?.spec.serverClaimRef?.name, 'tolerant');
    assert.ok(
      !(await eventsFor(s, 'ServerClaim', 'tolerant')).some((e) => e.reason === 'Evicted'),
      'no Evicted Event on the tolerant claim',
    );
  });
});

test('cordon puts an unclaimed Server into Maintenance (nothing binds it); uncordon brings it back', {
  timeout: 90_000,
}, async () => {
  await withStack('cordon', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const name = srv!.metadata.name!;
    assert.match(
      await setCordon(s.client, name, true, { reason: 'disk-swap' }),
      /metal.ironcore.dev\/maintenance=disk-swap:NoBind/,
    );
    await eventually(
      'Maintenance',
      10_000,
      async () => (await getServer(s, name))?.status?.state === 'Maintenance',
    );
    await createClaim(s, 'waits', { serverRef: name, timeout: '20s' });
    const waiting = await eventually('claim Unbound', 10_000, async () => {
      const c = await getClaim(s, 'waits');
      return cond(c, 'Bound')?.status === 'False' ? c : undefined;
    });
    assert.match(
      cond(waiting, 'Bound')!.message,
      /taint metal\.ironcore\.dev\/maintenance=disk-swap:NoBind not tolerated/,
    );
    await eventMatching(s, 'Server', name, 'default', (e) => e.reason === 'MaintenanceStarted');
    // A claim by selector is told, like a pending pod, why no Server fits (condition and Warning Event).
    await createClaim(s, 'any', { selector: { [SCOPE_LABEL]: s.scope }, timeout: '20s' });
    const explained = await eventually('explained', 10_000, async () => {
      const c = await getClaim(s, 'any');
      return cond(c, 'Bound')?.reason === 'NoServerAvailable' ? c : undefined;
    });
    assert.equal(
      cond(explained, 'Bound')!.message,
      '0/1 servers: 1 taint metal.ironcore.dev/maintenance=disk-swap:NoBind not tolerated',
    );
    await eventually('Warning NoServerAvailable Event', 10_000, async () =>
      (await eventsFor(s, 'ServerClaim', 'any')).some(
        (e) => e.type === 'Warning' && e.reason === 'NoServerAvailable' && /^0\/1 servers: /.test(e.message),
      ),
    );
    await s.client.delete(Resources.ServerClaim, 'any', s.ns);
    assert.equal(await setCordon(s.client, name, false), `Server ${name} uncordoned`);
    await eventually(
      'claim Booted after uncordon',
      30_000,
      async () => cond(await getClaim(s, 'waits'), 'Booted')?.status === 'True',
    );
    assert.equal((await getServer(s, name))?.spec.taints?.length ?? 0, 0);
  });
});

test('cordon --evict of a claimed Server: the release Event says Maintenance follows, not a claimable Server (issue 36)', {
  timeout: 120_000,
}, async () => {
  await withStack('evict-maint', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const name = srv!.metadata.name!;
    await createClaim(s, 'tenant', { serverRef: name, timeout: '20s' });
    await eventually(
      'claim Booted',
      30_000,
      async () => cond(await getClaim(s, 'tenant'), 'Booted')?.status === 'True',
    );
    await setCordon(s.client, name, true, { reason: 'psu', evict: true });
    await eventually(
      'Maintenance',
      20_000,
      async () => (await getServer(s, name))?.status?.state === 'Maintenance',
    );
    const released = await eventually('Released Event', 10_000, async () =>
      (await eventsFor(s, 'Server', name, 'default')).find((e) => e.reason === 'Released'),
    );
    assert.match(
      released.message,
      /Maintenance \(taint metal\.ironcore\.dev\/maintenance=psu:Evict\): not claimable$/,
    );
    assert.doesNotMatch(released.message, /; Available$/);
  });
});
