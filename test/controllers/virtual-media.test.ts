/**
 * The `VirtualMedia` boot method against the real API server and the virtual BMC (sim hosts): the
 * manager inserts the attempt's ISO (eject first when media is present) and sets a one-time `Cd`
 * override; the BMC fetches the ISO from the boot server through the attempt's capability URL
 * (Range reads); the sim host boots it without ever fetching `/ipxe`; the claim is Booted, and the
 * CD is ejected after completion. Another attempt's URL is refused with 403 and no body; an ISO the
 * BMC cannot fetch fails the insert at once with a reason, and the boot is retried.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { request } from 'undici';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { attemptSignals } from '../../src/controllers/common/boot-configuration.js';
import { Resources } from '../../src/runtime/resource.js';
import { callbackTokenOf } from '../harness/callback-token.js';
import { stablePorts } from '../harness/ports.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  API,
  availableServers,
  cond,
  createClaim,
  eventually,
  getClaim,
  getSbc,
  hostOf,
  OS_IMAGE,
  overridesSent,
  PROBE_IMAGE,
  type Stack,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

const BROKEN_IMAGE = 'test/broken:1.0';

/**
 * The fixture's two images plus one whose "kernel" is a folder: the boot configuration is Ready (the
 * path exists) but the boot server cannot build its ISO, so the BMC cannot fetch it.
 */
function catalogWithBrokenImage(): string {
  const dir = mkdtempSync(join(tmpdir(), 'metal-vmedia-'));
  writeFileSync(join(dir, 'vmlinuz'), randomBytes(64 * 1024));
  writeFileSync(join(dir, 'initrd'), randomBytes(16 * 1024));
  mkdirSync(join(dir, 'not-a-kernel'));
  const entry = (kernel: string, mode: string) =>
    `    kernel: ${kernel}\n    initrd: ${join(dir, 'initrd')}\n    cmdline: console=ttyS0\n    mode: ${mode}\n`;
  const file = join(dir, 'images.yaml');
  writeFileSync(
    file,
    `images:\n  ${OS_IMAGE}:\n${entry(join(dir, 'vmlinuz'), 'os')}  ${PROBE_IMAGE}:\n${entry(join(dir, 'vmlinuz'), 'probe')}  ${BROKEN_IMAGE}:\n${entry(join(dir, 'not-a-kernel'), 'os')}`,
  );
  return file;
}

function vmediaClaim(s: Stack, name: string, server: string, image = OS_IMAGE): Promise<ServerClaim> {
  return s.client.create<ServerClaim>(Resources.ServerClaim, {
    apiVersion: API,
    kind: 'ServerClaim',
    metadata: { name, namespace: s.ns, labels: s.labels },
    spec: {
      power: 'On',
      image,
      serverRef: { name: server },
      bootMethod: 'VirtualMedia',
      bootPolicy: 'NetBootAlways',
      bootCompletion: { timeout: '30s' },
    },
  });
}

/** The virtual BMC's accepted InsertMedia / EjectMedia / boot PATCH requests of the stack's only system, in order. */
function mediaRequests(s: Stack): Array<{ what: string; body: unknown }> {
  return s.vbmc
    .requests()
    .filter((r) => r.status > 0 && r.status < 300 && (r.method === 'POST' || r.method === 'PATCH'))
    .filter((r) => /VirtualMedia\.(Insert|Eject)Media$/.test(r.path) || r.method === 'PATCH')
    .map((r) => ({ what: r.method === 'PATCH' ? 'PATCH' : (r.path.split('.').pop() ?? ''), body: r.body }));
}

async function fetchIso(url: string, range?: string) {
  const res = await request(url, { method: 'GET', headers: range ? { range } : {} });
  const body = Buffer.from(await res.body.arrayBuffer());
  return { status: res.statusCode, headers: res.headers, body };
}

test('VirtualMedia: ISO by capability URL, Cd once, Booted without /ipxe, ejected after; other attempts get 403', {
  timeout: 120_000,
}, async () => {
  // A fixed boot-server port: the URLs the manager hands the BMC name it (with port 0 they could not).
  const [bootPort] = await stablePorts(1);
  await withStack(
    'vmedia',
    {
      hosts: 1,
      args: ['--image-catalog', catalogWithBrokenImage(), '--bootserver-addr', `127.0.0.1:${bootPort}`],
    },
    async (s) => {
      const [srv] = await availableServers(s, 1);
      const sys = s.vbmc.systems[0]!;
      s.vbmc.clearRequests();
      const host = hostOf(s, srv!);
      await vmediaClaim(s, 'vm', srv!.metadata.name!);
      const booted = await eventually('Booted=True', 45_000, async () => {
        const c = await getClaim(s, 'vm');
        return cond(c, 'Booted')?.status === 'True' ? c : undefined;
      });
      assert.equal(cond(booted, 'Booted')?.reason, 'BootCompleted');
      const sbc = (await getSbc(s, 'vm'))!;
      const attempt = sbc.spec.bootAttempt ?? 1;
      assert.deepEqual(
        attemptSignals(sbc, ['VirtualMediaFetched', 'IgnitionDataFetched', 'BootStateReceived']).missing,
        [],
      );
      assert.deepEqual(
        attemptSignals(sbc, ['IPXEScriptFetched']).arrived,
        [],
        'the claim attempt never fetched an iPXE script',
      );
      assert.equal(host.lastBoot?.device, 'Cd');
      assert.equal(host.lastBoot?.phase, 'up');

      const seen = mediaRequests(s);
      const insert = seen.find((r) => r.what === 'InsertMedia');
      assert.ok(insert, `an InsertMedia was posted: ${JSON.stringify(seen)}`);
      const image = (insert.body as { Image: string }).Image;
      assert.match(
        image,
        new RegExp(`/vmedia/${srv!.spec.systemUUID}/${attempt}/[A-Za-z0-9_-]{43}/boot\\.iso$`),
      );
      assert.deepEqual(insert.body, { Image: image, Inserted: true, WriteProtected: true });
      const cdPatch = seen.findIndex((r) => r.what === 'PATCH' && JSON.stringify(r.body).includes('"Cd"'));
      assert.ok(cdPatch > seen.indexOf(insert), 'the Cd override is set after the insert');
      assert.deepEqual(
        (seen[cdPatch]!.body as { Boot: Record<string, string> }).Boot.BootSourceOverrideEnabled,
        'Once',
      );
      const token = (await callbackTokenOf(s.client, s.ns, sbc))!;
      assert.ok(token.length > 20 && !image.includes(token), 'no token in the URL');

      // Ejected once the attempt completed: the host's CD is empty and Redfish says so.
      await eventually('media ejected after completion', 15_000, () => host.insertedMedia === undefined);
      const device = await request(`${s.vbmc.url}${sys.uri}/VirtualMedia/CD1`, {
        headers: { authorization: `Basic ${Buffer.from('admin:secret').toString('base64')}` },
      });
      const doc = (await device.body.json()) as Record<string, unknown>;
      assert.equal(doc['Inserted'], false);
      assert.equal(doc['Image'], null);
      assert.ok(mediaRequests(s).some((r) => r.what === 'EjectMedia'));

      // The BMC reads in ranges: 206 with the asked bytes.
      const part = await fetchIso(image, 'bytes=32768-32773');
      assert.equal(part.status, 206);
      assert.equal(
        part.body.toString('latin1', 1, 6),
        'CD001',
        'ISO 9660 primary volume descriptor at sector 16',
      );
      assert.match(String(part.headers['content-range']), /^bytes 32768-32773\/\d+$/);
      assert.equal(part.headers['accept-ranges'], 'bytes');
      const whole = await fetchIso(image);
      assert.equal(whole.status, 200);
      assert.ok(whole.body.includes(`metal.attempt=${attempt}`), 'the command line carries the attempt');
      assert.equal((await fetchIso(image, `bytes=${whole.body.length}-`)).status, 416);

      // Another attempt's URL, or a guessed capability: 403 with nothing streamed.
      const next = image.replace(`/${attempt}/`, `/${attempt + 1}/`);
      const forged = image.replace(/\/([A-Za-z0-9_-]{43})\/boot\.iso$/, `/${'A'.repeat(43)}/boot.iso`);
      for (const url of [next, forged]) {
        const r = await fetchIso(url);
        assert.equal(r.status, 403, url);
        assert.ok(!r.body.includes('CD001') && r.body.length < 1024, 'no ISO bytes');
        assert.equal(JSON.parse(r.body.toString()).reason, 'CapabilityRejected');
      }

      // A new attempt (power off, on): new token, new URL; the earlier attempt's URL is refused.
      await s.client.mergePatch(Resources.ServerClaim, 'vm', s.ns, { spec: { power: 'Off' } });
      await eventually('host off', 15_000, () => host.powerState() === 'Off');
      s.vbmc.clearRequests();
      await s.client.mergePatch(Resources.ServerClaim, 'vm', s.ns, { spec: { power: 'On' } });
      await eventually('Booted=True in a later attempt', 45_000, async () => {
        const c = await getClaim(s, 'vm');
        const b = await getSbc(s, 'vm');
        return cond(c, 'Booted')?.status === 'True' && (b?.spec.bootAttempt ?? 1) > attempt;
      });
      const second = mediaRequests(s).find((r) => r.what === 'InsertMedia');
      assert.ok(second);
      assert.notEqual((second.body as { Image: string }).Image, image);
      const old = await fetchIso(image);
      assert.equal(old.status, 403, 'the earlier attempt’s URL is refused');
      assert.ok(old.body.length < 1024);
      await s.client.delete(Resources.ServerClaim, 'vm', s.ns);
      await eventually('claim gone', 20_000, async () => !(await getClaim(s, 'vm')));

      // An ISO the BMC cannot fetch (the boot server cannot build it): the insert fails at once, with a
      // reason, nothing is powered on, and it is tried again.
      const [again] = await availableServers(s, 1, 30_000);
      s.vbmc.clearRequests();
      const bootsBefore = host.bootCount;
      await vmediaClaim(s, 'broken', again!.metadata.name!, BROKEN_IMAGE);
      const failing = await eventually('the refused insert on the claim', 20_000, async () => {
        const c = await getClaim(s, 'broken');
        const m = cond(c, 'Booted')?.message ?? '';
        return m.includes('VirtualMediaInsertRefused') ? m : undefined;
      });
      assert.match(failing, /cannot be read: .*HTTP 503/);
      const refusals = () =>
        s.vbmc.requests().filter((r) => r.path.endsWith('VirtualMedia.InsertMedia') && r.status === 400)
          .length;
      await eventually('the insert is retried', 20_000, () => refusals() >= 2);
      // ... after a backoff (5 s, then 10 s), not in a hot loop.
      await new Promise((ok) => setTimeout(ok, 4_000));
      assert.ok(refusals() <= 3, `${refusals()} refused inserts within ~10 s`);
      assert.equal(host.bootCount, bootsBefore, 'nothing booted');
      assert.equal(
        s.vbmc.requests().filter((r) => r.path.endsWith('ComputerSystem.Reset')).length,
        0,
        'no power-on without media',
      );
    },
  );
});

const CLEANUP_IMAGE = 'test/cleanup:1.0';

/** The fixture's two images plus a cleanup image (an `os`-mode agent that posts /bootstate). */
function catalogWithCleanupImage(): string {
  const dir = mkdtempSync(join(tmpdir(), 'metal-vmedia-'));
  writeFileSync(join(dir, 'vmlinuz'), randomBytes(64 * 1024));
  writeFileSync(join(dir, 'initrd'), randomBytes(16 * 1024));
  const entry = (mode: string) =>
    `    kernel: ${join(dir, 'vmlinuz')}\n    initrd: ${join(dir, 'initrd')}\n    cmdline: console=ttyS0\n    mode: ${mode}\n`;
  const file = join(dir, 'images.yaml');
  writeFileSync(
    file,
    `images:\n  ${OS_IMAGE}:\n${entry('os')}  ${PROBE_IMAGE}:\n${entry('probe')}  ${CLEANUP_IMAGE}:\n${entry('os')}`,
  );
  return file;
}

test('--default-boot-method VirtualMedia: discovery and the cleanup boot insert their ISO, Cd once, no PXE; ejected after', {
  timeout: 120_000,
}, async () => {
  const [bootPort] = await stablePorts(1);
  await withStack(
    'vmedia-mgr',
    {
      hosts: 1,
      args: [
        '--image-catalog',
        catalogWithCleanupImage(),
        '--bootserver-addr',
        `127.0.0.1:${bootPort}`,
        '--default-boot-method',
        'VirtualMedia',
        '--cleanup-image',
        CLEANUP_IMAGE,
        '--cleanup-timeout',
        '20s',
      ],
    },
    async (s) => {
      const [srv] = await availableServers(s, 1);
      const uuid = srv!.spec.systemUUID;
      const host = hostOf(s, srv!);
      // Discovery: one boot, from the virtual CD, of the probe; the BMC was told Cd, never Pxe.
      assert.equal(host.bootCount, 1, 'discovery booted once');
      assert.equal(host.lastBoot?.device, 'Cd');
      assert.equal(host.lastBoot?.mode, 'probe');
      assert.ok(srv!.status?.registration, 'the probe registered');
      const inserts = () =>
        mediaRequests(s)
          .filter((r) => r.what === 'InsertMedia')
          .map((r) => (r.body as { Image: string }).Image);
      const discoveryInserts = inserts();
      assert.equal(discoveryInserts.length, 1, JSON.stringify(mediaRequests(s)));
      assert.match(discoveryInserts[0]!, new RegExp(`/vmedia/${uuid}/1/[A-Za-z0-9_-]{43}/boot\\.iso$`));
      const targets = () => overridesSent(s, uuid).map((b) => b['BootSourceOverrideTarget']);
      assert.deepEqual(targets(), ['Cd'], 'one Cd override, no Pxe');
      assert.equal(overridesSent(s, uuid)[0]!['BootSourceOverrideEnabled'], 'Once');
      await eventually('media ejected after discovery', 15_000, () => host.insertedMedia === undefined);

      // A tenant (claims default to VirtualMedia too), then the release: the cleanup boot by CD.
      await createClaim(s, 'tenant', { serverRef: srv!.metadata.name! });
      await eventually(
        'tenant Booted',
        30_000,
        async () => cond(await getClaim(s, 'tenant'), 'Booted')?.status === 'True',
      );
      await eventually('tenant media ejected', 15_000, () => host.insertedMedia === undefined);
      const before = {
        boots: host.bootCount,
        media: inserts().length,
        overrides: overridesSent(s, uuid).length,
      };
      await s.client.delete(Resources.ServerClaim, 'tenant', s.ns);
      const cleaned = await eventually('Cleaned=True', 40_000, async () => {
        const x = await s.client.get<Server>(Resources.Server, srv!.metadata.name!);
        return cond(x, 'Cleaned')?.status === 'True' ? x : undefined;
      });
      assert.equal(cleaned.status?.state, 'Available');
      assert.equal(host.bootCount, before.boots + 1, 'one cleanup boot');
      assert.equal(host.lastBoot?.device, 'Cd');
      const cleanupMedia = inserts().slice(before.media);
      assert.equal(cleanupMedia.length, 1, JSON.stringify(mediaRequests(s)));
      assert.match(cleanupMedia[0]!, new RegExp(`/vmedia/${uuid}/\\d+/[A-Za-z0-9_-]{43}/boot\\.iso$`));
      // One override PATCH; the BMC client leaves out a target already set (Cd since the tenant's boot).
      const cleanupOverrides = overridesSent(s, uuid).slice(before.overrides);
      assert.equal(cleanupOverrides.length, 1, JSON.stringify(cleanupOverrides));
      assert.equal(cleanupOverrides[0]!['BootSourceOverrideEnabled'], 'Once');
      assert.ok(
        [undefined, 'Cd'].includes(cleanupOverrides[0]!['BootSourceOverrideTarget']),
        `the cleanup boot: Cd, no Pxe: ${JSON.stringify(cleanupOverrides)}`,
      );
      await eventually('media ejected after the cleanup', 15_000, () => host.insertedMedia === undefined);
    },
  );
});
