/**
 * Edits of a Booted claim (issue 36 item 1), against the real API server, simulated hosts behind the
 * virtual BMC and a real OCI registry on loopback: a boot policy flip never power-cycles; an image
 * or ignition edit re-provisions only when what would boot differs (the resolved manifest, the
 * ignition Secret's content).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { countsForCurrentAttempt } from '../../src/api/vocabulary.js';
import { OciRegistry } from '../../src/localstack/oci-registry.js';
import { pushBootImage } from '../../src/oci/push.js';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  b64,
  cond,
  createClaim,
  eventually,
  getClaim,
  getSbc,
  resets,
  type Stack,
  startStack,
} from './fixture.js';

after(releaseSharedCluster);

const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));
/** How long a test watches for a power action that must not come, ms (resync and requeues pass). */
const QUIET_MS = 4_000;

function bootImage(tagline: string) {
  return {
    layers: [
      {
        mediaType: 'application/vnd.ironcore.image.kernel',
        data: Buffer.concat([Buffer.from(`kernel ${tagline}\n`), randomBytes(4096)]),
      },
      {
        mediaType: 'application/vnd.ironcore.image.initramfs',
        data: Buffer.concat([Buffer.from(`initrd ${tagline}\n`), randomBytes(4096)]),
      },
    ],
  };
}

describe('editing a Booted claim', { timeout: 180_000 }, () => {
  let s: Stack;
  let reg: OciRegistry;
  let pool: Server[];
  const take = () => pool.shift()!;

  before(async () => {
    reg = await new OciRegistry().start();
    s = await startStack('claim-edits', {
      hosts: 3,
      args: [
        '--allowed-registries',
        reg.host,
        '--insecure-registries',
        reg.host,
        '--boot-timeout',
        '30s',
        '--server-resync',
        '1s',
      ],
    });
    pool = await availableServers(s, 3, 60_000);
  });
  after(async () => {
    await s?.close();
    await reg?.stop();
  });

  async function booted(name: string): Promise<ServerClaim> {
    return eventually(`${name} Booted`, 40_000, async () => {
      const c = await getClaim(s, name);
      return cond(c, 'Booted')?.status === 'True' ? c : undefined;
    });
  }
  const patch = (name: string, spec: Record<string, unknown>) =>
    s.client.mergePatch(Resources.ServerClaim, name, s.ns, { spec });

  it('a bootPolicy flip on a Booted claim power-cycles nothing, either way', async () => {
    const srv = take();
    const uuid = srv.spec.systemUUID!;
    await createClaim(s, 'flip', { serverRef: srv.metadata.name!, bootPolicy: 'NetBootAlways' });
    const before = await booted('flip');
    const n = resets(s, uuid).length;
    await patch('flip', { bootPolicy: 'NetBootOnce' });
    // The SBC follows in place, and NetBootOnce's marker makes the boot server answer local boot.
    await eventually('SBC NetBootOnce with BootCompleted for its attempt', 20_000, async () => {
      const sbc = await getSbc(s, 'flip');
      return sbc?.spec.bootPolicy === 'NetBootOnce' && countsForCurrentAttempt(sbc, 'BootCompleted');
    });
    await sleep(QUIET_MS);
    await patch('flip', { bootPolicy: 'NetBootAlways' });
    await eventually('SBC NetBootAlways', 20_000, async () => {
      return (await getSbc(s, 'flip'))?.spec.bootPolicy === 'NetBootAlways';
    });
    await sleep(QUIET_MS);
    const after = (await getClaim(s, 'flip'))!;
    assert.deepEqual(resets(s, uuid).slice(n), [], 'no power action after the flips');
    assert.equal(after.status?.boot?.series, before.status?.boot?.series, 'no new series');
    assert.equal(after.status?.boot?.attempt, before.status?.boot?.attempt);
    assert.equal(cond(after, 'Booted')?.status, 'True');
    const sbc = (await getSbc(s, 'flip'))!;
    assert.ok(countsForCurrentAttempt(sbc, 'BootStateReceived'), "the attempt's signals still count");
  });

  it('an ignition Secret with the same content boots the same; different content re-provisions', async () => {
    const srv = take();
    const uuid = srv.spec.systemUUID!;
    const ign = JSON.stringify({ ignition: { version: '3.4.0' }, storage: { files: [] } });
    const other = JSON.stringify({
      ignition: { version: '3.4.0' },
      storage: { files: [{ path: '/etc/motd', contents: { source: 'data:,hi' } }] },
    });
    for (const [name, text] of [
      ['ign-a', ign],
      ['ign-b', ign],
      ['ign-c', other],
    ] as const)
      await s.client.create(Resources.Secret, {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name, namespace: s.ns, labels: s.labels },
        data: { ignition: b64(text) },
      });
    await createClaim(s, 'ign', { serverRef: srv.metadata.name!, ignition: 'ign-a' });
    const first = await booted('ign');
    const n = resets(s, uuid).length;
    await patch('ign', { ignitionSecretRef: { name: 'ign-b' } });
    await eventually('SBC names ign-b', 20_000, async () => {
      return (await getSbc(s, 'ign'))?.spec.ignitionSecretRef?.name === 'ign-b';
    });
    await sleep(QUIET_MS);
    assert.deepEqual(resets(s, uuid).slice(n), [], 'same content: no power action');
    assert.equal((await getClaim(s, 'ign'))!.status?.boot?.series, first.status?.boot?.series);
    await patch('ign', { ignitionSecretRef: { name: 'ign-c' } });
    const again = await eventually('series 2 Booted', 40_000, async () => {
      const c = await getClaim(s, 'ign');
      return (c?.status?.boot?.series ?? 0) > (first.status?.boot?.series ?? 1) &&
        cond(c, 'Booted')?.status === 'True'
        ? c
        : undefined;
    });
    assert.ok(resets(s, uuid).length > n, 'different content: re-provisioned');
    assert.ok((again.status?.boot?.attempt ?? 0) > (first.status?.boot?.attempt ?? 0));
  });

  it('an image tag resolving to the booted manifest boots the same; another manifest re-provisions', async () => {
    const srv = take();
    const uuid = srv.spec.systemUUID!;
    const t = { registryUrl: reg.url, repository: 'metal/edit' };
    const img = bootImage('one');
    await pushBootImage(t, img, '1.0');
    await pushBootImage(t, img, '1.0-again');
    await pushBootImage(t, bootImage('two'), '2.0');
    await createClaim(s, 'img', { serverRef: srv.metadata.name!, image: `${reg.host}/metal/edit:1.0` });
    const first = await booted('img');
    const n = resets(s, uuid).length;
    await patch('img', { image: `${reg.host}/metal/edit:1.0-again` });
    await eventually('SBC names the new tag', 20_000, async () => {
      return (await getSbc(s, 'img'))?.spec.image === `${reg.host}/metal/edit:1.0-again`;
    });
    await sleep(QUIET_MS);
    assert.deepEqual(resets(s, uuid).slice(n), [], 'same manifest: no power action');
    const mid = (await getClaim(s, 'img'))!;
    assert.equal(mid.status?.boot?.series, first.status?.boot?.series);
    assert.equal(cond(mid, 'Booted')?.status, 'True');
    await patch('img', { image: `${reg.host}/metal/edit:2.0` });
    await eventually('series 2 Booted', 40_000, async () => {
      const c = await getClaim(s, 'img');
      return (c?.status?.boot?.series ?? 0) > (first.status?.boot?.series ?? 1) &&
        cond(c, 'Booted')?.status === 'True'
        ? c
        : undefined;
    });
    assert.ok(resets(s, uuid).length > n, 'another manifest: re-provisioned');
  });
});
