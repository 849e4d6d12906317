/**
 * Recently read chunks of blob files, in memory and shared by every transfer of the same file: when
 * N servers boot one image at once their transfers walk the same file at nearly the same offsets, so
 * one `read` (and one Buffer) serves all of them instead of N reads and N short-lived Buffers. A
 * CPU profile of the boot server serving 50 × 200 MiB (bench/oci-pull.ts) spent ~45 % of its time in
 * per-transfer file reads and the garbage collection of their 1 MiB Buffers.
 *
 * - Chunks are aligned (`chunkBytes`, default 1 MiB) and keyed by a file id chosen by the caller,
 *   unique per file incarnation (a download's temp file, or a verified blob's digest), so bytes of a
 *   download that later fails its digest check are never served under the blob's digest.
 * - Only whole chunks are pooled (the caller asks once the bytes are on disk); at most `maxBytes`
 *   (default 32 MiB), least recently used dropped first. Buffers handed out are shared and must not be
 *   written to.
 * - A failed read rejects every waiter for that chunk and is not remembered.
 */
import type { FileHandle } from 'node:fs/promises';

export const DEFAULT_CHUNK_BYTES = 1024 * 1024;

export class ChunkPool {
  readonly chunkBytes: number;
  private readonly maxBytes: number;
  /** Insertion order is recency order (a hit re-inserts). */
  private readonly chunks = new Map<string, { buf: Promise<Buffer>; bytes: number }>();
  private bytes = 0;
  /** Reads issued to files (tests and benchmarks compare it with the bytes served). */
  reads = 0;

  constructor(o: { chunkBytes?: number; maxBytes?: number } = {}) {
    this.chunkBytes = o.chunkBytes ?? DEFAULT_CHUNK_BYTES;
    this.maxBytes = o.maxBytes ?? 32 * this.chunkBytes;
  }

  /**
   * Chunk `index` of file `fileId`: bytes `[index * chunkBytes, index * chunkBytes + length)`, read
   * from `fh` when not pooled. `length` is `chunkBytes` except for the file's last chunk. Rejects
   * with the read's error, or a `RangeError` when the file is shorter than asked.
   */
  chunk(fileId: string, index: number, length: number, fh: FileHandle): Promise<Buffer> {
    const key = `${fileId}#${index}`;
    const hit = this.chunks.get(key);
    if (hit) {
      this.chunks.delete(key);
      this.chunks.set(key, hit);
      return hit.buf;
    }
    this.reads++;
    const buf = readFully(fh, index * this.chunkBytes, length);
    const entry = { buf, bytes: length };
    this.insert(key, entry);
    buf.catch(() => {
      if (this.chunks.get(key) === entry) {
        this.chunks.delete(key);
        this.bytes -= length;
      }
    });
    return buf;
  }

  private insert(key: string, entry: { buf: Promise<Buffer>; bytes: number }): void {
    const old = this.chunks.get(key);
    if (old) {
      this.chunks.delete(key);
      this.bytes -= old.bytes;
    }
    this.chunks.set(key, entry);
    this.bytes += entry.bytes;
    for (const [k, e] of this.chunks) {
      if (this.bytes <= this.maxBytes || k === key) break;
      this.chunks.delete(k);
      this.bytes -= e.bytes;
    }
  }

  /** Pools chunk `index` of `fileId` from bytes the caller has in memory (a download writing it). */
  put(fileId: string, index: number, buf: Buffer): void {
    this.insert(`${fileId}#${index}`, { buf: Promise.resolve(buf), bytes: buf.length });
  }

  /** Bytes held (at most `maxBytes` plus one chunk). */
  heldBytes(): number {
    return this.bytes;
  }
}

async function readFully(fh: FileHandle, position: number, length: number): Promise<Buffer> {
  const buf = Buffer.allocUnsafeSlow(length);
  let off = 0;
  while (off < length) {
    const { bytesRead } = await fh.read(buf, off, length - off, position + off);
    if (bytesRead === 0) throw new RangeError(`file ended at ${position + off}, ${length - off} bytes short`);
    off += bytesRead;
  }
  return buf;
}
