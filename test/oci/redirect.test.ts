/**
 * Credentials stay with their origin (unit test of the registry client's redirect handling): a
 * stand-in registry that asks for HTTP Basic credentials answers a blob GET with a 307 to another
 * origin (blob storage, as registries backed by object stores do); that origin must see the
 * request without `Authorization`, and a redirect to plain HTTP outside the insecure list is refused.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { parseReference } from '../../src/oci/reference.js';
import { RegistryClient, readLimited } from '../../src/oci/registry-client.js';
import { newRegistryPolicy } from '../../src/oci/registry-policy.js';

function listen(s: Server, host: string): Promise<string> {
  return new Promise((ok) => s.listen(0, host, () => ok(`${host}:${(s.address() as AddressInfo).port}`)));
}

describe('registry client redirects', () => {
  const seen: IncomingHttpHeaders[] = [];
  let storage: Server;
  let registry: Server;
  let storageHost = '';
  let registryHost = '';

  before(async () => {
    storage = createServer((req, res) => {
      seen.push(req.headers);
      res.writeHead(200, { 'content-type': 'application/octet-stream' }).end('blob-bytes');
    });
    storageHost = await listen(storage, '127.0.0.2');
    registry = createServer((req, res) => {
      if (req.headers.authorization !== `Basic ${Buffer.from('u:p').toString('base64')}`) {
        res.writeHead(401, { 'www-authenticate': 'Basic realm="r"' }).end();
        return;
      }
      res.writeHead(307, { location: `http://${storageHost}/bucket/blob?sig=1` }).end();
    });
    registryHost = await listen(registry, '127.0.0.1');
  });
  after(() => {
    storage?.close();
    registry?.close();
  });

  it('follows a redirect to another origin without the Authorization header', async () => {
    const client = new RegistryClient(
      // Blob storage on a private address must be allowed explicitly (security review N11).
      newRegistryPolicy({ allowed: [registryHost, storageHost], insecure: [registryHost, storageHost] }),
    );
    const res = await client.get(parseReference(`${registryHost}/a/b:1`), `/blobs/sha256:${'0'.repeat(64)}`, {
      credentials: { username: 'u', password: 'p' },
    });
    assert.equal(await readLimited(res.body, 1024), 'blob-bytes');
    assert.equal(seen.length, 1);
    assert.equal(seen[0]!.authorization, undefined, 'no credentials to the other origin');
    await client.close();
  });

  it('refuses a redirect to plain HTTP on a host outside --insecure-registries', async () => {
    const client = new RegistryClient(
      newRegistryPolicy({ allowed: [registryHost], insecure: [registryHost] }),
    );
    await assert.rejects(
      client.get(parseReference(`${registryHost}/a/b:1`), `/blobs/sha256:${'0'.repeat(64)}`, {
        credentials: { username: 'u', password: 'p' },
      }),
      /not HTTPS/,
    );
    await client.close();
  });
});
