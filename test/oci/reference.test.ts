/**
 * Reference parsing by the distribution reference grammar, Docker Hub normalisation, the registry
 * allow-list, docker-config credentials and WWW-Authenticate parsing (pure logic).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { credentialsFor } from '../../src/oci/docker-config.js';
import { apiHost, formatReference, InvalidReference, parseReference } from '../../src/oci/reference.js';
import { parseChallenge } from '../../src/oci/registry-client.js';
import { isAllowed, newRegistryPolicy } from '../../src/oci/registry-policy.js';

const D = `sha256:${'a'.repeat(64)}`;

describe('OCI references', () => {
  it('normalises like ParseNormalizedNamed: Docker Hub, library/, default tag latest', () => {
    assert.deepEqual(parseReference('os-image:latest'), {
      domain: 'docker.io',
      repository: 'library/os-image',
      tag: 'latest',
      digest: undefined,
    });
    assert.deepEqual(parseReference('alpine'), {
      domain: 'docker.io',
      repository: 'library/alpine',
      tag: 'latest',
      digest: undefined,
    });
    assert.equal(formatReference(parseReference('index.docker.io/foo/bar')), 'docker.io/foo/bar:latest');
    assert.equal(apiHost(parseReference('foo/bar')), 'registry-1.docker.io');
    assert.deepEqual(parseReference('ghcr.io/ironcore-dev/os-images/gardenlinux:1877.0'), {
      domain: 'ghcr.io',
      repository: 'ironcore-dev/os-images/gardenlinux',
      tag: '1877.0',
      digest: undefined,
    });
  });

  it('hosts with ports, localhost, tag plus digest, digest only', () => {
    assert.deepEqual(parseReference(`127.0.0.1:5000/metal/os:1.0@${D}`), {
      domain: '127.0.0.1:5000',
      repository: 'metal/os',
      tag: '1.0',
      digest: D,
    });
    assert.deepEqual(parseReference(`localhost/os@${D}`), {
      domain: 'localhost',
      repository: 'os',
      tag: undefined,
      digest: D,
    });
    assert.equal(parseReference('localhost:5000/a_b/c__d/e-f.g:v_1.2-3').repository, 'a_b/c__d/e-f.g');
  });

  it('rejects what the grammar does not allow', () => {
    for (const bad of [
      '',
      ' x',
      'Upper/case',
      'a//b',
      'a/b:',
      'a/b:-x',
      `a@sha256:${'a'.repeat(63)}`,
      'a/b@md5:00',
      'foo:5000x/bar',
      `a:${'t'.repeat(129)}`,
      '-a/b',
    ]) {
      assert.throws(() => parseReference(bad), InvalidReference, bad);
    }
  });

  it('allow-list with Docker Hub aliases; upstream default is ghcr.io only', () => {
    const def = newRegistryPolicy();
    assert.equal(isAllowed(def, 'ghcr.io'), true);
    assert.equal(isAllowed(def, 'docker.io'), false);
    const p = newRegistryPolicy({ allowed: ['registry-1.docker.io', '127.0.0.1:5000'] });
    assert.equal(isAllowed(p, 'docker.io'), true);
    assert.equal(isAllowed(p, '127.0.0.1:5000'), true);
    assert.equal(isAllowed(p, '127.0.0.1:5001'), false);
  });

  it('docker config JSON: auth, username/password, scheme and path in keys, Docker Hub v1 key', () => {
    const enc = (o: object) => ({ '.dockerconfigjson': Buffer.from(JSON.stringify(o)).toString('base64') });
    const data = enc({
      auths: {
        'https://index.docker.io/v1/': { auth: Buffer.from('hub:pw:with:colons').toString('base64') },
        'http://127.0.0.1:5000': { username: 'u', password: 'p' },
        'ghcr.io': { identitytoken: 'refresh' },
      },
    });
    assert.deepEqual(credentialsFor(data, 'docker.io'), { username: 'hub', password: 'pw:with:colons' });
    assert.deepEqual(credentialsFor(data, '127.0.0.1:5000'), { username: 'u', password: 'p' });
    assert.deepEqual(credentialsFor(data, 'ghcr.io'), { identityToken: 'refresh', username: undefined });
    assert.equal(credentialsFor(data, 'quay.io'), undefined);
    assert.throws(() => credentialsFor({ '.dockerconfigjson': Buffer.from('{').toString('base64') }, 'x'));
  });

  it('WWW-Authenticate challenges (RFC 7235 auth-params)', () => {
    assert.deepEqual(
      parseChallenge('Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:a/b:pull"'),
      {
        scheme: 'bearer',
        params: { realm: 'https://ghcr.io/token', service: 'ghcr.io', scope: 'repository:a/b:pull' },
      },
    );
    assert.deepEqual(parseChallenge('Basic realm="metal-test"'), {
      scheme: 'basic',
      params: { realm: 'metal-test' },
    });
  });
});
