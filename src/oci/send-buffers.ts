/**
 * The memory every blob transfer of the boot server sends from (blob-cache.ts, `OpenBlob.sendTo`): a
 * budget of reusable buffers (default 128 × 256 KiB = 32 MiB, `--image-transfer-memory`), each
 * holding one aligned chunk of a blob file. A transfer takes a reference on the chunk it sends next,
 * hands the chunk's bytes to the socket and drops the reference once the socket has written them to
 * the kernel (the write's callback). Transfers of one file at the same offset share the chunk (one
 * file read for all of them: 50 servers booting one image walk it nearly in step); a chunk nobody
 * references stays readable (idle) until its buffer is needed for another one, least recently used
 * first, and idle chunks hold at most `idleBytes` (default 8 MiB): beyond, a new chunk takes an idle
 * chunk's buffer before a new buffer is made, so buffers are made only as far as transfers hold
 * them. Nothing is allocated per chunk, so serving 50 × 200 MiB leaves no garbage behind for V8 to
 * collect (issue 35: garbage Buffers awaiting collection were part of the boot server's 340–750 MiB).
 *
 * Bounds (issue 35), whatever a client reads:
 * - per transfer (one connection): references on at most {@link SEND_BUFFERS_PER_TRANSFER} chunks
 *   (2 × 256 KiB = 512 KiB by default) — a client that reads nothing pins two chunks until its
 *   socket closes (the boot server closes sockets without traffic after `idleMs`, 60 s,
 *   bootsignals/http-app.ts);
 * - all transfers together: at most `maxBytes`. A transfer that needs a chunk nobody has while every
 *   buffer is referenced waits for one (first come, first served) instead of allocating more: past
 *   `maxBytes / (2 × chunkBytes)` (64 by default) clients that stopped reading at different offsets,
 *   other transfers slow down rather than the process growing, until those sockets time out.
 *
 * The kernel's socket send buffer (`net.ipv4.tcp_wmem`) comes on top of this for each connection; it
 * is kernel memory, not the process's.
 *
 * Chunks are keyed by a file id chosen by the caller, unique per file incarnation (a download's temp
 * file, or a verified blob's digest), so bytes of a download that later fails its digest check are
 * never served under the blob's digest. A chunk is loaded only once its bytes are in the file. A
 * failed read rejects every waiter for that chunk and is not remembered.
 *
 * A chunk whose transfer ended while a socket still held its bytes (the client went away) is written
 * off ({@link SendBuffers.forget}): once nobody references it, its buffer is left to the garbage
 * collector, never reused, so a write the kernel had not finished can never see its bytes change.
 */
import type { FileHandle } from 'node:fs/promises';

/** Bytes of one chunk: the unit of file reads and socket writes of a transfer. */
export const SEND_BUFFER_BYTES = 256 * 1024;
/** Chunks one transfer references at most: one in the socket while the next is read from the file. */
export const SEND_BUFFERS_PER_TRANSFER = 2;
/** Default budget of all chunk buffers together (`--image-transfer-memory`). */
export const SEND_BUFFERS_MAX_BYTES = 32 * 1024 * 1024;
/**
 * Default bytes of idle chunks kept readable: transfers a little behind others find their chunks
 * there (50 transfers of one image stay within a few MiB of each other); beyond, an idle chunk's
 * buffer is taken before a new one is made, so the budget is used only as far as transfers need it.
 */
export const SEND_BUFFERS_IDLE_BYTES = 8 * 1024 * 1024;

/** A chunk of a file in a buffer of the budget; `buf` holds its bytes once `loaded` resolved. */
export interface Chunk {
  readonly key: string;
  readonly buf: Buffer;
  /** Resolves once the bytes are in `buf`; rejects with the read's error. */
  readonly loaded: Promise<void>;
  refs: number;
  /** `loaded` settled: the read no longer writes into `buf`. */
  settled: boolean;
  failed: boolean;
  /** Written off: never reused (see the file comment). */
  forgotten: boolean;
}

export class SendBuffers {
  readonly chunkBytes: number;
  readonly maxBytes: number;
  private readonly maxBuffers: number;
  private readonly maxIdle: number;
  /** Chunks by key: loading, referenced, or idle (unreferenced, still readable). */
  private readonly chunks = new Map<string, Chunk>();
  /** Idle chunks, least recently used first (insertion order). */
  private readonly idle = new Map<string, Chunk>();
  private readonly free: Buffer[] = [];
  /** Buffers of the budget in existence: free, idle, referenced. */
  private live = 0;
  private readonly waiters: { grant: (b: Buffer) => void }[] = [];
  /** File reads issued (tests and benchmarks compare them with the bytes served). */
  reads = 0;
  /** Most bytes of referenced chunks at once so far (tests and benchmarks read it). */
  peakReferencedBytes = 0;
  /** Chunks with at least one reference (a chunk shared by many transfers counts once). */
  private referenced = 0;

  constructor(o: { chunkBytes?: number; maxBytes?: number; idleBytes?: number } = {}) {
    this.chunkBytes = o.chunkBytes ?? SEND_BUFFER_BYTES;
    this.maxBytes = o.maxBytes ?? SEND_BUFFERS_MAX_BYTES;
    this.maxIdle = Math.floor((o.idleBytes ?? SEND_BUFFERS_IDLE_BYTES) / this.chunkBytes);
    // At least one transfer's worth, or nothing could ever be sent.
    this.maxBuffers = Math.max(SEND_BUFFERS_PER_TRANSFER, Math.floor(this.maxBytes / this.chunkBytes));
  }

  /**
   * A reference on chunk `index` of file `fileId` (`length` bytes at `index × chunkBytes`, read from
   * `fh` unless another transfer has it), waiting in line for a buffer when every one is referenced
   * (rejects with `signal`'s reason when it aborts first). The caller awaits `loaded` and must
   * {@link SendBuffers.release} (or {@link SendBuffers.forget}) the chunk exactly once.
   */
  async acquire(fileId: string, index: number, length: number, fh: FileHandle, signal?: AbortSignal) {
    const key = `${fileId}#${index}`;
    const had = this.join(key);
    if (had) return had;
    const buf = this.takeBuffer() ?? (await this.waitBuffer(signal));
    // Another transfer may have loaded it while this one waited: give the buffer back, join.
    const meanwhile = this.join(key);
    if (meanwhile) {
      this.giveBack(buf);
      return meanwhile;
    }
    return this.load(key, buf, index, length, fh);
  }

  /** As {@link SendBuffers.acquire}, but undefined instead of waiting for a buffer. */
  tryAcquire(fileId: string, index: number, length: number, fh: FileHandle): Chunk | undefined {
    const key = `${fileId}#${index}`;
    const had = this.join(key);
    if (had) return had;
    const buf = this.waiters.length ? undefined : this.takeBuffer();
    return buf ? this.load(key, buf, index, length, fh) : undefined;
  }

  /**
   * Drops a reference whose bytes nobody reads any more (the socket wrote them). Of a chunk still
   * being read, once the read ended (its buffer must not be reused while the read writes into it).
   */
  release(c: Chunk): void {
    if (!c.settled) {
      c.loaded.then(
        () => this.release(c),
        () => this.release(c),
      );
      return;
    }
    c.refs--;
    if (c.refs > 0) return;
    this.referenced--;
    if (c.forgotten) {
      if (this.chunks.get(c.key) === c) this.chunks.delete(c.key);
      this.live--; // left to the garbage collector
      this.serveWaiters();
      return;
    }
    if (c.failed || this.chunks.get(c.key) !== c) {
      this.giveBack(c.buf);
      return;
    }
    this.idle.set(c.key, c);
    this.serveWaiters();
  }

  /** Drops a reference whose bytes a socket may still hold: the buffer is never reused. */
  forget(c: Chunk): void {
    c.forgotten = true;
    this.release(c);
  }

  /** Bytes of the chunks referenced now, each counted once however many transfers share it (at most `maxBytes`). */
  referencedBytes(): number {
    return this.referenced * this.chunkBytes;
  }

  private join(key: string): Chunk | undefined {
    const c = this.chunks.get(key);
    if (!c) return undefined;
    this.idle.delete(key);
    this.ref(c);
    return c;
  }

  private load(key: string, buf: Buffer, index: number, length: number, fh: FileHandle): Chunk {
    this.reads++;
    const c: Chunk = {
      key,
      buf,
      refs: 0,
      settled: false,
      failed: false,
      forgotten: false,
      loaded: readFully(fh, buf, length, index * this.chunkBytes),
    };
    c.loaded.then(
      () => {
        c.settled = true;
      },
      () => {
        c.settled = true;
        c.failed = true;
        if (this.chunks.get(key) === c) this.chunks.delete(key);
      },
    );
    this.chunks.set(key, c);
    this.ref(c);
    return c;
  }

  private ref(c: Chunk): void {
    if (c.refs++ === 0) this.referenced++;
    this.peakReferencedBytes = Math.max(this.peakReferencedBytes, this.referenced * this.chunkBytes);
  }

  /** A free buffer, a new one within the budget, or the buffer of the least recently used idle chunk. */
  private takeBuffer(): Buffer | undefined {
    const free = this.free.pop();
    if (free) return free;
    // Idle chunks keep at most `idleBytes` of buffers from new chunks; beyond, the oldest gives its own.
    if (this.idle.size >= this.maxIdle) return this.evictIdle();
    if (this.live < this.maxBuffers) {
      this.live++;
      return Buffer.allocUnsafeSlow(this.chunkBytes);
    }
    return this.evictIdle();
  }

  private evictIdle(): Buffer | undefined {
    const oldest = this.idle.values().next();
    if (oldest.done) return undefined;
    const c = oldest.value;
    this.idle.delete(c.key);
    this.chunks.delete(c.key);
    return c.buf;
  }

  private waitBuffer(signal?: AbortSignal): Promise<Buffer> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const waiter = {
        grant: (b: Buffer) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(b);
        },
      };
      const onAbort = () => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  private giveBack(b: Buffer): void {
    this.free.push(b);
    this.serveWaiters();
  }

  private serveWaiters(): void {
    while (this.waiters.length) {
      const b = this.takeBuffer();
      if (!b) return;
      this.waiters.shift()!.grant(b);
    }
  }
}

/** Reads `n` bytes at `position` of `fh` into the start of `buf`. */
export async function readFully(fh: FileHandle, buf: Buffer, n: number, position: number): Promise<void> {
  for (let off = 0; off < n; ) {
    const { bytesRead } = await fh.read(buf, off, n - off, position + off);
    if (bytesRead === 0) throw new RangeError(`file ended at ${position + off}, ${n - off} bytes short`);
    off += bytesRead;
  }
}
