/**
 * Docker's token authentication flow (distribution docs/spec/auth/token.md) against a real
 * registry: docker-registry configured with `auth.token` trusts a certificate made here; a token
 * endpoint in this test issues RS256 JWTs (header `x5c` with that certificate) for
 * `repository:<name>:pull`, anonymously or for HTTP Basic credentials. The registry client follows
 * the 401 `WWW-Authenticate: Bearer realm=…,service=…,scope=…` challenge, fetches a token, retries,
 * and caches it.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createSign, randomBytes, X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePorts } from '../../src/localstack/control-plane.js';
import { REGISTRY_BINARY } from '../../src/localstack/oci-registry.js';
import { ImageResolver } from '../../src/oci/image-resolver.js';
import { parseReference } from '../../src/oci/reference.js';
import { RegistryClient } from '../../src/oci/registry-client.js';
import { newRegistryPolicy } from '../../src/oci/registry-policy.js';

const b64url = (b: Buffer | string) => Buffer.from(b).toString('base64url');

describe('registry token flow (real docker-registry with auth.token)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'metal-token-'));
  let tokenServer: Server;
  let registry: ChildProcess;
  let host = '';
  const issued: { scope: string; user?: string }[] = [];

  before(async () => {
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
        '-days',
        '1',
        '-subj',
        '/CN=metal-test-token',
      ],
      { stdio: 'ignore' },
    );
    const key = readFileSync(join(dir, 'key.pem'), 'utf8');
    const der = new X509Certificate(readFileSync(join(dir, 'cert.pem'))).raw;
    const [regPort, tokPort] = (await freePorts(2)) as [number, number];
    host = `127.0.0.1:${regPort}`;
    tokenServer = createServer((req, res) => {
      const url = new URL(req.url ?? '/', `http://${req.headers.host}`);
      const scope = url.searchParams.get('scope') ?? '';
      const basic = req.headers.authorization?.startsWith('Basic ')
        ? Buffer.from(req.headers.authorization.slice(6), 'base64').toString()
        : undefined;
      if (basic !== undefined && basic !== 'puller:pw') {
        res.writeHead(401).end();
        return;
      }
      issued.push({ scope, user: basic?.split(':')[0] });
      const [, name, actions] = scope.split(':');
      const now = Math.floor(Date.now() / 1000);
      const header = b64url(JSON.stringify({ alg: 'RS256', typ: 'JWT', x5c: [der.toString('base64')] }));
      const claims = b64url(
        JSON.stringify({
          iss: 'metal-test-issuer',
          sub: basic?.split(':')[0] ?? '',
          aud: 'metal-test-registry',
          exp: now + 300,
          nbf: now - 10,
          iat: now,
          jti: randomBytes(8).toString('hex'),
          access: [{ type: 'repository', name, actions: (actions ?? '').split(',') }],
        }),
      );
      const sig = createSign('RSA-SHA256').update(`${header}.${claims}`).sign(key);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ token: `${header}.${claims}.${b64url(sig)}`, expires_in: 300 }));
    });
    await new Promise<void>((ok) => tokenServer.listen(tokPort, '127.0.0.1', ok));
    writeFileSync(
      join(dir, 'config.yml'),
      `version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: ${join(dir, 'data')}}}
http: {addr: ${host}, secret: ${randomBytes(8).toString('hex')}}
auth:
  token:
    realm: http://127.0.0.1:${tokPort}/token
    service: metal-test-registry
    issuer: metal-test-issuer
    rootcertbundle: ${join(dir, 'cert.pem')}
`,
    );
    registry = spawn(
      'setpriv',
      ['--pdeathsig', 'KILL', '--', REGISTRY_BINARY, 'serve', join(dir, 'config.yml')],
      { stdio: 'ignore' },
    );
    for (let i = 0; i < 150; i++) {
      try {
        if ((await fetch(`http://${host}/v2/`)).status === 401) break;
      } catch {
        // starting
      }
      await new Promise((ok) => setTimeout(ok, 100));
    }
    // Push with a push-scoped token from the same endpoint.
    const tok = async (scope: string) =>
      (
        (await (
          await fetch(`http://127.0.0.1:${tokPort}/token?service=metal-test-registry&scope=${scope}`)
        ).json()) as { token: string }
      ).token;
    const t = await tok('repository:tok/os:pull,push');
    const auth = { authorization: `Bearer ${t}` };
    const put = async (data: Buffer) => {
      const { createHash } = await import('node:crypto');
      const digest = `sha256:${createHash('sha256').update(data).digest('hex')}`;
      const start = await fetch(`http://${host}/v2/tok/os/blobs/uploads/`, { method: 'POST', headers: auth });
      const loc = new URL(start.headers.get('location')!, `http://${host}`);
      loc.searchParams.set('digest', digest);
      const r = await fetch(loc, {
        method: 'PUT',
        headers: { ...auth, 'content-type': 'application/octet-stream' },
        body: data,
      });
      assert.equal(r.status, 201);
      return { digest, size: data.length };
    };
    const kernel = await put(Buffer.from('kernel'));
    const initrd = await put(Buffer.from('initrd'));
    const config = await put(Buffer.from('{}'));
    const m = await fetch(`http://${host}/v2/tok/os/manifests/1.0`, {
      method: 'PUT',
      headers: { ...auth, 'content-type': 'application/vnd.oci.image.manifest.v1+json' },
      body: JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: { mediaType: 'application/vnd.oci.empty.v1+json', ...config },
        layers: [
          { mediaType: 'application/vnd.ironcore.image.kernel', ...kernel },
          { mediaType: 'application/vnd.ironcore.image.initramfs', ...initrd },
        ],
      }),
    });
    assert.equal(m.status, 201, await m.text());
    issued.length = 0;
  });
  after(async () => {
    registry?.kill('SIGKILL');
    await new Promise<void>((ok) => (tokenServer ? tokenServer.close(() => ok()) : ok()));
  });

  const tokHost = () => `127.0.0.1:${(tokenServer.address() as { port: number }).port}`;

  it('a plain-HTTP token realm not in --insecure-registries is refused', async () => {
    const client = new RegistryClient(newRegistryPolicy({ allowed: [host], insecure: [host] }));
    await assert.rejects(
      new ImageResolver(client).resolve(parseReference(`${host}/tok/os:1.0`)),
      /token realm .* is not HTTPS/,
    );
    assert.equal(issued.length, 0);
    await client.close();
  });

  it('anonymous: 401 challenge → token for repository:tok/os:pull → manifest; the token is reused', async () => {
    const client = new RegistryClient(newRegistryPolicy({ allowed: [host], insecure: [host, tokHost()] }));
    const r = new ImageResolver(client);
    const img = await r.resolve(parseReference(`${host}/tok/os:1.0`));
    assert.ok(img.layers.kernel && img.layers.initrd);
    assert.deepEqual(issued, [{ scope: 'repository:tok/os:pull', user: undefined }]);
    await r.resolve(parseReference(`${host}/tok/os:1.0`));
    assert.equal(issued.length, 1, 'cached token, no second token request');
    await client.close();
  });

  it('with pull-secret credentials: the token request carries them (HTTP Basic to the realm)', async () => {
    issued.length = 0;
    const client = new RegistryClient(newRegistryPolicy({ allowed: [host], insecure: [host, tokHost()] }));
    await new ImageResolver(client).resolve(parseReference(`${host}/tok/os:1.0`), {
      username: 'puller',
      password: 'pw',
    });
    assert.deepEqual(issued, [{ scope: 'repository:tok/os:pull', user: 'puller' }]);
    await assert.rejects(
      new ImageResolver(client).resolve(parseReference(`${host}/tok/os:1.0`), {
        username: 'puller',
        password: 'wrong',
      }),
      /refused the pull secret credentials/,
    );
    await client.close();
  });
});
