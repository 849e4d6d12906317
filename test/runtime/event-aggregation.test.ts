/**
 * EventRecorder aggregation against a real API server: repeats of one Event cost one create and at
 * most one PATCH per flush interval (counted by the client's own request metrics), and more than
 * MAX_SIMILAR distinct messages for one (object, type, reason) combine into one Event.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { KubeClient } from '../../src/runtime/client.js';
import { EventRecorder, MAX_SIMILAR } from '../../src/runtime/events.js';
import { RuntimeMetrics } from '../../src/runtime/metrics.js';
import { type KObject, Resources } from '../../src/runtime/resource.js';
import { sharedCluster, testNamespace } from '../harness/shared.js';

interface Event extends KObject {
  reason?: string;
  message?: string;
  count?: number;
  series?: { count: number };
}

let client: KubeClient;
let metrics: RuntimeMetrics;
let ns: { name: string; cleanup(): Promise<void> };

async function eventWrites(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await metrics.apiRequests.get()).values) {
    if (v.labels.resource !== 'events') continue;
    out[String(v.labels.verb)] = (out[String(v.labels.verb)] ?? 0) + v.value;
  }
  return out;
}

describe('EventRecorder aggregation (real API server)', () => {
  before(async () => {
    const kc = (await sharedCluster()).kubeConfig();
    metrics = new RuntimeMetrics();
    client = new KubeClient(kc, { metrics });
    ns = await testNamespace(kc, 'rt-event-agg');
  });
  after(async () => {
    await ns.cleanup();
    await client.close();
  });

  it('writes 50 repeats as one create and one patch, with the full count', async () => {
    const rec = new EventRecorder(client, 'metal-operator');
    const obj = await client.create<KObject>(Resources.ConfigMap, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'repeats', namespace: ns.name },
    });
    Object.assign(obj, { apiVersion: 'v1', kind: 'ConfigMap' });
    for (let i = 0; i < 50; i++) rec.event(obj, 'Normal', 'PowerOnRequested', 'attempt 1: power on sent');
    await rec.flush();
    const events = (
      await client.list<Event>(Resources.Event, {
        namespace: ns.name,
        fieldSelector: 'involvedObject.name=repeats',
      })
    ).items;
    assert.equal(events.length, 1);
    assert.equal(events[0]!.count, 50);
    assert.equal(events[0]!.series?.count, 50);
    const writes = await eventWrites();
    assert.equal(writes.create, 1);
    assert.ok((writes.patch ?? 0) <= 1, `at most one series patch, got ${writes.patch}`);
  });

  it('combines distinct messages beyond MAX_SIMILAR into one Event', async () => {
    const rec = new EventRecorder(client, 'metal-operator');
    const obj = await client.create<KObject>(Resources.ConfigMap, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'similar', namespace: ns.name },
    });
    Object.assign(obj, { apiVersion: 'v1', kind: 'ConfigMap' });
    const total = MAX_SIMILAR + 15;
    for (let i = 0; i < total; i++) rec.event(obj, 'Warning', 'BMCUnreachable', `try ${i}: 503`);
    await rec.flush();
    const events = (
      await client.list<Event>(Resources.Event, {
        namespace: ns.name,
        fieldSelector: 'involvedObject.name=similar',
      })
    ).items;
    assert.equal(events.length, MAX_SIMILAR + 1);
    const combined = events.filter((e) => e.message?.startsWith('(combined from similar events): '));
    assert.equal(combined.length, 1);
    assert.equal(combined[0]!.count, 15);
    assert.equal(combined[0]!.message, `(combined from similar events): try ${total - 1}: 503`);
  });
});
