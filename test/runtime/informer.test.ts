/**
 * Informer against a real API server: cache and indexes follow adds, updates and deletes; a throwing
 * or rejecting handler is logged and the watch keeps delivering, across server-side watch timeouts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { KubeClient } from '../../src/runtime/client.js';
import { Informer } from '../../src/runtime/informer.js';
import { type KObject, Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';
import { captureLogger } from './log-capture.js';

// A file run on its own started a private control plane: stop it, or the process never exits.
after(releaseSharedCluster);

interface ConfigMap extends KObject {
  data?: Record<string, string>;
}

let client: KubeClient;
let ns: { name: string; cleanup(): Promise<void> };

const cm = (
  name: string,
  labels: Record<string, string> = {},
  data: Record<string, string> = {},
): ConfigMap => ({
  metadata: { name, namespace: ns.name, labels: { suite: 'informer', ...labels } },
  data,
});

describe('Informer (real API server)', () => {
  before(async () => {
    const kc = (await sharedCluster()).kubeConfig();
    client = new KubeClient(kc);
    ns = await testNamespace(kc, 'rt-informer');
  });
  after(async () => {
    await ns.cleanup();
    await client.close();
  });

  it('keeps cache and indexes in step with adds, updates and deletes', async () => {
    await client.create(Resources.ConfigMap, cm('pre', { tier: 'a' }));
    const { log } = captureLogger('informer-test', 'warn');
    const inf = new Informer<ConfigMap>(client, Resources.ConfigMap, {
      namespace: ns.name,
      labelSelector: 'suite=informer',
      indexers: { tier: (o) => (o.metadata.labels?.tier ? [o.metadata.labels.tier] : []) },
      log,
    });
    const seen: string[] = [];
    inf.on('add', (o) => seen.push(`add ${o.metadata.name}`));
    inf.on('update', (o, old) =>
      seen.push(`update ${o.metadata.name} ${old?.metadata.labels?.tier}->${o.metadata.labels?.tier}`),
    );
    inf.on('delete', (o) => seen.push(`delete ${o.metadata.name}`));
    try {
      await inf.start();
      assert.equal(inf.hasSynced(), true);
      assert.deepEqual(seen, ['add pre']);
      assert.equal(inf.get('pre', ns.name)?.metadata.name, 'pre');

      await client.create(Resources.ConfigMap, cm('x', { tier: 'a' }));
      await client.create(Resources.ConfigMap, cm('y', { tier: 'b' }));
      await waitFor('x and y cached', 10_000, () => inf.list(ns.name).length === 3);
      assert.deepEqual(
        inf
          .byIndex('tier', 'a')
          .map((o) => o.metadata.name)
          .sort(),
        ['pre', 'x'],
      );

      await client.mergePatch(Resources.ConfigMap, 'x', ns.name, { metadata: { labels: { tier: 'b' } } });
      await client.delete(Resources.ConfigMap, 'pre', ns.name);
      await waitFor('update and delete seen', 10_000, () => seen.includes('delete pre'));
      assert.deepEqual(
        inf
          .byIndex('tier', 'b')
          .map((o) => o.metadata.name)
          .sort(),
        ['x', 'y'],
      );
      assert.deepEqual(inf.byIndex('tier', 'a'), []);
      assert.equal(inf.get('pre', ns.name), undefined);
      assert.deepEqual(seen.slice(1), ['add x', 'add y', 'update x a->b', 'delete pre']);
      assert.deepEqual(inf.list('other-namespace'), []);
      assert.throws(() => inf.byIndex('nope', 'x'));
      // Adding an index later indexes what is cached already.
      inf.addIndexers({ name: (o) => [o.metadata.name!] });
      assert.equal(inf.byIndex('name', 'y').length, 1);
    } finally {
      inf.stop();
      await inf.stopped();
    }
  });

  it('logs a throwing handler and keeps delivering, also across watch timeouts', async () => {
    const { log, records } = captureLogger('informer-test');
    const inf = new Informer<ConfigMap>(client, Resources.ConfigMap, {
      namespace: ns.name,
      labelSelector: 'suite=informer,handler=yes',
      watchTimeoutSeconds: 1,
      log,
    });
    const delivered: string[] = [];
    inf.on('add', (o) => {
      if (o.metadata.name?.startsWith('boom')) throw new Error(`handler exploded on ${o.metadata.name}`);
    });
    inf.on('add', async (o) => {
      if (o.metadata.name?.startsWith('boom')) throw new Error('async handler rejected');
    });
    inf.on('add', (o) => delivered.push(`add ${o.metadata.name}`));
    inf.on('update', (o) => delivered.push(`update ${o.metadata.name} ${o.data?.v}`));
    try {
      await inf.start();
      await client.create(Resources.ConfigMap, cm('boom-1', { handler: 'yes' }));
      await client.create(Resources.ConfigMap, cm('ok-1', { handler: 'yes' }));
      await waitFor('ok-1 delivered', 10_000, () => delivered.includes('add ok-1'));
      // Let the server end the (1 s) watch a few times, then make sure events still flow.
      await new Promise((ok) => setTimeout(ok, 2_500));
      await client.create(Resources.ConfigMap, cm('boom-2', { handler: 'yes' }));
      await client.create(Resources.ConfigMap, cm('ok-2', { handler: 'yes' }));
      await client.mergePatch(Resources.ConfigMap, 'ok-1', ns.name, { data: { v: '2' } });
      await waitFor(
        'later events delivered',
        10_000,
        () => delivered.includes('update ok-1 2') && delivered.includes('add ok-2'),
      );
      assert.deepEqual(delivered, ['add boom-1', 'add ok-1', 'add boom-2', 'add ok-2', 'update ok-1 2']);

      await waitFor(
        'async rejections logged',
        5_000,
        () => records.filter((r) => r.msg === 'informer event handler threw').length === 4,
      );
      const errors = records.filter((r) => r.msg === 'informer event handler threw');
      assert.ok(errors.every((r) => r.level === 50));
      assert.deepEqual(errors.map((r) => r.err?.message).sort(), [
        'async handler rejected',
        'async handler rejected',
        'handler exploded on boom-1',
        'handler exploded on boom-2',
      ]);
      assert.ok(errors.some((r) => r.key === `${ns.name}/boom-1`));
      assert.equal(inf.stats.lists, 1, 'timeouts re-watch from the last resourceVersion, no relist');
      assert.ok(
        inf.stats.watches >= 3,
        `watch re-opened after server timeouts (${inf.stats.watches} watches)`,
      );
      assert.equal(inf.stats.errors, 0);
    } finally {
      inf.stop();
      await inf.stopped();
    }
  });
});
