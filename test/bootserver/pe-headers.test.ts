/**
 * pe-headers.ts: what the HTTP-boot route may send before the attempt's pin is stored — the PE
 * headers of a UKI and nothing of its sections — read from crafted PE images (layout per Microsoft's
 * "PE Format": e_lfanew at 0x3c, COFF header, optional header, 40-byte section entries).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { peHeaderLength, readPeHeaders, withoutSecret } from '../../src/bootserver/pe-headers.js';

/** A PE image whose sections (raw size, raw offset) are `sections`, padded to `total` bytes. */
function pe(sections: [number, number][], total = 8192): Buffer {
  const b = Buffer.alloc(total);
  b.write('MZ', 0, 'latin1');
  const at = 0x80;
  b.writeUInt32LE(at, 0x3c);
  b.write('PE\0\0', at, 'latin1');
  b.writeUInt16LE(sections.length, at + 6);
  const optional = 0xf0;
  b.writeUInt16LE(optional, at + 20);
  let entry = at + 24 + optional;
  for (const [size, offset] of sections) {
    b.writeUInt32LE(size, entry + 16);
    b.writeUInt32LE(offset, entry + 20);
    entry += 40;
  }
  return b;
}

describe('PE headers of a UKI', () => {
  it('end where the first section with raw data begins, whatever the table order', () => {
    assert.equal(
      peHeaderLength(
        pe([
          [0x200, 0x1000],
          [0x400, 0x400],
          [0, 0x200],
        ]),
      ),
      0x400,
    );
  });
  it('are none for anything that is no PE image or does not parse', () => {
    const notMz = pe([[0x200, 0x400]]);
    notMz.write('ZM', 0, 'latin1');
    assert.equal(peHeaderLength(notMz), 0, 'no MZ');
    const noSignature = pe([[0x200, 0x400]]);
    noSignature.write('XX', 0x80, 'latin1');
    assert.equal(peHeaderLength(noSignature), 0, 'no PE signature');
    assert.equal(peHeaderLength(pe([[0x200, 0x400]]).subarray(0, 0x100)), 0, 'section table cut off');
    assert.equal(peHeaderLength(pe([[0x200, 0x100]])), 0, 'raw data inside the section table');
    assert.equal(peHeaderLength(pe([])), 0, 'no section');
    assert.equal(peHeaderLength(Buffer.from('MZ')), 0, 'too short');
  });
  it('are not sent early when they would contain the secret', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pe-headers-'));
    try {
      const image = pe([[0x200, 0x400]]);
      const file = join(dir, 'uki.efi');
      writeFileSync(file, image);
      const head = readPeHeaders(file);
      assert.deepEqual(head, image.subarray(0, 0x400));
      assert.deepEqual(withoutSecret(head, 'token-abc'), head);
      image.write('token-abc', 0x300, 'latin1');
      writeFileSync(file, image);
      assert.equal(withoutSecret(readPeHeaders(file), 'token-abc').length, 0);
      writeFileSync(file, Buffer.from('not a PE image'));
      assert.equal(readPeHeaders(file).length, 0, 'no PE image: nothing to send early');
      assert.equal(readPeHeaders(join(dir, 'missing.efi')).length, 0, 'unreadable: nothing early, no throw');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
