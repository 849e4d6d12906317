/**
 * Informers through kube-apiserver restarts and etcd compaction, on a PRIVATE control plane (this
 * file restarts its API server and compacts its etcd). The informers reach the API server through a
 * {@link TcpGate}, so the test decides when they may reconnect.
 *
 * The API server runs with `--watch-cache-sizes=configmaps#0`: Endpoint watches are served from the
 * watch cache (the production path: after a restart the cache starts at the current revision), while
 * ConfigMap watches go straight to etcd, where a compacted revision is what yields 410 Gone.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { KubeClient } from '../../src/runtime/client.js';
import { Informer } from '../../src/runtime/informer.js';
import { type KObject, Resources } from '../../src/runtime/resource.js';
import { ControlPlane, kubeconfigYaml, waitFor } from '../harness/control-plane.js';
import { captureLogger } from './log-capture.js';
import { TcpGate } from './tcp-gate.js';

interface Endpoint extends KObject {
  spec: { ip: string; macAddress: string };
}

let cp: ControlPlane;
let gate: TcpGate;
let direct: KubeClient;
let gated: KubeClient;
const suffix = randomBytes(3).toString('hex');

async function etcdRevision(): Promise<string> {
  // etcd requires the control plane's client certificate (N15): etcdRequest presents it.
  const res = await cp.etcdRequest('/v3/kv/range', { key: Buffer.from('/').toString('base64') });
  assert.equal(res.status, 200, res.body);
  const body = JSON.parse(res.body) as { header: { revision: string } };
  return body.header.revision;
}

async function compactEtcd(revision: string): Promise<void> {
  const res = await cp.etcdRequest('/v3/kv/compaction', { revision, physical: true });
  assert.equal(res.status, 200, res.body);
}

const names = <T extends KObject>(inf: Informer<T>) =>
  inf
    .list()
    .map((o) => o.metadata.name!)
    .sort();

describe('Informer across API server restarts and compaction (private control plane)', () => {
  before(async () => {
    cp = await ControlPlane.start({ apiServerArgs: ['--watch-cache-sizes=configmaps#0'] });
    gate = await TcpGate.start(Number(new URL(cp.server).port));
    direct = new KubeClient(cp.kubeConfig());
    const kc = new KubeConfig();
    kc.loadFromString(kubeconfigYaml(`https://127.0.0.1:${gate.port}`, cp.caFile, cp.token));
    gated = new KubeClient(kc, { timeoutMs: 5_000 });
  });
  after(async () => {
    await gated?.close();
    await direct?.close();
    await gate?.stop();
    await cp?.stop();
  });

  it('survives a kube-apiserver restart; changes made before it reconnects and after it converge', async (t) => {
    const label = `restart-${suffix}`;
    const ep = (n: string, ip: string): Endpoint => ({
      apiVersion: 'metal.ironcore.dev/v1alpha1',
      kind: 'Endpoint',
      metadata: { name: `${label}-${n}`, labels: { suite: label } },
      spec: { ip, macAddress: '52:54:00:00:00:01' },
    });
    for (const n of ['e1', 'e2', 'e3']) await direct.create(Resources.Endpoint, ep(n, '10.0.0.1'));
    const { log, records } = captureLogger('restart-test');
    const inf = new Informer<Endpoint>(gated, Resources.Endpoint, {
      labelSelector: `suite=${label}`,
      backoff: { initialMs: 200, maxMs: 1_000 },
      log,
    });
    try {
      await inf.start();
      assert.deepEqual(names(inf), [`${label}-e1`, `${label}-e2`, `${label}-e3`]);

      await cp.stopApiServer(); // the informer sees its server go away (gate still open)
      gate.close(); // ...and may not reconnect until the test says so
      await cp.startApiServer();
      await direct.create(Resources.Endpoint, ep('e4', '10.0.0.4'));
      await direct.create(Resources.Endpoint, ep('e5', '10.0.0.5'));
      await direct.delete(Resources.Endpoint, `${label}-e1`);
      await direct.mergePatch(Resources.Endpoint, `${label}-e2`, undefined, { spec: { ip: '10.0.0.22' } });
      const refusedWhileClosed = gate.refused;
      gate.open();

      await waitFor('cache converged after the restart', 20_000, () => {
        return (
          names(inf).join() === [`${label}-e2`, `${label}-e3`, `${label}-e4`, `${label}-e5`].join() &&
          inf.get(`${label}-e2`)?.spec.ip === '10.0.0.22'
        );
      });
      await direct.create(Resources.Endpoint, ep('e6', '10.0.0.6'));
      await waitFor('objects created after the reconnect arrive', 10_000, () => !!inf.get(`${label}-e6`));

      t.diagnostic(`informer stats after the restart: ${JSON.stringify(inf.stats)}`);
      assert.ok(refusedWhileClosed > 0, 'the informer kept trying while the API server was away');
      assert.ok(inf.stats.errors > 0);
      assert.ok(records.some((r) => r.msg === 'informer watch failed; retrying' && r.level >= 40));
    } finally {
      inf.stop();
      await inf.stopped();
    }
  });

  it('relists after a forced 410 (etcd compacted while the watch was disconnected)', async () => {
    const ns = `compact-${suffix}`;
    await direct.create(Resources.Namespace, { metadata: { name: ns } });
    for (const n of ['c1', 'c2', 'c3'])
      await direct.create(Resources.ConfigMap, { metadata: { name: n, namespace: ns }, data: { v: '1' } });
    const { log, records } = captureLogger('compaction-test');
    const inf = new Informer<KObject & { data?: Record<string, string> }>(gated, Resources.ConfigMap, {
      namespace: ns,
      backoff: { initialMs: 200, maxMs: 1_000 },
      log,
    });
    const deleted: string[] = [];
    inf.on('delete', (o) => deleted.push(o.metadata.name!));
    try {
      await inf.start();
      assert.deepEqual(names(inf), ['c1', 'c2', 'c3']);
      const rvBefore = inf.resourceVersion;

      gate.close();
      await direct.create(Resources.ConfigMap, { metadata: { name: 'c4', namespace: ns } });
      await direct.delete(Resources.ConfigMap, 'c1', ns);
      await direct.mergePatch(Resources.ConfigMap, 'c2', ns, { data: { v: '2' } });
      const rev = await etcdRevision();
      assert.ok(Number(rev) > Number(rvBefore));
      await compactEtcd(rev);
      gate.open();

      await waitFor('cache converged after the relist', 20_000, () => {
        return names(inf).join() === 'c2,c3,c4' && inf.get('c2', ns)?.data?.v === '2';
      });
      assert.ok(inf.stats.gone >= 1, 'the watch got 410 Gone');
      assert.ok(inf.stats.lists >= 2, 'and relisted');
      assert.deepEqual(deleted, ['c1'], 'the relist reported the deletion it had missed');
      assert.ok(records.some((r) => r.msg === 'resourceVersion too old (410 Gone); relisting'));

      await direct.create(Resources.ConfigMap, { metadata: { name: 'c5', namespace: ns } });
      await waitFor('the informer keeps watching after the relist', 10_000, () => !!inf.get('c5', ns));
    } finally {
      inf.stop();
      await inf.stopped();
    }
  });
});
