/**
 * Security review S15: anyone who may create Secrets can label them `metal.ironcore.dev/callback=true`;
 * the signal servers' cache keeps the data only of Secrets a ServerBootConfiguration controls.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SecretObject } from '../../src/bootsignals/boot-target.js';
import { CALLBACK_SECRET_LABEL } from '../../src/bootsignals/signal-stack.js';
import { Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { seedBootTarget, useSignalStack, waitCached } from './fixture.js';

describe('callback Secret cache', () => {
  const fx = useSignalStack('sec-cache');

  it('S15: a labelled Secret no SBC controls is cached without its data; SBC-controlled ones keep it', async () => {
    const big = Buffer.alloc(512 * 1024, 7).toString('base64');
    await fx.client.create<SecretObject>(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: 'tenant-blob',
        namespace: fx.namespace.name,
        labels: { [CALLBACK_SECRET_LABEL]: 'true' },
      },
      data: {
        blob: big,
        token: Buffer.from('x').toString('base64'),
        attempt: Buffer.from('1').toString('base64'),
      },
    });
    await waitFor(
      'tenant Secret cached',
      10_000,
      () => !!fx.stack.sources.secrets.get('tenant-blob', fx.namespace.name),
    );
    assert.equal(fx.stack.sources.secrets.get('tenant-blob', fx.namespace.name)!.data, undefined);

    const s = await seedBootTarget(fx.client, fx.namespace.name);
    await waitCached(fx.stack, s);
    await waitFor(
      'callback Secret cached with its owner',
      10_000,
      () => !!fx.stack.sources.secrets.get(s.secretName, fx.namespace.name)?.metadata.ownerReferences,
    );
    assert.ok(fx.stack.sources.secrets.get(s.secretName, fx.namespace.name)!.data?.token);
    assert.equal((await fetch(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=${s.token}`)).status, 200);
  });
});
