/**
 * The informer's view of this process's own writes (client-go's MutationCache), against a real API
 * server: with `client.onObject` wired to `observe()` (as the Manager does), `get()` answers with a
 * write's result while the watch has not delivered it — here the watch is stopped, so it never
 * does — `list()` keeps the watched version, an older version never replaces a newer one, a creation
 * of this process is answered by `get()` when the informer's namespace and label selector would
 * include it (never otherwise), and the watched version wins once it catches up.
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

describe('Informer own writes (real API server)', () => {
  before(async () => {
    const kc = (await sharedCluster()).kubeConfig();
    client = new KubeClient(kc);
    ns = await testNamespace(kc, 'rt-inf-own');
  });
  after(async () => {
    await ns.cleanup();
    await client.close();
  });

  it('get() serves a write answer ahead of a lagging watch; list() and older versions do not', async () => {
    await client.create<CM>(Resources.ConfigMap, cm('a', '1'));
    const inf = new Informer<CM>(client, Resources.ConfigMap, { namespace: ns.name });
    client.onObject((o) => inf.observe(o));
    await inf.start();
    inf.stop();
    await inf.stopped();
    const watched = inf.get('a', ns.name)!;
    assert.equal(watched.data?.v, '1');

    const written = await client.mergePatch<CM>(Resources.ConfigMap, 'a', ns.name, { data: { v: '2' } });
    assert.equal(inf.get('a', ns.name)?.data?.v, '2', 'the write answer');
    assert.equal(inf.get('a', ns.name)?.metadata.resourceVersion, written.metadata.resourceVersion);
    assert.equal(
      (inf.get('a', ns.name)!.metadata as { managedFields?: unknown }).managedFields,
      undefined,
      'transformed like watched objects',
    );
    assert.ok(
      (written.metadata as { managedFields?: unknown[] }).managedFields?.length,
      "the caller's answer is not modified",
    );
    assert.equal(inf.list(ns.name)[0]?.data?.v, '1', 'list() shows the watched version');

    inf.observe(watched);
    assert.equal(inf.get('a', ns.name)?.data?.v, '2', 'an older version does not replace a newer one');

    await client.create<CM>(Resources.ConfigMap, cm('b', '1'));
    assert.equal(inf.get('b', ns.name)?.data?.v, '1', 'a creation the watch has not delivered yet');
    assert.equal(inf.list(ns.name).length, 1, 'list() shows only watched objects');
  });

  it('a creation enters only when the namespace and label selector would include it', async () => {
    const inf = new Informer<CM>(client, Resources.ConfigMap, {
      namespace: ns.name,
      labelSelector: 'metal.ironcore.dev/test=own,!excluded',
    });
    client.onObject((o) => inf.observe(o));
    await inf.start();
    inf.stop();
    await inf.stopped();
    const labelled = (name: string, labels: Record<string, string>): CM => ({
      ...cm(name, '1'),
      metadata: { name, namespace: ns.name, labels },
    });
    await client.create<CM>(Resources.ConfigMap, labelled('in', { 'metal.ironcore.dev/test': 'own' }));
    await client.create<CM>(Resources.ConfigMap, labelled('other-value', { 'metal.ironcore.dev/test': 'x' }));
    await client.create<CM>(
      Resources.ConfigMap,
      labelled('excluded', { 'metal.ironcore.dev/test': 'own', excluded: 'yes' }),
    );
    await client.create<CM>(Resources.ConfigMap, cm('unlabelled', '1'));
    const other = await testNamespace((await sharedCluster()).kubeConfig(), 'rt-inf-own-b');
    try {
      await client.create<CM>(Resources.ConfigMap, {
        ...labelled('in', { 'metal.ironcore.dev/test': 'own' }),
        metadata: { name: 'in', namespace: other.name, labels: { 'metal.ironcore.dev/test': 'own' } },
      });
      assert.ok(inf.get('in', ns.name), 'matching: enters');
      assert.equal(inf.get('in', other.name), undefined, 'another namespace');
    } finally {
      await other.cleanup();
    }
    assert.equal(inf.get('other-value', ns.name), undefined, 'label value differs');
    assert.equal(inf.get('excluded', ns.name), undefined, '!excluded');
    assert.equal(inf.get('unlabelled', ns.name), undefined, 'label missing');
  });

  it('the watched version takes over once the watch catches up', async () => {
    await client.create<CM>(Resources.ConfigMap, cm('c', '1'));
    const inf = new Informer<CM>(client, Resources.ConfigMap, { namespace: ns.name });
    client.onObject((o) => inf.observe(o));
    await inf.start();
    try {
      await client.mergePatch<CM>(Resources.ConfigMap, 'c', ns.name, { data: { v: '2' } });
      assert.equal(inf.get('c', ns.name)?.data?.v, '2');
      // Someone else's write, seen only through the watch.
      const other = new KubeClient((await sharedCluster()).kubeConfig());
      try {
        await other.mergePatch<CM>(Resources.ConfigMap, 'c', ns.name, { data: { v: '3' } });
      } finally {
        await other.close();
      }
      await waitFor('watched v3', 10_000, () => inf.get('c', ns.name)?.data?.v === '3');
      assert.equal(inf.list(ns.name).find((x) => x.metadata.name === 'c')?.data?.v, '3');
    } finally {
      inf.stop();
      await inf.stopped();
    }
  });
});
