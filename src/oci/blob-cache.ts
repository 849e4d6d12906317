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
 * Memory (issue 35): a transfer sends the file (a verified blob, or the one a download is writing)
 * from chunks of the cache's {@link SendBuffers}, shared by transfers at the same offset, and takes
 * the next chunk only once the socket has written one to the kernel ({@link OpenBlob.sendTo}): one
 * transfer holds at most 2 × 256 KiB however slowly its client reads, all transfers together at
 * most the budget (`sendBufferBytes`, `--image-transfer-memory`, 32 MiB by default; a transfer that
 * finds it held waits for a buffer), and nothing is allocated per chunk. The page cache, not the
 * process, holds the rest of the blob. A download holds one 1 MiB staging buffer
 * ({@link DOWNLOAD_STAGING_BYTES}) and undici's bounded read-ahead of the registry's answer.
 * {@link OpenBlob.stream} (tools, tests) reads 256 KiB pieces of its own on demand, one ahead of its
 * consumer.
 */
import { createHash, randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { type FileHandle, mkdir, open, readdir, rename, rm, stat, unlink } from 'node:fs/promises';
import type { ServerResponse } from 'node:http';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type pino from 'pino';
import type { RegistryCredentials } from './docker-config.js';
import { formatReference, type ImageReference } from './reference.js';
import { type RegistryClient, RegistryError } from './registry-client.js';
import {
  type Chunk,
  readFully,
  SEND_BUFFER_BYTES,
  SEND_BUFFERS_PER_TRANSFER,
  SendBuffers,
} from './send-buffers.js';

export class DigestMismatch extends Error {}

export interface BlobRange {
  start: number;
  /** Inclusive. */
  end: number;
}

export interface OpenBlob {
  /** Size of the whole blob in bytes. */
  size: number;
  /** The bytes served: the whole blob, or the requested range clipped to it (inclusive). */
  range: BlobRange;
  /** `hit` (verified file), `join` (a download in flight), `miss` (this request started it). */
  source: 'hit' | 'join' | 'miss';
  /**
   * The bytes as a stream (tools, tests), made on first use; fails with the download's error
   * (e.g. {@link DigestMismatch}) before its last byte. Closes the file when it ends or is destroyed.
   */
  readonly stream: Readable;
  /**
   * Writes the bytes to an HTTP response whose headers the caller wrote, then ends it, from the
   * cache's {@link SendBuffers} (see the file comment: at most 2 buffers of this transfer exist at
   * once, each reused only after the socket wrote it). Rejects with the download's error (the
   * caller destroys the response: the client sees a transfer short of its `Content-Length`), or a
   * {@link ClientGone} when the response closed first. Closes the file either way.
   */
  sendTo(res: ServerResponse): Promise<void>;
  /** Closes the file when neither {@link OpenBlob.stream} nor {@link OpenBlob.sendTo} is used. */
  close(): Promise<void>;
}

/** {@link OpenBlob.sendTo}'s rejection when the client closed the connection before the last byte. */
export class ClientGone extends Error {}

/** A file being served: a verified blob (`done`, all `written`) or a download in flight. */
interface SourceFile {
  /** Unique per file incarnation: the key of its chunks in the {@link SendBuffers}. */
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

/**
 * Bytes a download collects before writing them to its file (one buffer per download in flight,
 * reused for the whole download): transfers at the growing edge wake once per this many bytes.
 */
export const DOWNLOAD_STAGING_BYTES = 1024 * 1024;

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
  /** The buffers every transfer sends from (see the file comment; tests read their counters). */
  readonly buffers: SendBuffers;

  constructor(
    private readonly o: {
      dir: string;
      maxBytes: number;
      registry: RegistryClient;
      log: pino.Logger;
      /** Budget of all transfers' send buffers in bytes (default 32 MiB, send-buffers.ts). */
      sendBufferBytes?: number;
      /** Bytes of one send buffer, a chunk (default 256 KiB). */
      sendBufferSize?: number;
      /** Largest blob downloaded, in bytes (default: `maxBytes`). */
      maxBlobBytes?: number;
    },
  ) {
    this.buffers = new SendBuffers({ maxBytes: o.sendBufferBytes, chunkBytes: o.sendBufferSize });
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
  open(
    ref: ImageReference,
    digest: string,
    credentials?: RegistryCredentials,
    range?: BlobRange,
    size?: number,
  ): Promise<OpenBlob> {
    return this.openTransfer(ref, digest, credentials, range, size);
  }

  private async openTransfer(
    ref: ImageReference,
    digest: string,
    credentials?: RegistryCredentials,
    range?: BlobRange,
    size?: number,
  ): Promise<Transfer> {
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
        return new Transfer(fh, file, r, 'hit', this.buffers);
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
      if (this.files.has(digest)) return this.openTransfer(ref, digest, credentials, range, size);
      throw d.failed ?? new RegistryError('RegistryUnavailable', `blob ${digest} download failed`);
    }
    return new Transfer(fh, d, r, source, this.buffers);
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
    const blob = await this.openTransfer(ref, digest, credentials, undefined, size);
    try {
      await blob.settled(); // a download's end, without reading its bytes
    } finally {
      await blob.close();
    }
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
    // Network reads are collected in one staging buffer, written when full: transfers at the
    // growing edge wake once per staging buffer, not per small network read. Reused after each
    // write (the write resolved: the bytes are in the file).
    const staging = Buffer.allocUnsafeSlow(Math.max(1, Math.min(DOWNLOAD_STAGING_BYTES, d.size)));
    let filled = 0;
    let received = 0;
    const flush = async () => {
      for (let off = 0; off < filled; ) {
        const { bytesWritten } = await fh.write(staging, off, filled - off, d.written + off);
        off += bytesWritten;
      }
      d.written += filled;
      filled = 0;
      d.events.emit('progress');
    };
    try {
      for await (const c of body) {
        const b = c as Buffer;
        received += b.length;
        if (received > d.size) break; // more than Content-Length: mismatch below, nothing more written
        hash.update(b);
        for (let off = 0; off < b.length; ) {
          const n = b.copy(staging, filled, off);
          filled += n;
          off += n;
          if (filled === staging.length) await flush();
        }
      }
      if (filled > 0 && received <= d.size) await flush();
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

/** Resolves on `d`'s next progress, or when `signal` aborts. */
function progress(d: SourceFile, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const on = () => {
      d.events?.off('progress', on);
      signal.removeEventListener('abort', on);
      resolve();
    };
    d.events?.on('progress', on);
    signal.addEventListener('abort', on, { once: true });
  });
}

/**
 * One transfer of bytes `range` of `d` (a verified file, or one a download is still writing) from
 * its own file handle (eviction may unlink the file meanwhile). Of a download, the range's final byte
 * is only read once the download is verified (see the file comment).
 */
class Transfer implements OpenBlob {
  readonly size: number;
  private streamed?: Readable;
  private closing?: Promise<void>;
  /** Chunk reads this transfer waited for that have not settled. */
  private readonly loads = new Set<Promise<unknown>>();
  /** Aborts waits for download progress and for send buffers once the transfer ended. */
  private readonly ended = new AbortController();

  constructor(
    private readonly fh: FileHandle,
    private readonly d: SourceFile,
    readonly range: BlobRange,
    readonly source: OpenBlob['source'],
    private readonly buffers: SendBuffers,
  ) {
    this.size = d.size;
  }

  get stream(): Readable {
    this.streamed ??= this.toStream();
    return this.streamed;
  }

  close(): Promise<void> {
    if (!this.closing) {
      this.ended.abort(new ClientGone('transfer closed'));
      // Chunks this transfer asked for may still be read through its handle, for others too.
      this.closing = Promise.allSettled([...this.loads])
        .then(() => this.fh.close())
        .catch(() => undefined);
    }
    return this.closing;
  }

  /** Resolves when the source file is verified (at once for a cached one); throws its failure. */
  async settled(): Promise<void> {
    while (!this.d.done) await progress(this.d, this.ended.signal);
    if (this.d.failed) throw this.d.failed;
  }

  async sendTo(res: ServerResponse): Promise<void> {
    const signal = this.ended.signal;
    const CH = this.buffers.chunkBytes;
    /** References handed to the socket whose write has not completed. */
    const inSocket = new Set<{ chunk: Chunk }>();
    let wake: (() => void) | undefined;
    const wakeUp = () => {
      const w = wake;
      wake = undefined;
      w?.();
    };
    let looping = true;
    let wentAway = false;
    // The response closes when the client goes away; a pipelined response that never got the
    // socket does not, so the connection's close counts too. Listened to until the last write
    // completed: what the socket still holds then is written off (see send-buffers.ts).
    const socket = res.req.socket;
    const gone = () => {
      wentAway = true;
      this.ended.abort(new ClientGone('client closed the connection'));
      for (const r of inSocket) this.buffers.forget(r.chunk);
      inSocket.clear();
      settle();
    };
    const settle = () => {
      if (looping || (inSocket.size && !wentAway)) return;
      res.off('close', gone);
      socket.off('close', gone);
    };
    res.once('close', gone);
    socket.once('close', gone);
    signal.addEventListener('abort', wakeUp, { once: true });
    if (res.destroyed || socket.destroyed) gone(); // closed before the first byte: nothing to send
    try {
      let pos = this.range.start;
      for (;;) {
        const limit = await this.sendable(pos);
        if (limit === undefined) break;
        const index = Math.floor(pos / CH);
        const chunkStart = index * CH;
        const chunkEnd = Math.min(chunkStart + CH, this.d.size);
        const chunk = await this.chunkAt(index, chunkEnd - chunkStart, inSocket.size, signal);
        if (!chunk) {
          await new Promise<void>((resolve) => {
            wake = resolve;
          });
          continue;
        }
        const piece = chunk.buf.subarray(pos - chunkStart, Math.min(limit, chunkEnd) - chunkStart);
        pos += piece.length;
        const ref = { chunk };
        inSocket.add(ref);
        res.write(piece, (err) => {
          // Written to the kernel, or failed (the client went away): reusable, unless written off.
          if (!inSocket.delete(ref)) return;
          this.buffers.release(ref.chunk);
          if (err) return gone();
          wakeUp();
          settle();
        });
      }
      res.end();
    } finally {
      looping = false;
      signal.removeEventListener('abort', wakeUp);
      settle();
      await this.close();
    }
  }

  /**
   * Chunk `index` (`bytes` long), loaded, for a transfer with `inSocket` chunks in its socket: at
   * most SEND_BUFFERS_PER_TRANSFER, the next one read while one is in the socket, so `undefined`
   * when this transfer holds its share or none is free now. Throws the read's failure or `signal`'s reason.
   */
  private async chunkAt(
    index: number,
    bytes: number,
    inSocket: number,
    signal: AbortSignal,
  ): Promise<Chunk | undefined> {
    let chunk: Chunk | undefined;
    if (inSocket === 0) chunk = await this.buffers.acquire(this.d.id, index, bytes, this.fh, signal);
    else if (inSocket < SEND_BUFFERS_PER_TRANSFER)
      chunk = this.buffers.tryAcquire(this.d.id, index, bytes, this.fh);
    if (!chunk) return undefined;
    this.track(chunk);
    try {
      await chunk.loaded;
      if (signal.aborted) throw signal.reason;
    } catch (err) {
      this.buffers.release(chunk);
      throw err;
    }
    return chunk;
  }

  /** Remembers `chunk`'s read until it settled ({@link Transfer.close} waits for it). */
  private track(chunk: Chunk): void {
    if (chunk.settled) return;
    const p: Promise<unknown> = chunk.loaded.then(
      () => this.loads.delete(p),
      () => this.loads.delete(p),
    );
    this.loads.add(p);
  }

  /**
   * The end (exclusive) of the bytes from `pos` that may be sent now, waiting for a download's
   * progress; undefined past the range. `wholeChunks`: of a download in progress only whole chunks
   * count (the chunk buffers are shared; the file-backed path reads any written byte). Throws the
   * download's failure, or the transfer's end.
   */
  private async sendable(pos: number, wholeChunks = true): Promise<number | undefined> {
    const d = this.d;
    const last = this.range.end;
    const signal = this.ended.signal;
    for (;;) {
      if (d.failed) throw d.failed;
      if (signal.aborted) throw signal.reason;
      const verified = d.done;
      if (d.size === 0 || pos > last) {
        if (verified) return undefined;
      } else {
        // Bytes we may send now: written ones, minus the range's final byte until verified.
        const limit = verified ? last + 1 : Math.min(d.written, last);
        const chunkEnd = Math.min(
          (Math.floor(pos / this.buffers.chunkBytes) + 1) * this.buffers.chunkBytes,
          d.size,
        );
        if (pos < limit && (verified || !wholeChunks || d.written >= chunkEnd)) return limit;
      }
      await progress(d, signal);
    }
  }

  /**
   * Reads the bytes at `pos` that may be served now into `buf` (as many as fit), waiting for a
   * download's progress; 0 past the range. Throws the download's failure, or the transfer's end.
   */
  private async readAt(buf: Buffer, pos: number): Promise<number> {
    const limit = await this.sendable(pos, false);
    if (limit === undefined) return 0;
    const n = Math.min(buf.length, limit - pos);
    await readFully(this.fh, buf, n, pos);
    return n;
  }

  private toStream(): Readable {
    let pos = this.range.start;
    const out = new Readable({
      highWaterMark: SEND_BUFFER_BYTES,
      read: () => {
        // Called again only after this push: one piece in flight at a time.
        const piece = Buffer.allocUnsafeSlow(
          Math.min(SEND_BUFFER_BYTES, Math.max(1, this.range.end - pos + 1)),
        );
        this.readAt(piece, pos).then(
          (n) => {
            if (out.destroyed) return;
            if (n === 0) return void out.push(null);
            pos += n;
            out.push(n === piece.length ? piece : piece.subarray(0, n));
          },
          (err: Error) => out.destroy(err),
        );
      },
      destroy: (err, cb) => {
        this.close().then(
          () => cb(err),
          () => cb(err),
        );
      },
    });
    // A consumer that attached no 'error' listener must not crash the process on a failed download
    // (async iteration and pipeline read the stream's stored error).
    out.on('error', () => undefined);
    return out;
  }
}
