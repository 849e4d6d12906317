/**
 * Controller + Manager against a real API server: a burst of 1,000 objects is reconciled, each key
 * at least once after its last change, never by two of the 8 workers at once; `requeueAfterMs` and
 * errors requeue; the health server reports readiness and metrics.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { KubeConfig } from '@kubernetes/client-node';
import { Controller, type Request } from '../../src/runtime/controller.js';
import { Manager } from '../../src/runtime/manager.js';
import { controllerOwnerReference } from '../../src/runtime/ownerrefs.js';
import { type KObject, objectKey, Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';
import { captureLogger } from './log-capture.js';

// A file run on its own started a private control plane: stop it, or the process never exits.
after(releaseSharedCluster);

interface ConfigMap extends KObject {
  data?: Record<string, string>;
}

const N = 1000;
let kc: KubeConfig;
let ns: { name: string; cleanup(): Promise<void> };

/** Runs `fn` over `items` with at most `limit` in flight. */
async function pool<T>(items: T[], limit: number, fn: (t: T) => Promise<unknown>): Promise<void> {
  let i = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (i < items.length) await fn(items[i++]!);
    }),
  );
}

describe('Controller (real API server)', () => {
  before(async () => {
    kc = (await sharedCluster()).kubeConfig();
    ns = await testNamespace(kc, 'rt-controller');
  });
  after(async () => {
    await ns.cleanup();
  });

  it('reconciles each of 1,000 burst-created objects, never one key on two workers at once', async (t) => {
    const { log, records } = captureLogger('controller-test', 'info');
    const mgr = new Manager({ kubeConfig: kc, name: 'rt-burst', leaderElection: false, metricsPort: 0, log });
    const inf = mgr.informer<ConfigMap>(Resources.ConfigMap, { namespace: ns.name });
    const inFlight = new Set<string>();
    const overlaps: string[] = [];
    /** key → data.v of the cached object at its latest reconcile */
    const lastSeen = new Map<string, string | undefined>();
    let reconciles = 0;
    let maxConcurrent = 0;
    const ctrl = new Controller('burst', {
      workers: 8,
      log,
      metrics: mgr.metrics,
      reconcile: async (req: Request) => {
        const key = `${req.namespace}/${req.name}`;
        if (inFlight.has(key)) overlaps.push(key);
        inFlight.add(key);
        maxConcurrent = Math.max(maxConcurrent, inFlight.size);
        reconciles++;
        try {
          // Read from the cache at the start, as a real reconcile does, then "work" a little.
          const obj = inf.get(req.name, req.namespace);
          await new Promise((ok) => setTimeout(ok, Math.random() * 4));
          lastSeen.set(key, obj?.data?.v);
        } finally {
          inFlight.delete(key);
        }
      },
    }).watches(inf);
    mgr.add(ctrl);
    await mgr.start();
    try {
      const readyz = await fetch(`http://127.0.0.1:${mgr.healthPort}/readyz`);
      assert.equal(readyz.status, 200);

      const names = Array.from({ length: N }, (_, i) => `burst-${i}`);
      const t0 = Date.now();
      await pool(names, 50, (name) =>
        mgr.client.create(Resources.ConfigMap, { metadata: { name, namespace: ns.name }, data: { v: '1' } }),
      );
      // Change a fifth of them again while their first reconciles are running, so keys get
      // re-added while a worker holds them.
      await pool(names.slice(0, N / 5), 50, (name) =>
        mgr.client.mergePatch(Resources.ConfigMap, name, ns.name, { data: { v: '2' } }),
      );
      const want = (i: number) => (i < N / 5 ? '2' : '1');
      await waitFor('every object reconciled at its latest version', 60_000, () =>
        names.every((n, i) => lastSeen.get(`${ns.name}/${n}`) === want(i)),
      );
      const secs = (Date.now() - t0) / 1000;
      t.diagnostic(
        `${N} objects created+reconciled in ${secs.toFixed(1)} s, ${reconciles} reconciles, max ${maxConcurrent} concurrent`,
      );

      assert.deepEqual(overlaps, [], 'no key reconciled by two workers at once');
      assert.ok(maxConcurrent <= 8, `at most 8 concurrent reconciles (saw ${maxConcurrent})`);
      assert.ok(maxConcurrent > 1, 'workers ran in parallel');
      assert.ok(reconciles >= N);

      const metrics = await (await fetch(`http://127.0.0.1:${mgr.healthPort}/metrics`)).text();
      assert.match(metrics, /controller_runtime_reconcile_total\{controller="burst",result="success"\} \d+/);
      assert.match(metrics, /workqueue_adds_total\{name="burst"\} \d+/);
      assert.match(metrics, /rest_client_requests_total\{method="POST",code="201"\} \d+/);
    } finally {
      await mgr.stop();
    }
    assert.equal(records.filter((r) => r.level >= 50).length, 0, 'no errors logged');
  });

  it('requeues after errors (with backoff) and after requeueAfterMs; maps owned objects to owners', async () => {
    const { log, records } = captureLogger('controller-test', 'info');
    const mgr = new Manager({ kubeConfig: kc, name: 'rt-requeue', leaderElection: false, log });
    const owners = mgr.informer<ConfigMap>(Resources.ConfigMap, {
      namespace: ns.name,
      labelSelector: 'role=owner',
    });
    const owned = mgr.informer<ConfigMap>(Resources.ConfigMap, {
      namespace: ns.name,
      labelSelector: 'role=owned',
    });
    const calls = new Map<string, number[]>();
    const ctrl = new Controller('requeue', {
      log,
      // Large enough that timer lateness under load cannot hide the doubling (200 ms, then 400 ms).
      queue: { baseDelayMs: 200 },
      reconcile: async (req) => {
        const list = calls.get(req.name) ?? [];
        list.push(Date.now());
        calls.set(req.name, list);
        if (req.name === 'flaky' && list.length < 3) throw new Error('transient failure');
        if (req.name === 'poll' && list.length < 3) return { requeueAfterMs: 150 };
      },
    })
      .watches(owners)
      .owns(owned, 'ConfigMap');
    mgr.add(ctrl);
    await mgr.start();
    try {
      for (const name of ['flaky', 'poll', 'parent']) {
        await mgr.client.create(Resources.ConfigMap, {
          metadata: { name, namespace: ns.name, labels: { role: 'owner' } },
        });
      }
      await waitFor(
        'flaky and poll settled',
        10_000,
        () => calls.get('flaky')?.length === 3 && calls.get('poll')?.length === 3,
      );
      const poll = calls.get('poll')!;
      assert.ok(poll[2]! - poll[1]! >= 140, 'requeueAfterMs honoured');
      const flaky = calls.get('flaky')!;
      // Lower bounds only: a stalled machine stretches gaps, it never shortens a timer.
      assert.ok(flaky[1]! - flaky[0]! >= 190, `first retry after ${flaky[1]! - flaky[0]!} ms, base 200 ms`);
      assert.ok(
        flaky[2]! - flaky[1]! >= 390,
        `second retry after ${flaky[2]! - flaky[1]!} ms: backoff doubles`,
      );
      const requeued = records.filter((r) => r.msg === 'reconcile failed; requeued');
      assert.deepEqual(
        requeued.map((r) => (r as { retries?: number }).retries),
        [1, 2],
      );

      const parent = owners.get('parent', ns.name)!;
      await waitFor('parent reconciled', 5_000, () => (calls.get('parent')?.length ?? 0) >= 1);
      const before = calls.get('parent')!.length;
      await mgr.client.create(Resources.ConfigMap, {
        metadata: {
          name: 'child',
          namespace: ns.name,
          labels: { role: 'owned' },
          ownerReferences: [controllerOwnerReference({ ...parent, kind: 'ConfigMap' }, Resources.ConfigMap)],
        },
      });
      await waitFor('owner enqueued by its dependent', 5_000, () => calls.get('parent')!.length > before);
      assert.equal(calls.has('child'), false, 'the dependent itself is not reconciled');
      assert.equal(objectKey(parent), `${ns.name}/parent`);
    } finally {
      await mgr.stop();
    }
  });
});
