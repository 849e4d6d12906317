/**
 * Second security review (issue 29), the blob cache's size bounds against a real registry
 * (docker-registry on loopback):
 * - N10: a blob beyond `maxBlobBytes` (`--max-layer-size`) is refused before a byte is written; a
 *   download reserves its size first, so concurrent downloads never take the cache past `maxBytes`.
 * - N10: no registry `Content-Length` is trusted beyond the OCI descriptor's `size` (OCI image-spec,
 *   descriptor.md: `size` is required and "SHOULD be used to ... pre-allocate"): a lying registry
 *   (a node:http server standing in for one) announcing more is refused before a byte is written.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { OciRegistry } from '../../src/localstack/oci-registry.js';
import { BlobCache } from '../../src/oci/blob-cache.js';
import { digestOf, pushBlob } from '../../src/oci/push.js';
import { parseReference } from '../../src/oci/reference.js';
import { RegistryClient } from '../../src/oci/registry-client.js';
import { newRegistryPolicy } from '../../src/oci/registry-policy.js';

const MiB = 1024 * 1024;

describe('second security review: blob sizes', () => {
  let reg: OciRegistry;
  let client: RegistryClient;
  before(async () => {
    reg = await new OciRegistry().start();
    client = new RegistryClient(newRegistryPolicy({ allowed: [reg.host], insecure: [reg.host] }));
  });
  after(async () => {
    await client?.close();
    await reg?.stop();
  });

  it('N10: a blob beyond --max-layer-size is refused; downloads reserve their room in the cache', async () => {
    const ref = parseReference(`${reg.host}/n10/os:1`);
    const big = await pushBlob({ registryUrl: reg.url, repository: 'n10/os' }, 'big', randomBytes(3 * MiB));
    const dir = mkdtempSync(join(tmpdir(), 'metal-n10-'));
    const small = new BlobCache({
      dir,
      maxBytes: 64 * MiB,
      maxBlobBytes: 1 * MiB,
      registry: client,
      log: pino({ level: 'silent' }),
    } as ConstructorParameters<typeof BlobCache>[0]);
    await small.init();
    await assert.rejects(
      small.open(ref, big.digest),
      (e: { reason?: string }) => e.reason === 'LayerTooLarge',
      'a 3 MiB blob with a 1 MiB bound',
    );
    assert.deepEqual(readdirSync(join(dir, 'sha256')), [], 'nothing cached');
    assert.deepEqual(readdirSync(join(dir, 'tmp')), [], 'nothing left behind');

    // Two concurrent 3 MiB downloads with room for one: the second is refused, not squeezed in.
    const other = await pushBlob(
      { registryUrl: reg.url, repository: 'n10/os' },
      'other',
      randomBytes(3 * MiB),
    );
    const tight = new BlobCache({
      dir: mkdtempSync(join(tmpdir(), 'metal-n10-')),
      maxBytes: 4 * MiB,
      registry: client,
      log: pino({ level: 'silent' }),
    });
    await tight.init();
    const results = await Promise.allSettled([tight.open(ref, big.digest), tight.open(ref, other.digest)]);
    const opened = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    for (const o of opened) o.stream.resume();
    await Promise.all(opened.map((o) => new Promise((ok) => o.stream.on('close', ok))));
    assert.equal(opened.length, 1, results.map((r) => r.status).join(','));
    const refused = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    assert.match((refused.reason as Error).message, /does not fit the cache now/);
    assert.ok(tight.bytes() <= 4 * MiB);
  });

  it('N10: a registry announcing more bytes than the descriptor size is refused before a byte is written', async () => {
    const blob = randomBytes(4096);
    const digest = digestOf(blob);
    // A lying registry: the blob's digest, but a Content-Length (and body) 8 MiB longer.
    const liar = createServer((req, res) => {
      if (req.url === `/v2/n10/liar/blobs/${digest}`) {
        const body = Buffer.concat([blob, Buffer.alloc(8 * MiB)]);
        res.writeHead(200, { 'content-length': String(body.length) });
        res.end(body);
        return;
      }
      res.writeHead(404).end();
    });
    await new Promise<void>((ok) => liar.listen(0, '127.0.0.1', ok));
    const host = `127.0.0.1:${(liar.address() as AddressInfo).port}`;
    const liarClient = new RegistryClient(newRegistryPolicy({ allowed: [host], insecure: [host] }));
    try {
      const dir = mkdtempSync(join(tmpdir(), 'metal-n10-'));
      const cache = new BlobCache({
        dir,
        maxBytes: 64 * MiB,
        registry: liarClient,
        log: pino({ level: 'silent' }),
      });
      await cache.init();
      const ref = parseReference(`${host}/n10/liar:1`);
      await assert.rejects(
        cache.open(ref, digest, undefined, undefined, blob.length),
        (e: { reason?: string; message?: string }) => {
          assert.equal(e.reason, 'BlobSizeMismatch', e.message);
          return true;
        },
        'Content-Length 8 MiB beyond the descriptor size',
      );
      assert.deepEqual(readdirSync(join(dir, 'sha256')), [], 'nothing cached');
      assert.deepEqual(readdirSync(join(dir, 'tmp')), [], 'nothing left behind');
      assert.equal(cache.bytes(), 0);
      // The descriptor size beyond --max-layer-size: refused without asking the registry.
      const bounded = new BlobCache({
        dir: mkdtempSync(join(tmpdir(), 'metal-n10-')),
        maxBytes: 64 * MiB,
        maxBlobBytes: 1024,
        registry: liarClient,
        log: pino({ level: 'silent' }),
      });
      await bounded.init();
      const before = liarClient.requests;
      await assert.rejects(
        bounded.open(ref, digest, undefined, undefined, blob.length),
        (e: { reason?: string }) => e.reason === 'LayerTooLarge',
      );
      assert.equal(liarClient.requests, before, 'no registry request for a descriptor beyond the bound');
    } finally {
      await liarClient.close();
      liar.closeAllConnections();
      await new Promise((ok) => liar.close(ok));
    }
  });
});
