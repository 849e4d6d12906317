/**
 * The headers of a PE/COFF image (a UKI): the bytes before the first section's raw data, which hold
 * the DOS stub, the PE signature, the COFF and optional headers and the section table — names,
 * sizes and offsets, nothing a section carries. The HTTP-boot route sends them while the attempt's
 * pin is being stored (http-boot.ts), because the secret part of a UKI, the attempt token, lives in
 * its `.cmdline` section.
 *
 * Layout per Microsoft's "PE Format" specification: `e_lfanew` (u32 at 0x3c) points at the `PE\0\0`
 * signature; the COFF header follows (NumberOfSections u16 at +6, SizeOfOptionalHeader u16 at +20);
 * the section table follows the optional header, 40 bytes per entry with SizeOfRawData (u32 at +16)
 * and PointerToRawData (u32 at +20). Pure, never throws: anything that does not parse is length 0.
 * The UKI builder reads a file's headers once, when the build ends (uki.ts), so a GET sends them
 * from memory: no file system round trip before its first byte.
 */
import { closeSync, openSync, readSync } from 'node:fs';

/** How much of a file {@link peHeaderLength} may read: the headers of any UKI fit in it. */
export const PE_HEADER_READ_BYTES = 4096;

const SECTION_ENTRY_BYTES = 40;

/**
 * Bytes of `image` before the first section's raw data (the PE headers), or 0 when `image` is no PE
 * image, its section table does not fit in `image`, or it has no section with raw data.
 */
export function peHeaderLength(image: Buffer): number {
  if (image.length < 0x40 || image.toString('latin1', 0, 2) !== 'MZ') return 0;
  const pe = image.readUInt32LE(0x3c);
  if (pe + 24 > image.length || image.toString('latin1', pe, pe + 4) !== 'PE\0\0') return 0;
  const sections = image.readUInt16LE(pe + 6);
  const table = pe + 24 + image.readUInt16LE(pe + 20);
  const tableEnd = table + sections * SECTION_ENTRY_BYTES;
  if (sections === 0 || tableEnd > image.length) return 0;
  let first = Number.POSITIVE_INFINITY;
  for (let s = table; s < tableEnd; s += SECTION_ENTRY_BYTES) {
    const size = image.readUInt32LE(s + 16);
    const at = image.readUInt32LE(s + 20);
    if (size > 0 && at < first) first = at;
  }
  // Raw data that starts inside the section table would be no valid image: send nothing early.
  return Number.isFinite(first) && first >= tableEnd && first <= image.length ? first : 0;
}

/**
 * The PE headers of the file at `path` (see {@link peHeaderLength}; at most
 * {@link PE_HEADER_READ_BYTES}), or an empty buffer when they cannot be told apart or the file
 * cannot be read (out of file descriptors, say: then nothing goes out before the pin, which is
 * always safe). Reads synchronously: once per built file. Never throws.
 */
export function readPeHeaders(path: string): Buffer {
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    const buf = Buffer.alloc(PE_HEADER_READ_BYTES);
    const bytesRead = readSync(fd, buf, 0, buf.length, 0);
    return Buffer.from(buf.subarray(0, peHeaderLength(buf.subarray(0, bytesRead))));
  } catch {
    return Buffer.alloc(0);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * `head` when it may go out before the pin, an empty buffer when it contains `secret` (defence in
 * depth: a section table cannot hold the token, but if it ever did, nothing is sent before the pin).
 */
export function withoutSecret(head: Buffer, secret: string): Buffer {
  return secret && head.includes(secret) ? Buffer.alloc(0) : head;
}
