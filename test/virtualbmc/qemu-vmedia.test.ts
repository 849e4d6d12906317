/**
 * Virtual media on a QEMU VM (UEFI, OVMF), through the virtual BMC's Redfish service: the ISO the boot
 * server's builder makes from the test image (UKI in an El Torito EFI image) is inserted with
 * `VirtualMedia.InsertMedia` (the BMC reads it in Range requests), the one-time `Cd` override makes
 * OVMF boot the DVD-ROM although the NIC has no boot ROM, the guest takes a static address from the
 * command line's `ip=` (it never runs DHCP) and posts `/bootstate` to the stand-in registry. After
 * an eject, a power cycle boots no CD. Slow under TCG: one VM, one boot.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { RedfishBMC } from '../../src/bmc/redfish-bmc.js';
import { UkiBuilder } from '../../src/bootserver/uki.js';
import { VirtualMediaIsoBuilder } from '../../src/bootserver/vmedia-iso.js';
import { QemuHost, qemuHostIdentity, qemuPrerequisiteProblems } from '../../src/virtualbmc/qemu.js';
import { startVirtualBmc } from '../../src/virtualbmc/server.js';
import { startStandin } from './standin-boot-server.js';

const execFileP = promisify(execFile);

async function vmArtefacts(): Promise<string> {
  let root = process.cwd();
  while (!existsSync(path.join(root, 'hack', 'build-vm-artefacts.sh'))) {
    if (path.dirname(root) === root) throw new Error('run the tests from the repository');
    root = path.dirname(root);
  }
  if (qemuPrerequisiteProblems({ firmware: 'uefi' }).length > 0)
    await execFileP('bash', [path.join(root, 'hack', 'install-packages.sh')], { timeout: 600_000 });
  const { stdout } = await execFileP('bash', [path.join(root, 'hack', 'build-vm-artefacts.sh')], {
    timeout: 600_000,
  });
  return stdout.trim().split('\n').at(-1) ?? '';
}

test('vmedia: a UEFI VM without NIC boot ROM boots the inserted ISO, static ip=, /bootstate; no CD after eject', {
  timeout: 420_000,
}, async () => {
  const dir = await vmArtefacts();
  const standin = await startStandin({ mode: () => 'os' });
  const identity = qemuHostIdentity(7);
  const uuid = identity.uuid;
  const token = standin.tokenFor(uuid);
  const port = new URL(standin.url).port;
  const guestBase = `http://10.0.2.2:${port}`;
  const uki = new UkiBuilder();
  const isos = new VirtualMediaIsoBuilder(uki);
  const cmdline = [
    'console=ttyS0',
    'metal.mode=os',
    `metal.uuid=${uuid}`,
    `metal.registry=${guestBase}`,
    `metal.token=${token}`,
    `ignition.config.url=${guestBase}/ignition/${uuid}?token=${token}`,
    'ip=10.0.2.15::10.0.2.2:255.255.255.0::eth0:off',
  ].join(' ');
  const iso = await isos.get('qemu/1', {
    kernel: path.join(dir, 'vmlinuz'),
    initrd: path.join(dir, 'initramfs.cpio.gz'),
    cmdline,
  });
  const data = readFileSync(iso.path);
  const ranges: string[] = [];
  const isoServer = createServer((req, res) => {
    const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
    if (!m) return void res.writeHead(200, { 'content-length': data.length }).end(data);
    ranges.push(req.headers.range!);
    const [a, b] = [Number(m[1]), Math.min(Number(m[2]), data.length - 1)];
    res.writeHead(206, { 'content-range': `bytes ${a}-${b}/${data.length}` }).end(data.subarray(a, b + 1));
  });
  await new Promise<void>((ok) => isoServer.listen(0, '127.0.0.1', ok));
  const imageUrl = `http://127.0.0.1:${(isoServer.address() as AddressInfo).port}/vmedia/${uuid}/1/cap/boot.iso`;
  const host = new QemuHost(identity, { bootServerUrl: standin.url, firmware: 'uefi', noneBoot: 'disk' });
  const vbmc = await startVirtualBmc({ hosts: [host], username: 'admin', password: 'secret' });
  const bmc = new RedfishBMC({ endpoint: vbmc.url, username: 'admin', password: 'secret' });
  const systemUri = vbmc.systems[0]!.uri;
  try {
    const inserted = await bmc.insertMedia(systemUri, imageUrl);
    assert.equal(inserted.inserted, true);
    assert.ok(ranges.length >= 2, `the BMC read the ISO in ranges (${ranges.length})`);
    await bmc.setBootOverride(systemUri, { target: 'Cd', enabled: 'Once' });
    await bmc.powerOn(systemUri);
    try {
      await standin.waitForAccepted(1, 300_000);
    } catch (err) {
      console.log(await host.diagnosis(60));
      throw err;
    }
    assert.deepEqual(
      standin.callbacks.map((c) => [c.path, c.status, c.authorization]),
      [['/bootstate', 200, `Bearer ${token}`]],
    );
    assert.deepEqual(standin.ipxePaths, [], 'no iPXE script was fetched');
    assert.deepEqual(standin.ignitionFetched, [uuid]);
    // The console reaches the log file behind the guest's network traffic: wait for the last line.
    let serial = '';
    for (const end = Date.now() + 60_000; Date.now() < end; ) {
      serial = await fs.readFile(host.serialLogPath, 'utf8');
      if (/boot state reported/.test(serial)) break;
      await new Promise((ok) => setTimeout(ok, 500));
    }
    assert.match(serial, /BdsDxe: starting Boot\d+ "UEFI QEMU DVD-ROM/);
    assert.match(serial, /static address on eth0: 10\.0\.2\.15\/24 gateway 10\.0\.2\.2 \(no DHCP\)/);
    assert.doesNotMatch(serial, /with DHCP/);
    assert.doesNotMatch(host.qemuArgs('Cd').join(' '), /romfile=\//, 'the NIC has no boot ROM');

    // Eject (as the manager does after completion); the next power-on boots no CD.
    const out = await bmc.ejectMedia(systemUri);
    assert.equal(out.ejected, true);
    assert.equal(host.insertedMedia, undefined);
    await bmc.forceOff(systemUri);
    const before = (await fs.readFile(host.serialLogPath, 'utf8')).length;
    await bmc.powerOn(systemUri);
    await new Promise((ok) => setTimeout(ok, 15_000));
    const after = (await fs.readFile(host.serialLogPath, 'utf8')).slice(before);
    assert.doesNotMatch(after, /DVD-ROM|metal: init started/, 'no CD boot after the eject');
    assert.equal(standin.callbacks.length, 1);
  } finally {
    await bmc.close();
    await vbmc.close();
    await new Promise<void>((ok) => isoServer.close(() => ok()));
    isos.close();
    uki.close();
    await standin.close();
  }
});
