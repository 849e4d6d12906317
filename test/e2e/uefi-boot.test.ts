/**
 * End to end under UEFI: a QEMU VM with OVMF whose network boot is iPXE's UEFI driver ROM is
 * discovered, claimed to `Booted=True` with all three signals of attempt 1, and under NetBootOnce a
 * later power-on boots from disk (the firmware still asks the boot server, which answers with a
 * local-boot script, and no network override is set at the BMC). Runs on QEMU user networking: the
 * fallback network, where no namespaces are needed. Each test establishes the claim it needs
 * (scenario.ts), so any test runs alone.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { LocalStack } from '../../src/localstack/local-stack.js';
import { OS_IMAGE } from '../../src/localstack/vm-artefacts.js';
import type { QemuHost } from '../../src/virtualbmc/qemu.js';
import {
  assertBootedAttempt1,
  assertNetBootOnceBootsFromDisk,
  deleteClaim,
  discoverSettled,
  ensureBooted,
} from './scenario.js';

let stack: LocalStack;
let dir: string;
let servers: Server[];

describe('end to end under UEFI (OVMF + iPXE) on user networking', { timeout: 15 * 60_000 }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'metal-e2e-uefi-'));
    stack = await LocalStack.start({
      servers: 1,
      backend: 'qemu',
      firmware: 'uefi',
      dir,
      managerArgs: ['--boot-timeout=180s', '--discovery-timeout=240s'],
      progress: (l) => console.log(`# ${l}`),
    });
    servers = await discoverSettled(stack, 1, 400_000);
  });
  after(async () => {
    if (stack && servers)
      await deleteClaim(stack, 'uefi-boot', servers[0]!.metadata.name!).catch(() => undefined);
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a claim boots the UEFI VM to Booted=True with all three signals for attempt 1', async () => {
    const target = servers[0]!.metadata.name!;
    await deleteClaim(stack, 'uefi-boot', target);
    await ensureBooted(stack, 'uefi-boot', target, { image: OS_IMAGE, bootPolicy: 'NetBootOnce' }, 300_000);
    await assertBootedAttempt1(stack, 'uefi-boot', target, [
      'IPXEScriptFetched',
      'IgnitionDataFetched',
      'BootStateReceived',
    ]);
  });

  it('the running VM is OVMF with its own variable store and the iPXE UEFI ROM', async () => {
    // Read from the QEMU process the claim booted (/proc/<pid>/cmdline, NUL-separated argv), not
    // rebuilt with qemuArgs(): a difference between what is built and what is spawned shows here.
    const target = servers[0]!.metadata.name!;
    await ensureBooted(stack, 'uefi-boot', target, { image: OS_IMAGE, bootPolicy: 'NetBootOnce' }, 300_000);
    const host = stack.hosts[0] as QemuHost;
    const pid = host.pid;
    assert.ok(pid, 'the VM of the Booted claim is running');
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
      .split('\0')
      .filter((a) => a !== '');
    assert.match(argv[0] ?? '', /qemu-system-x86_64$/, `pid ${pid} is QEMU: ${argv.join(' ')}`);
    assert.equal(
      argv[argv.indexOf('-uuid') + 1],
      host.identity.uuid.toUpperCase(),
      'the host of this Server',
    );
    const args = argv.join(' ');
    assert.match(args, /if=pflash,format=raw,unit=0,readonly=on,file=\/usr\/share\/OVMF\/OVMF_CODE_4M\.fd/);
    assert.match(args, new RegExp(`unit=1,file=${host.ovmfVarsPath}`));
    assert.match(args, /romfile=\/usr\/lib\/ipxe\/qemu\/efi-virtio\.rom/);
  });

  it('NetBootOnce under UEFI PXE: after Booted, a power-on boots from disk', async () => {
    // Precondition established here, not taken from the test above.
    const target = servers[0]!.metadata.name!;
    await ensureBooted(stack, 'uefi-boot', target, { image: OS_IMAGE, bootPolicy: 'NetBootOnce' }, 300_000);
    await assertNetBootOnceBootsFromDisk(stack, 'uefi-boot', servers[0]!);
  });
});
