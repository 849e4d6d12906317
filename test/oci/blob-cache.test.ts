/**
 * The on-disk blob cache against a real registry (docker-registry on loopback): N concurrent
 * readers → one registry download; Range; verified files only; a mismatch aborts every reader;
 * LRU eviction within the byte bound; the allow-list applies to cached blobs too.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { OciRegistry } from '../../src/localstack/oci-registry.js';
import { BlobCache } from '../../src/oci/blob-cache.js';
import { pushBlob } from '../../src/oci/push.js';
import { parseReference } from '../../src/oci/reference.js';
import { RegistryClient } from '../../src/oci/registry-client.js';
import { newRegistryPolicy } from '../../src/oci/registry-policy.js';

async function drain(s: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of s) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

describe('blob cache', () => {
  let reg: OciRegistry;
  let client: RegistryClient;
  const log = pino({ level: process.env.LOG_LEVEL ?? 'silent' });
  const newCache = async (maxBytes = 1 << 30) => {
    const c = new BlobCache({
      dir: mkdtempSync(join(tmpdir(), 'metal-blobs-')),
      maxBytes,
      registry: client,
      log,
    });
    await c.init();
    return c;
  };

  before(async () => {
    reg = await new OciRegistry().start();
    client = new RegistryClient(newRegistryPolicy({ allowed: [reg.host], insecure: [reg.host] }));
  });
  after(async () => {
    await client?.close();
    await reg?.stop();
  });

  it('20 concurrent readers of one blob: one registry download, identical bytes, then a hit', async () => {
    const data = randomBytes(3 * 1024 * 1024 + 17);
    const d = await pushBlob({ registryUrl: reg.url, repository: 'c/one' }, 'x', data);
    const cache = await newCache();
    const ref = parseReference(`${reg.host}/c/one:1`);
    const opened = await Promise.all(Array.from({ length: 20 }, () => cache.open(ref, d.digest)));
    const bodies = await Promise.all(opened.map((o) => drain(o.stream)));
    assert.equal(cache.downloads, 1);
    assert.deepEqual(opened.map((o) => o.source).sort()[0], 'join');
    assert.equal(opened.filter((o) => o.source === 'miss').length, 1);
    for (const b of bodies) assert.ok(b.equals(data));
    const again = await cache.open(ref, d.digest, undefined, { start: 5, end: 9 });
    assert.equal(again.source, 'hit');
    assert.ok((await drain(again.stream)).equals(data.subarray(5, 10)));
    assert.equal(cache.downloads, 1);
  });

  it('file(): a verified file with the blob bytes, downloaded once (UKI builds read layers as files)', async () => {
    const data = randomBytes(700 * 1024 + 3);
    const d = await pushBlob({ registryUrl: reg.url, repository: 'c/file' }, 'x', data);
    const cache = await newCache();
    const ref = parseReference(`${reg.host}/c/file:1`);
    const [a, b] = await Promise.all([cache.file(ref, d.digest), cache.file(ref, d.digest)]);
    assert.equal(a, b);
    assert.ok(readFileSync(a).equals(data));
    assert.equal(cache.downloads, 1);
    assert.equal(await cache.file(ref, d.digest), a);
    assert.equal(cache.downloads, 1);
  });

  it('a blob that does not match its digest: every reader is aborted, nothing is cached', async () => {
    const data = randomBytes(512 * 1024);
    const d = await pushBlob({ registryUrl: reg.url, repository: 'c/bad' }, 'x', data);
    const hex = d.digest.slice(7);
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
    const bad = Buffer.from(data);
    bad[10] = bad[10]! ^ 1;
    writeFileSync(file, bad);
    const cache = await newCache();
    const ref = parseReference(`${reg.host}/c/bad:1`);
    // Both readers consume at once, as two firmware downloads do. The download can fail before a
    // reader is opened (open() then rejects with the mismatch) or while it reads (its stream fails).
    const opened = await Promise.allSettled([cache.open(ref, d.digest), cache.open(ref, d.digest)]);
    await Promise.all(
      opened.map(async (o) => {
        if (o.status === 'rejected') return assert.match(String(o.reason), /digest/);
        let got = 0;
        await assert.rejects(
          (async () => {
            for await (const c of o.value.stream) got += (c as Buffer).length;
          })(),
          /digest/,
        );
        assert.ok(got < data.length, 'the final byte is held back until verification');
      }),
    );
    assert.equal(existsSync(join((cache as unknown as { o: { dir: string } }).o.dir, 'sha256', hex)), false);
  });

  it('evicts least recently used blobs beyond the byte bound', async () => {
    const cache = await newCache(300 * 1024);
    const ref = parseReference(`${reg.host}/c/lru:1`);
    const digests = [];
    for (let i = 0; i < 3; i++) {
      const d = await pushBlob({ registryUrl: reg.url, repository: 'c/lru' }, 'x', randomBytes(128 * 1024));
      await drain((await cache.open(ref, d.digest)).stream);
      digests.push(d.digest);
      await new Promise((ok) => setTimeout(ok, 20));
    }
    const dir = join((cache as unknown as { o: { dir: string } }).o.dir, 'sha256');
    const kept = digests
      .slice(1)
      .map((x) => x.slice(7))
      .sort();
    // Eviction runs after the third blob is stored: wait for it (bounded), not for a fixed time.
    for (const end = Date.now() + 10_000; Date.now() < end; ) {
      if (cache.bytes() <= 300 * 1024 && readdirSync(dir).length === kept.length) break;
      await new Promise((ok) => setTimeout(ok, 20));
    }
    assert.ok(cache.bytes() <= 300 * 1024, String(cache.bytes()));
    assert.deepEqual(readdirSync(dir).sort(), kept);
  });

  it('the allow-list applies to cached blobs too', async () => {
    const data = randomBytes(1024);
    const d = await pushBlob({ registryUrl: reg.url, repository: 'c/allow' }, 'x', data);
    const cache = await newCache();
    await drain((await cache.open(parseReference(`${reg.host}/c/allow:1`), d.digest)).stream);
    const strict = new RegistryClient(newRegistryPolicy({ allowed: ['ghcr.io'] }));
    const other = new BlobCache({
      dir: (cache as unknown as { o: { dir: string } }).o.dir,
      maxBytes: 1 << 30,
      registry: strict,
      log,
    });
    await other.init();
    await assert.rejects(
      other.open(parseReference(`${reg.host}/c/allow:1`), d.digest),
      /not in --allowed-registries/,
    );
    await strict.close();
  });
});
