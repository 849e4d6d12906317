import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { canonicalSystemUUID } from '../../src/api/system-uuid.js';
import type { BMC } from '../../src/api/v1alpha1/bmc.js';
import { Resources } from '../../src/runtime/resource.js';
import { registrationData } from '../../src/virtualbmc/sim.js';
import { releaseSharedCluster } from '../harness/shared.js';
import { availableServers, cond, eventually, resets, servers, startStack } from './fixture.js';

after(releaseSharedCluster);

test('BMC → Servers → discovery → Available with the probe data, for 3 simulated systems', {
  timeout: 60_000,
}, async () => {
  const s = await startStack('disc', { hosts: 3 });
  try {
    const avail = await availableServers(s, 3);
    assert.equal(avail.length, 3);
    for (const srv of avail) {
      const host = s.vbmc.systems.find((x) => x.id === srv.spec.systemUUID)!.host;
      assert.equal(srv.spec.systemUUID, canonicalSystemUUID(host.identity.uuid));
      assert.equal(srv.metadata.name, `${s.bmcName}-${srv.spec.systemUUID}`);
      assert.equal(srv.spec.bmcRef?.name, s.bmcName);
      assert.equal(srv.metadata.ownerReferences?.[0]?.kind, 'BMC');
      assert.equal(srv.status?.manufacturer, 'Contoso');
      assert.equal(srv.status?.totalSystemMemory, host.identity.memoryMiB * 1024 * 1024);
      assert.equal(srv.status?.networkInterfaces?.[0]?.macAddress, host.identity.macAddress);
      assert.ok(srv.status?.networkInterfaces?.[0]?.ips?.length);
      assert.equal(srv.status?.processors?.[0]?.totalCores, host.identity.cpus);
      assert.equal(srv.status?.storages?.[0]?.drives?.[0]?.capacity, 64 * 1024 ** 3);
      // Stored whole (the manager's cache keeps only a projection of it: never written back).
      assert.deepEqual(
        srv.status?.registration?.data,
        registrationData(host.identity),
        'registration persisted',
      );
      assert.equal(cond(srv, 'Discovered')?.status, 'True');
      assert.equal(srv.spec.bootConfigurationRef, undefined, 'discovery SBC no longer current');
      // One network boot (On), then the power-off of an Available server.
      assert.deepEqual(resets(s, srv.spec.systemUUID), ['On', 'ForceOff']);
    }
    await eventually('discovery SBCs deleted', 10_000, async () => {
      const { items } = await s.client.list(Resources.ServerBootConfiguration, { namespace: s.ns });
      return items.length === 0;
    });
    const bmc = await s.client.get<BMC>(Resources.BMC, s.bmcName);
    assert.equal(bmc?.status?.state, 'Enabled');
    assert.equal(cond(bmc, 'SystemsDiscovered')?.status, 'True');
    assert.equal((await servers(s)).length, 3);
  } finally {
    await s.close();
  }
});

test('C01: a Redfish system without a UUID gets a BMC condition, no Server, and no hot loop', {
  timeout: 30_000,
}, async () => {
  const s = await startStack('c01', { hosts: 2, profile: { omitSystemUUID: true } });
  try {
    const bmc = await eventually('SystemsDiscovered=False', 10_000, async () => {
      const b = await s.client.get<BMC>(Resources.BMC, s.bmcName);
      return cond(b, 'SystemsDiscovered')?.status === 'False' ? b : undefined;
    });
    assert.equal(cond(bmc, 'SystemsDiscovered')?.reason, 'SystemUUIDMissing');
    assert.match(cond(bmc, 'SystemsDiscovered')!.message, /\/redfish\/v1\/Systems\//);
    assert.equal(cond(bmc, 'Ready')?.status, 'True', 'the BMC itself is fine');
    const reads = () =>
      s.vbmc.requests().filter((r) => r.method === 'GET' && r.path === '/redfish/v1/Systems').length;
    const before = reads();
    await new Promise((ok) => setTimeout(ok, 2_000));
    assert.ok(reads() - before <= 1, `systems listed ${reads() - before} times in 2 s`);
    assert.equal((await servers(s)).length, 0);
  } finally {
    await s.close();
  }
});
