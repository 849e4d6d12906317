/**
 * End to end, UEFI HTTP boot on the bridged test network: a UEFI VM (OVMF) discovered over iPXE is
 * claimed with `bootMethod: HTTPBoot` and an OCI image of the local registry the stack runs. The
 * claim controller sets the BMC override `UefiHttp` with `Boot.HttpBootUri` at the attempt's boot
 * file; the virtual BMC makes the firmware fetch that URI (dnsmasq offers it to the VM's MAC);
 * OVMF's HTTP boot client downloads the UKI the boot server built from the image's kernel and
 * initramfs layers (pulled through its blob cache) with the attempt's command line; the booted OS
 * fetches its ignition and posts `/bootstate`. A fetch of the boot file from another address while the
 * attempt is live gets 403 and no token, and under
 * NetBootOnce a later power-on boots from disk. Each test establishes the claim it needs
 * (scenario.ts), so any test runs alone.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { httpBootFileUrl } from '../../src/api/v1alpha1/boot-method.js';
import { API_VERSION } from '../../src/api/v1alpha1/schema.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import { tokenSubject } from '../../src/bootauth/callback-token.js';
import { waitFor } from '../../src/localstack/control-plane.js';
import { LocalStack } from '../../src/localstack/local-stack.js';
import type { TestNetwork } from '../../src/localstack/test-network.js';
import { Resources } from '../../src/runtime/resource.js';
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
let net: TestNetwork;
let dir: string;
let server: Server;
/** The claim the tests need Booted: HTTP boot of the OCI image in the stack's local registry. */
const hbSpec = () => ({ image: stack.images.osImage, bootPolicy: 'NetBootOnce', bootMethod: 'HTTPBoot' });

describe('end to end: UEFI HTTP boot of a UKI on the bridged test network', { timeout: 15 * 60_000 }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'metal-e2e-hb-'));
    stack = await LocalStack.start({
      servers: 1,
      backend: 'qemu',
      network: 'bridge',
      firmware: 'uefi',
      dir,
      managerArgs: ['--boot-timeout=240s', '--discovery-timeout=240s'],
      progress: (l) => console.log(`# ${l}`),
    });
    net = stack.network!;
    [server] = (await discoverSettled(stack, 1, 400_000)) as [Server];
  });
  after(async () => {
    if (stack && server) await deleteClaim(stack, 'hb', server.metadata.name!).catch(() => undefined);
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('an HTTPBoot claim of an OCI image boots the UKI to Booted=True with all three signals for attempt 1', async () => {
    const name = server.metadata.name!;
    const image = stack.images.osImage;
    assert.match(image, /^[^/]+:\d+\/metal\//, 'an OCI reference into the local registry');
    await deleteClaim(stack, 'hb', name);
    const since = Date.now();
    await ensureBooted(stack, 'hb', name, hbSpec(), 400_000);
    const sbc = await assertBootedAttempt1(stack, 'hb', name, [
      'HTTPBootFileFetched',
      'IgnitionDataFetched',
      'BootStateReceived',
    ]);
    assert.equal(sbc.spec.bootMethod, 'HTTPBoot', 'copied from the claim');
    assert.equal(sbc.status?.image?.reference, image, 'resolved as an OCI image');
    assert.match(sbc.status?.image?.digest ?? '', /^sha256:/);
    assert.ok(
      sbc.status?.image?.kernel && sbc.status.image.initrd,
      'kernel and initrd layers of the attempt',
    );
    const lease = net.leases().find((l) => l.mac === stack.hosts[0]!.identity.macAddress)!;
    const served = managerLines(stack).filter(
      (l) => l.msg === 'HTTP boot file served' && l.systemUUID === server.spec.systemUUID,
    );
    assert.deepEqual([...new Set(served.map((l) => l.client))], [lease.ip], "served to the VM's own address");
    const patches = stack.vbmc
      .requests()
      .filter(
        (r) => r.at >= since && r.method === 'PATCH' && JSON.stringify(r.body ?? {}).includes('"UefiHttp"'),
      );
    assert.ok(patches.length >= 1, 'UefiHttp override sent to the BMC');
    assert.match(JSON.stringify(patches[0]!.body), /"HttpBootUri":"http:\/\/10\.251\.\d+\.1:\d+\/httpboot\//);
  });

  it('while the attempt is live, the boot file fetched from another address gets 403 and no token', async () => {
    // Checked during an attempt, when the VM's own address is being served the token: after the
    // claim completed nobody gets one, so a refusal then would prove nothing. A fresh claim; the
    // window is the VM's kernel and ignition boot between the boot-file fetch and /bootstate.
    const name = server.metadata.name!;
    await deleteClaim(stack, 'hb', name);
    await stack.client.create(Resources.ServerClaim, {
      apiVersion: API_VERSION,
      kind: 'ServerClaim',
      metadata: { name: 'hb', namespace: NS },
      spec: { power: 'On', serverRef: { name }, ...hbSpec() },
    });
    const isTrue = (conds: { type: string; status: string }[] | undefined, type: string) =>
      conds?.some((c) => c.type === type && c.status === 'True') ?? false;
    let sbc: ServerBootConfiguration | undefined;
    await waitFor('the VM fetched its boot file (attempt live)', 400_000, async () => {
      sbc = await sbcOf(stack, name);
      return isTrue(sbc?.status?.conditions, 'HTTPBootFileFetched');
    });
    const token = stack.callbackKey.tokenFor(tokenSubject(sbc!)!);
    const other = net.hostAddress.replace(/\.1$/, '.40'); // outside the DHCP range: nobody's
    const url = httpBootFileUrl(net.bootServerUrl, server.spec.systemUUID, sbc!.spec.bootAttempt ?? 1);
    const res = net.requestFrom(other, url);
    // Still live after the refusal: the claim had not completed while it was answered.
    const after = await getClaim(stack, 'hb');
    assert.ok(
      !isTrue(after.status?.conditions, 'Booted'),
      `the claim completed before the check ran (the window was missed): ${JSON.stringify(after.status)}`,
    );
    assert.equal(res.status, 403, res.body);
    assert.match(res.body, /UnknownClient/);
    assert.ok(!res.body.includes(token), 'no token in the answer');
    const refused = managerLines(stack).filter((l) => l.client === other && /refused/.test(l.msg ?? ''));
    assert.ok(refused.length >= 1, 'the refusal is logged with the address');
    // The attempt completes for the VM itself (and leaves the claim Booted for the next test).
    await ensureBooted(stack, 'hb', name, hbSpec(), 400_000);
  });

  it('NetBootOnce under UEFI HTTP boot: after Booted, a power-on boots from disk', async () => {
    await ensureBooted(stack, 'hb', server.metadata.name!, hbSpec(), 400_000);
    await assertNetBootOnceBootsFromDisk(stack, 'hb', server);
  });
});
