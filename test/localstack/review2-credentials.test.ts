/**
 * Second security review (issue 29), the local control plane's credentials (the harness's real
 * cluster of this run):
 * - N15: the admin token file, the kubeconfig, the service-account key and the serving key are
 *   readable by their owner only, in a folder only the owner may enter.
 * - N15: etcd (which holds every Secret) answers nobody without the control plane's client
 *   certificate: not plain HTTP, not TLS without a certificate, not a certificate of another CA
 *   (a private control plane: the run's shared one is reached through its kubeconfig only).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { ControlPlane } from '../harness/control-plane.js';
import { sharedCluster } from '../harness/shared.js';

/** GET `url` (http or https by its scheme) with TLS options `tls`: the status, or the error's text. */
function get(url: string, tls: https.RequestOptions = {}): Promise<{ status?: number; error?: string }> {
  return new Promise((ok) => {
    const u = new URL(url);
    const req = (u.protocol === 'https:' ? https : http).get(u, { ...tls, timeout: 5_000 }, (res) => {
      res.resume();
      res.on('end', () => ok({ status: res.statusCode }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => ok({ error: `${(err as { code?: string }).code ?? ''} ${err.message}` }));
  });
}

describe('second security review: local control plane', () => {
  it('N15: cluster-admin credentials are 0600 in a 0700 folder', async () => {
    const cluster = await sharedCluster();
    const dir = dirname(cluster.kubeconfigPath);
    const mode = (p: string) => (statSync(p).mode & 0o777).toString(8);
    assert.equal(mode(dir), '700', dir);
    for (const f of ['kubeconfig', 'tokens.csv', 'sa.key', 'serving.key'])
      assert.equal(mode(join(dir, f)), '600', f);
  });

  it('N15: etcd refuses every request without the control plane client certificate', async () => {
    const cp = await ControlPlane.start({ installCRDs: false });
    const other = mkdtempSync(join(tmpdir(), 'metal-n15-'));
    try {
      const caPath = join(cp.dir, 'etcd-pki', 'ca.crt');
      const ca = existsSync(caPath) ? readFileSync(caPath) : undefined;
      const health = `${cp.etcdUrl}/health`;
      // Trusting etcd's CA, but presenting no certificate.
      const anonymous = await get(health, { ca });
      assert.notEqual(
        anonymous.status,
        200,
        `${health} without a client certificate: ${JSON.stringify(anonymous)}`,
      );
      assert.match(anonymous.error ?? '', /certificate required|bad certificate|ECONNRESET|socket hang up/);
      // Plain HTTP on etcd's port.
      const plain = await get(health.replace(/^https:/, 'http:'));
      assert.notEqual(plain.status, 200, `plain HTTP: ${JSON.stringify(plain)}`);
      // A client certificate of another CA (self-signed, clientAuth).
      execFileSync(
        'openssl',
        ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1']
          .concat(['-subj', '/CN=kube-apiserver', '-addext', 'extendedKeyUsage=clientAuth'])
          .concat(['-keyout', join(other, 'k'), '-out', join(other, 'c')]),
        { stdio: 'ignore' },
      );
      const forged = await get(health, {
        ca,
        key: readFileSync(join(other, 'k')),
        cert: readFileSync(join(other, 'c')),
      });
      assert.notEqual(forged.status, 200, `another CA's certificate: ${JSON.stringify(forged)}`);
      // The control plane's own client certificate works (the refusals are about the certificate).
      assert.equal((await cp.etcdRequest('/health')).status, 200);
      const mode = (p: string) => (statSync(p).mode & 0o777).toString(8);
      assert.equal(mode(join(cp.dir, 'etcd-pki')), '700');
      for (const k of ['ca.key', 'server.key', 'client.key'])
        assert.equal(mode(join(cp.dir, 'etcd-pki', k)), '600', k);
    } finally {
      rmSync(other, { recursive: true, force: true });
      await cp.stop();
    }
  });
});
