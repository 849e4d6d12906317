/**
 * The client's request breakdown against a real API server: requests are counted by origin
 * (`withRequestOrigin`), resource (with `/status`), verb and status code; a 409 shows as code 409;
 * a patch that changes nothing counts as a no-op write, one that changes something does not — also
 * while a watch of the same client delivers each write's result, often ahead of its response.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { KubeClient, withRequestOrigin } from '../../src/runtime/client.js';
import { RuntimeMetrics } from '../../src/runtime/metrics.js';
import { type KObject, Resources } from '../../src/runtime/resource.js';
import { sharedCluster, testNamespace } from '../harness/shared.js';

let client: KubeClient;
let metrics: RuntimeMetrics;
let ns: { name: string; cleanup(): Promise<void> };

async function counted(m: RuntimeMetrics['apiRequests'] | RuntimeMetrics['apiNoopWrites'], origin: string) {
  const out: Record<string, number> = {};
  for (const v of (await m.get()).values) {
    if (v.labels.origin !== origin) continue;
    const l = v.labels as Record<string, string | number | undefined>;
    const k = [l.resource, l.verb, l.code].filter(Boolean).join(' ');
    out[k] = (out[k] ?? 0) + v.value;
  }
  return out;
}

describe('request metrics (real API server)', () => {
  before(async () => {
    const kc = (await sharedCluster()).kubeConfig();
    metrics = new RuntimeMetrics();
    client = new KubeClient(kc, { metrics });
    ns = await testNamespace(kc, 'rt-req-metrics');
  });
  after(async () => {
    await ns.cleanup();
    await client.close();
  });

  it('counts by origin, resource, verb and code, and spots writes that changed nothing', async () => {
    await withRequestOrigin('test-controller', async () => {
      const obj = await client.create<KObject & { data?: Record<string, string> }>(Resources.ConfigMap, {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: 'counted', namespace: ns.name },
        data: { a: '1' },
      });
      await client.mergePatch(Resources.ConfigMap, 'counted', ns.name, { data: { a: '2' } }); // changes
      await client.mergePatch(Resources.ConfigMap, 'counted', ns.name, { data: { a: '2' } }); // no-op
      await assert.rejects(
        client.update(Resources.ConfigMap, { ...obj, data: { a: '3' } }), // stale resourceVersion
        (e: { status?: number }) => e.status === 409,
      );
      await client.get(Resources.ConfigMap, 'counted', ns.name);
    });
    await client.get(Resources.ConfigMap, 'counted', ns.name); // outside: origin "other"
    assert.deepEqual(await counted(metrics.apiRequests, 'test-controller'), {
      'configmaps create 201': 1,
      'configmaps patch 200': 2,
      'configmaps update 409': 1,
      'configmaps get 200': 1,
    });
    assert.deepEqual(await counted(metrics.apiNoopWrites, 'test-controller'), { 'configmaps patch': 1 });
    assert.equal((await counted(metrics.apiRequests, 'other'))['configmaps get 200'], 1);
  });

  it('does not count a write as a no-op because its own watch event arrived first', async () => {
    const abort = new AbortController();
    let seen = 0;
    // From the list's resourceVersion, not '0': a watch established only after the first writes
    // (a loaded machine) still gets every event, where '0' would fold them into one ADDED.
    const { resourceVersion } = await client.list(Resources.ConfigMap, { namespace: ns.name });
    const watching = client
      .watch(
        Resources.ConfigMap,
        { namespace: ns.name, resourceVersion },
        () => {
          seen++;
        },
        abort.signal,
      )
      .catch(() => undefined);
    await withRequestOrigin('watched-writer', async () => {
      await client.create(Resources.ConfigMap, {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: 'watched', namespace: ns.name },
        data: { n: '0' },
      });
      for (let i = 1; i <= 40; i++)
        await client.mergePatch(Resources.ConfigMap, 'watched', ns.name, { data: { n: String(i) } });
    });
    const deadline = Date.now() + 10_000;
    while (seen < 41 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    abort.abort();
    await watching;
    assert.ok(seen >= 41, `the watch delivered ${seen} of 41 events`);
    assert.deepEqual(await counted(metrics.apiNoopWrites, 'watched-writer'), {});
    assert.equal((await counted(metrics.apiRequests, 'watched-writer'))['configmaps patch 200'], 40);
  });
});
