/**
 * Clients that stop reading an OCI layer (issue 35), against the boot server in-process (its real
 * HTTP server and `/oci/{uuid}/{attempt}/{layer}` route), the run's API server and Debian's
 * docker-registry, over real loopback sockets; nothing is mocked. The layer is 64 MiB, far more
 * than the kernel's socket buffers take, so a client that reads nothing leaves the rest with the
 * boot server, which must hold at most 2 send chunks (2 × 256 KiB) for it:
 * - one client reads the headers and then nothing: the boot server's queue for that socket
 *   (`writableLength`), the chunks that transfer references and what the process allocated
 *   (`arrayBuffers`, after a full garbage collection) all stay within 512 KiB (+ slack for the
 *   allocations of the test process itself), while the transfer is stuck short of the layer's end;
 * - six such clients at once: together within 6 × 512 KiB, and a client that reads gets the whole
 *   layer, byte for byte, meanwhile; once they hang up, no chunk stays referenced.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { pino } from 'pino';
import { layerCapability } from '../../src/bootauth/layer-capability.js';
import { OciRegistry } from '../../src/localstack/oci-registry.js';
import { BlobCache } from '../../src/oci/blob-cache.js';
import { BootImages } from '../../src/oci/boot-images.js';
import { digestOf, pushBootImage } from '../../src/oci/push.js';
import { newRegistryPolicy } from '../../src/oci/registry-policy.js';
import { SEND_BUFFER_BYTES, SEND_BUFFERS_PER_TRANSFER } from '../../src/oci/send-buffers.js';
import type { KubeClient } from '../../src/runtime/client.js';
import { Resources } from '../../src/runtime/resource.js';
import {
  deleteSeededServers,
  newTestClient,
  type Seeded,
  seedBootTarget,
  startTestStack,
  type TestStack,
} from '../bootsignals/fixture.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';

after(releaseSharedCluster);

const MiB = 1024 * 1024;
const LAYER_BYTES = 64 * MiB;
/** What one transfer may hold (send-buffers.ts): the bound under test. */
const PER_TRANSFER = SEND_BUFFERS_PER_TRANSFER * SEND_BUFFER_BYTES;

setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;
/** `arrayBuffers` of this process after full garbage collections (Buffers nobody references are gone). */
async function liveArrayBuffers(): Promise<number> {
  for (let i = 0; i < 3; i++) {
    collect();
    await new Promise((ok) => setTimeout(ok, 50));
  }
  return process.memoryUsage().arrayBuffers;
}

/** A raw HTTP/1.1 GET that reads the response headers and then stops reading (socket paused). */
async function stallingGet(port: number, path: string): Promise<{ client: Socket; status: number }> {
  const client = connect(port, '127.0.0.1');
  await new Promise<void>((ok, fail) => client.once('connect', ok).once('error', fail));
  client.write(`GET ${path} HTTP/1.1\r\nHost: boot\r\n\r\n`);
  let head = '';
  await new Promise<void>((ok, fail) => {
    const onData = (b: Buffer) => {
      head += b.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      client.pause();
      client.off('data', onData);
      ok();
    };
    client.on('data', onData).once('error', fail);
  });
  return { client, status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]) };
}

/** The boot server's end of `client`'s connection (both ends live in this process). */
function serverEnd(client: Socket): Socket {
  const handles = (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles();
  const end = handles.find(
    (h): h is Socket =>
      h instanceof Socket &&
      h !== client &&
      h.remotePort === client.localPort &&
      h.localPort === client.remotePort,
  );
  assert.ok(end, `the boot server's socket for client port ${client.localPort}`);
  return end;
}

/** Waits until `s` has not handed more bytes to the kernel for a second: the client's stall reached it. */
async function stalled(s: Socket): Promise<void> {
  let last = -1;
  let since = Date.now();
  await waitFor('the transfer to stall', 30_000, () => {
    if (s.bytesWritten !== last) {
      last = s.bytesWritten;
      since = Date.now();
    }
    return Date.now() - since > 1000;
  });
}

describe('OCI layers to clients that stop reading', { timeout: 180_000 }, () => {
  let reg: OciRegistry;
  let client: KubeClient;
  let ns: Awaited<ReturnType<typeof testNamespace>>;
  let images: BootImages;
  let cache: BlobCache;
  let stack: TestStack;
  let seeded: Seeded;
  let layer: Buffer;
  let path: string;
  let port: number;
  const cacheDir = mkdtempSync(join(tmpdir(), 'metal-slow-reader-'));

  before(async () => {
    reg = await new OciRegistry().start();
    const kc = (await sharedCluster()).kubeConfig();
    client = newTestClient(kc);
    ns = await testNamespace(kc, 'slow-reader');
    images = new BootImages({
      client,
      policy: newRegistryPolicy({ allowed: [reg.host], insecure: [reg.host] }),
    });
    cache = new BlobCache({
      dir: cacheDir,
      maxBytes: 1024 * MiB,
      registry: images.registry,
      log: pino({ level: process.env.LOG_LEVEL ?? 'silent' }),
    });
    await cache.init();
    stack = await startTestStack(kc, { oci: { images, cache } });
    port = Number(new URL(stack.bootUrl).port);
    layer = randomBytes(LAYER_BYTES);
    const initrd = randomBytes(4096);
    const reference = `${reg.host}/slow/os:1`;
    const img = await pushBootImage(
      { registryUrl: reg.url, repository: 'slow/os' },
      {
        layers: [
          { mediaType: 'application/vnd.ironcore.image.kernel', data: layer },
          { mediaType: 'application/vnd.ironcore.image.initramfs', data: initrd },
        ],
      },
      '1',
    );
    seeded = await seedBootTarget(client, ns.name, { image: reference });
    const kernel = digestOf(layer);
    await client.mergePatch(
      Resources.ServerBootConfiguration,
      seeded.sbc.metadata.name!,
      ns.name,
      {
        status: {
          image: { reference, digest: img.digest, kernel, initrd: digestOf(initrd), bootAttempt: 1 },
        },
      },
      { subresource: 'status' },
    );
    await waitFor('the SBC image in the boot server cache', 10_000, () => {
      const sbc = stack.sources.sbcs.get(seeded.sbc.metadata.name!, ns.name);
      return (
        !!stack.sources.servers.get(seeded.server.metadata.name!) && sbc?.status?.image?.kernel === kernel
      );
    });
    const cap = layerCapability(seeded.token, {
      uuid: seeded.uuid,
      attempt: 1,
      layer: 'kernel',
      digest: kernel,
    });
    path = `/oci/${seeded.uuid}/1/kernel?cap=${cap}`;
    // The layer cached (one registry download) and read once, so the measurements below see the
    // steady state: no download, send chunks already made.
    const res = await fetch(`${stack.bootUrl}${path}`);
    assert.equal(res.status, 200);
    assert.equal(digestOf(Buffer.from(await res.arrayBuffer())), kernel);
    const head = await fetch(`${stack.bootUrl}${path}`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(head.headers.get('content-length'), String(LAYER_BYTES));
    assert.equal((await head.arrayBuffer()).byteLength, 0);
  });

  after(async () => {
    await stack?.close();
    await images?.close();
    if (ns && client) await deleteSeededServers(client, ns.name);
    await ns?.cleanup();
    await client?.close();
    await reg?.stop();
    rmSync(cacheDir, { recursive: true, force: true });
  });

  it('a client that reads nothing of a 64 MiB layer: the boot server holds at most 2 × 256 KiB for it', async (t) => {
    const before = await liveArrayBuffers();
    const { client: slow, status } = await stallingGet(port, path);
    try {
      assert.equal(status, 200);
      const end = serverEnd(slow);
      await stalled(end);
      assert.ok(end.writableLength <= PER_TRANSFER, `socket queue ${end.writableLength} bytes`);
      // Not vacuous: most of the layer is neither in the kernel nor read (the kernel took a few MiB).
      const accepted = end.bytesWritten - end.writableLength;
      assert.ok(accepted < LAYER_BYTES / 2, `${accepted} bytes went to the kernel`);
      assert.ok(
        cache.buffers.referencedBytes() <= PER_TRANSFER,
        `chunks referenced: ${cache.buffers.referencedBytes()} bytes`,
      );
      const grown = (await liveArrayBuffers()) - before;
      t.diagnostic(
        `to the kernel ${accepted} B, socket queue ${end.writableLength} B, chunks referenced ${cache.buffers.referencedBytes()} B, arrayBuffers +${grown} B`,
      );
      assert.ok(grown <= PER_TRANSFER + 4 * MiB, `the process holds ${grown} bytes more`);
    } finally {
      slow.destroy();
    }
  });

  it('six stalled clients stay within 6 × 2 × 256 KiB; a reading client gets the whole layer meanwhile; nothing stays referenced', async (t) => {
    const slow: Socket[] = [];
    try {
      for (let i = 0; i < 6; i++) {
        const s = await stallingGet(port, path);
        slow.push(s.client);
        assert.equal(s.status, 200);
      }
      const ends = slow.map(serverEnd);
      for (const e of ends) await stalled(e);
      const queued = ends.reduce((n, e) => n + e.writableLength, 0);
      t.diagnostic(`socket queues ${queued} B, chunks referenced ${cache.buffers.referencedBytes()} B`);
      assert.ok(queued <= 6 * PER_TRANSFER, `socket queues ${queued} bytes`);
      assert.ok(
        cache.buffers.referencedBytes() <= 6 * PER_TRANSFER,
        `${cache.buffers.referencedBytes()} bytes`,
      );
      const res = await fetch(`${stack.bootUrl}${path}`);
      assert.equal(res.status, 200);
      const body = Buffer.from(await res.arrayBuffer());
      assert.equal(createHash('sha256').update(body).digest('hex'), digestOf(layer).slice(7));
    } finally {
      for (const s of slow) s.destroy();
    }
    await waitFor('every chunk released', 10_000, () => cache.buffers.referencedBytes() === 0);
  });
});
