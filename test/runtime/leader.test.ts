/**
 * Leader election on a real Lease: of two Managers exactly one runs controllers, and a graceful stop
 * hands over at once (released Lease); across two processes, SIGKILL of the leader hands over within
 * 20 s with the default timings (15 s lease, 10 s renew deadline, 2 s retry period).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { KubeConfig } from '@kubernetes/client-node';
import { KubeClient } from '../../src/runtime/client.js';
import { Controller } from '../../src/runtime/controller.js';
import { Manager } from '../../src/runtime/manager.js';
import { type KObject, Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';
import { captureLogger } from './log-capture.js';

// A file run on its own started a private control plane: stop it, or the process never exits.
after(releaseSharedCluster);

interface Lease extends KObject {
  spec?: { holderIdentity?: string | null; leaseTransitions?: number; renewTime?: string };
}

let kc: KubeConfig;
let kubeconfigPath: string;
let ns: { name: string; cleanup(): Promise<void> };
const children = new Set<ChildProcess>();

describe('LeaderElector (real API server)', () => {
  before(async () => {
    const cluster = await sharedCluster();
    kc = cluster.kubeConfig();
    kubeconfigPath = cluster.kubeconfigPath;
    ns = await testNamespace(kc, 'rt-leader');
  });
  after(async () => {
    for (const c of children) c.kill('SIGKILL');
    await ns.cleanup();
  });

  it('two Managers: exactly one runs controllers; stopping it hands over at once', async () => {
    const lease = `mgr-${randomBytes(3).toString('hex')}`;
    const reconciledBy = new Map<string, Set<string>>();
    const make = (id: string) => {
      const { log } = captureLogger(`mgr-${id}`, 'warn');
      const mgr = new Manager({
        kubeConfig: kc,
        name: 'rt-leader-test',
        leaderElection: {
          namespace: ns.name,
          leaseName: lease,
          identity: id,
          retryPeriodMs: 500,
          renewDeadlineMs: 3_000,
          leaseDurationMs: 4_000,
        },
        log,
      });
      const inf = mgr.informer(Resources.ConfigMap, { namespace: ns.name, labelSelector: `lease=${lease}` });
      mgr.add(
        new Controller('c', {
          log,
          reconcile: async (req) => {
            const s = reconciledBy.get(id) ?? new Set();
            s.add(req.name);
            reconciledBy.set(id, s);
          },
        }).watches(inf),
      );
      return mgr;
    };
    const a = make('a');
    const b = make('b');
    const client = new KubeClient(kc);
    try {
      await Promise.all([a.start(), b.start()]);
      await waitFor('a leader', 10_000, () => a.isLeader() || b.isLeader());
      const [leader, follower, leaderId, followerId] = a.isLeader() ? [a, b, 'a', 'b'] : [b, a, 'b', 'a'];
      await client.create(Resources.ConfigMap, {
        metadata: { name: 'work-1', namespace: ns.name, labels: { lease } },
      });
      await waitFor('work-1 reconciled', 10_000, () => !!reconciledBy.get(leaderId)?.has('work-1'));
      // For a while (several renewals), exactly one of them leads and only it reconciles.
      for (let i = 0; i < 20; i++) {
        assert.equal(Number(a.isLeader()) + Number(b.isLeader()), 1, 'exactly one leader');
        await new Promise((ok) => setTimeout(ok, 100));
      }
      assert.equal(reconciledBy.has(followerId), false, 'the follower ran no reconcile');
      assert.equal(follower.ready(), true, 'the follower still serves from synced caches');

      const t0 = Date.now();
      await leader.stop();
      const held = await client.get<Lease>(Resources.Lease, lease, ns.name);
      assert.notEqual(held?.spec?.holderIdentity, leaderId, 'released on stop');
      await waitFor('follower takes over', 5_000, () => follower.isLeader());
      const took = Date.now() - t0;
      await waitFor(
        'new leader reconciles existing objects',
        5_000,
        () => !!reconciledBy.get(followerId)?.has('work-1'),
      );
      const after = await client.get<Lease>(Resources.Lease, lease, ns.name);
      assert.equal(after?.spec?.holderIdentity, followerId);
      assert.ok((after?.spec?.leaseTransitions ?? 0) >= 1);
      assert.ok(took < 2_000, `handover after a release took ${took} ms`);
    } finally {
      await a.stop();
      await b.stop();
      await client.close();
    }
  });

  /** Runs `fixtures/leader.js` as `identity`; its JSON lines land in `lines`. */
  const processes = (lease: string) => {
    const script = fileURLToPath(new URL('./fixtures/leader.js', import.meta.url));
    const lines: { event: string; identity: string; at: number; seenAt: number }[] = [];
    const start = (identity: string, timings: Record<string, number> = {}) => {
      const child = spawn(process.execPath, [script], {
        env: {
          ...process.env,
          KUBECONFIG: kubeconfigPath,
          LEASE_NAMESPACE: ns.name,
          LEASE_NAME: lease,
          IDENTITY: identity,
          ...Object.fromEntries(Object.entries(timings).map(([k, v]) => [k, String(v)])),
        },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      children.add(child);
      child.once('exit', () => children.delete(child));
      let buf = '';
      child.stdout!.on('data', (d: Buffer) => {
        buf += d.toString();
        let nl = buf.indexOf('\n');
        while (nl >= 0) {
          lines.push({ ...JSON.parse(buf.slice(0, nl)), seenAt: Date.now() });
          buf = buf.slice(nl + 1);
          nl = buf.indexOf('\n');
        }
      });
      return child;
    };
    const leading = (id: string) => lines.find((l) => l.event === 'leading' && l.identity === id);
    return { lines, start, leading };
  };

  it('two processes: the follower waits past the lease duration while the leader renews', async () => {
    const lease = `wait-${randomBytes(3).toString('hex')}`;
    // Short timings so that waiting longer than a whole lease duration is cheap.
    const timings = { LEASE_DURATION_MS: 3_000, RENEW_DEADLINE_MS: 2_000, RETRY_PERIOD_MS: 500 };
    const { lines, start, leading } = processes(lease);
    const client = new KubeClient(kc);
    const p1 = start('p1', timings);
    const p2 = start('p2', timings);
    try {
      await waitFor('one leads', 15_000, () => !!leading('p1') || !!leading('p2'));
      const [leaderId, followerId] = leading('p1') ? ['p1', 'p2'] : ['p2', 'p1'];
      await waitFor('the follower campaigns', 10_000, () =>
        lines.some((l) => l.event === 'campaigning' && l.identity === followerId),
      );
      const first = await client.get<Lease>(Resources.Lease, lease, ns.name);
      assert.equal(first?.spec?.holderIdentity, leaderId);
      // Longer than two lease durations: without renewals the follower would have taken over.
      const renewals = new Set<string>();
      const until = Date.now() + 7_000;
      while (Date.now() < until) {
        const l = await client.get<Lease>(Resources.Lease, lease, ns.name);
        assert.equal(l?.spec?.holderIdentity, leaderId, 'the Lease stays with the leader');
        if (l?.spec?.renewTime) renewals.add(l.spec.renewTime);
        await new Promise((ok) => setTimeout(ok, 250));
      }
      assert.equal(leading(followerId), undefined, 'the follower waits while the leader renews');
      assert.ok(renewals.size >= 3, `renewTime advanced ${renewals.size - 1} times in 7 s`);
    } finally {
      for (const c of [p1, p2]) c.kill('SIGKILL');
      await client.close();
    }
  });

  it('two processes: SIGKILL of the leader hands over to the other within 20 s', async (t) => {
    const lease = `proc-${randomBytes(3).toString('hex')}`;
    const { lines, start, leading } = processes(lease);

    const p1 = start('p1');
    await waitFor('p1 leads', 15_000, () => !!leading('p1'));
    const p2 = start('p2');
    await waitFor('p2 campaigns', 10_000, () =>
      lines.some((l) => l.event === 'campaigning' && l.identity === 'p2'),
    );
    // p2 has read the Lease held by p1 (it tried and failed to acquire) before p1 dies.
    const client = new KubeClient(kc);
    await waitFor('p1 holds the Lease', 10_000, async () => {
      const l = await client.get<Lease>(Resources.Lease, lease, ns.name);
      return l?.spec?.holderIdentity === 'p1';
    });
    assert.equal(leading('p2'), undefined, 'p2 does not lead while p1 holds the Lease');

    const exited = new Promise((ok) => p1.once('exit', ok));
    const killedAt = Date.now();
    p1.kill('SIGKILL');
    await exited;
    await waitFor('p2 leads', 25_000, () => !!leading('p2'));
    const handoverMs = leading('p2')!.seenAt - killedAt;
    t.diagnostic(`handover after SIGKILL of the leader: ${(handoverMs / 1000).toFixed(2)} s`);
    assert.ok(handoverMs < 20_000, `handover took ${handoverMs} ms`);
    assert.equal(lines.filter((l) => l.event === 'leading').length, 2, 'one term each, never two leaders');

    const exit2 = new Promise((ok) => p2.once('exit', ok));
    p2.kill('SIGTERM');
    assert.equal(await exit2, 0);
    const l = await client.get<Lease>(Resources.Lease, lease, ns.name);
    assert.ok(!l?.spec?.holderIdentity, 'SIGTERM released the Lease');
    await client.close();
  });
});
