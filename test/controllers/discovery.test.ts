import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { binarySIQuantity } from '../../src/api/quantity.js';
import { canonicalSystemUUID } from '../../src/api/system-uuid.js';
import type { BMC } from '../../src/api/v1alpha1/bmc.js';
import { registrationDigest } from '../../src/inventory/registration-record.js';
import { Resources } from '../../src/runtime/resource.js';
import { storedRegistration } from '../../src/testing/stored-registration.js';
import { registrationData } from '../../src/virtualbmc/sim.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  cond,
  eventsFor,
  eventually,
  pokeServer,
  reconciles,
  resets,
  resetsSent,
  type Stack,
  servers,
  settled,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

test('BMC → Servers → discovery → Available with the probe data, for 3 simulated systems', {
  timeout: 60_000,
}, async () => {
  await withStack('disc', { hosts: 3 }, async (s) => {
    const avail = await availableServers(s, 3);
    assert.equal(avail.length, 3);
    for (const srv of avail) {
      const host = s.vbmc.systems.find((x) => x.id === srv.spec.systemUUID)!.host;
      assert.equal(srv.spec.systemUUID, canonicalSystemUUID(host.identity.uuid));
      assert.equal(srv.metadata.name, `${s.bmcName}-${srv.spec.systemUUID}`);
      assert.equal(srv.spec.bmcRef?.name, s.bmcName);
      assert.equal(srv.metadata.ownerReferences?.[0]?.kind, 'BMC');
      assert.equal(srv.status?.manufacturer, 'Contoso');
      assert.equal(
        srv.status?.totalSystemMemory,
        binarySIQuantity(host.identity.memoryMiB * 1024 * 1024),
        'a Quantity string as upstream stores it',
      );
      assert.equal(srv.status?.networkInterfaces?.[0]?.macAddress, host.identity.macAddress);
      assert.ok(srv.status?.networkInterfaces?.[0]?.ips?.length);
      assert.equal(srv.status?.processors?.[0]?.totalCores, host.identity.cpus);
      assert.equal(srv.status?.storages?.[0]?.drives?.[0]?.capacity, 64 * 1024 ** 3);
      // Stored whole in its ConfigMap; the Server keeps the record, the hardware only once.
      const stored = await storedRegistration(s.client, srv.metadata.name!);
      assert.deepEqual(stored.payload, registrationData(host.identity), 'registration persisted');
      assert.equal(stored.record?.digest, registrationDigest(registrationData(host.identity)));
      assert.equal(stored.record?.hardware, undefined, 'the hardware moved into the status fields');
      assert.equal(stored.record?.data, undefined, 'the payload is not in the Server');
      assert.equal(cond(srv, 'Discovered')?.status, 'True');
      // Issue 28: the NICs as the BMC reports them, read before the power-on, and what they mean.
      assert.deepEqual(srv.status?.bmcNetworkInterfaces, [
        {
          name: host.identity.macAddress.replace(/:/g, '').toUpperCase(),
          macAddress: host.identity.macAddress,
          carrierStatus: 'LinkUp',
        },
      ]);
      assert.equal(cond(srv, 'MachineIdentity')?.reason, 'BMCReportedNICs');
      assert.ok(cond(srv, 'MachineIdentity')?.message.includes(host.identity.macAddress));
      // One network boot (On), then the power-off of an Available server.
      assert.deepEqual(resets(s, srv.spec.systemUUID), ['On', 'ForceOff']);
    }
    // Cleared by a spec patch right after the Available write (which carries the power-off).
    await eventually('discovery SBCs no longer current', 10_000, async () =>
      (await servers(s)).every((x) => x.spec.bootConfigurationRef === undefined) ? true : undefined,
    );
    await eventually('discovery SBCs deleted', 10_000, async () => {
      const { items } = await s.client.list(Resources.ServerBootConfiguration, { namespace: s.ns });
      return items.length === 0;
    });
    const bmc = await s.client.get<BMC>(Resources.BMC, s.bmcName);
    assert.equal(bmc?.status?.state, 'Enabled');
    assert.equal(cond(bmc, 'SystemsDiscovered')?.status, 'True');
    assert.equal((await servers(s)).length, 3);
    // One Event for the scan that created them, naming each (not one Event per Server).
    const created = (await eventsFor(s, 'BMC', s.bmcName, 'default')).filter(
      (e) => e.reason === 'ServerCreated',
    );
    assert.equal(created.length, 1, JSON.stringify(created));
    assert.match(created[0]!.message, /^3 Server\(s\) created: /);
    for (const srv of avail)
      assert.ok(created[0]!.message.includes(`${srv.metadata.name} (UUID ${srv.spec.systemUUID})`));
  });
});

test('a BMC that reports no NIC: discovery completes by the old rule, and the condition says so', {
  timeout: 60_000,
}, async () => {
  await withStack('nonic', { hosts: 1, profile: { omitEthernetInterfaces: true } }, async (s) => {
    const [srv] = await availableServers(s, 1);
    assert.deepEqual(srv!.status?.bmcNetworkInterfaces, []);
    assert.equal(cond(srv, 'MachineIdentity')?.status, 'False');
    assert.equal(cond(srv, 'MachineIdentity')?.reason, 'NoBMCNICs');
    assert.match(cond(srv, 'MachineIdentity')!.message, /reports no Ethernet interface/);
    assert.ok(srv!.status?.networkInterfaces?.length, 'the registration was stored unchecked');
  });
});

test('C01: a Redfish system without a UUID gets a BMC condition, no Server, and no hot loop', {
  timeout: 30_000,
}, async () => {
  await withStack('c01', { hosts: 2, profile: { omitSystemUUID: true } }, async (s) => {
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
    const since = await reconciles(s, 'bmc');
    await new Promise((ok) => setTimeout(ok, 2_000));
    // Positive control: the BMC was reconciled in the window (an edit of it, then idle), so a
    // controller that listed on every reconcile would have listed again.
    await s.client.mergePatch(Resources.BMC, s.bmcName, undefined, {
      metadata: { annotations: { 'metal-test.ironcore.dev/poke': String(Date.now()) } },
    });
    await settled(s, 'bmc', since, { more: 1 });
    assert.ok(reads() - before <= 1, `systems listed ${reads() - before} times in 2 s`);
    assert.equal((await servers(s)).length, 0);
  });
});

/**
 * The manager's `metal_api_requests_total` of one origin: `resource verb` → count of 2xx answers
 * (of every answer with `allCodes`).
 */
async function requestsOf(s: Stack, origin: string, allCodes = false): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${s.op?.metricsPort}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^metal_api_requests_total\{([^}]*)\} (\d+)/gm)) {
    const l = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (l.origin !== origin || (!allCodes && !String(l.code).startsWith('2'))) continue;
    const k = `${l.resource} ${l.verb}`;
    out[k] = (out[k] ?? 0) + Number(m[2]);
  }
  return out;
}

test('discovery writes each Server status change once: 3 status writes and 2 Events per Server', {
  timeout: 60_000,
}, async () => {
  const n = 3;
  await withStack('disc-req', { hosts: n }, async (s) => {
    const avail = await availableServers(s, n);
    await eventually('discovery SBCs deleted and no longer current', 10_000, async () => {
      const { items } = await s.client.list(Resources.ServerBootConfiguration, { namespace: s.ns });
      const refs = (await servers(s)).filter((x) => x.spec.bootConfigurationRef).length;
      return items.length === 0 && refs === 0 ? true : undefined;
    });
    const got = await requestsOf(s, 'server');
    // Initial→Discovery once the SBC is Ready (BMC facts, the power-on intent, Discovered),
    // powerState On after the power-on, Available (hardware, Discovered=True, powerState Off).
    assert.equal(got['servers/status patch'], 3 * n, JSON.stringify(got));
    // One delete per discovery SBC, also while the cache still holds the deleted one (no 404s).
    const all = await requestsOf(s, 'server', true);
    assert.equal(all['serverbootconfigurations delete'], n, JSON.stringify(all));
    // One Event per discovery: Discovered tells the power-on (its time) and the power-off.
    assert.equal(got['events create'], n, JSON.stringify(got));
    for (const srv of avail) {
      const events = await eventsFor(s, 'Server', srv.metadata.name!, 'default');
      assert.deepEqual(events.map((e) => e.reason).sort(), ['Discovered']);
      const discovered = events.find((e) => e.reason === 'Discovered')!;
      // The power-off of the completed discovery is told in the Discovered Event, not one of its own.
      assert.match(
        discovered.message,
        /^registration received in attempt 1 \(\d+\.\d s after power-on\); Available, powered off: ForceOff sent to the BMC \(PowerState was On\)$/,
      );
      assert.deepEqual(resets(s, srv.spec.systemUUID), ['On', 'ForceOff']);
    }
  });
});

test('a discovery SBC in Error: state Discovery with the reason in Discovered, never powered on', {
  timeout: 60_000,
}, async () => {
  // A registry outside --allowed-registries: refused without any network request.
  await withStack(
    'disc-bad',
    { hosts: 1, args: ['--probe-image', 'registry.invalid/probe:1'] },
    async (s) => {
      const srv = await eventually('Discovered=False WaitingForBootConfiguration', 20_000, async () => {
        const [x] = await servers(s);
        return cond(x, 'Discovered')?.reason === 'WaitingForBootConfiguration' ? x : undefined;
      });
      assert.equal(srv.status?.state, 'Discovery');
      assert.equal(srv.status?.manufacturer, 'Contoso', 'the BMC facts come with the first write');
      assert.match(cond(srv, 'Discovered')!.message, /registry\.invalid.*--allowed-registries/);
      assert.equal(srv.status?.discovery?.poweredOnAt, undefined, 'no power-on intent');
      // Two more reconciles of the Server (the positive control: they ran), then idle: still nothing.
      await pokeServer(s, srv.metadata.name!);
      assert.deepEqual(resetsSent(s, srv.spec.systemUUID), [], 'nothing powered on');
    },
  );
});

test('discovery that never registers: attempts bounded, then state Error with the reason, no SBC, powered off', {
  timeout: 90_000,
}, async () => {
  await withStack(
    'disc-exh',
    {
      hosts: 1,
      simFaults: { neverCallBack: true },
      args: ['--discovery-timeout', '3s', '--discovery-max-attempts', '2'],
    },
    async (s) => {
      const srv = await eventually('state Error', 40_000, async () => {
        const [x] = await servers(s);
        return x?.status?.state === 'Error' ? x : undefined;
      });
      // The condition rides in the write of the state: whoever sees Error sees why.
      const c = cond(srv, 'Discovered');
      assert.equal(c?.reason, 'DiscoveryAttemptsExhausted');
      assert.match(c!.message, /attempt 2\/2 timed out after 3s/);
      const done = await eventually('powered off, discovery SBC deleted', 15_000, async () => {
        const [x] = await servers(s);
        const { items } = await s.client.list(Resources.ServerBootConfiguration, { namespace: s.ns });
        const host = s.vbmc.systems.find((h) => h.id === x?.spec.systemUUID)?.host;
        return items.length === 0 && host?.powerState() === 'Off' && !x?.spec.bootConfigurationRef
          ? x
          : undefined;
      });
      const r = resets(s, done.spec.systemUUID);
      assert.equal(r.at(-1), 'ForceOff', r.join(','));
      assert.equal(
        r.filter((x) => x !== 'ForceOff').length,
        2,
        `one power action per attempt: ${r.join(',')}`,
      );
      const events = await eventually('the Warning Event', 10_000, async () => {
        const e = await eventsFor(s, 'Server', done.metadata.name!, 'default');
        return e.some((x) => x.reason === 'DiscoveryAttemptsExhausted') ? e : undefined;
      });
      assert.equal(events.find((x) => x.reason === 'DiscoveryAttemptsExhausted')?.type, 'Warning');
    },
  );
});
