/**
 * Host-facing URLs (security review S16): what goes onto kernel command lines must be routable from
 * the boot network, so cluster-DNS names and the wildcard address are refused with a clear error,
 * and the sample manifests carry none.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { CommanderError } from 'commander';
import { hostFacingUrl } from '../../src/cmd/host-url.js';
import { runManager } from '../../src/cmd/manager.js';

function yamlFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? yamlFiles(p) : f.endsWith('.yaml') ? [p] : [];
  });
}

describe('host-facing URLs', () => {
  it('S16: no manifest under config/ puts a cluster-DNS URL on a command line', () => {
    for (const f of yamlFiles(join(process.cwd(), 'config'))) {
      const svcUrls = readFileSync(f, 'utf8').match(/https?:\/\/[^\s'"]*\.svc\b[^\s'"]*/g) ?? [];
      assert.deepEqual(svcUrls, [], f);
    }
  });

  it('S16: the manager refuses *.svc and wildcard URLs, and wants a URL when listening on all addresses', async () => {
    const cases: [string[], RegExp][] = [
      [['--registry-url=http://metal-registry.metal-system.svc:10000'], /--registry-url.*cluster-DNS/],
      [
        [
          '--registry-url=http://10.0.0.5:10000',
          '--bootserver-url=http://metal-bootserver.ns.svc.cluster.local:8082',
        ],
        /--bootserver-url.*cluster-DNS/,
      ],
      [['--registry-url=http://0.0.0.0:10000'], /wildcard/],
      [[], /--registry-url is required when listening on 0\.0\.0\.0/],
      [['--registry-url=http://10.0.0.5:10000'], /--bootserver-url is required/],
    ];
    for (const [argv, message] of cases) {
      await assert.rejects(
        runManager([...argv, '--kubeconfig=/nonexistent/kubeconfig'], {}),
        (err: unknown) =>
          err instanceof CommanderError && err.code === 'manager.hostUrl' && message.test(err.message),
        argv.join(' '),
      );
    }
  });

  it('S16: routable URLs and specific listen addresses pass', () => {
    assert.equal(
      hostFacingUrl('--registry-url', 'http://192.0.2.10:10000/', { host: '0.0.0.0', port: 1 }),
      'http://192.0.2.10:10000',
    );
    assert.equal(
      hostFacingUrl('--registry-url', 'https://boot.example.net', { host: '0.0.0.0', port: 1 }),
      'https://boot.example.net',
    );
    assert.equal(
      hostFacingUrl('--registry-url', undefined, { host: '127.0.0.1', port: 8 }),
      'http://127.0.0.1:8',
    );
    assert.equal(hostFacingUrl('--registry-url', undefined, { host: '::1', port: 8 }), 'http://[::1]:8');
    assert.throws(() => hostFacingUrl('--url', 'ftp://x', { host: '::', port: 1 }), /http/);
    assert.throws(() => hostFacingUrl('--url', 'not a url', { host: '::', port: 1 }), /not a URL/);
  });
});
