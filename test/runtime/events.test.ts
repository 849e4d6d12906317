/**
 * EventRecorder against a real API server: repeats aggregate into one Event (count and series go
 * up), distinct messages make distinct Events, cluster-scoped objects get Events in `default`, and
 * the events.k8s.io fields pass the API server's validation.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { KubeClient } from '../../src/runtime/client.js';
import { EventRecorder } from '../../src/runtime/events.js';
import { type KObject, Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';
import { captureLogger } from './log-capture.js';

// A file run on its own started a private control plane: stop it, or the process never exits.
after(releaseSharedCluster);

interface Event extends KObject {
  reason?: string;
  message?: string;
  count?: number;
  type?: string;
  eventTime?: string;
  action?: string;
  reportingComponent?: string;
  reportingInstance?: string;
  series?: { count: number; lastObservedTime: string };
  involvedObject?: { kind?: string; name?: string; uid?: string; namespace?: string };
}

let client: KubeClient;
let ns: { name: string; cleanup(): Promise<void> };

describe('EventRecorder (real API server)', () => {
  before(async () => {
    const kc = (await sharedCluster()).kubeConfig();
    client = new KubeClient(kc);
    ns = await testNamespace(kc, 'rt-events');
  });
  after(async () => {
    await ns.cleanup();
    await client.close();
  });

  it('aggregates repeats into one Event and keeps distinct messages apart', async () => {
    const { log, records } = captureLogger('events-test');
    const rec = new EventRecorder(client, 'metal-operator', { log });
    const obj = await client.create<KObject>(Resources.ConfigMap, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'subject', namespace: ns.name },
    });
    obj.apiVersion = 'v1';
    obj.kind = 'ConfigMap';
    for (let i = 0; i < 3; i++) rec.event(obj, 'Warning', 'BootTimedOut', 'attempt 1 timed out');
    await rec.flush();
    rec.event(obj, 'Warning', 'BootTimedOut', 'attempt 1 timed out');
    rec.event(obj, 'Normal', 'BootStarted', 'attempt 2 started', { action: 'PowerCycle' });
    await rec.flush();

    const events = (
      await client.list<Event>(Resources.Event, {
        namespace: ns.name,
        fieldSelector: 'involvedObject.name=subject',
      })
    ).items;
    assert.equal(events.length, 2, JSON.stringify(records));
    const timedOut = events.find((e) => e.reason === 'BootTimedOut')!;
    assert.equal(timedOut.count, 4);
    assert.equal(timedOut.series?.count, 4);
    assert.match(timedOut.series!.lastObservedTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    assert.match(timedOut.eventTime!, /\.\d{6}Z$/);
    assert.equal(timedOut.type, 'Warning');
    assert.equal(timedOut.action, 'BootTimedOut');
    assert.equal(timedOut.reportingComponent, 'metal-operator');
    assert.ok(timedOut.reportingInstance);
    assert.equal(timedOut.involvedObject?.uid, obj.metadata.uid);
    const started = events.find((e) => e.reason === 'BootStarted')!;
    assert.equal(started.count, 1);
    assert.equal(started.action, 'PowerCycle');
    assert.equal(started.series, undefined);
    assert.equal(records.filter((r) => r.level >= 40).length, 0, 'nothing failed');
  });

  it('records Events of cluster-scoped objects in default, and never throws', async () => {
    const { log, records } = captureLogger('events-test');
    const rec = new EventRecorder(client, 'metal-operator', { log });
    const nsObj = (await client.get<KObject>(Resources.Namespace, ns.name))!;
    rec.event({ ...nsObj, apiVersion: 'v1', kind: 'Namespace' }, 'Normal', 'Tested', 'cluster scoped');
    // Invalid input (no name): logged, not thrown.
    rec.event({ apiVersion: 'v1', kind: 'Namespace', metadata: {} }, 'Normal', 'Bad', 'x');
    await rec.flush();
    const events = (
      await client.list<Event>(Resources.Event, {
        namespace: 'default',
        fieldSelector: `involvedObject.name=${ns.name}`,
      })
    ).items;
    assert.equal(events.length, 1);
    assert.equal(events[0]!.involvedObject?.kind, 'Namespace');
    for (const e of events) await client.delete(Resources.Event, e.metadata.name!, 'default');
    assert.equal(records.filter((r) => r.msg === 'failed to record event').length, 1);
  });
});
