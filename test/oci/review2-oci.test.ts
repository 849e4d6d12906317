/**
 * Second security review (issue 29), OCI items, against a real docker-registry with Docker token
 * authentication (`auth.token`, RS256 JWTs signed here): user `tenant-a:pw` may pull and push every
 * repository, anonymous requests only `pub/*`. Each test is named after its item:
 * - N3: the resolver's and the blob cache's content caches never answer a (reference, credentials)
 *   pair the registry would refuse: tenant B, anonymous, naming tenant A's private digest in a
 *   repository that does not exist (or A's repository itself) gets a refusal, not A's image.
 * - N5: a current-looking `status.image` (forged layers, another namespace's pull secret) is not
 *   reused as it is: the SBC controller resolves its digest again with the SBC's own credentials.
 * - N6: manifests beyond what boot images need are refused, the resolver caches extracted fields
 *   only within a byte bound, and an image `commandLine` is capped.
 * - N11: redirects and token realms outside the allow-lists to loopback/private/link-local
 *   literals or cluster names are refused, and registry bodies never reach error messages.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash, createSign, randomBytes, X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import { resolveSbcImage } from '../../src/controllers/serverbootconfiguration/boot-image-resolution.js';
import { freePorts } from '../../src/localstack/control-plane.js';
import { REGISTRY_BINARY } from '../../src/localstack/oci-registry.js';
import { BlobCache } from '../../src/oci/blob-cache.js';
import { BootImages } from '../../src/oci/boot-images.js';
import { ImageCatalog } from '../../src/oci/image-catalog.js';
import { ImageResolver } from '../../src/oci/image-resolver.js';
import { formatReference, parseReference } from '../../src/oci/reference.js';
import { RegistryClient } from '../../src/oci/registry-client.js';
import { newRegistryPolicy } from '../../src/oci/registry-policy.js';
import type { KubeClient } from '../../src/runtime/client.js';

const b64url = (b: Buffer | string) => Buffer.from(b).toString('base64url');
const TENANT_A = { username: 'tenant-a', password: 'pw' };

describe('second security review: OCI caches', () => {
  const dir = mkdtempSync(join(tmpdir(), 'metal-review2-'));
  let tokenServer: Server;
  let proxy: Server | undefined;
  let registry: ChildProcess;
  let host = '';
  let tokHost = '';
  /** Requests the registry itself received (the token endpoint's are not counted). */
  let seen = 0;
  let manifestDigest = '';
  let kernelDigest = '';
  let pubManifestDigest = '';
  let pubKernelDigest = '';
  /** Pushes a blob / a manifest to `pub/os` (as tenant A). */
  let pushPub: (data: Buffer) => Promise<{ digest: string; size: number }>;
  let pushPubManifest: (tag: string, body: string) => Promise<void>;

  before(async () => {
    execFileSync(
      'openssl',
      ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(dir, 'key.pem')].concat([
        '-out',
        join(dir, 'cert.pem'),
        '-days',
        '1',
        '-subj',
        '/CN=metal-review2',
      ]),
      { stdio: 'ignore' },
    );
    const key = readFileSync(join(dir, 'key.pem'), 'utf8');
    const der = new X509Certificate(readFileSync(join(dir, 'cert.pem'))).raw;
    const [regPort, tokPort, proxyPort] = (await freePorts(3)) as [number, number, number];
    tokHost = `127.0.0.1:${tokPort}`;
    tokenServer = createServer((req, res) => {
      const url = new URL(req.url ?? '/', `http://${req.headers.host}`);
      const scope = url.searchParams.get('scope') ?? '';
      const basic = req.headers.authorization?.startsWith('Basic ')
        ? Buffer.from(req.headers.authorization.slice(6), 'base64').toString()
        : undefined;
      if (basic !== undefined && basic !== `${TENANT_A.username}:${TENANT_A.password}`) {
        res.writeHead(401).end();
        return;
      }
      const [, name = '', actions = ''] = scope.split(':');
      const granted = basic !== undefined || name.startsWith('pub/') ? actions.split(',') : [];
      const now = Math.floor(Date.now() / 1000);
      const header = b64url(JSON.stringify({ alg: 'RS256', typ: 'JWT', x5c: [der.toString('base64')] }));
      const claims = b64url(
        JSON.stringify({
          iss: 'metal-review2',
          sub: basic?.split(':')[0] ?? '',
          aud: 'metal-review2-registry',
          exp: now + 300,
          nbf: now - 10,
          iat: now,
          jti: randomBytes(8).toString('hex'),
          access: [{ type: 'repository', name, actions: granted }],
        }),
      );
      const sig = createSign('RSA-SHA256').update(`${header}.${claims}`).sign(key);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ token: `${header}.${claims}.${b64url(sig)}`, expires_in: 300 }));
    });
    await new Promise<void>((ok) => tokenServer.listen(tokPort, '127.0.0.1', ok));
    const backend = `127.0.0.1:${regPort}`;
    writeFileSync(
      join(dir, 'config.yml'),
      `version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: ${join(dir, 'data')}}}
http: {addr: ${backend}, secret: ${randomBytes(8).toString('hex')}}
auth:
  token:
    realm: http://${tokHost}/token
    service: metal-review2-registry
    issuer: metal-review2
    rootcertbundle: ${join(dir, 'cert.pem')}
`,
    );
    registry = spawn(
      'setpriv',
      ['--pdeathsig', 'KILL', '--', REGISTRY_BINARY, 'serve', join(dir, 'config.yml')],
      {
        stdio: 'ignore',
      },
    );
    // A counting pass-through in front of the registry: what "the registry saw".
    proxy = createServer((req, res) => {
      seen++;
      const up = fetch(`http://${backend}${req.url}`, {
        method: req.method,
        headers: Object.fromEntries(
          Object.entries(req.headers).filter(([k]) => k !== 'host' && k !== 'connection') as [
            string,
            string,
          ][],
        ),
        redirect: 'manual',
      });
      up.then(
        async (r) => {
          const body = Buffer.from(await r.arrayBuffer());
          const headers = Object.fromEntries(r.headers.entries());
          delete headers['content-encoding'];
          delete headers['transfer-encoding'];
          res.writeHead(r.status, headers).end(req.method === 'HEAD' ? undefined : body);
        },
        () => res.writeHead(502).end(),
      );
    });
    await new Promise<void>((ok) => proxy!.listen(proxyPort, '127.0.0.1', ok));
    host = `127.0.0.1:${proxyPort}`;
    for (let i = 0; i < 150; i++) {
      try {
        if ((await fetch(`http://${backend}/v2/`)).status === 401) break;
      } catch {
        // starting
      }
      await new Promise((ok) => setTimeout(ok, 100));
    }
    const tokenFor = async (repo: string) =>
      (
        (await (
          await fetch(
            `http://${tokHost}/token?service=metal-review2-registry&scope=repository:${repo}:pull,push`,
            { headers: { authorization: `Basic ${Buffer.from('tenant-a:pw').toString('base64')}` } },
          )
        ).json()) as { token: string }
      ).token;
    const auth = { authorization: `Bearer ${await tokenFor('priv/os')}` };
    const pubAuth = { authorization: `Bearer ${await tokenFor('pub/os')}` };
    const put = async (data: Buffer, repo = 'priv/os') => {
      const digest = `sha256:${createHash('sha256').update(data).digest('hex')}`;
      const h = repo === 'pub/os' ? pubAuth : auth;
      const start = await fetch(`http://${backend}/v2/${repo}/blobs/uploads/`, {
        method: 'POST',
        headers: h,
      });
      const loc = new URL(start.headers.get('location')!, `http://${backend}`);
      loc.searchParams.set('digest', digest);
      const r = await fetch(loc, {
        method: 'PUT',
        headers: { ...h, 'content-type': 'application/octet-stream' },
        body: data,
      });
      assert.equal(r.status, 201);
      return { digest, size: data.length };
    };
    const kernel = await put(randomBytes(64 * 1024));
    const initrd = await put(randomBytes(16 * 1024));
    const config = await put(Buffer.from(JSON.stringify({ commandLine: 'tenant-a-secret=1' })));
    kernelDigest = kernel.digest;
    const manifest = JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
      layers: [
        { mediaType: 'application/vnd.ironcore.image.kernel', ...kernel },
        { mediaType: 'application/vnd.ironcore.image.initramfs', ...initrd },
      ],
    });
    manifestDigest = `sha256:${createHash('sha256').update(manifest).digest('hex')}`;
    const m = await fetch(`http://${backend}/v2/priv/os/manifests/1.0`, {
      method: 'PUT',
      headers: { ...auth, 'content-type': 'application/vnd.oci.image.manifest.v1+json' },
      body: manifest,
    });
    assert.equal(m.status, 201, await m.text());
    const pk = await put(randomBytes(32 * 1024), 'pub/os');
    const pi = await put(randomBytes(8 * 1024), 'pub/os');
    pubKernelDigest = pk.digest;
    const pub = JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.empty.v1+json', ...(await put(Buffer.from('{}'), 'pub/os')) },
      layers: [
        { mediaType: 'application/vnd.ironcore.image.kernel', ...pk },
        { mediaType: 'application/vnd.ironcore.image.initramfs', ...pi },
      ],
    });
    pubManifestDigest = `sha256:${createHash('sha256').update(pub).digest('hex')}`;
    const pm = await fetch(`http://${backend}/v2/pub/os/manifests/1.0`, {
      method: 'PUT',
      headers: { ...pubAuth, 'content-type': 'application/vnd.oci.image.manifest.v1+json' },
      body: pub,
    });
    assert.equal(pm.status, 201, await pm.text());
    pushPub = (data) => put(data, 'pub/os');
    pushPubManifest = async (tag, body) => {
      const r = await fetch(`http://${backend}/v2/pub/os/manifests/${tag}`, {
        method: 'PUT',
        headers: { ...pubAuth, 'content-type': 'application/vnd.oci.image.manifest.v1+json' },
        body,
      });
      assert.equal(r.status, 201, await r.text());
    };
  });
  after(async () => {
    registry?.kill('SIGKILL');
    await new Promise<void>((ok) => (proxy ? proxy.close(() => ok()) : ok()));
    await new Promise<void>((ok) => (tokenServer ? tokenServer.close(() => ok()) : ok()));
  });

  const newClient = () =>
    new RegistryClient(newRegistryPolicy({ allowed: [host], insecure: [host, tokHost] }));

  it("N3: tenant B without credentials cannot get tenant A's private image or blobs by digest", async () => {
    const client = newClient();
    const resolver = new ImageResolver(client);
    const cache = new BlobCache({
      dir: mkdtempSync(join(tmpdir(), 'metal-review2-blobs-')),
      maxBytes: 1 << 30,
      registry: client,
      log: pino({ level: 'silent' }),
    });
    await cache.init();
    try {
      const a = await resolver.resolve(parseReference(`${host}/priv/os:1.0`), TENANT_A);
      assert.equal(a.digest, manifestDigest);
      assert.equal(a.commandLine, 'tenant-a-secret=1');
      await cache.file(parseReference(`${host}/priv/os:1.0`), kernelDigest, TENANT_A);

      for (const name of [`${host}/does/not-exist@${manifestDigest}`, `${host}/priv/os@${manifestDigest}`]) {
        const before = seen;
        const err = await resolver.resolve(parseReference(name)).then(
          (img) => assert.fail(`${name}: resolved to tenant A's image (commandLine ${img.commandLine})`),
          (e: Error) => e,
        );
        assert.match(
          (err as { reason?: string }).reason ?? '',
          /RegistryUnauthorized|ImageNotFound/,
          err.message,
        );
        assert.ok(seen > before, 'the registry was asked');
        await assert.rejects(
          cache.open(parseReference(name), kernelDigest),
          (e: { reason?: string }) => /RegistryUnauthorized|ImageNotFound/.test(e.reason ?? ''),
          `${name}: the cached kernel of tenant A is not served`,
        );
      }

      // Tenant A's own hits are confirmed once, then remembered (no registry request per hit).
      await resolver.resolve(parseReference(`${host}/priv/os@${manifestDigest}`), TENANT_A);
      await (
        await cache.open(parseReference(`${host}/priv/os:1.0`), kernelDigest, TENANT_A)
      ).stream.destroy();
      const settled = seen;
      await resolver.resolve(parseReference(`${host}/priv/os@${manifestDigest}`), TENANT_A);
      await (
        await cache.open(parseReference(`${host}/priv/os:1.0`), kernelDigest, TENANT_A)
      ).stream.destroy();
      assert.equal(seen, settled, 'remembered confirmations cost no registry request');
    } finally {
      await client.close();
    }
  });

  it('N5: a forged current-looking status.image is resolved again, not reused', async () => {
    // No annotation, no controlling claim, no default: the SBC's own pull secret is none.
    const images = new BootImages({
      client: {} as KubeClient,
      policy: newRegistryPolicy({ allowed: [host], insecure: [host, tokHost] }),
    });
    try {
      const image = `${host}/pub/os:1.0`;
      const reference = formatReference(parseReference(image));
      const sbc = {
        apiVersion: 'metal.ironcore.dev/v1alpha1',
        kind: 'ServerBootConfiguration',
        metadata: { name: 'b', namespace: 'tenant-b', uid: 'u' },
        spec: { serverRef: { name: 's' }, image, bootAttempt: 1 },
        status: {
          image: {
            reference,
            digest: pubManifestDigest,
            manifest: pubManifestDigest,
            kernel: kernelDigest, // tenant A's private kernel
            initrd: kernelDigest,
            commandLine: 'forged',
            bootAttempt: 1,
            pullSecret: 'tenant-a/pull', // another namespace's credentials
          },
        },
      } as unknown as ServerBootConfiguration;
      const v = await resolveSbcImage(sbc, ImageCatalog.parse('images: {}\n'), images);
      assert.ok(v.ok, JSON.stringify(v));
      assert.equal(v.image?.kernel, pubKernelDigest, 'the layers of the pinned digest, not the stored ones');
      assert.equal(v.image?.pullSecret, undefined, 'no Secret reference taken from status');
      assert.equal(v.image?.commandLine, undefined);
      assert.equal(v.image?.digest, pubManifestDigest, 'the attempt keeps its digest');
      assert.equal(v.resolvedNow, true, 'status is rewritten');
      // An honest status is reused as it is.
      const honest = { ...sbc, status: { image: v.image } } as ServerBootConfiguration;
      const again = await resolveSbcImage(honest, ImageCatalog.parse('images: {}\n'), images);
      assert.ok(again.ok && !again.resolvedNow && again.image === v.image);
    } finally {
      await images.close();
    }
  });

  it('N6: oversized manifests and commandLines are refused; the digest caches hold extracted fields within a byte bound', async () => {
    const client = newClient();
    const resolver = new ImageResolver(client);
    try {
      const kernel = await pushPub(randomBytes(1024));
      const initrd = await pushPub(randomBytes(1024));
      const manifest = (config: { digest: string; size: number }, pad: number, salt: string) =>
        JSON.stringify({
          schemaVersion: 2,
          mediaType: 'application/vnd.oci.image.manifest.v1+json',
          config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
          layers: [
            { mediaType: 'application/vnd.ironcore.image.kernel', ...kernel },
            { mediaType: 'application/vnd.ironcore.image.initramfs', ...initrd },
          ],
          annotations: { pad: salt + 'x'.repeat(pad) },
        });
      const empty = await pushPub(Buffer.from('{}'));
      await pushPubManifest('big', manifest(empty, 1024 * 1024, 'big'));
      await assert.rejects(
        resolver.resolve(parseReference(`${host}/pub/os:big`)),
        (e: { reason?: string; message: string }) =>
          e.reason === 'ImageManifestInvalid' && /larger than/.test(e.message),
        'a 1 MiB manifest is refused',
      );

      for (let i = 0; i < 12; i++) {
        await pushPubManifest(`pad${i}`, manifest(empty, 200 * 1024, `p${i}-`));
        const r = await resolver.resolve(parseReference(`${host}/pub/os:pad${i}`));
        assert.equal(r.layers.kernel, kernel.digest);
      }
      const held = resolver.cachedBytes();
      assert.ok(held < 32 * 1024, `12 manifests of 200 KiB keep ${held} bytes of cache, not their size`);

      for (const [tag, commandLine] of [
        ['long', `console=ttyS0 ${'a'.repeat(8 * 1024)}`],
        ['newline', 'console=ttyS0\nmetal.token=forged'],
      ] as const) {
        const cfg = await pushPub(Buffer.from(JSON.stringify({ commandLine })));
        await pushPubManifest(tag, manifest(cfg, 0, tag));
        await assert.rejects(
          resolver.resolve(parseReference(`${host}/pub/os:${tag}`)),
          (e: { reason?: string; message: string }) =>
            e.reason === 'ImageManifestInvalid' && /commandLine/.test(e.message),
          `${tag} commandLine refused`,
        );
      }
    } finally {
      await client.close();
    }
  });

  it('N11: no redirect or token realm into the cluster or the node; no registry bodies in errors', async () => {
    const hits: string[] = [];
    const inside = createServer((req, res) => {
      hits.push(req.url ?? '');
      res.writeHead(200).end('{"token":"t"}');
    });
    await new Promise<void>((ok) => inside.listen(0, '127.0.0.2', ok));
    const insideHost = `127.0.0.2:${(inside.address() as AddressInfo).port}`;
    const evil = createServer((req, res) => {
      if (req.url?.includes('/redirect/'))
        res.writeHead(307, { location: `https://${insideHost}/steal` }).end();
      else if (req.url?.includes('/metadata/'))
        res.writeHead(307, { location: 'https://169.254.169.254/latest/meta-data/' }).end();
      else if (req.url?.includes('/cluster/'))
        res.writeHead(307, { location: 'https://kubernetes.default.svc/api' }).end();
      else if (req.url?.includes('/realm/'))
        res
          .writeHead(401, { 'www-authenticate': `Bearer realm="https://${insideHost}/token",service="x"` })
          .end();
      else res.writeHead(404, { 'content-type': 'text/plain' }).end('SECRET-BODY-FROM-REGISTRY');
    });
    await new Promise<void>((ok) => evil.listen(0, '127.0.0.1', ok));
    const evilHost = `127.0.0.1:${(evil.address() as AddressInfo).port}`;
    const client = new RegistryClient(newRegistryPolicy({ allowed: [evilHost], insecure: [evilHost] }));
    const blob = `/blobs/sha256:${'0'.repeat(64)}`;
    try {
      for (const repo of ['redirect/x', 'metadata/x', 'cluster/x', 'realm/x']) {
        await assert.rejects(
          client.get(parseReference(`${evilHost}/${repo}:1`), blob),
          (e: { reason?: string; message: string }) =>
            e.reason === 'RegistryNotAllowed' && /refused/.test(e.message),
          repo,
        );
      }
      assert.deepEqual(hits, [], 'nothing inside was contacted');
      const err = await client.get(parseReference(`${evilHost}/other/x:1`), blob).then(
        () => assert.fail('404 expected'),
        (e: Error) => e,
      );
      assert.match(err.message, /not found \(404\)/);
      assert.doesNotMatch(err.message, /SECRET-BODY/, 'no registry body in the message');
    } finally {
      await client.close();
      evil.close();
      inside.close();
    }
  });
});
