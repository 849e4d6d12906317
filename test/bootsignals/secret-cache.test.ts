/**
 * Security review S15: anyone who may create Secrets can label them `metal.ironcore.dev/callback=true`;
 * the signal servers' cache keeps the data only of Secrets a ServerBootConfiguration controls.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { SecretObject } from '../../src/bootsignals/boot-target.js';
import { CALLBACK_SECRET_LABEL } from '../../src/bootsignals/signal-stack.js';
import type { KubeClient } from '../../src/runtime/client.js';
import { Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { sharedCluster, testNamespace } from '../harness/shared.js';
import { deleteSeededServers, newTestClient, seedBootTarget, startTestStack, waitCached } from './fixture.js';

let client: KubeClient;
let stack: Awaited<ReturnType<typeof startTestStack>>;
let ns: { name: string; cleanup(): Promise<void> };

describe('callback Secret cache', () => {
  before(async () => {
    const kc = (await sharedCluster()).kubeConfig();
    client = newTestClient(kc);
    ns = await testNamespace(kc, 'sec-cache');
    stack = await startTestStack(kc);
  });
  after(async () => {
    await stack?.close();
    if (client && ns) await deleteSeededServers(client, ns.name);
    await ns?.cleanup();
    await client?.close();
  });

  it('S15: a labelled Secret no SBC controls is cached without its data; SBC-controlled ones keep it', async () => {
    const big = Buffer.alloc(512 * 1024, 7).toString('base64');
    await client.create<SecretObject>(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'tenant-blob', namespace: ns.name, labels: { [CALLBACK_SECRET_LABEL]: 'true' } },
      data: {
        blob: big,
        token: Buffer.from('x').toString('base64'),
        attempt: Buffer.from('1').toString('base64'),
      },
    });
    await waitFor('tenant Secret cached', 10_000, () => !!stack.sources.secrets.get('tenant-blob', ns.name));
    assert.equal(stack.sources.secrets.get('tenant-blob', ns.name)!.data, undefined);

    const s = await seedBootTarget(client, ns.name);
    await waitCached(stack, s);
    await waitFor(
      'callback Secret cached with its owner',
      10_000,
      () => !!stack.sources.secrets.get(s.secretName, ns.name)?.metadata.ownerReferences,
    );
    assert.ok(stack.sources.secrets.get(s.secretName, ns.name)!.data?.token);
    assert.equal((await fetch(`${stack.bootUrl}/ignition/${s.uuid}?token=${s.token}`)).status, 200);
  });
});
