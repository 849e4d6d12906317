/**
 * The QEMU accelerator is chosen by a probe boot, not by the presence of /dev/kvm (issue: KVM
 * guests that never run). Stand-in QEMU binaries (shell scripts) play a KVM that never runs the
 * guest and one that does; the real QEMU boots the probe guest (the test kernel and initramfs)
 * under TCG to prove that the guest itself prints the marker (a broken probe would silently cost
 * every KVM machine its KVM).
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { buildVmArtefacts } from '../../src/localstack/vm-artefacts.js';
import { accelFromEnv, chooseAccel, PROBE_MARKER, probeGuest } from '../../src/virtualbmc/accel-probe.js';

const dir = mkdtempSync(join(tmpdir(), 'metal-accel-test-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A read-write file stands in for a KVM device node that exists and is accessible. */
const device = join(dir, 'kvm');
writeFileSync(device, '');
/** Stand-ins never read the guest files; they only have to exist. */
const guest = { kernel: join(dir, 'vmlinuz'), initrd: join(dir, 'initrd') };
writeFileSync(guest.kernel, 'k');
writeFileSync(guest.initrd, 'i');

/** A stand-in QEMU: answers --version, logs every other invocation's arguments, then runs `body`. */
function standIn(name: string, body: string): { binary: string; calls: () => string[] } {
  const binary = join(dir, name);
  const log = join(dir, `${name}.calls`);
  writeFileSync(log, '');
  writeFileSync(
    binary,
    `#!/bin/sh\nif [ "$1" = "--version" ]; then echo "QEMU emulator version 0.0.0 (${name})"; exit 0; fi\necho "$*" >> ${log}\n${body}\n`,
  );
  chmodSync(binary, 0o755);
  return { binary, calls: () => readFileSync(log, 'utf8').split('\n').filter(Boolean) };
}

describe('QEMU accelerator choice', () => {
  it('a KVM whose guest never prints (the device exists, guests do not run) gives TCG', async () => {
    const q = standIn('silent-kvm', 'exec sleep 30');
    const v = await chooseAccel('auto', {
      guest,
      qemuBinary: q.binary,
      kvmDevice: device,
      cacheDir: join(dir, 'cache-silent'),
      timeoutMs: 700,
    });
    assert.equal(v.accel, 'tcg');
    assert.match(v.reason, /no sign of life/);
    assert.equal(v.cached, false);
    assert.equal(q.calls().length, 1);
    assert.match(q.calls()[0] ?? '', /-accel kvm -cpu host/);
  });

  it('a KVM whose guest prints the marker gives KVM, and the verdict is cached per machine', async () => {
    const q = standIn(
      'working-kvm',
      `case "$*" in *"-accel kvm"*) echo ${PROBE_MARKER}; exec sleep 30;; esac; exit 1`,
    );
    const cacheDir = join(dir, 'cache-working');
    const v = await chooseAccel('auto', {
      guest,
      qemuBinary: q.binary,
      kvmDevice: device,
      cacheDir,
      timeoutMs: 5000,
    });
    assert.equal(v.accel, 'kvm');
    assert.equal(v.cached, false);
    assert.ok((v.probeMs ?? Infinity) < 5000);
    // Another call (other options, so not the in-process memo) reads the cache: no second probe.
    const again = await chooseAccel('auto', {
      guest,
      qemuBinary: q.binary,
      kvmDevice: device,
      cacheDir,
      timeoutMs: 5001,
    });
    assert.deepEqual([again.accel, again.cached], ['kvm', true], again.reason);
    assert.equal(q.calls().length, 1);
  });

  it('a QEMU that exits at once (KVM refused) gives TCG with its error', async () => {
    const q = standIn('refusing-kvm', 'echo "Could not access KVM kernel module" >&2; exit 1');
    const v = await chooseAccel('auto', {
      guest,
      qemuBinary: q.binary,
      kvmDevice: device,
      cacheDir: join(dir, 'cache-refusing'),
      timeoutMs: 5000,
    });
    assert.equal(v.accel, 'tcg');
    assert.match(v.reason, /Could not access KVM kernel module/);
  });

  it('an absent KVM device gives TCG without running QEMU', async () => {
    const q = standIn('unused', `echo ${PROBE_MARKER}`);
    const v = await chooseAccel('auto', {
      guest,
      qemuBinary: q.binary,
      kvmDevice: join(dir, 'no-such-device'),
    });
    assert.equal(v.accel, 'tcg');
    assert.match(v.reason, /absent or not read-write/);
    assert.equal(q.calls().length, 0);
  });

  it('without a probe kernel KVM is not proven: TCG', async () => {
    const q = standIn('no-guest', `echo ${PROBE_MARKER}`);
    const v = await chooseAccel('auto', { qemuBinary: q.binary, kvmDevice: device });
    assert.equal(v.accel, 'tcg');
    assert.equal(q.calls().length, 0);
  });

  it('kvm and tcg are taken as requested; METAL_QEMU_ACCEL is validated', async () => {
    assert.equal((await chooseAccel('kvm')).accel, 'kvm');
    assert.equal((await chooseAccel('tcg')).accel, 'tcg');
    assert.equal(accelFromEnv({}), 'auto');
    assert.equal(accelFromEnv({ METAL_QEMU_ACCEL: 'tcg' }), 'tcg');
    assert.throws(() => accelFromEnv({ METAL_QEMU_ACCEL: 'fast' }), /must be auto, kvm or tcg/);
  });

  it('the probe guest (test kernel + initramfs) prints the marker on the real QEMU under TCG', async () => {
    const artefacts = buildVmArtefacts();
    const r = await probeGuest(
      'qemu-system-x86_64',
      'tcg',
      { kernel: join(artefacts, 'vmlinuz'), initrd: join(artefacts, 'initramfs.cpio.gz') },
      120_000,
    );
    assert.equal(r.ok, true, r.detail);
    console.log(`# TCG probe boot reached user space in ${r.ms} ms`);
  });
});
