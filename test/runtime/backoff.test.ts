/** Backoff pacing, retryOnConflict, Retry-After parsing, time formats, owner references: no API server. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Backoff } from '../../src/runtime/backoff.js';
import { ApiError, parseRetryAfter, retryOnConflict } from '../../src/runtime/client.js';
import {
  controllerOwnerReference,
  isControlledBy,
  withControllerReference,
} from '../../src/runtime/ownerrefs.js';
import { objectKey, parseObjectKey, Resources, resourcePath } from '../../src/runtime/resource.js';
import { microTime, rfc3339 } from '../../src/runtime/time.js';

describe('Backoff', () => {
  it('grows exponentially within its jitter, caps, and resets', () => {
    const b = new Backoff({ initialMs: 100, maxMs: 1000, factor: 2, jitter: 0.5 });
    const bases = [100, 200, 400, 800, 1000, 1000];
    for (const base of bases) {
      const d = b.next();
      assert.ok(d >= base * 0.75 && d <= base * 1.25, `${d} not within ±25% of ${base}`);
    }
    b.reset();
    const d = b.next();
    assert.ok(d >= 75 && d <= 125);
  });
});

describe('retryOnConflict', () => {
  it('re-runs on 409 until success', async () => {
    let calls = 0;
    const r = await retryOnConflict(async () => {
      calls++;
      if (calls < 3) throw new ApiError('conflict', 409, { reason: 'Conflict' });
      return 'ok';
    });
    assert.equal(r, 'ok');
    assert.equal(calls, 3);
  });

  it('gives up after `attempts` and rethrows the 409', async () => {
    let calls = 0;
    await assert.rejects(
      retryOnConflict(
        async () => {
          calls++;
          throw new ApiError('conflict', 409);
        },
        { attempts: 3 },
      ),
      (e: unknown) => e instanceof ApiError && e.status === 409,
    );
    assert.equal(calls, 3);
  });

  it('does not retry other errors', async () => {
    let calls = 0;
    await assert.rejects(
      retryOnConflict(async () => {
        calls++;
        throw new ApiError('down', 0, { reason: 'ConnectionRefused' });
      }),
      (e: unknown) => e instanceof ApiError && e.unreachable,
    );
    assert.equal(calls, 1);
  });
});

describe('small pieces', () => {
  it('parses Retry-After seconds and HTTP dates', () => {
    assert.equal(parseRetryAfter('7'), 7);
    assert.equal(parseRetryAfter(undefined), undefined);
    assert.equal(parseRetryAfter('soon'), undefined);
    const d = parseRetryAfter(new Date(Date.now() + 5_000).toUTCString())!;
    assert.ok(d >= 4 && d <= 6);
  });

  it('formats metav1.Time and MicroTime', () => {
    const d = new Date('2025-03-04T05:06:07.891Z');
    assert.equal(rfc3339(d), '2025-03-04T05:06:07Z');
    assert.equal(microTime(d), '2025-03-04T05:06:07.891000Z');
  });

  it('builds keys and paths', () => {
    assert.equal(objectKey({ metadata: { name: 'a', namespace: 'ns' } }), 'ns/a');
    assert.equal(objectKey({ metadata: { name: 'a' } }), 'a');
    assert.deepEqual(parseObjectKey('ns/a'), { namespace: 'ns', name: 'a' });
    assert.deepEqual(parseObjectKey('a'), { name: 'a' });
    assert.equal(resourcePath(Resources.ConfigMap, 'ns', 'x'), '/api/v1/namespaces/ns/configmaps/x');
    assert.equal(
      resourcePath(Resources.Server, 'ignored', 's', 'status'),
      '/apis/metal.ironcore.dev/v1alpha1/servers/s/status',
    );
    assert.equal(resourcePath(Resources.Lease, undefined), '/apis/coordination.k8s.io/v1/leases');
  });

  it('builds and checks controller owner references', () => {
    const owner = { metadata: { name: 'claim', uid: 'u1' } };
    const ref = controllerOwnerReference(owner, Resources.ServerClaim);
    assert.deepEqual(ref, {
      apiVersion: 'metal.ironcore.dev/v1alpha1',
      kind: 'ServerClaim',
      name: 'claim',
      uid: 'u1',
      controller: true,
      blockOwnerDeletion: true,
    });
    const dep = { metadata: { name: 'sbc', ownerReferences: [ref] } };
    assert.equal(isControlledBy(dep, owner), true);
    assert.equal(isControlledBy(dep, { metadata: { name: 'claim', uid: 'u2' } }), false);
    assert.throws(() =>
      withControllerReference(dep, { metadata: { name: 'other', uid: 'u2' } }, Resources.ServerClaim),
    );
    assert.equal(withControllerReference(dep, owner, Resources.ServerClaim).length, 1);
    assert.throws(() => controllerOwnerReference({ metadata: { name: 'x' } }, Resources.Server));
  });
});
