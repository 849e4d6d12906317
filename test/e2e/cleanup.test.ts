/**
 * End to end: the cleanup boot on release with a real QEMU VM. A tenant's boot writes a marker to
 * the VM's disk; the claim is deleted; the manager (`--cleanup-image` = the pushed OCI image
 * `metal/cleanup:latest` of the local registry) boots the cleanup image through the attempt engine,
 * which erases the disk and reports `/bootstate`; the Server becomes Available only then, and the
 * raw disk image file no longer holds the marker. Runs on QEMU user networking with SeaBIOS + iPXE.
 */
import assert from 'node:assert/strict';
import { closeSync, mkdtempSync, openSync, readFileSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { waitFor } from '../../src/localstack/control-plane.js';
import { LocalStack } from '../../src/localstack/local-stack.js';
import { DISK_MARKER, MARKER_OS_IMAGE } from '../../src/localstack/vm-artefacts.js';
import { findCondition } from '../../src/runtime/conditions.js';
import { Resources } from '../../src/runtime/resource.js';
import type { QemuHost } from '../../src/virtualbmc/qemu.js';
import { claimAndWaitBooted, NS } from './scenario.js';

let stack: LocalStack;
let dir: string;
let servers: Server[];

/** The first MiB of the VM's raw disk image (where the marker and the metadata erase are). */
function diskHead(host: QemuHost): Buffer {
  const buf = Buffer.alloc(1 << 20);
  const fd = openSync(host.diskPath, 'r');
  try {
    readSync(fd, buf, 0, buf.length, 0);
  } finally {
    closeSync(fd);
  }
  return buf;
}

describe('cleanup boot on release with a QEMU VM', { timeout: 30 * 60_000 }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'metal-e2e-cleanup-'));
    stack = await LocalStack.start({
      servers: 1,
      backend: 'qemu',
      dir,
      cleanup: true,
      managerArgs: ['--boot-timeout=300s', '--discovery-timeout=300s', '--cleanup-timeout=300s'],
      progress: (l) => console.log(`# ${l}`),
    });
    servers = await stack.waitForDiscovery(1, 600_000);
  });
  after(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a tenant writes a marker, the release erases it before the Server is Available', async () => {
    const name = servers[0]!.metadata.name!;
    const host = stack.hosts[0] as QemuHost;
    await claimAndWaitBooted(stack, 'tenant', name, { image: MARKER_OS_IMAGE }, 600_000);
    await waitFor('the marker on the VM disk', 30_000, async () => diskHead(host).includes(DISK_MARKER));

    const t0 = Date.now();
    const states: string[] = [];
    await stack.client.delete(Resources.ServerClaim, 'tenant', NS);
    let cleaned: Server | undefined;
    await waitFor('Available after the cleanup boot', 900_000, async () => {
      cleaned = await stack.client.get<Server>(Resources.Server, name);
      const st = cleaned?.status?.state ?? '?';
      if (states[states.length - 1] !== st) states.push(st);
      return st === 'Available';
    });
    console.log(
      `# release → Available took ${((Date.now() - t0) / 1000).toFixed(1)} s: ${states.join(' → ')}`,
    );
    assert.ok(states.includes('Cleaning'), `went through Cleaning: ${states.join(' → ')}`);
    assert.ok(!states.slice(0, states.indexOf('Cleaning')).includes('Available'), 'not Available before');
    const c = findCondition(cleaned!.status?.conditions, 'Cleaned');
    assert.equal(c?.status, 'True', JSON.stringify(c));
    assert.equal(c?.reason, 'CleanupCompleted');
    assert.match(cleaned!.status?.cleanup?.image ?? '', /\/metal\/cleanup:latest$/);

    const head = diskHead(host);
    assert.ok(!head.includes(DISK_MARKER), 'the marker is gone from the disk image file');
    assert.equal(
      head.findIndex((b) => b !== 0),
      -1,
      'the first MiB of the disk image is zero',
    );
    const serial = readFileSync(host.serialLogPath, 'utf8');
    assert.match(
      serial,
      /metal: cleanup: erased \/dev\/vda \(metadata: first and last MiB of \d+ bytes\), first MiB verified zero/,
    );
  });
});
