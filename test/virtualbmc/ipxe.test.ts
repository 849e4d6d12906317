import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseIpxeScript, parseKernelCommandLine } from '../../src/virtualbmc/ipxe.js';

describe('iPXE script parsing for simulated hosts', () => {
  it('reads the kernel line and the metal.* keys', () => {
    const s = parseIpxeScript(
      [
        '#!ipxe',
        '# rendered by the boot server',
        'kernel http://10.0.0.1:8082/images/vmlinuz initrd=initrd.img metal.mode=os metal.registry=http://10.0.0.1:10000 metal.token=abc123 metal.uuid=0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d ignition.config.url=http://10.0.0.1:8082/ignition/0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d?token=abc123 console=ttyS0 quiet',
        'initrd http://10.0.0.1:8082/images/initrd.img',
        'boot',
      ].join('\n'),
    );
    assert.equal(s.kernelUrl, 'http://10.0.0.1:8082/images/vmlinuz');
    assert.deepEqual(s.initrdUrls, ['http://10.0.0.1:8082/images/initrd.img']);
    const c = s.cmdline!;
    assert.equal(c.mode, 'os');
    assert.equal(c.registry, 'http://10.0.0.1:10000');
    assert.equal(c.token, 'abc123');
    assert.equal(c.uuid, '0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d');
    assert.equal(
      c.ignitionUrl,
      'http://10.0.0.1:8082/ignition/0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d?token=abc123',
    );
    assert.equal(c.params.get('quiet'), '');
    assert.equal(c.params.get('console'), 'ttyS0');
    assert.equal(c.skipCallback, false);
    assert.equal(parseKernelCommandLine(['metal.callback=skip']).skipCallback, true);
  });

  it('tolerates CRLF, labels, options before the URL and quoted values', () => {
    const s = parseIpxeScript(
      ':start\r\nimgfree\r\nkernel --name vmlinuz --autofree "http://h/k" metal.mode=probe "metal.registry=http://r:1/" ignition.config.url=\'http://h/i?token=t1\'\r\nboot || goto start\r\n',
    );
    assert.equal(s.kernelUrl, 'http://h/k');
    assert.equal(s.cmdline?.mode, 'probe');
    assert.equal(s.cmdline?.registry, 'http://r:1/');
    assert.equal(s.cmdline?.ignitionUrl, 'http://h/i?token=t1');
    assert.equal(s.cmdline?.token, 't1', 'token taken from the ignition URL when metal.token is absent');
  });

  it('treats a script without a kernel as a local boot', () => {
    for (const script of [
      '#!ipxe\nexit\n',
      '#!ipxe\nsanboot --no-describe --drive 0x80\n',
      '',
      'garbage ~~ \u0000',
    ]) {
      const s = parseIpxeScript(script);
      assert.equal(s.kernelUrl, undefined, JSON.stringify(script));
      assert.equal(s.cmdline, undefined);
    }
  });

  it('infers the mode from the token when metal.mode is absent or unknown', () => {
    assert.equal(parseKernelCommandLine(['metal.registry=http://r']).mode, 'probe');
    assert.equal(parseKernelCommandLine(['metal.token=x']).mode, 'os');
    assert.equal(parseKernelCommandLine(['metal.mode=INSTALL', 'metal.token=x']).mode, 'os');
    assert.equal(parseKernelCommandLine(['metal.mode=PROBE', 'metal.token=x']).mode, 'probe');
    assert.equal(parseKernelCommandLine(['ignition.config.url=not a url']).token, undefined);
  });
});
