/**
 * Informer transforms against a real API server: by default cached objects carry no
 * `managedFields` (listed and watched alike); `transform: null` keeps them; a custom transform sees
 * every object before handlers do.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { KubeClient } from '../../src/runtime/client.js';
import { Informer } from '../../src/runtime/informer.js';
import { type KObject, Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { sharedCluster, testNamespace } from '../harness/shared.js';

interface CM extends KObject {
  data?: Record<string, string>;
}

let client: KubeClient;
let ns: { name: string; cleanup(): Promise<void> };

const cm = (name: string, v: string): CM => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name, namespace: ns.name },
  data: { v },
});

describe('Informer transform (real API server)', () => {
  before(async () => {
    const kc = (await sharedCluster()).kubeConfig();
    client = new KubeClient(kc);
    ns = await testNamespace(kc, 'rt-inf-transform');
  });
  after(async () => {
    await ns.cleanup();
    await client.close();
  });

  it('strips managedFields from listed and watched objects by default; null keeps them', async () => {
    const listed = await client.apply<CM>(Resources.ConfigMap, cm('listed', '1'));
    assert.ok(
      (listed.metadata as { managedFields?: unknown[] }).managedFields?.length,
      'the API server sends managedFields',
    );
    const stripping = new Informer<CM>(client, Resources.ConfigMap, { namespace: ns.name });
    const keeping = new Informer<CM>(client, Resources.ConfigMap, { namespace: ns.name, transform: null });
    await Promise.all([stripping.start(), keeping.start()]);
    try {
      await client.apply<CM>(Resources.ConfigMap, cm('watched', '2'));
      await waitFor(
        'watched in both caches',
        10_000,
        async () => !!stripping.get('watched', ns.name) && !!keeping.get('watched', ns.name),
      );
      for (const name of ['listed', 'watched']) {
        assert.equal(
          (stripping.get(name, ns.name)!.metadata as { managedFields?: unknown[] }).managedFields,
          undefined,
          name,
        );
        assert.equal(stripping.get(name, ns.name)!.data?.v, name === 'listed' ? '1' : '2');
        assert.ok(
          (keeping.get(name, ns.name)!.metadata as { managedFields?: unknown[] }).managedFields?.length,
          name,
        );
      }
    } finally {
      stripping.stop();
      keeping.stop();
    }
  });

  it('runs a custom transform before handlers', async () => {
    const seen: string[] = [];
    const inf = new Informer<CM>(client, Resources.ConfigMap, {
      namespace: ns.name,
      transform: (o) => {
        o.data = { v: `t:${o.data?.v ?? ''}` };
        return o;
      },
    });
    inf.on('add', (o) => seen.push(o.data?.v ?? ''));
    inf.on('update', (o) => seen.push(o.data?.v ?? ''));
    await inf.start();
    try {
      await client.apply<CM>(Resources.ConfigMap, cm('watched', '3'));
      await waitFor('update seen', 10_000, async () => seen.includes('t:3'));
      assert.equal(inf.get('watched', ns.name)!.data?.v, 't:3');
      assert.ok(
        seen.every((v) => v.startsWith('t:')),
        JSON.stringify(seen),
      );
    } finally {
      inf.stop();
    }
  });
});
