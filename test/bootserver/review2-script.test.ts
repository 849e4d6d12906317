/**
 * Second security review (issue 29), the attempt script's pure parts (no cluster):
 * - N12: an image command line cannot break the iPXE `kernel` line or drop the token: control
 *   characters, overlong command lines and the operator's own keys are refused (409
 *   `InvalidCommandLine`), and the `metal.*` keys come before the image's arguments.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attemptKernelArgs, attemptScript } from '../../src/bootserver/ipxe-script.js';
import type { ImageEntry } from '../../src/oci/image-catalog.js';

const input = (cmdline: string) => ({
  image: { name: 'os', kernel: '/k', initrd: '/i', cmdline, mode: 'os' } as ImageEntry,
  uuid: '0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d',
  attempt: 1,
  token: 'tok123',
  bootServerUrl: 'http://10.0.0.1:8082',
  registryUrl: 'http://10.0.0.1:10000',
});

const refused = (cmdline: string, why: RegExp) =>
  assert.throws(
    () => attemptScript(input(cmdline)),
    (e: { status?: number; reason?: string; message: string }) =>
      e.status === 409 && e.reason === 'InvalidCommandLine' && why.test(e.message),
    JSON.stringify(cmdline.slice(0, 40)),
  );

describe('second security review: the attempt script', () => {
  it('N12: control characters, overlong command lines and the operator keys are refused', () => {
    refused('console=ttyS0\nboot', /control characters/);
    refused('console=ttyS0\r', /control characters/);
    refused(`console=ttyS0 ${'a'.repeat(2000)}`, /longer than 1024/);
    refused('console=ttyS0 metal.token=forged', /sets metal\.token/);
    refused('ignition.config.url=http://evil/', /sets ignition\.config\.url/);
    // Keys that merely start alike are the image's own.
    assert.ok(attemptScript(input('metal.test=oci metal.tokenizer=1')).includes('metal.test=oci'));
  });

  it('N12: the metal.* keys and the token come before the image arguments (an iPXE # cannot drop them)', () => {
    const script = attemptScript(input('console=ttyS0 # rest'));
    const kernel = script.split('\n').find((l) => l.startsWith('kernel '))!;
    const hash = kernel.indexOf('#');
    for (const key of ['initrd=initrd.img', 'metal.token=tok123', 'ignition.config.url=', 'metal.uuid='])
      assert.ok(kernel.indexOf(key) >= 0 && kernel.indexOf(key) < hash, `${key} before the image's '#'`);
    assert.deepEqual(attemptKernelArgs(input('quiet')).slice(-1), ['quiet']);
  });
});
