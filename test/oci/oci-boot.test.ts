/**
 * OCI images end to end below QEMU: the manager (controllers + boot server) against the run's real
 * API server, simulated hosts, and real registries (Debian's docker-registry, the CNCF distribution
 * registry, on loopback; images pushed with the registry HTTP API by src/oci/push.ts).
 *
 * Covers: tag and digest references, an index with amd64 and arm64 entries, a gardenlinux-style
 * index with `cname` annotations and legacy media types, a pull secret (htpasswd registry), a
 * retag between two attempts, a corrupted blob (digest mismatch → transfer aborted), a blob the
 * registry announces longer than its descriptor (N10: 502, nothing streamed), a registry
 * that is down (SBC Error, no power action), layers streamed with Range, the capabilities of layer
 * URLs (403 without one, with another layer's or attempt's, or for an unknown UUID; 404 after a
 * NetBootOnce claim completed), and a squashfs layer on the kernel command line (`gl.url=`).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Agent, fetch as undiciFetch } from 'undici';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { layerCapability } from '../../src/bootauth/layer-capability.js';
import { OciRegistry } from '../../src/localstack/oci-registry.js';
import { PULL_SECRET_ANNOTATION } from '../../src/oci/boot-images.js';
import { type PushTarget, pushBootImage, pushIndex } from '../../src/oci/push.js';
import { Resources, type SecretObject } from '../../src/runtime/resource.js';
import {
  availableServers,
  cond,
  createClaim,
  currentToken,
  eventsFor,
  eventually,
  getClaim,
  getSbc,
  hostOf,
  pokeClaim,
  resets,
  resetsSent,
  type Stack,
  startStack,
} from '../controllers/fixture.js';
import { releaseSharedCluster } from '../harness/shared.js';

after(releaseSharedCluster);

const KERNEL = 'application/vnd.ironcore.image.kernel';
const INITRD = 'application/vnd.ironcore.image.initramfs';

function bootImage(tagline: string, commandLine?: string) {
  const kernel = Buffer.concat([Buffer.from(`kernel ${tagline}\n`), randomBytes(64 * 1024)]);
  const initrd = Buffer.concat([Buffer.from(`initrd ${tagline}\n`), randomBytes(16 * 1024)]);
  return {
    kernel,
    initrd,
    image: {
      layers: [
        { mediaType: KERNEL, data: kernel },
        { mediaType: INITRD, data: initrd },
      ],
      commandLine,
    },
  };
}

describe('OCI images from a real registry', { timeout: 240_000 }, () => {
  let s: Stack;
  let reg: OciRegistry;
  let authReg: OciRegistry;
  let downReg: OciRegistry;
  let pool: Server[];
  const take = () => pool.shift()!;

  before(async () => {
    reg = await new OciRegistry().start();
    authReg = await new OciRegistry({ users: { puller: 'pull-pass' } }).start();
    downReg = await new OciRegistry().start();
    const hosts = [reg.host, authReg.host, downReg.host].join(',');
    s = await startStack('oci', {
      hosts: 12,
      args: [
        '--allowed-registries',
        hosts,
        '--insecure-registries',
        hosts,
        '--image-cache-dir',
        mkdtempSync(join(tmpdir(), 'metal-oci-cache-')),
        // Sim hosts on a loaded machine may miss the fixture's 2 s; retries are the retag test's subject only.
        '--boot-timeout',
        '60s',
      ],
    });
    pool = await availableServers(s, 12, 60_000);
  });
  after(async () => {
    await s?.close();
    await Promise.all([reg?.stop(), authReg?.stop(), downReg?.stop()]);
  });

  const target = (r: OciRegistry, repository: string, auth?: PushTarget['auth']): PushTarget => ({
    registryUrl: r.url,
    repository,
    auth,
  });

  async function booted(name: string, timeoutMs = 30_000) {
    return eventually(`${name} Booted`, timeoutMs, async () => {
      const c = await getClaim(s, name);
      return cond(c, 'Booted')?.status === 'True' ? c : undefined;
    });
  }

  /** The attempt's callback token, derived with the manager's key. */
  async function tokenOf(claim: string): Promise<string> {
    return (await currentToken(s, claim))!.token;
  }

  /**
   * GET of layer `which` of `claim`'s server at `attempt`, with the capability the attempt's script
   * carries (computed here from the current token and the recorded digest; `cap` overrides it).
   */
  async function layer(
    claim: string,
    uuid: string,
    attempt: number,
    which: 'kernel' | 'initrd' | 'squashfs',
    o: { headers?: Record<string, string>; cap?: string } = {},
  ) {
    const digest = (await getSbc(s, claim))!.status!.image![which] ?? 'sha256:none';
    const cap = o.cap ?? layerCapability(await tokenOf(claim), { uuid, attempt, layer: which, digest });
    return fetch(`${s.op!.bootServerUrl}/oci/${uuid}/${attempt}/${which}?cap=${cap}`, {
      headers: o.headers ?? {},
    });
  }

  /** The URL after `key` in an iPXE script (`kernel`, `initrd --name initrd.img`, `gl.url=`). */
  function urlIn(script: string, key: string): string {
    const m = new RegExp(`${key.replace(/[.]/g, '\\.')}[ =]?(http\\S+)`).exec(script);
    assert.ok(m, `${key} URL in ${script}`);
    return m[1]!;
  }

  it('a tag reference: resolved once to its digest, recorded, booted; layers streamed, with Range', async () => {
    const img = bootImage('tag', 'console=ttyS0 metal.test=oci');
    const m = await pushBootImage(target(reg, 'metal/os'), img.image, '1.0');
    const srv = take();
    await createClaim(s, 'tag', { serverRef: srv.metadata.name!, image: `${reg.host}/metal/os:1.0` });
    await booted('tag');
    const sbc = (await getSbc(s, 'tag'))!;
    assert.equal(sbc.status?.image?.reference, `${reg.host}/metal/os:1.0`);
    assert.equal(sbc.status?.image?.digest, m.digest);
    assert.equal(sbc.status?.image?.commandLine, 'console=ttyS0 metal.test=oci');
    assert.equal(sbc.status?.image?.bootAttempt, 1);
    const uuid = srv.spec.systemUUID!;
    const script = await (await fetch(`${s.op!.bootServerUrl}/ipxe/${uuid}`)).text();
    const CAP = '\\?cap=[A-Za-z0-9_-]{43}';
    assert.match(
      script,
      new RegExp(
        `^kernel \\S+/oci/${uuid}/1/kernel${CAP} initrd=initrd.img metal\\.mode=os .* console=ttyS0 metal.test=oci`,
        'm',
      ),
    );
    assert.match(script, new RegExp(`^initrd --name initrd.img \\S+/oci/${uuid}/1/initrd${CAP}$`, 'm'));
    assert.doesNotMatch(script, /gl\.url=/, 'no squashfs layer, no live root');
    // The script's own URLs, as firmware fetches them.
    const k = await fetch(urlIn(script, 'kernel'));
    assert.equal(k.status, 200);
    assert.equal(k.headers.get('etag'), `"${sbc.status?.image?.kernel}"`);
    assert.ok(Buffer.from(await k.arrayBuffer()).equals(img.kernel));
    const part = await fetch(urlIn(script, 'initrd --name initrd.img'), { headers: { range: 'bytes=0-9' } });
    assert.equal(part.status, 206);
    assert.equal(part.headers.get('content-range'), `bytes 0-9/${img.initrd.length}`);
    assert.equal(Buffer.from(await part.arrayBuffer()).toString(), img.initrd.subarray(0, 10).toString());
    assert.equal((await layer('tag', uuid, 1, 'initrd')).status, 200, "the test's own capability");
  });

  it('layer URLs without the capability of their attempt and layer: 403, nothing streamed', async () => {
    const img = bootImage('capability');
    await pushBootImage(target(reg, 'metal/private-layers'), img.image, '1.0');
    const srv = take();
    const uuid = srv.spec.systemUUID!;
    await createClaim(s, 'cap', {
      serverRef: srv.metadata.name!,
      image: `${reg.host}/metal/private-layers:1.0`,
    });
    await booted('cap');
    const base = `${s.op!.bootServerUrl}/oci/${uuid}/1`;
    const kernelUrl = urlIn(await (await fetch(`${s.op!.bootServerUrl}/ipxe/${uuid}`)).text(), 'kernel');
    const kernelCap = new URL(kernelUrl).searchParams.get('cap')!;
    const refused = async (url: string, why: string) => {
      const res = await fetch(url);
      const body = await res.text();
      assert.equal(res.status, 403, why);
      assert.equal(JSON.parse(body).reason, 'InvalidCapability', why);
      assert.ok(!body.includes('kernel capability'), `${why}: no layer bytes`);
    };
    await refused(`${base}/kernel`, 'no capability (knowing the UUID is not enough)');
    await refused(`${base}/kernel?cap=${'A'.repeat(43)}`, 'a made-up capability');
    await refused(`${base}/initrd?cap=${kernelCap}`, "the kernel's capability for the initrd");
    await refused(`${base}/squashfs?cap=${kernelCap}`, 'a layer the image does not have');
    await refused(`${s.op!.bootServerUrl}/oci/${uuid}/2/kernel?cap=${kernelCap}`, 'another attempt');
    await refused(
      `${s.op!.bootServerUrl}/oci/00000000-0000-4000-8000-00000000beef/1/kernel?cap=${kernelCap}`,
      'an unknown UUID answers as a wrong capability (no probing)',
    );
    const forged = layerCapability('not-the-token', {
      uuid,
      attempt: 1,
      layer: 'kernel',
      digest: (await getSbc(s, 'cap'))!.status!.image!.kernel!,
    });
    await refused(`${base}/kernel?cap=${forged}`, 'an HMAC under another key');
    assert.equal((await fetch(kernelUrl)).status, 200, 'the script URL itself still works');
    // This test's own SBC (`cap`): the refused layer requests above resolved nothing again.
    const events = await eventsFor(s, 'ServerBootConfiguration', 'cap');
    assert.equal(
      events.filter((e) => e.reason === 'ImageResolved').length,
      1,
      'resolved once for the attempt',
    );
  });

  it('a NetBootOnce claim that completed: its layer URLs answer 404 Provisioned, nothing streamed', async () => {
    await pushBootImage(target(reg, 'metal/once'), bootImage('once').image, '1.0');
    const srv = take();
    const uuid = srv.spec.systemUUID!;
    await createClaim(s, 'once', {
      serverRef: srv.metadata.name!,
      image: `${reg.host}/metal/once:1.0`,
      bootPolicy: 'NetBootOnce',
    });
    await booted('once');
    const res = await eventually('Provisioned', 15_000, async () => {
      const r = await layer('once', uuid, 1, 'kernel');
      const body = await r.text();
      return r.status === 404 ? body : undefined;
    });
    assert.equal(JSON.parse(res).reason, 'Provisioned');
    assert.equal((await layer('once', uuid, 1, 'kernel', { cap: 'x'.repeat(43) })).status, 403);
  });

  it('a digest reference boots the manifest it names', async () => {
    const img = bootImage('digest');
    const m = await pushBootImage(target(reg, 'metal/pinned'), img.image);
    const srv = take();
    await createClaim(s, 'digest', {
      serverRef: srv.metadata.name!,
      image: `${reg.host}/metal/pinned@${m.digest}`,
    });
    await booted('digest');
    const sbc = (await getSbc(s, 'digest'))!;
    assert.equal(sbc.status?.image?.digest, m.digest);
    const k = await layer('digest', srv.spec.systemUUID!, 1, 'kernel');
    assert.ok(Buffer.from(await k.arrayBuffer()).equals(img.kernel));
  });

  it('an index with arm64 and amd64 entries: the amd64 manifest (--architecture default)', async () => {
    const t = target(reg, 'metal/multi');
    const arm = await pushBootImage(t, bootImage('arm64').image);
    const amd = bootImage('amd64');
    const amdDesc = await pushBootImage(t, amd.image);
    const idx = await pushIndex(
      t,
      [
        { ...arm, platform: { architecture: 'arm64', os: 'linux' } },
        { ...amdDesc, platform: { architecture: 'amd64', os: 'linux' } },
      ],
      'latest',
    );
    const srv = take();
    // No tag: `latest` by the reference grammar.
    await createClaim(s, 'multi', { serverRef: srv.metadata.name!, image: `${reg.host}/metal/multi` });
    await booted('multi');
    const sbc = (await getSbc(s, 'multi'))!;
    assert.equal(sbc.status?.image?.reference, `${reg.host}/metal/multi:latest`);
    assert.equal(sbc.status?.image?.digest, idx.digest);
    assert.equal(sbc.status?.image?.manifest, amdDesc.digest);
    const k = await layer('multi', srv.spec.systemUUID!, 1, 'kernel');
    assert.ok(Buffer.from(await k.arrayBuffer()).equals(amd.kernel));
  });

  it('a gardenlinux-style index: the metal_pxe cname entry, legacy io.gardenlinux media types', async () => {
    const t = target(reg, 'gardenlinux');
    const kernel = randomBytes(8192);
    const initrd = randomBytes(4096);
    const squashfs = randomBytes(1024);
    const pxe = await pushBootImage(t, {
      layers: [
        { mediaType: 'application/io.gardenlinux.kernel', data: kernel },
        { mediaType: 'application/io.gardenlinux.initrd', data: initrd },
        { mediaType: 'application/io.gardenlinux.squashfs', data: squashfs },
      ],
    });
    const other = await pushBootImage(t, bootImage('kvm').image);
    await pushIndex(
      t,
      [
        {
          ...other,
          platform: { architecture: 'amd64', os: 'linux' },
          annotations: { cname: 'kvm_amd64', architecture: 'amd64' },
        },
        { ...pxe, annotations: { cname: 'metal_pxe-gardener_prod-amd64-1877.0', architecture: 'amd64' } },
      ],
      '1877.0',
    );
    const srv = take();
    await createClaim(s, 'gl', { serverRef: srv.metadata.name!, image: `${reg.host}/gardenlinux:1877.0` });
    await booted('gl');
    const img = (await getSbc(s, 'gl'))!.status!.image!;
    assert.equal(img.manifest, pxe.digest);
    assert.ok(img.squashfs);
    const k = await layer('gl', srv.spec.systemUUID!, 1, 'kernel');
    assert.ok(Buffer.from(await k.arrayBuffer()).equals(kernel));
    // The squashfs layer boots as upstream boot-operator's template passes it: a live root over HTTP.
    const uuid = srv.spec.systemUUID!;
    const script = await (await fetch(`${s.op!.bootServerUrl}/ipxe/${uuid}`)).text();
    const kernelLine = script.split('\n').find((l) => l.startsWith('kernel '))!;
    assert.match(
      kernelLine,
      new RegExp(
        ` gl\\.ovl=/:tmpfs gl\\.url=\\S+/oci/${uuid}/1/squashfs\\?cap=[A-Za-z0-9_-]{43} gl\\.live=1( |$)`,
      ),
    );
    const sq = await fetch(urlIn(kernelLine, 'gl.url='));
    assert.equal(sq.status, 200);
    assert.ok(Buffer.from(await sq.arrayBuffer()).equals(squashfs), 'the squashfs layer streamed');
  });

  it('a pull secret named on the claim: resolved and streamed with its credentials; without it RegistryUnauthorized, no power-on', async () => {
    const auth = { username: 'puller', password: 'pull-pass' };
    const img = bootImage('private');
    await pushBootImage(target(authReg, 'private/os', auth), img.image, 'v1');
    const ref = `${authReg.host}/private/os:v1`;
    const denied = take();
    const mark = resets(s, denied.spec.systemUUID!).length;
    await createClaim(s, 'private-denied', { serverRef: denied.metadata.name!, image: ref });
    const c = await eventually('RegistryUnauthorized', 15_000, async () => {
      const x = cond(await getClaim(s, 'private-denied'), 'BootConfigurationReady');
      return x?.reason === 'RegistryUnauthorized' ? x : undefined;
    });
    assert.match(c.message, /no pull secret/);
    await s.client.create<SecretObject>(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'pull', namespace: s.ns },
      type: 'kubernetes.io/dockerconfigjson',
      data: {
        '.dockerconfigjson': Buffer.from(
          JSON.stringify({
            auths: {
              [`http://${authReg.host}`]: { auth: Buffer.from('puller:pull-pass').toString('base64') },
            },
          }),
        ).toString('base64'),
      },
    } as SecretObject);
    const srv = take();
    await s.client.create(Resources.ServerClaim, {
      apiVersion: 'metal.ironcore.dev/v1alpha1',
      kind: 'ServerClaim',
      metadata: {
        name: 'private',
        namespace: s.ns,
        labels: s.labels,
        annotations: { [PULL_SECRET_ANNOTATION]: 'pull' },
      },
      spec: { power: 'On', image: ref, serverRef: { name: srv.metadata.name } },
    });
    await booted('private');
    const sbc = (await getSbc(s, 'private'))!;
    assert.equal(sbc.status?.image?.pullSecret, `${s.ns}/pull`);
    const k = await layer('private', srv.spec.systemUUID!, 1, 'kernel');
    assert.ok(Buffer.from(await k.arrayBuffer()).equals(img.kernel));
    assert.deepEqual(
      resets(s, denied.spec.systemUUID!).slice(mark),
      [],
      'never powered on while unauthorized',
    );
  });

  it('a retag between two attempts: attempt 2 boots the new digest; attempt 1 recorded the old', async () => {
    const t = target(reg, 'metal/moving');
    const first = await pushBootImage(t, bootImage('first').image, 'stable');
    const srv = take();
    const host = hostOf(s, srv);
    host.setFaults({ neverCallBack: true });
    await createClaim(s, 'retag', {
      serverRef: srv.metadata.name!,
      image: `${reg.host}/metal/moving:stable`,
      timeout: '8s',
      maxAttempts: 2,
    });
    const a1 = await eventually('attempt 1 resolved', 15_000, async () => {
      const img = (await getSbc(s, 'retag'))?.status?.image;
      return img?.bootAttempt === 1 ? img : undefined;
    });
    assert.equal(a1.digest, first.digest);
    const second = bootImage('second');
    const secondDesc = await pushBootImage(t, second.image, 'stable');
    const scriptA1 = await (await fetch(`${s.op!.bootServerUrl}/ipxe/${srv.spec.systemUUID}`)).text();
    assert.match(scriptA1, /\/1\/kernel\?cap=\S+ /, 'attempt 1 keeps its digest after the retag');
    const kernelA1 = urlIn(scriptA1, 'kernel');
    const a2 = await eventually('attempt 2 resolved', 30_000, async () => {
      const img = (await getSbc(s, 'retag'))?.status?.image;
      return img?.bootAttempt === 2 ? img : undefined;
    });
    // Resolution precedes the power-on of attempt 2 (SBC Ready first): let this attempt call back.
    host.setFaults({ neverCallBack: false });
    assert.equal(a2.digest, secondDesc.digest);
    await booted('retag', 30_000);
    const k = await layer('retag', srv.spec.systemUUID!, 2, 'kernel');
    assert.ok(Buffer.from(await k.arrayBuffer()).equals(second.kernel));
    const stale = await fetch(kernelA1);
    assert.equal(stale.status, 403, "attempt 1's URLs are worthless once its token was rotated");
    assert.equal(((await stale.json()) as { reason: string }).reason, 'InvalidCapability');
    const resolved = (await eventsFor(s, 'ServerBootConfiguration', 'retag')).filter(
      (e) => e.reason === 'ImageResolved',
    );
    assert.match(resolved[0]!.message, new RegExp(`attempt 1: .* resolved to ${first.digest}`));
    assert.match(resolved.at(-1)!.message, new RegExp(`attempt 2: .* resolved to ${secondDesc.digest}`));
  });

  it('a corrupted blob: the transfer is aborted short of Content-Length, nothing cached', async () => {
    const img = bootImage('corrupt');
    await pushBootImage(target(reg, 'metal/corrupt'), img.image, 'bad');
    const srv = take();
    await createClaim(s, 'corrupt', {
      serverRef: srv.metadata.name!,
      image: `${reg.host}/metal/corrupt:bad`,
    });
    const sbcImg = await eventually(
      'resolved',
      15_000,
      async () => (await getSbc(s, 'corrupt'))?.status?.image,
    );
    // The registry serves what is on its disk without checking: flip bytes of the kernel blob there.
    const hex = sbcImg.kernel!.slice('sha256:'.length);
    const file = join(
      reg.dir,
      'data',
      'docker',
      'registry',
      'v2',
      'blobs',
      'sha256',
      hex.slice(0, 2),
      hex,
      'data',
    );
    assert.ok(readdirSync(join(file, '..')).includes('data'));
    const bad = Buffer.from(img.kernel);
    bad[bad.length - 100] = bad[bad.length - 100]! ^ 0xff;
    writeFileSync(file, bad);
    for (let round = 0; round < 2; round++) {
      // A connection of its own each round: the aborted transfer of round 1 ends its socket, and a
      // pooled connection the client has not yet seen closed would fail round 2 before any answer.
      const digest = (await getSbc(s, 'corrupt'))!.status!.image!.kernel!;
      const uuid = srv.spec.systemUUID!;
      const cap = layerCapability(await tokenOf('corrupt'), { uuid, attempt: 1, layer: 'kernel', digest });
      const dispatcher = new Agent({ pipelining: 0 });
      const res = await undiciFetch(`${s.op!.bootServerUrl}/oci/${uuid}/1/kernel?cap=${cap}`, { dispatcher });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('content-length'), String(img.kernel.length));
      await assert.rejects(res.arrayBuffer(), 'the body ends early: the transfer was aborted');
      await dispatcher.destroy().catch(() => undefined);
    }
  });

  it('N10: a registry announcing more than the descriptor size: 502 BlobSizeMismatch, nothing streamed', async () => {
    const img = bootImage('oversized');
    await pushBootImage(target(reg, 'metal/oversized'), img.image, 'long');
    const srv = take();
    await createClaim(s, 'oversized', {
      serverRef: srv.metadata.name!,
      image: `${reg.host}/metal/oversized:long`,
    });
    const sbcImg = await eventually(
      'resolved',
      15_000,
      async () => (await getSbc(s, 'oversized'))?.status?.image,
    );
    // The registry's Content-Length is its file's size: append 1 MiB to the initrd blob on its disk.
    const hex = sbcImg.initrd!.slice('sha256:'.length);
    const file = join(
      reg.dir,
      'data',
      'docker',
      'registry',
      'v2',
      'blobs',
      'sha256',
      hex.slice(0, 2),
      hex,
      'data',
    );
    writeFileSync(file, Buffer.concat([img.initrd, Buffer.alloc(1024 * 1024)]));
    const res = await layer('oversized', srv.spec.systemUUID!, 1, 'initrd');
    const body = await res.text();
    assert.equal(res.status, 502, body);
    assert.match(body, /BlobSizeMismatch/);
  });

  it('a registry that is down: SBC Error RegistryUnavailable, no power action', async () => {
    await pushBootImage(target(downReg, 'metal/os'), bootImage('down').image, '1.0');
    await downReg.stop(true);
    const srv = take();
    const mark = resetsSent(s, srv.spec.systemUUID!).length;
    await createClaim(s, 'down', { serverRef: srv.metadata.name!, image: `${downReg.host}/metal/os:1.0` });
    const c = await eventually('RegistryUnavailable', 15_000, async () => {
      const sbc = await getSbc(s, 'down');
      const r = cond(sbc, 'Ready');
      return sbc?.status?.state === 'Error' && r?.reason === 'RegistryUnavailable' ? r : undefined;
    });
    assert.match(c.message, new RegExp(`${downReg.host.replace(/\./g, '\\.')} unreachable`));
    // Positive control instead of a 1 s window: two more claim reconciles with the SBC in Error.
    await pokeClaim(s, 'down');
    assert.deepEqual(resetsSent(s, srv.spec.systemUUID!).slice(mark), []);
    // Back up (same port, same content): the periodic recheck finds it and the claim boots.
    await downReg.start();
    await booted('down', 40_000);
  });
});
