/**
 * A bounded on-disk cache of registry blobs by digest, filled by streaming: the first request for a
 * digest starts one registry download, and it and every concurrent request read the file as it
 * grows, so N servers booting one image pull each blob from the registry once.
 *
 * Integrity: the download is hashed while it streams; a reader never gets a blob's last byte before
 * the whole blob matched its digest, so a mismatch (or a broken download) ends every transfer short
 * of its `Content-Length` — the client sees an aborted transfer, never a complete wrong file — and
 * the partial file is deleted. Only verified files are renamed into the cache (`<dir>/sha256/<hex>`).
 *
 * Access (security review N3): files are stored once per digest, but a cached file or a download
 * another request started is handed to a (reference, credentials) pair only after the registry
 * confirmed that pair may read the digest (`RegistryClient.confirm`, an authenticated HEAD whose
 * yes is remembered for a bounded time); a miss is authorised by its own GET.
 *
 * Bounds: `maxBytes` of verified files and downloads together (least recently used evicted; open
 * readers keep their file handle, so eviction never cuts a transfer): a download reserves its
 * `Content-Length` before its first byte is written, evicting to make room, and is refused
 * (`RegistryUnavailable`, transient) when downloads in flight already hold the room; a blob larger
 * than `maxBlobBytes` (`--max-layer-size`) is refused (`LayerTooLarge`) before a byte is written, and
 * no more bytes than its `Content-Length` are read (security review N10); registry timeouts as
 * `RegistryClient`. Given the OCI descriptor's `size` (image-spec descriptor.md: required, the exact
 * byte count of the content), no registry `Content-Length` is trusted beyond it: a blob whose
 * `Content-Length` differs, or a cached file or download of another size, is refused
 * (`BlobSizeMismatch`) before a byte is written or served, and a descriptor size beyond
 * `maxBlobBytes` before the registry is asked (N10).
 *
 * Cost per served byte: a verified file is never hashed again; transfers read it in 1 MiB chunks
 * through a shared {@link ChunkPool} (concurrent transfers of one blob share each read and Buffer)
 * and respect the socket's backpressure (a chunk is read only when the previous one was taken).
 */
import { createHash, randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { type FileHandle, mkdir, open, readdir, rename, rm, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type pino from 'pino';
import { ChunkPool } from './chunk-pool.js';
import type { RegistryCredentials } from './docker-config.js';
import { formatReference, type ImageReference } from './reference.js';
import { type RegistryClient, RegistryError } from './registry-client.js';

export class DigestMismatch extends Error {}

export interface BlobRange {
  start: number;
  /** Inclusive. */
  end: number;
}

export interface OpenBlob {
  /** Size of the whole blob in bytes. */
  size: number;
  stream: Readable;
  /** `hit` (verified file), `join` (a download in flight), `miss` (this request started it). */
  source: 'hit' | 'join' | 'miss';
}

/** A file being served: a verified blob (`done`, all `written`) or a download in flight. */
interface SourceFile {
  /** Unique per file incarnation: the chunk pool's key. */
  id: string;
  size: number;
  written: number;
  done: boolean;
  failed?: Error;
  /** Emits `progress` when `written`, `done` or `failed` changed (downloads only). */
  events?: EventEmitter;
}

interface Download extends SourceFile {
  tmp: string;
  events: EventEmitter;
  /** Resolves once the size is known (registry headers arrived); rejects when the fetch failed. */
  ready: Promise<void>;
}

const DIGEST = /^sha256:([a-f0-9]{64})$/;
/** `RegistryError` reason of a blob beyond `maxBlobBytes`: not transient (the blob is what it is). */
export const LAYER_TOO_LARGE = 'LayerTooLarge';
/**
 * `RegistryError` reason of a blob whose registry `Content-Length` (or cached size) is not its OCI
 * descriptor's `size`: not transient (the registry or the manifest is wrong; no retry helps).
 */
export const BLOB_SIZE_MISMATCH = 'BlobSizeMismatch';

export class BlobCache {
  private readonly files = new Map<string, { size: number; used: number }>();
  private readonly inflight = new Map<string, Download>();
  private total = 0;
  /** Bytes reserved by downloads in flight (their `Content-Length`). */
  private reserved = 0;
  /** Registry blob downloads started (benchmarks and tests count them). */
  downloads = 0;
  /** Chunks read from disk for transfers, shared by concurrent ones (tests count its `reads`). */
  readonly pool: ChunkPool;

  constructor(
    private readonly o: {
      dir: string;
      maxBytes: number;
      registry: RegistryClient;
      log: pino.Logger;
      /** Memory for shared read chunks (default 32 MiB). */
      poolBytes?: number;
      /** Largest blob downloaded, in bytes (default: `maxBytes`). */
      maxBlobBytes?: number;
    },
  ) {
    this.pool = new ChunkPool({ maxBytes: o.poolBytes });
  }

  /** Creates the folders, drops partial files of an earlier run and indexes verified ones. */
  async init(): Promise<void> {
    await mkdir(join(this.o.dir, 'sha256'), { recursive: true });
    await rm(join(this.o.dir, 'tmp'), { recursive: true, force: true });
    await mkdir(join(this.o.dir, 'tmp'), { recursive: true });
    for (const f of await readdir(join(this.o.dir, 'sha256'))) {
      const s = await stat(join(this.o.dir, 'sha256', f));
      this.files.set(`sha256:${f}`, { size: s.size, used: s.mtimeMs });
      this.total += s.size;
    }
  }

  /**
   * Opens blob `digest` of `ref` (whole, or `range`). `size` is the blob's OCI descriptor `size` in
   * bytes (the manifest's layer descriptor), when the caller has it: then nothing of another size is
   * downloaded or served (`BlobSizeMismatch`). Throws `RegistryError` when the registry refuses or
   * cannot be reached before the first byte (`LayerTooLarge`, `BlobSizeMismatch`, or the client's
   * reasons), `RangeError` for a range beyond the blob. Later failures (digest mismatch, broken
   * download) destroy the stream with the error.
   */
  async open(
    ref: ImageReference,
    digest: string,
    credentials?: RegistryCredentials,
    range?: BlobRange,
    size?: number,
  ): Promise<OpenBlob> {
    const m = DIGEST.exec(digest);
    if (!m) throw new RegistryError('InvalidDigest', `unsupported digest ${digest}`);
    this.o.registry.origin(ref); // the allow-list applies to cached blobs too
    if (size !== undefined) this.checkDescriptorSize(digest, size);
    if (this.files.has(digest) || this.inflight.has(digest))
      await this.o.registry.confirm(ref, 'blobs', digest, credentials);
    const cached = this.files.get(digest);
    if (cached) {
      if (size !== undefined) sizeMatches(digest, cached.size, size, 'the cached file has');
      cached.used = Date.now();
      const r = clamp(range, cached.size);
      // Its own handle: eviction may unlink the file while this transfer still reads it.
      const fh = await open(this.path(digest), 'r').catch(() => undefined);
      if (fh) {
        const file = { id: digest, size: cached.size, written: cached.size, done: true };
        return { size: cached.size, source: 'hit', stream: tail(fh, file, r, this.pool) };
      }
      // Evicted between the lookup and the open: fetch it again.
      if (this.files.get(digest) === cached) {
        this.files.delete(digest);
        this.total -= cached.size;
      }
    }
    let d = this.inflight.get(digest);
    const source = d ? 'join' : 'miss';
    if (!d) d = this.start(ref, digest, m[1]!, credentials, size);
    await d.ready;
    if (size !== undefined) sizeMatches(digest, d.size, size, 'the download in flight has');
    const r = clamp(range, d.size);
    const fh = await open(d.tmp, 'r').catch(() => undefined);
    if (!fh) {
      // The download finished (renamed) or failed between `ready` and here.
      if (this.files.has(digest)) return this.open(ref, digest, credentials, range, size);
      throw d.failed ?? new RegistryError('RegistryUnavailable', `blob ${digest} download failed`);
    }
    return { size: d.size, source, stream: tail(fh, d, r, this.pool) };
  }

  /**
   * The path of blob `digest` as a verified file in the cache, downloading it first when needed (for
   * tools that need a file, such as the UKI builder). Throws as {@link BlobCache.open}, and the stream
   * error (e.g. `DigestMismatch`) when the download fails; `size` as there. The file may be evicted
   * later: read it soon.
   */
  async file(
    ref: ImageReference,
    digest: string,
    credentials?: RegistryCredentials,
    size?: number,
  ): Promise<string> {
    const blob = await this.open(ref, digest, credentials, undefined, size);
    if (blob.source !== 'hit') {
      await new Promise<void>((resolve, reject) => {
        blob.stream.on('error', reject).on('end', resolve).resume();
      });
    } else blob.stream.destroy();
    const cached = this.files.get(digest);
    if (!cached) throw new RegistryError('RegistryUnavailable', `blob ${digest} was not cached`);
    cached.used = Date.now();
    return this.path(digest);
  }

  /** Bytes of verified blobs on disk. */
  bytes(): number {
    return this.total;
  }

  /** Refuses a descriptor size that is no byte count or beyond `maxBlobBytes`, before any registry call. */
  private checkDescriptorSize(digest: string, size: number): void {
    if (!Number.isSafeInteger(size) || size < 0)
      throw new RegistryError(
        BLOB_SIZE_MISMATCH,
        `blob ${digest}: descriptor size ${size} is not a byte count`,
      );
    const maxBlob = this.o.maxBlobBytes ?? this.o.maxBytes;
    if (size > maxBlob)
      throw new RegistryError(
        LAYER_TOO_LARGE,
        `blob ${digest} has ${size} bytes (descriptor), more than --max-layer-size (${maxBlob} bytes)`,
      );
  }

  private path(digest: string): string {
    return join(this.o.dir, 'sha256', digest.slice('sha256:'.length));
  }

  private start(
    ref: ImageReference,
    digest: string,
    hex: string,
    credentials?: RegistryCredentials,
    expected?: number,
  ): Download {
    const tmp = join(this.o.dir, 'tmp', `${hex}.${randomBytes(4).toString('hex')}`);
    const events = new EventEmitter();
    events.setMaxListeners(0);
    const d: Download = {
      id: tmp,
      tmp,
      size: 0,
      written: 0,
      done: false,
      events,
      ready: Promise.resolve(),
    };
    this.inflight.set(digest, d);
    this.downloads++;
    const log = this.o.log.child({ image: formatReference(ref), digest });
    d.ready = (async () => {
      // A refused download leaves no file behind by the time open() rejects (not after).
      try {
        const fh = await open(tmp, 'w');
        let res: Awaited<ReturnType<RegistryClient['get']>>;
        try {
          res = await this.o.registry.get(ref, `/blobs/${digest}`, { credentials });
        } catch (err) {
          await fh.close();
          throw err;
        }
        d.size = Number(res.headers['content-length'] ?? Number.NaN);
        if (!Number.isSafeInteger(d.size) || d.size < 0) {
          res.body.destroy();
          await fh.close();
          throw new RegistryError('RegistryError', `blob ${digest}: registry sent no Content-Length`);
        }
        if (expected !== undefined && d.size !== expected) {
          res.body.destroy();
          await fh.close();
          sizeMatches(digest, d.size, expected, 'the registry announced');
        }
        const maxBlob = this.o.maxBlobBytes ?? this.o.maxBytes;
        if (d.size > maxBlob) {
          res.body.destroy();
          await fh.close();
          throw new RegistryError(
            LAYER_TOO_LARGE,
            `blob ${digest} has ${d.size} bytes, more than --max-layer-size (${maxBlob} bytes)`,
          );
        }
        await this.evict(d.size);
        if (this.total + this.reserved + d.size > this.o.maxBytes) {
          res.body.destroy();
          await fh.close();
          throw new RegistryError(
            'RegistryUnavailable',
            `blob ${digest} (${d.size} bytes) does not fit the cache now: downloads in flight hold its room`,
          );
        }
        this.reserved += d.size; // released by fill, as the file is counted or dropped
        void this.fill(res.body, fh, d, digest, log);
      } catch (err) {
        await unlink(tmp).catch(() => {});
        throw err;
      }
    })();
    d.ready.catch(async (err) => {
      d.failed = err as Error;
      d.done = true;
      this.inflight.delete(digest);
      await unlink(tmp).catch(() => {});
      events.emit('progress');
    });
    return d;
  }

  private async fill(
    body: Readable,
    fh: FileHandle,
    d: Download,
    digest: string,
    log: pino.Logger,
  ): Promise<void> {
    let reserved = true;
    const hash = createHash('sha256');
    const CH = this.pool.chunkBytes;
    // Bytes are written (and offered to transfers) in whole pool chunks: transfers at the growing
    // edge take each chunk from memory once instead of re-reading every small network read.
    let chunk = Buffer.allocUnsafeSlow(Math.min(CH, d.size));
    let filled = 0;
    let received = 0;
    const flush = async () => {
      await fh.write(chunk, 0, filled, d.written);
      this.pool.put(d.id, d.written / CH, chunk.subarray(0, filled));
      d.written += filled;
      d.events.emit('progress');
      chunk = Buffer.allocUnsafeSlow(Math.min(CH, d.size - d.written));
      filled = 0;
    };
    try {
      for await (const c of body) {
        const b = c as Buffer;
        received += b.length;
        if (received > d.size) break; // more than Content-Length: mismatch below, nothing more written
        hash.update(b);
        for (let off = 0; off < b.length; ) {
          const n = b.copy(chunk, filled, off);
          filled += n;
          off += n;
          if (filled === chunk.length) await flush();
        }
      }
      body.destroy();
      await fh.close();
      const got = `sha256:${hash.digest('hex')}`;
      if (got !== digest || received !== d.size) {
        throw new DigestMismatch(
          `blob ${digest}: received ${received} bytes with digest ${got}; transfer aborted`,
        );
      }
      await rename(d.tmp, this.path(digest));
      this.files.set(digest, { size: d.size, used: Date.now() });
      this.reserved -= d.size;
      reserved = false;
      this.total += d.size;
      log.info({ bytes: d.size }, 'blob verified and cached');
      void this.evict();
    } catch (err) {
      await fh.close().catch(() => {});
      d.failed = err as Error;
      log.error({ err: (err as Error).message, bytes: d.written }, 'blob download failed; transfers aborted');
      await unlink(d.tmp).catch(() => {});
    } finally {
      if (reserved) this.reserved -= d.size;
      d.done = true;
      this.inflight.delete(digest);
      d.events.emit('progress');
    }
  }

  /** Evicts least recently used verified files until `need` more bytes fit beside the reservations. */
  private async evict(need = 0): Promise<void> {
    const fits = () => this.total + this.reserved + need <= this.o.maxBytes;
    if (fits()) return;
    const byAge = [...this.files.entries()].sort((a, b) => a[1].used - b[1].used);
    for (const [digest, f] of byAge) {
      if (fits()) break;
      this.files.delete(digest);
      this.total -= f.size;
      await unlink(this.path(digest)).catch(() => {});
      this.o.log.info({ digest, bytes: f.size }, 'blob evicted from the cache');
    }
  }
}

/** Throws `BlobSizeMismatch` unless `actual` (what `what` says) is the descriptor's `expected` size. */
function sizeMatches(digest: string, actual: number, expected: number, what: string): void {
  if (actual !== expected)
    throw new RegistryError(
      BLOB_SIZE_MISMATCH,
      `blob ${digest}: ${what} ${actual} bytes, its OCI descriptor says ${expected}; refused`,
    );
}

function clamp(range: BlobRange | undefined, size: number): BlobRange {
  if (!range) return { start: 0, end: Math.max(0, size - 1) };
  if (range.start >= size || range.start > range.end)
    throw new RangeError(`range ${range.start}-${range.end} outside 0-${size - 1}`);
  return { start: range.start, end: Math.min(range.end, size - 1) };
}

/**
 * A stream of bytes `r` of `d` (a verified file, or one a download is still writing), read in the
 * pool's chunks. Of a download its final byte is only emitted once the download is verified (see the
 * file comment). Closes `fh` when it ends or is destroyed.
 */
function tail(fh: FileHandle, d: SourceFile, r: BlobRange, pool: ChunkPool): Readable {
  const CH = pool.chunkBytes;
  let pos = r.start;
  let reading = false;
  let pending = false;
  const out = new Readable({
    highWaterMark: CH,
    read() {
      void pump();
    },
    destroy(err, cb) {
      d.events?.off('progress', onProgress);
      fh.close().then(
        () => cb(err),
        () => cb(err),
      );
    },
  });
  // A failed download destroys its readers at once, maybe before a consumer attached (between
  // open() resolving and the reply piping it): without a listener that 'error' would be an uncaught
  // exception and end the process. Consumers still get the error (async iteration and pipeline
  // read the stream's stored error).
  out.on('error', () => undefined);
  const onProgress = () => void pump();
  d.events?.on('progress', onProgress);
  async function pump(): Promise<void> {
    if (out.destroyed) return;
    if (reading) {
      pending = true;
      return;
    }
    reading = true;
    try {
      for (;;) {
        if (d.failed) return void out.destroy(d.failed);
        const verified = d.done && !d.failed;
        const last = r.end;
        // Bytes we may send now: written ones, minus the final byte until verified.
        const limit = verified ? last + 1 : Math.min(d.written, last);
        if (d.size === 0) {
          if (verified) out.push(null);
          return;
        }
        if (pos > last) {
          out.push(null);
          return;
        }
        if (pos >= limit) return; // wait for progress
        const index = Math.floor(pos / CH);
        const chunkStart = index * CH;
        const chunkEnd = Math.min(chunkStart + CH, d.size);
        // A download offers whole chunks only (see fill).
        if (d.written < chunkEnd) return;
        const chunk = await pool.chunk(d.id, index, chunkEnd - chunkStart, fh);
        const piece = chunk.subarray(pos - chunkStart, Math.min(limit, chunkEnd) - chunkStart);
        if (out.destroyed) return;
        pos += piece.length;
        if (!out.push(piece)) return;
      }
    } catch (err) {
      out.destroy(err as Error);
    } finally {
      reading = false;
      if (pending) {
        pending = false;
        void pump();
      }
    }
  }
  return out;
}
