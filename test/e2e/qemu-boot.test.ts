/**
 * End to end on real input: QEMU VMs whose iPXE firmware does DHCP, fetches `/ipxe/{uuid}` from the
 * boot server, boots the Debian kernel and the busybox initramfs, which registers (probe) or posts
 * `/bootstate` (os). Everything else is the real system: control plane, manager (controllers,
 * registry, boot server) as its own process, virtual BMC speaking Redfish.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { API_VERSION } from '../../src/api/v1alpha1/schema.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { waitFor } from '../../src/localstack/control-plane.js';
import { LocalStack } from '../../src/localstack/local-stack.js';
import { SILENT_OS_IMAGE } from '../../src/localstack/vm-artefacts.js';
import { Resources } from '../../src/runtime/resource.js';
import type { QemuHost } from '../../src/virtualbmc/qemu.js';

const NS = 'default';
let stack: LocalStack;
let dir: string;
let servers: Server[];

async function claim(name: string, serverName: string, extra: Record<string, unknown>): Promise<void> {
  await stack.client.create(Resources.ServerClaim, {
    apiVersion: API_VERSION,
    kind: 'ServerClaim',
    metadata: { name, namespace: NS },
    spec: { power: 'On', serverRef: { name: serverName }, ...extra },
  });
}

async function getClaim(name: string): Promise<ServerClaim> {
  return (await stack.client.get<ServerClaim>(Resources.ServerClaim, name, NS))!;
}

async function sbcOf(serverName: string): Promise<ServerBootConfiguration | undefined> {
  const srv = await stack.client.get<Server>(Resources.Server, serverName);
  const ref = srv?.spec.bootConfigurationRef;
  return ref
    ? stack.client.get<ServerBootConfiguration>(Resources.ServerBootConfiguration, ref.name, ref.namespace)
    : undefined;
}

function managerLines(): { msg?: string; server?: string; systemUUID?: string; time?: string }[] {
  return readFileSync(stack.managerLog, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      try {
        return JSON.parse(l);
      } catch {
        return {};
      }
    });
}

describe('end to end with QEMU VMs', { timeout: 20 * 60_000 }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'metal-e2e-'));
    stack = await LocalStack.start({
      servers: 2,
      backend: 'qemu',
      dir,
      managerArgs: ['--boot-timeout=60s', '--discovery-timeout=120s'],
      progress: (l) => console.log(`# ${l}`),
    });
    const t0 = Date.now();
    servers = await stack.waitForDiscovery(2, 300_000);
    console.log(`# discovery of 2 VMs took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  });
  after(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('discovers 2 VMs with their UUID, MAC, memory and CPU count in the Server status', async () => {
    assert.equal(servers.length, 2);
    for (const srv of servers) {
      const host = stack.hosts.find((h) => h.identity.uuid === srv.spec.systemUUID) as QemuHost | undefined;
      assert.ok(host, `a VM with UUID ${srv.spec.systemUUID}`);
      assert.equal(srv.status?.state, 'Available');
      assert.ok(srv.status?.registration?.data, 'registration payload stored');
      const macs = (srv.status?.networkInterfaces ?? []).map((n) => n.macAddress.toLowerCase());
      assert.ok(macs.includes(host.identity.macAddress), `MAC ${host.identity.macAddress} in ${macs}`);
      const mem = srv.status?.totalSystemMemory;
      assert.ok(
        mem === 512 * 1024 * 1024 || mem === '512Mi' || mem === String(512 * 1024 * 1024),
        `memory ${mem}`,
      );
      // The probe reports one entry per CPU package with its hardware threads: together, the VM's -smp.
      const processors = srv.status?.processors ?? [];
      assert.ok(processors.length >= 1, 'processors reported');
      const threads = processors.reduce((n, p) => n + (p.totalThreads ?? 0), 0);
      assert.equal(threads, host.identity.cpus, `CPU threads in ${JSON.stringify(processors)}`);
    }
    // Discovery ends with a power-off that the Server status observes on a later BMC read.
    await waitFor('Available servers powered off', 60_000, async () => {
      const all = (await stack.client.list<Server>(Resources.Server)).items;
      return (
        all.length === 2 &&
        all.every((x) => x.status?.state === 'Available' && x.status?.powerState === 'Off')
      );
    });
  });

  it('a claim boots a VM from an OCI image of the local registry to Booted=True with all three signals for attempt 1', async () => {
    const target = servers[0]!.metadata.name!;
    await claim('e2e-boot', target, { image: stack.images.osImage, bootPolicy: 'NetBootOnce' });
    const t0 = Date.now();
    await waitFor('claim Booted', 240_000, async () => {
      const c = await getClaim('e2e-boot');
      return c.status?.conditions?.some((x) => x.type === 'Booted' && x.status === 'True') ?? false;
    });
    console.log(`# claim to Booted: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const c = await getClaim('e2e-boot');
    assert.equal(c.status?.boot?.attempt, 1);
    const sbc = (await sbcOf(target))!;
    assert.equal(sbc.status?.image?.reference, stack.images.osImage);
    assert.match(sbc.status?.image?.digest ?? '', /^sha256:/);
    // The VM's iPXE fetched kernel and initramfs as layers through the boot server.
    const served = managerLines().filter(
      (l) => l.systemUUID === servers[0]!.spec.systemUUID && l.msg === 'image layer served',
    ) as { layer?: string }[];
    assert.deepEqual([...new Set(served.map((l) => l.layer))].sort(), ['initrd', 'kernel']);
    for (const type of ['IPXEScriptFetched', 'IgnitionDataFetched', 'BootStateReceived']) {
      const cond: { status?: string; observedGeneration?: number } | undefined = sbc.status?.conditions?.find(
        (x) => x.type === type,
      );
      assert.equal(cond?.status, 'True', type);
      assert.ok(
        (cond?.observedGeneration ?? 0) >= (sbc.status?.attemptGeneration ?? 0),
        `${type} belongs to attempt 1`,
      );
    }
  });

  it('NetBootOnce: after Booted, power Off then On boots from disk: no override, no image script', async () => {
    const target = servers[0]!.metadata.name!;
    const uuid = servers[0]!.spec.systemUUID;
    await stack.client.mergePatch(Resources.ServerClaim, 'e2e-boot', NS, { spec: { power: 'Off' } });
    await waitFor(
      'server Off',
      120_000,
      async () => (await stack.client.get<Server>(Resources.Server, target))?.status?.powerState === 'Off',
    );
    const mark = new Date().toISOString();
    stack.vbmc.clearRequests();
    await stack.client.mergePatch(Resources.ServerClaim, 'e2e-boot', NS, { spec: { power: 'On' } });
    await waitFor(
      'server On',
      120_000,
      async () => (await stack.client.get<Server>(Resources.Server, target))?.status?.powerState === 'On',
    );
    // Firmware with network after disk asks the boot server; it must be told to boot locally.
    await waitFor('the VM asked for its script', 180_000, () =>
      managerLines().some(
        (l) => (l.time ?? '') > mark && l.systemUUID === uuid && /local boot/.test(l.msg ?? ''),
      ),
    ).catch((err) => {
      const host = stack.hosts.find((h) => h.identity.uuid === uuid) as QemuHost;
      const mine = managerLines()
        .filter((l) => (l.time ?? '') > mark && (l.systemUUID === uuid || l.server === target))
        .map((l) => JSON.stringify(l).slice(0, 300));
      let serial = '';
      try {
        serial = readFileSync(host.serialLogPath, 'utf8').split('\n').slice(-15).join('\n');
      } catch {}
      throw new Error(
        `${String(err)}\nmanager lines since power-on:\n${mine.join('\n')}\nserial tail:\n${serial}`,
      );
    });
    const served = managerLines().filter(
      (l) => (l.time ?? '') > mark && l.systemUUID === uuid && l.msg === 'iPXE script served',
    );
    assert.deepEqual(served, [], 'no image script after completion');
    const overrides = stack.vbmc
      .requests()
      .filter((r) => r.method === 'PATCH' && JSON.stringify(r.body ?? {}).includes('"Pxe"'));
    assert.deepEqual(overrides, [], 'no network-boot override at the BMC');
  });

  it('an OS that never calls back is retried with a new token and a power cycle, then AttemptsExhausted', async () => {
    const target = servers[1]!.metadata.name!;
    const system = stack.vbmc.systems.find((x) => x.id === servers[1]!.spec.systemUUID.toLowerCase());
    assert.ok(system, `the virtual BMC serves ${servers[1]!.spec.systemUUID}`);
    const since = Date.now();
    await claim('e2e-silent', target, {
      image: SILENT_OS_IMAGE,
      bootCompletion: { timeout: '45s', maxAttempts: 2 },
    });
    const tokens = new Set<string>();
    let attempts = 0;
    await waitFor('AttemptsExhausted', 400_000, async () => {
      const sbc = await sbcOf(target);
      const secretName = sbc?.spec.callbackSecretRef?.name;
      if (secretName) {
        const secret = await stack.client.get<
          { data?: Record<string, string> } & import('../../src/runtime/resource.js').KObject
        >(Resources.Secret, secretName, sbc?.metadata.namespace);
        if (secret?.data?.token) tokens.add(secret.data.token);
      }
      const c = await getClaim('e2e-silent');
      attempts = Math.max(attempts, c.status?.boot?.attempt ?? 0);
      return (
        c.status?.conditions?.some((x) => x.type === 'Booted' && x.reason === 'AttemptsExhausted') ?? false
      );
    });
    assert.equal(attempts, 2);
    assert.equal(tokens.size, 2, 'a fresh token for attempt 2');
    const sbc = (await sbcOf(target))!;
    assert.equal(
      sbc.status?.conditions?.find((c) => c.type === 'IgnitionDataFetched')?.status,
      'True',
      'the silent OS fetched ignition',
    );
    // This VM's accepted power actions since the claim: power-on for attempt 1, a forced restart for 2.
    const resets = stack.vbmc
      .requests()
      .filter(
        (r) =>
          r.at >= since &&
          r.method === 'POST' &&
          r.path === `${system!.uri}/Actions/ComputerSystem.Reset` &&
          r.status >= 200 &&
          r.status < 300,
      )
      .map((r) => (r.body as { ResetType?: string } | undefined)?.ResetType);
    assert.deepEqual(resets, ['On', 'ForceRestart'], 'one power action per attempt');
  });
});
