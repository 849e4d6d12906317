/**
 * Boot server behaviour beyond the boot-flow cases: NetBootOnce local boot after completion, script
 * pinning to the first client address, `booted: false` recorded, ignition hook, Butane translation and
 * Ignition validation (the official tools, hack/ignition-tools).
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, describe, it } from 'node:test';
import { API_VERSION } from '../../src/api/v1alpha1/schema.js';
import { Resources, type SecretObject } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  bearer,
  postJson,
  type Seeded,
  sbcCondition,
  seedBootTarget,
  useSignalStack,
  waitCached,
} from './fixture.js';

// A file run on its own started a private control plane: stop it, or the process never exits.
after(releaseSharedCluster);

/** GET from a chosen loopback source address (127.0.0.0/8 is all local on Linux). */
function getFrom(url: string, localAddress: string): Promise<{ status: number; text: string }> {
  return new Promise((ok, fail) => {
    const req = request(url, { localAddress }, (res) => {
      let text = '';
      res.on('data', (c) => {
        text += c;
      });
      res.on('end', () => ok({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', fail);
    req.end();
  });
}

describe('boot server', () => {
  const fx = useSignalStack('boot');

  /** Merges `data` (base64 values) into the ignition Secret of a `withIgnition` seed. */
  const patchIgnition = (s: Seeded, data: Record<string, string>) =>
    fx.client.mergePatch<SecretObject>(
      Resources.Secret,
      `${s.sbc.metadata.name}-ignition`,
      fx.namespace.name,
      {
        data,
      },
    );

  it('GET /ipxe chains to the UUID script through the iPXE uuid variable', async () => {
    const res = await fetch(`${fx.stack.bootUrl}/ipxe`);
    assert.equal(res.status, 200);
    assert.equal(await res.text(), `#!ipxe\nchain --autofree ${fx.stack.bootUrl}/ipxe/\${uuid}\n`);
  });

  it('NetBootOnce after completion: the script exits to local boot and records nothing', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { policy: 'NetBootOnce' });
    await waitCached(fx.stack, s);
    const first = await fetch(`${fx.stack.bootUrl}/ipxe/${s.uuid}`);
    assert.match(await first.text(), /^kernel /m, 'provisioning attempt network-boots');
    await fx.client.apply(
      Resources.ServerBootConfiguration,
      {
        apiVersion: API_VERSION,
        kind: 'ServerBootConfiguration',
        metadata: { name: s.sbc.metadata.name, namespace: fx.namespace.name },
        status: {
          conditions: [
            {
              type: 'BootCompleted',
              status: 'True',
              reason: 'BootCompleted',
              message: '',
              observedGeneration: 1,
              lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
            },
          ],
        },
      },
      { subresource: 'status', fieldManager: 'test-claim', force: true },
    );
    await waitFor(
      'BootCompleted cached',
      5_000,
      () =>
        !!fx.stack.sources.sbcs
          .get(s.sbc.metadata.name!, fx.namespace.name)
          ?.status?.conditions?.some((c) => c.type === 'BootCompleted'),
    );
    const before = (await sbcCondition(fx.client, s, 'IPXEScriptFetched')).sbc.metadata.resourceVersion;
    const again = await fetch(`${fx.stack.bootUrl}/ipxe/${s.uuid.toUpperCase()}`);
    const text = await again.text();
    assert.equal(again.status, 200);
    assert.match(text, /^exit$/m);
    assert.doesNotMatch(text, /kernel|metal\.token/);
    assert.equal(
      (await sbcCondition(fx.client, s, 'IPXEScriptFetched')).sbc.metadata.resourceVersion,
      before,
    );
  });

  it('serves the kernel and initrd the script names (image names with a slash, as firmware sends them)', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name);
    await waitCached(fx.stack, s);
    const script = await (await fetch(`${fx.stack.bootUrl}/ipxe/${s.uuid}`)).text();
    const kernelUrl = /^kernel (\S+)/m.exec(script)?.[1];
    const initrdUrl = /^initrd --name initrd.img (\S+)/m.exec(script)?.[1];
    assert.ok(kernelUrl && initrdUrl, script);
    const kernel = await fetch(kernelUrl);
    assert.equal(kernel.status, 200);
    assert.equal((await kernel.arrayBuffer()).byteLength, 4096);
    // iPXE decodes %2F and %3A before sending the request.
    const decoded = await fetch(decodeURIComponent(initrdUrl));
    assert.equal(decoded.status, 200);
    assert.equal((await decoded.arrayBuffer()).byteLength, 2048);
    assert.equal((await fetch(`${fx.stack.bootUrl}/images/test/os:1.0/etc-passwd`)).status, 404);
    assert.equal((await fetch(`${fx.stack.bootUrl}/images/no/such:image/kernel`)).status, 404);
  });

  it('pins an attempt script to the first client address (403 for another)', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name);
    await waitCached(fx.stack, s);
    const url = `${fx.stack.bootUrl}/ipxe/${s.uuid}`;
    assert.equal((await getFrom(url, '127.0.0.1')).status, 200);
    await waitFor(
      'pin cached',
      5_000,
      () =>
        !!fx.stack.sources.sbcs
          .get(s.sbc.metadata.name!, fx.namespace.name)
          ?.status?.conditions?.some((c) => c.type === 'IPXEScriptFetched'),
    );
    const other = await getFrom(url, '127.0.0.2');
    assert.equal(other.status, 403, other.text);
    assert.doesNotMatch(other.text, new RegExp(s.token));
    assert.equal((await getFrom(url, '127.0.0.1')).status, 200, 'the pinned client may fetch again');
  });

  it('records booted=false as BootStateReceived=False reason BootFailed', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name);
    await waitCached(fx.stack, s);
    const res = await postJson(
      `${fx.stack.registryUrl}/bootstate`,
      { systemUUID: s.uuid, booted: false },
      bearer(s.token),
    );
    assert.equal(res.status, 200, res.text);
    const { cond } = await sbcCondition(fx.client, s, 'BootStateReceived');
    assert.equal(cond?.status, 'False');
    assert.equal(cond?.reason, 'BootFailed');
  });

  it('serves Ignition v3 with the /bootstate unit merged in, and sets IgnitionDataFetched', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { withIgnition: true });
    await waitCached(fx.stack, s);
    const res = await fetch(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=${encodeURIComponent(s.token)}`);
    assert.equal(res.status, 200);
    const cfg = (await res.json()) as {
      ignition: { version: string };
      passwd: unknown;
      systemd: { units: { name: string }[] };
      storage: { files: { path: string; contents: { source: string } }[] };
    };
    assert.equal(cfg.ignition.version, '3.4.0');
    assert.deepEqual(cfg.passwd, { users: [{ name: 'core' }] }, 'stored config kept');
    assert.ok(cfg.systemd.units.some((u) => u.name === 'metal-bootstate.service'));
    const env = decodeURIComponent(
      cfg.storage.files.find((f) => f.path === '/etc/metal/bootstate.env')!.contents.source,
    );
    assert.match(env, new RegExp(`METAL_TOKEN=${s.token}`));
    assert.match(env, new RegExp(`METAL_REGISTRY=${fx.stack.registryUrl}`));
    const { cond } = await sbcCondition(fx.client, s, 'IgnitionDataFetched');
    assert.equal(cond?.status, 'True');
  });

  it('Butane (format fcos 1.5) is translated by the official translator and served with the hook', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { withIgnition: true });
    await patchIgnition(s, {
      format: Buffer.from('fcos').toString('base64'),
      ignition: Buffer.from(
        'variant: fcos\nversion: 1.5.0\npasswd:\n  users:\n    - name: core\nstorage:\n  files:\n    - path: /etc/hostname\n      contents:\n        inline: metal\n',
      ).toString('base64'),
    });
    await waitCached(fx.stack, s);
    const res = await fetch(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=${encodeURIComponent(s.token)}`);
    assert.equal(res.status, 200);
    const cfg = (await res.json()) as {
      ignition: { version: string };
      passwd: { users: { name: string }[] };
      storage: { files: { path: string; contents: { source: string } }[] };
      systemd: { units: { name: string }[] };
    };
    assert.equal(cfg.ignition.version, '3.4.0', 'fcos 1.5.0 translates to Ignition 3.4.0');
    assert.equal(cfg.passwd.users[0]?.name, 'core');
    assert.equal(cfg.storage.files.find((f) => f.path === '/etc/hostname')?.contents.source, 'data:,metal');
    assert.ok(cfg.systemd.units.some((u) => u.name === 'metal-bootstate.service'));
  });

  it('an invalid Ignition config: 409 InvalidIgnition with the validator report, no condition', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { withIgnition: true });
    await patchIgnition(s, {
      ignition: Buffer.from(
        JSON.stringify({ ignition: { version: '3.4.0' }, storage: { files: [{ path: 'relative' }] } }),
      ).toString('base64'),
    });
    await waitCached(fx.stack, s);
    const res = await fetch(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=${encodeURIComponent(s.token)}`);
    const body = (await res.json()) as { reason: string; message: string };
    assert.equal(res.status, 409);
    assert.equal(body.reason, 'InvalidIgnition');
    assert.match(body.message, /\$\.storage\.files\.0\.path.*path not absolute/);
    assert.equal((await sbcCondition(fx.client, s, 'IgnitionDataFetched')).cond, undefined);
  });
});
