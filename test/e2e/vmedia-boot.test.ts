/**
 * End to end, virtual media on a bridged test network with **no DHCP server** (no dnsmasq) and no NIC
 * boot ROM: the stack makes the VM's Server by hand with a static address (`metal.ironcore.dev/boot-ip`)
 * before its BMC, and the manager runs with `--default-boot-method VirtualMedia`, so discovery and the
 * claim both boot the attempt's ISO: the manager inserts it through the virtual BMC (which reads it from
 * the boot server's capability URL in Range requests) and sets the one-time `Cd` override; OVMF boots
 * the DVD-ROM, the guest configures the static address from `ip=` on the ISO's command line, never runs
 * DHCP, registers, and later fetches its ignition and posts `/bootstate` from that address:
 * `Booted=True` with VirtualMediaFetched, IgnitionDataFetched, BootStateReceived. The CD is ejected
 * after completion and a power cycle boots the disk (no insert, no `Cd` override, OVMF does not start
 * the DVD-ROM); another attempt's ISO URL gets 403 and no ISO bytes.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { STATIC_IP_ANNOTATION } from '../../src/api/v1alpha1/boot-method.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { LocalStack } from '../../src/localstack/local-stack.js';
import { Resources } from '../../src/runtime/resource.js';
import type { QemuHost } from '../../src/virtualbmc/qemu.js';
import { assertBootedAttempt1, deleteClaim, discoverSettled, ensureBooted } from './scenario.js';

let stack: LocalStack;
let dir: string;
let server: Server;
const spec = () => ({ image: stack.images.osImage, bootPolicy: 'NetBootOnce', bootMethod: 'VirtualMedia' });

describe('end to end: virtual media boot (vmedia) on a bridged test network with no DHCP server', {
  timeout: 15 * 60_000,
}, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'metal-e2e-vm-'));
    stack = await LocalStack.start({
      servers: 1,
      backend: 'qemu',
      network: 'bridge',
      firmware: 'uefi',
      bootMethod: 'vmedia',
      dhcp: false,
      dir,
      managerArgs: ['--boot-timeout=240s', '--discovery-timeout=240s'],
      progress: (l) => console.log(`# ${l}`),
    });
    [server] = (await discoverSettled(stack, 1, 400_000)) as [Server];
  });
  after(async () => {
    if (stack && server) await deleteClaim(stack, 'vm', server.metadata.name!).catch(() => undefined);
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('discovery and a VirtualMedia claim boot the ISO over a static address, no DHCP; ejected after; disk on power cycle; other attempts 403', async () => {
    const net = stack.network!;
    const name = server.metadata.name!;
    const staticIp = net.staticAddress(0);
    assert.equal(net.dhcp, false, 'no dnsmasq on the test network');
    assert.equal(server.metadata.annotations?.[STATIC_IP_ANNOTATION], net.staticIpArg(0));
    // Discovery booted the probe ISO with the static address (the console from the start).
    const discoveryLog = readFileSync((stack.hosts[0] as QemuHost).serialLogPath, 'utf8');
    assert.match(discoveryLog, /BdsDxe: starting Boot\d+ "UEFI QEMU DVD-ROM/);
    assert.match(discoveryLog, new RegExp(`static address on eth0: ${staticIp.replace(/\./g, '\\.')}/24`));
    assert.doesNotMatch(discoveryLog, /with DHCP/, 'discovery ran no DHCP');
    assert.doesNotMatch(
      discoveryLog,
      /iPXE \(https?:\/\/ipxe\.org\)|iPXE initialising/,
      'no NIC boot ROM ran',
    );
    assert.ok(
      stack.vbmc.requests().every((r) => !/"(Pxe|UefiHttp)"/.test(JSON.stringify(r.body ?? {}))),
      'no network-boot override at the BMC',
    );
    const host = stack.hosts[0] as QemuHost;
    const serialBefore = readFileSync(host.serialLogPath, 'utf8').length;
    const since = Date.now();
    await ensureBooted(stack, 'vm', name, spec(), 400_000);
    const sbc = await assertBootedAttempt1(stack, 'vm', name, [
      'VirtualMediaFetched',
      'IgnitionDataFetched',
      'BootStateReceived',
    ]);
    assert.equal(sbc.spec.bootMethod, 'VirtualMedia');
    // The console reaches the log file behind the guest's network traffic: wait for the last line.
    let serial = '';
    await waitUntil('the boot-state line on the console', 60_000, () => {
      serial = readFileSync(host.serialLogPath, 'utf8').slice(serialBefore);
      return /boot state reported/.test(serial);
    });
    assert.match(serial, /BdsDxe: starting Boot\d+ "UEFI QEMU DVD-ROM/);
    assert.match(serial, new RegExp(`static address on eth0: ${staticIp.replace(/\./g, '\\.')}/24`));
    assert.doesNotMatch(serial, /with DHCP/, 'the claim boot ran no DHCP');
    const inserts = stack.vbmc
      .requests()
      .filter((r) => r.at >= since && r.method === 'POST' && r.path.endsWith('VirtualMedia.InsertMedia'));
    assert.equal(inserts.length, 1);
    const image = (inserts[0]!.body as { Image: string }).Image;
    await waitUntil('media ejected after completion', 60_000, () => host.insertedMedia === undefined);
    // Another attempt's URL: 403, nothing streamed.
    const other = image.replace(/\/1\/([A-Za-z0-9_-]+)\/boot\.iso$/, '/2/$1/boot.iso');
    const res = await request(other);
    const body = Buffer.from(await res.body.arrayBuffer());
    assert.equal(res.statusCode, 403);
    assert.ok(body.length < 1024 && !body.includes('CD001'));

    // NetBootOnce after completion: a power cycle boots the disk, no media inserted, no Cd override.
    const power = async (want: 'On' | 'Off') => {
      await stack.client.mergePatch(Resources.ServerClaim, 'vm', 'default', { spec: { power: want } });
      await waitUntilAsync(`server ${want}`, 120_000, async () => {
        const x = await stack.client.get<Server>(Resources.Server, name);
        return x?.status?.powerState === want;
      });
    };
    await power('Off');
    const cycleFrom = readFileSync(host.serialLogPath, 'utf8').length;
    const cycleSince = Date.now();
    await power('On');
    let firstBoot = '';
    await waitUntil('the firmware picks a boot option after the power cycle', 120_000, () => {
      const tail = readFileSync(host.serialLogPath, 'utf8').slice(cycleFrom);
      firstBoot = /BdsDxe: [^\r\n]*Boot\d+[^\r\n]*/.exec(tail)?.[0] ?? '';
      return firstBoot !== '';
    });
    assert.doesNotMatch(firstBoot, /DVD-ROM/, `after completion the firmware boots the disk: ${firstBoot}`);
    const later = stack.vbmc.requests().filter((r) => r.at >= cycleSince);
    assert.ok(!later.some((r) => r.path.endsWith('VirtualMedia.InsertMedia')), 'no insert after completion');
    assert.ok(
      !later.some((r) => r.method === 'PATCH' && /"Cd"/.test(JSON.stringify(r.body ?? {}))),
      'no Cd override',
    );
  });
});

async function waitUntil(what: string, ms: number, f: () => boolean): Promise<void> {
  const end = Date.now() + ms;
  while (!f()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((ok) => setTimeout(ok, 200));
  }
}

async function waitUntilAsync(what: string, ms: number, f: () => Promise<boolean>): Promise<void> {
  const end = Date.now() + ms;
  while (!(await f())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((ok) => setTimeout(ok, 500));
  }
}
