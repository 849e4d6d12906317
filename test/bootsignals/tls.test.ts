/**
 * Security review S17: on networks where firmware and agents can use it, the registry and the boot
 * server serve HTTPS with a certificate from a file (in a cluster: a mounted kubernetes.io/tls
 * Secret), and the URLs they render say https.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { seedBootTarget, useSignalStack, waitCached } from './fixture.js';

let ca: string;

function httpsRequest(
  url: string,
  opts: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; text: string }> {
  return new Promise((ok, fail) => {
    const req = request(url, { ca, method: opts.method ?? 'GET', headers: opts.headers }, (res) => {
      let text = '';
      res.on('data', (c) => {
        text += c;
      });
      res.on('end', () => ok({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', fail);
    req.end(opts.body);
  });
}

describe('TLS on the registry and the boot server', () => {
  // Options as a function: the certificate is made in the fixture's `before`, not when the suite is declared.
  const fx = useSignalStack('sec-tls', () => {
    const dir = mkdtempSync(join(tmpdir(), 'metal-tls-'));
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=metal-test',
        '-addext',
        'subjectAltName=IP:127.0.0.1',
        '-keyout',
        join(dir, 'tls.key'),
        '-out',
        join(dir, 'tls.crt'),
      ],
      { stdio: 'ignore' },
    );
    ca = readFileSync(join(dir, 'tls.crt'), 'utf8');
    return { tls: { cert: ca, key: readFileSync(join(dir, 'tls.key'), 'utf8') } };
  });

  it('S17: both servers speak HTTPS with the given certificate; scripts name https URLs', async () => {
    assert.match(fx.stack.bootUrl, /^https:/);
    const s = await seedBootTarget(fx.client, fx.namespace.name, { withIgnition: true });
    await waitCached(fx.stack, s);
    const script = await httpsRequest(`${fx.stack.bootUrl}/ipxe/${s.uuid}`);
    assert.equal(script.status, 200, script.text);
    assert.match(script.text, /^kernel https:\/\/127\.0\.0\.1:/m);
    assert.match(script.text, new RegExp(`metal\\.registry=${fx.stack.registryUrl.replace(/\./g, '\\.')}`));
    const ign = await httpsRequest(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=${s.token}`);
    assert.equal(ign.status, 200);
    const boot = await httpsRequest(`${fx.stack.registryUrl}/bootstate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${s.token}` },
      body: JSON.stringify({ systemUUID: s.uuid, booted: true }),
    });
    assert.equal(boot.status, 200, boot.text);
    // Plain HTTP is not served on those ports.
    await assert.rejects(fetch(fx.stack.bootUrl.replace('https:', 'http:') + '/ipxe'));
  });
});
