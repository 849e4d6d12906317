/**
 * End to end on real input: QEMU VMs whose iPXE firmware does DHCP, fetches `/ipxe/{uuid}` from the
 * boot server, boots the Debian kernel and the busybox initramfs, which registers (probe) or posts
 * `/bootstate` (os). Everything else is the real system: control plane, manager (controllers,
 * registry, boot server) as its own process, virtual BMC speaking Redfish. Discovery is shared
 * (the `before` hook); each test creates or establishes the claim it needs (scenario.ts) and deletes
 * the claims it made, so any test runs alone.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { API_VERSION } from '../../src/api/v1alpha1/schema.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { tokenSubject } from '../../src/bootauth/callback-token.js';
import { waitFor } from '../../src/localstack/control-plane.js';
import { LocalStack } from '../../src/localstack/local-stack.js';
import { SILENT_OS_IMAGE } from '../../src/localstack/vm-artefacts.js';
import { Resources } from '../../src/runtime/resource.js';
import type { QemuHost } from '../../src/virtualbmc/qemu.js';
import {
  assertBootedAttempt1,
  assertNetBootOnceBootsFromDisk,
  deleteClaim,
  discoverSettled,
  ensureBooted,
  getClaim,
  managerLines,
  NS,
  sbcOf,
} from './scenario.js';

let stack: LocalStack;
let dir: string;
let servers: Server[];

/** The NetBootOnce claim of servers[0] that the boot test creates and the disk-boot test needs Booted. */
const BOOT_CLAIM = 'e2e-boot';
const bootClaimSpec = () => ({ image: stack.images.osImage, bootPolicy: 'NetBootOnce' });

describe('end to end with QEMU VMs', { timeout: 20 * 60_000 }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'metal-e2e-'));
    stack = await LocalStack.start({
      servers: 2,
      backend: 'qemu',
      // Two different vCPU counts: a CPU count that does not come from the VM cannot match both.
      cpus: [1, 2],
      dir,
      managerArgs: ['--boot-timeout=60s', '--discovery-timeout=120s'],
      progress: (l) => console.log(`# ${l}`),
    });
    servers = await discoverSettled(stack, 2, 400_000);
  });
  after(async () => {
    if (stack && servers)
      await deleteClaim(stack, BOOT_CLAIM, servers[0]!.metadata.name!).catch(() => undefined);
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('discovers 2 VMs with their UUID, MAC, memory and CPU count in the Server status', async () => {
    assert.equal(servers.length, 2);
    for (const srv of servers) {
      const host = stack.hosts.find((h) => h.identity.uuid === srv.spec.systemUUID) as QemuHost | undefined;
      assert.ok(host, `a VM with UUID ${srv.spec.systemUUID}`);
      assert.equal(srv.status?.state, 'Available');
      assert.ok(srv.status?.registration?.payload, 'registration payload stored (its ConfigMap named)');
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
    // Discovery ends with a power-off (discoverSettled waited for the status to observe it).
    assert.ok(
      servers.every((x) => x.status?.powerState === 'Off'),
      'powered off after discovery',
    );
  });

  it('a claim boots a VM from an OCI image of the local registry to Booted=True with all three signals for attempt 1', async () => {
    const target = servers[0]!.metadata.name!;
    // A claim left by an earlier run of this test would not show attempt 1 of a fresh boot.
    await deleteClaim(stack, BOOT_CLAIM, target);
    await ensureBooted(stack, BOOT_CLAIM, target, bootClaimSpec(), 240_000);
    const sbc = await assertBootedAttempt1(stack, BOOT_CLAIM, target, [
      'IPXEScriptFetched',
      'IgnitionDataFetched',
      'BootStateReceived',
    ]);
    assert.equal(sbc.status?.image?.reference, stack.images.osImage);
    assert.match(sbc.status?.image?.digest ?? '', /^sha256:/);
    // The VM's iPXE fetched kernel and initramfs as layers through the boot server.
    const served = managerLines(stack).filter(
      (l) => l.systemUUID === servers[0]!.spec.systemUUID && l.msg === 'image layer served',
    ) as { layer?: string }[];
    assert.deepEqual([...new Set(served.map((l) => l.layer))].sort(), ['initrd', 'kernel']);
  });

  it('NetBootOnce: after Booted, power Off then On boots from disk: no override, no image script', async () => {
    // Precondition established here (not taken from the test above): the claim is Booted.
    await ensureBooted(stack, BOOT_CLAIM, servers[0]!.metadata.name!, bootClaimSpec(), 240_000);
    await assertNetBootOnceBootsFromDisk(stack, BOOT_CLAIM, servers[0]!, 180_000);
  });

  it('an OS that never calls back is retried with a new token and a power cycle, then AttemptsExhausted', async () => {
    const target = servers[1]!.metadata.name!;
    const system = stack.vbmc.systems.find((x) => x.id === servers[1]!.spec.systemUUID.toLowerCase());
    assert.ok(system, `the virtual BMC serves ${servers[1]!.spec.systemUUID}`);
    const since = Date.now();
    await stack.client.create(Resources.ServerClaim, {
      apiVersion: API_VERSION,
      kind: 'ServerClaim',
      metadata: { name: 'e2e-silent', namespace: NS },
      spec: {
        power: 'On',
        serverRef: { name: target },
        image: SILENT_OS_IMAGE,
        bootCompletion: { timeout: '45s', maxAttempts: 2 },
      },
    });
    try {
      const tokens = new Set<string>();
      let attempts = 0;
      await waitFor('AttemptsExhausted', 400_000, async () => {
        const sbc = await sbcOf(stack, target);
        const subject = sbc && tokenSubject(sbc);
        if (subject) tokens.add(stack.callbackKey.tokenFor(subject));
        const c = await getClaim(stack, 'e2e-silent');
        attempts = Math.max(attempts, c.status?.boot?.attempt ?? 0);
        return (
          c.status?.conditions?.some((x) => x.type === 'Booted' && x.reason === 'AttemptsExhausted') ?? false
        );
      });
      assert.equal(attempts, 2);
      assert.equal(tokens.size, 2, 'a fresh token for attempt 2');
      const sbc = (await sbcOf(stack, target))!;
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
    } finally {
      await deleteClaim(stack, 'e2e-silent', target);
    }
  });
});
