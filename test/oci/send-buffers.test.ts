/**
 * The send buffers of blob transfers (src/oci/send-buffers.ts): chunks shared and read once, kept
 * readable while idle, buffers written off never reused, waiting in line once the budget is
 * referenced; and through the blob cache over real sockets (an HTTP server serving a blob from
 * Debian's docker-registry as the boot server's route does): the budget bounds all transfers
 * together, a transfer beyond it waits and completes once a stalled client hangs up.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { OciRegistry } from '../../src/localstack/oci-registry.js';
import { BlobCache } from '../../src/oci/blob-cache.js';
import { pushBlob } from '../../src/oci/push.js';
import { parseReference } from '../../src/oci/reference.js';
import { RegistryClient } from '../../src/oci/registry-client.js';
import { newRegistryPolicy } from '../../src/oci/registry-policy.js';
import { SendBuffers } from '../../src/oci/send-buffers.js';

const KiB = 1024;
const MiB = 1024 * KiB;

describe('send buffers', () => {
  const dir = mkdtempSync(join(tmpdir(), 'metal-send-'));
  const file = join(dir, 'blob');
  const data = randomBytes(64 * KiB);
  writeFileSync(file, data);
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('a chunk two transfers ask for is read once; idle, it stays readable until its buffer is needed', async () => {
    const fh = await open(file, 'r');
    try {
      const b = new SendBuffers({ chunkBytes: 4 * KiB, maxBytes: 8 * KiB });
      const one = await b.acquire('f', 3, 4 * KiB, fh);
      const two = await b.acquire('f', 3, 4 * KiB, fh);
      await Promise.all([one.loaded, two.loaded]);
      assert.equal(one, two);
      assert.equal(b.reads, 1);
      assert.ok(one.buf.equals(data.subarray(12 * KiB, 16 * KiB)));
      assert.equal(b.referencedBytes(), 4 * KiB, 'a shared chunk counts once');
      b.release(one);
      b.release(two);
      assert.equal(b.referencedBytes(), 0);
      const again = await b.acquire('f', 3, 4 * KiB, fh);
      assert.equal(b.reads, 1, 'idle: read from memory');
      b.release(again);
      // Two other chunks need both buffers of the budget: the idle one goes.
      const x = await b.acquire('f', 0, 4 * KiB, fh);
      const y = await b.acquire('f', 1, 4 * KiB, fh);
      await Promise.all([x.loaded, y.loaded]);
      b.release(x);
      b.release(y);
      const back = await b.acquire('f', 3, 4 * KiB, fh);
      await back.loaded;
      assert.equal(b.reads, 4, 'evicted: read again');
      b.release(back);
    } finally {
      await fh.close();
    }
  });

  it('a written-off buffer is never handed out again; the line of waiters is first come, first served', async () => {
    const fh = await open(file, 'r');
    try {
      const b = new SendBuffers({ chunkBytes: 4 * KiB, maxBytes: 8 * KiB });
      const [p, q] = [await b.acquire('f', 0, 4 * KiB, fh), await b.acquire('f', 1, 4 * KiB, fh)];
      await Promise.all([p.loaded, q.loaded]);
      assert.equal(b.tryAcquire('f', 2, 4 * KiB, fh), undefined, 'the budget is referenced');
      const aborted = new AbortController();
      const order: number[] = [];
      const first = b.acquire('f', 2, 4 * KiB, fh).then((c) => {
        order.push(2);
        return c;
      });
      const gone = b.acquire('f', 5, 4 * KiB, fh, aborted.signal);
      const second = b.acquire('f', 3, 4 * KiB, fh).then((c) => {
        order.push(3);
        return c;
      });
      aborted.abort(new Error('client gone'));
      await assert.rejects(gone, /client gone/);
      b.forget(p); // a socket may still hold p's bytes
      const c2 = await first;
      await c2.loaded;
      assert.notEqual(c2.buf, p.buf, 'not the written-off buffer');
      b.release(q);
      const c3 = await second;
      assert.deepEqual(order, [2, 3]);
      assert.equal(c3.buf, q.buf, 'a released buffer is reused');
      await c3.loaded;
      assert.ok(c3.buf.equals(data.subarray(12 * KiB, 16 * KiB)));
      assert.equal(b.peakReferencedBytes, 8 * KiB);
      b.release(c2);
      b.release(c3);
    } finally {
      await fh.close();
    }
  });
});

describe('send buffers through the blob cache, over sockets', { timeout: 120_000 }, () => {
  let reg: OciRegistry;
  let registry: RegistryClient;
  let server: Server;
  let cache: BlobCache;
  let digest: string;
  const blob = randomBytes(32 * MiB);
  const cacheDir = mkdtempSync(join(tmpdir(), 'metal-send-cache-'));
  const ref = () => parseReference(`${reg.host}/send/budget:1`);

  before(async () => {
    reg = await new OciRegistry().start();
    registry = new RegistryClient(newRegistryPolicy({ allowed: [reg.host], insecure: [reg.host] }));
    digest = (await pushBlob({ registryUrl: reg.url, repository: 'send/budget' }, 'x', blob)).digest;
    // A budget of 4 chunks: two stalled clients at different offsets hold all of it.
    cache = new BlobCache({
      dir: cacheDir,
      maxBytes: 256 * MiB,
      registry,
      log: pino({ level: 'silent' }),
      sendBufferBytes: 1 * MiB,
    });
    await cache.init();
    await cache.file(ref(), digest);
    // As the boot server's route: headers, then sendTo; a range as `bytes=<start>-`.
    server = createServer((req, res) => {
      const start = Number(/bytes=(\d+)-/.exec(req.headers.range ?? '')?.[1] ?? 0);
      void (async () => {
        const b = await cache.open(ref(), digest, undefined, { start, end: blob.length - 1 });
        res.writeHead(start ? 206 : 200, { 'content-length': String(blob.length - start) });
        await b.sendTo(res).catch(() => res.destroy());
      })();
    });
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  });
  after(async () => {
    server?.closeAllConnections();
    await new Promise((ok) => server?.close(ok));
    await registry?.close();
    await reg?.stop();
    rmSync(cacheDir, { recursive: true, force: true });
  });

  const port = () => (server.address() as AddressInfo).port;
  async function stalling(start: number): Promise<Socket> {
    const s = connect(port(), '127.0.0.1');
    await new Promise<void>((ok, fail) => s.once('connect', ok).once('error', fail));
    s.write(`GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=${start}-\r\n\r\n`);
    await new Promise<void>((ok) => s.once('data', () => ok()));
    s.pause();
    return s;
  }

  it('the budget bounds all transfers: beyond it a transfer waits, and completes once a stalled client hangs up', async () => {
    const a = await stalling(0);
    const b = await stalling(16 * MiB);
    try {
      const end = Date.now() + 20_000;
      while (cache.buffers.referencedBytes() < 1 * MiB && Date.now() < end)
        await new Promise((ok) => setTimeout(ok, 50));
      assert.equal(cache.buffers.referencedBytes(), 1 * MiB, 'the two stalled clients hold the budget');
      const third = (async () => {
        const res = await fetch(`http://127.0.0.1:${port()}/`);
        return Buffer.from(await res.arrayBuffer());
      })();
      const early = await Promise.race([
        third.then(() => 'done'),
        new Promise((ok) => setTimeout(ok, 1500, 'waiting')),
      ]);
      assert.equal(early, 'waiting', 'no buffer for the third transfer while the budget is held');
      a.destroy();
      const got = await third;
      assert.ok(got.equals(blob), 'the third transfer completes, byte for byte');
      assert.ok(cache.buffers.peakReferencedBytes <= 1 * MiB, `peak ${cache.buffers.peakReferencedBytes}`);
    } finally {
      a.destroy();
      b.destroy();
    }
  });
});
