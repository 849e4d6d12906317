/**
 * End to end, virtual media on the bridged test network: a UEFI VM discovered over iPXE is claimed with
 * `bootMethod: VirtualMedia` and the OCI image of the stack's local registry; its Server carries a
 * static address (`metal.ironcore.dev/boot-ip`) outside the DHCP range. The manager inserts the
 * attempt's ISO through the virtual BMC (which reads it from the boot server's capability URL in
 * Range requests) and sets the one-time `Cd` override; OVMF boots the DVD-ROM (the NIC has no boot
 * ROM), the guest never runs DHCP, fetches its ignition and posts `/bootstate` from the static
 * address: `Booted=True` with VirtualMediaFetched, IgnitionDataFetched, BootStateReceived. The CD is
 * ejected after completion; another attempt's ISO URL gets 403 and no ISO bytes.
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

describe('end to end: virtual media boot (vmedia) without DHCP on the bridged test network', {
  timeout: 15 * 60_000,
}, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'metal-e2e-vm-'));
    stack = await LocalStack.start({
      servers: 1,
      backend: 'qemu',
      network: 'bridge',
      firmware: 'uefi',
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

  it('a VirtualMedia claim boots the ISO to Booted=True over a static address; ejected after; other attempts 403', async () => {
    const net = stack.network!;
    const name = server.metadata.name!;
    const staticIp = net.hostAddress.replace(/\.1$/, '.40'); // outside the DHCP range
    await stack.client.mergePatch(Resources.Server, name, undefined, {
      metadata: {
        annotations: { [STATIC_IP_ANNOTATION]: `${staticIp}::${net.hostAddress}:255.255.255.0::eth0:off` },
      },
    });
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
  });
});

async function waitUntil(what: string, ms: number, f: () => boolean): Promise<void> {
  const end = Date.now() + ms;
  while (!f()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((ok) => setTimeout(ok, 200));
  }
}
