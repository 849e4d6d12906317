/**
 * UEFI HTTP boot pieces without a cluster: the UKI layout (built for real with objcopy and the
 * Debian systemd EFI stub, then read back with objdump), the attempt-scoped URL, and how a client
 * address is matched against a Server's known addresses.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { httpBootFileUrl } from '../../src/api/v1alpha1/boot-method.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { knownAddresses } from '../../src/bootserver/client-identity.js';
import { DEFAULT_EFI_STUB, UkiBuilder, ukiObjcopyArgs } from '../../src/bootserver/uki.js';
import { clientAddress } from '../../src/bootsignals/client-address.js';

const MiB = 1024 * 1024;

describe('UKI layout', () => {
  it('puts .linux at 32 MiB and .initrd after the kernel, never below 48 MiB', () => {
    const files = { stub: 's', kernel: 'k', initrd: 'i', cmdline: 'c', osrel: 'o', out: 'u' };
    const vma = (args: string[], section: string) =>
      Number(args.find((a) => a.startsWith(`${section}=0x`))!.split('=')[1]);
    const small = ukiObjcopyArgs(files, 14 * MiB);
    assert.equal(vma(small, '.linux'), 32 * MiB);
    assert.equal(vma(small, '.initrd'), 48 * MiB);
    const big = ukiObjcopyArgs(files, 20 * MiB + 1);
    assert.equal(vma(big, '.initrd'), 53 * MiB, 'next MiB boundary after the kernel');
    assert.deepEqual(big.slice(-2), ['s', 'u']);
  });

  const dir = mkdtempSync(join(tmpdir(), 'uki-test-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  it('builds a PE file with the command line, kernel and initrd sections, cached per input', {
    skip: !existsSync(DEFAULT_EFI_STUB) && 'systemd-boot-efi not installed',
  }, async () => {
    const kernel = join(dir, 'vmlinuz');
    const initrd = join(dir, 'initrd');
    writeFileSync(kernel, Buffer.alloc(3 * MiB, 1));
    writeFileSync(initrd, Buffer.alloc(64 * 1024, 2));
    const b = new UkiBuilder();
    try {
      const a = await b.get({ kernel, initrd, cmdline: 'console=ttyS0 metal.token=abc' });
      assert.equal(await b.get({ kernel, initrd, cmdline: 'console=ttyS0 metal.token=abc' }), a, 'cached');
      const other = await b.get({ kernel, initrd, cmdline: 'console=ttyS0 metal.token=def' });
      assert.notEqual(other, a);
      const headers = execFileSync('objdump', ['-h', a], { encoding: 'utf8' });
      for (const [name, addr] of [
        ['.cmdline', '0000000000030000'],
        ['.linux', '0000000002000000'],
        ['.initrd', '0000000003000000'],
      ])
        assert.match(headers, new RegExp(`\\${name}\\s+\\S+\\s+${addr}`), `${name} at ${addr}`);
      assert.equal(readFileSync(a).subarray(0, 2).toString('latin1'), 'MZ');
      assert.ok(readFileSync(a).includes('metal.token=abc'));
    } finally {
      b.close();
    }
  });
});

describe('HTTP boot identity', () => {
  it('the URL is attempt-scoped and canonical', () => {
    assert.equal(
      httpBootFileUrl('http://10.0.0.1:8082/', 'ABCDEF00-0000-4000-8000-000000000001', 3),
      'http://10.0.0.1:8082/httpboot/abcdef00-0000-4000-8000-000000000001/3/uki.efi',
    );
  });

  it("knows a Server's addresses from every NIC's ips and legacy ip", () => {
    const srv = {
      status: {
        networkInterfaces: [
          { name: 'eth0', macAddress: 'a', ips: ['10.0.0.5', 'fd00::5'], ip: '10.0.0.5' },
          { name: 'eth1', macAddress: 'b', ip: '10.0.1.5' },
          { name: 'eth2', macAddress: 'c' },
        ],
      },
    } as unknown as Server;
    assert.deepEqual(knownAddresses(srv).sort(), ['10.0.0.5', '10.0.1.5', 'fd00::5']);
    assert.deepEqual(knownAddresses({ status: {} } as unknown as Server), []);
  });

  it('reads IPv4-mapped socket addresses as IPv4', () => {
    assert.equal(clientAddress('::ffff:10.0.0.5'), '10.0.0.5');
    assert.equal(clientAddress('fd00::5'), 'fd00::5');
    assert.equal(clientAddress(undefined), 'unknown');
  });
});
