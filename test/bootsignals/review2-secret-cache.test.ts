/**
 * Second security review (issue 29), the callback-Secret cache transform (pure):
 * - N13 (S15 residual): cached callback Secrets keep no labels, annotations or managedFields and only
 *   the callback keys of `data`, and a controller reference to an SBC whose uid or
 *   `callbackSecretRef` does not match keeps no `data`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import type { SecretObject } from '../../src/bootsignals/boot-target.js';
import { keepOnlySbcSecretData } from '../../src/bootsignals/signal-stack.js';

const secret = (uid = 'sbc-uid'): SecretObject =>
  ({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: 'b-callback',
      namespace: 'n',
      uid: 's',
      resourceVersion: '7',
      labels: { 'metal.ironcore.dev/callback': 'true', big: 'x'.repeat(1000) },
      annotations: { huge: 'y'.repeat(100_000) },
      managedFields: [{ manager: 'm', operation: 'Update' }],
      ownerReferences: [
        {
          apiVersion: 'metal.ironcore.dev/v1alpha1',
          kind: 'ServerBootConfiguration',
          name: 'b',
          uid,
          controller: true,
        },
      ],
    },
    data: { token: 'dA==', attempt: 'MQ==', previous: '', extra: 'z'.repeat(100_000) },
  }) as unknown as SecretObject;

const sbc = (uid: string, callback?: string) =>
  ({
    metadata: { name: 'b', namespace: 'n', uid },
    spec: { serverRef: { name: 's' }, ...(callback ? { callbackSecretRef: { name: callback } } : {}) },
  }) as unknown as ServerBootConfiguration;

describe('second security review: callback Secret cache', () => {
  it('N13: only the callback keys and the metadata the servers need are cached', () => {
    const kept = keepOnlySbcSecretData(secret()) as SecretObject & { metadata: Record<string, unknown> };
    assert.deepEqual(Object.keys(kept.data ?? {}).sort(), ['attempt', 'previous', 'token']);
    assert.equal(kept.metadata.labels, undefined);
    assert.equal(kept.metadata.annotations, undefined);
    assert.equal(kept.metadata.managedFields, undefined);
    assert.equal(kept.metadata.resourceVersion, '7');
    assert.ok(JSON.stringify(kept).length < 1000, `${JSON.stringify(kept).length} bytes kept`);
  });

  it('N13: a controller reference that does not match the cached SBC keeps no data', () => {
    const lookup = (s?: ServerBootConfiguration) => () => s;
    assert.equal(
      keepOnlySbcSecretData(secret('forged'), lookup(sbc('sbc-uid', 'b-callback'))).data,
      undefined,
    );
    assert.equal(keepOnlySbcSecretData(secret(), lookup(sbc('sbc-uid', 'other'))).data, undefined);
    assert.ok(keepOnlySbcSecretData(secret(), lookup(sbc('sbc-uid', 'b-callback'))).data?.token);
    assert.ok(
      keepOnlySbcSecretData(secret(), lookup(sbc('sbc-uid'))).data?.token,
      'SBC without callbackSecretRef yet',
    );
    assert.ok(keepOnlySbcSecretData(secret(), lookup(undefined)).data?.token, 'SBC not cached yet');
  });
});
