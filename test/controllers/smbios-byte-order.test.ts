/**
 * A host whose firmware reports its SMBIOS UUID with fields 1–3 byte-reversed relative to what its
 * BMC reports over Redfish (SMBIOS ≥ 2.6 little-endian; metal-stack/go-hal#57), through the whole
 * system: real API server, the manager, a virtual BMC and a simulated host. Discovery completes
 * (the probe registers in the host's form), the Server records that form, and a claim boots it.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { byteSwappedSystemUUID } from '../../src/api/system-uuid.js';
import type { BMC } from '../../src/api/v1alpha1/bmc.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { SYSTEM_UUID_BYTE_SWAPPED_REASON } from '../../src/bootsignals/uuid-alias.js';
import { Resources } from '../../src/runtime/resource.js';
import { storedRegistration } from '../../src/testing/stored-registration.js';
import type { BootDevice, Host, HostIdentity } from '../../src/virtualbmc/host.js';
import { startVirtualBmc, type VirtualBmc } from '../../src/virtualbmc/server.js';
import { SimHost } from '../../src/virtualbmc/sim.js';
import { simIdentity } from '../../src/virtualbmc/sim-fleet.js';
import { releaseSharedCluster } from '../harness/shared.js';
import { API, b64, cond, createClaim, eventually, getClaim, withStack } from './fixture.js';

after(releaseSharedCluster);

/**
 * What the BMC shows (`identity.uuid` = the Redfish UUID) in front of a simulated host whose firmware
 * and OS use the byte-swapped form: in `/ipxe/{uuid}`, the probe's `/register` and `/bootstate`.
 */
class ByteSwappedHost implements Host {
  readonly identity: HostIdentity;
  constructor(readonly inner: SimHost) {
    this.identity = { ...inner.identity, uuid: byteSwappedSystemUUID(inner.identity.uuid) };
  }
  powerState() {
    return this.inner.powerState();
  }
  powerOn(device: BootDevice) {
    return this.inner.powerOn(device);
  }
  gracefulShutdown() {
    return this.inner.gracefulShutdown();
  }
  forceOff() {
    return this.inner.forceOff();
  }
  reset(device: BootDevice) {
    return this.inner.reset(device);
  }
  close() {
    return this.inner.close();
  }
}

test('a host reporting its UUID byte-swapped is discovered, recorded and boots a claim', {
  timeout: 120_000,
}, async () => {
  // Closed after the stack (its manager stops first), as before withStack.
  let vbmc: VirtualBmc | undefined;
  try {
    await withStack('smbios-order', { hosts: 0 }, async (s) => {
      const id = simIdentity(0, `${s.ns}-swapped`);
      // The host's (SMBIOS) form; the BMC shows it with fields 1-3 byte-reversed (no byte palindromes).
      const hostForm = id.uuid;
      assert.notEqual(byteSwappedSystemUUID(hostForm), hostForm);
      const sim = new SimHost({
        identity: { ...id, uuid: hostForm },
        bootServerUrl: s.op!.bootServerUrl,
        timing: { firmwareMs: 20, kernelMs: 50 },
      });
      const host = new ByteSwappedHost(sim);
      const bmc = await startVirtualBmc({ hosts: [host], username: 'admin', password: 'secret', port: 0 });
      vbmc = bmc;
      const bmcName = `swapped-${s.ns}`;
      try {
        await s.client.create(Resources.BMCSecret, {
          apiVersion: API,
          kind: 'BMCSecret',
          metadata: { name: bmcName, labels: s.labels },
          data: { username: b64('admin'), password: b64('secret') },
        });
        await s.client.create<BMC>(Resources.BMC, {
          apiVersion: API,
          kind: 'BMC',
          metadata: { name: bmcName, labels: s.labels },
          spec: {
            access: { ip: '127.0.0.1' },
            bmcSecretRef: { name: bmcName },
            protocol: { name: 'Redfish', port: Number(new URL(bmc.url).port), scheme: 'http' },
          },
        });
        const redfishForm = host.identity.uuid;
        const server = await eventually('Server discovered and Available', 60_000, async () => {
          const { items } = await s.client.list<Server>(Resources.Server, {
            labelSelector: Object.entries(s.labels)
              .map(([k, v]) => `${k}=${v}`)
              .join(','),
          });
          const srv = items.find((x) => x.spec.systemUUID === redfishForm);
          return srv?.status?.state === 'Available' ? srv : undefined;
        });
        assert.equal(server.spec.systemUUID, redfishForm, 'the inventory keeps the BMC form');
        assert.equal(server.status?.smbiosUUIDAlias, hostForm, 'the host form is recorded');
        const reg = (await storedRegistration(s.client, server.metadata.name!)).payload as {
          systemInfo?: { systemInformation?: { uuid?: string } };
        };
        assert.equal(
          reg?.systemInfo?.systemInformation?.uuid,
          hostForm,
          'the probe registered in its own form',
        );
        const { items: events } = await s.client.list<{
          metadata: { name?: string };
          involvedObject?: { kind?: string; name?: string };
          reason: string;
        }>(Resources.Event, { namespace: 'default' });
        assert.equal(
          events.filter(
            (e) =>
              e.involvedObject?.kind === 'Server' &&
              e.involvedObject.name === server.metadata.name &&
              e.reason === SYSTEM_UUID_BYTE_SWAPPED_REASON,
          ).length,
          1,
        );

        await createClaim(s, 'os', { serverRef: server.metadata.name!, timeout: '20s' });
        const booted = await eventually('claim Booted', 30_000, async () => {
          const c = await getClaim(s, 'os');
          return cond(c, 'Booted')?.status === 'True' ? c : undefined;
        });
        assert.equal(cond(booted, 'Booted')?.reason, 'BootCompleted');
        assert.equal(sim.lastBoot?.mode, 'os');
        assert.equal(sim.lastBoot?.callbackStatus, 200);
      } finally {
        await sim.close();
        await s.client.delete(Resources.BMC, bmcName).catch(() => undefined);
        await s.client.delete(Resources.BMCSecret, bmcName).catch(() => undefined);
      }
    });
  } finally {
    await vbmc?.close();
  }
});
