/**
 * Which claims a Server event wakes (claim-binding.ts `watchServersForClaims`, the claim controller's
 * wiring, here on a recording controller), against the real API server:
 *
 * - a change of an available unbound Server wakes the claims naming it, those naming a Server with
 *   its system UUID, and the selecting ones — not a claim naming another Server, not a Bound claim;
 * - binding a Server wakes its claim only: the version the binding replaced offered the Server to
 *   the waiting claims, which it no longer does (waking them on every binding made a fleet of
 *   claims quadratic in the manager's CPU, bench/README.md);
 * - a Server whose system UUID changed wakes the claims waiting for the Servers that shared the old
 *   one (one of them may own it now).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { watchServersForClaims } from '../../src/controllers/serverclaim/claim-binding.js';
import { Controller } from '../../src/runtime/controller.js';
import { Manager } from '../../src/runtime/manager.js';
import { Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';
import { captureLogger } from '../runtime/log-capture.js';

after(releaseSharedCluster);

test('a Server event wakes the claims it may let bind, and a binding only its own claim', {
  timeout: 60_000,
}, async () => {
  const kc = (await sharedCluster()).kubeConfig();
  const ns = await testNamespace(kc, 'claim-wakeups');
  const { log, records } = captureLogger('claim-wakeups', 'warn');
  const mgr = new Manager({ kubeConfig: kc, name: 'claim-wakeups', leaderElection: false, log });
  const label = { 'metal-test.ironcore.dev/wakeups': ns.name };
  const servers = mgr.informer<Server>(Resources.Server, {
    labelSelector: `metal-test.ironcore.dev/wakeups=${ns.name}`,
  });
  const claims = mgr.informer<ServerClaim>(Resources.ServerClaim, { namespace: ns.name });
  const woken: string[] = [];
  const ctrl = new Controller('claim-wakeups', {
    log,
    workers: 2,
    reconcile: async (req) => void woken.push(req.name),
  });
  watchServersForClaims(ctrl, claims, servers);
  mgr.add(ctrl);
  const name = (s: string) => `${ns.name}-${s}`;
  const shared = randomUUID();
  const made: string[] = [];
  const server = async (s: string, systemUUID: string) => {
    made.push(name(s));
    await mgr.client.create<Server>(Resources.Server, {
      metadata: { name: name(s), labels: label },
      spec: { systemUUID },
    });
    await mgr.client.mergePatch(
      Resources.Server,
      name(s),
      undefined,
      { status: { state: 'Available' } },
      {
        subresource: 'status',
      },
    );
  };
  const claim = async (c: string, spec: Partial<ServerClaim['spec']>) =>
    mgr.client.create<ServerClaim>(Resources.ServerClaim, {
      metadata: { name: c, namespace: ns.name },
      spec: { power: 'On', image: 'test/os:1.0', ...spec },
    });
  try {
    await server('s1', shared);
    await server('s2', randomUUID());
    await server('dup', shared); // another Server with s1's system UUID
    await claim('names-s1', { serverRef: { name: name('s1') } });
    await claim('names-s2', { serverRef: { name: name('s2') } });
    await claim('names-dup', { serverRef: { name: name('dup') } });
    await claim('selects', { serverSelector: { matchLabels: label } });
    await claim('bound', { serverRef: { name: name('s1') } });
    await mgr.client.mergePatch(
      Resources.ServerClaim,
      'bound',
      ns.name,
      { status: { phase: 'Bound' } },
      {
        subresource: 'status',
      },
    );
    await mgr.start();
    await waitFor('caches hold the objects', 10_000, () => {
      const all = claims.list(ns.name);
      return servers.list().length === 3 && all.length === 5 && all.some((c) => c.status?.phase === 'Bound');
    });

    /** Waits until every claim of `expected` was reconciled, then a grace for any other key of the event. */
    const settle = async (...expected: string[]) => {
      await waitFor(`${expected.join(', ')} reconciled`, 10_000, () =>
        expected.every((e) => woken.includes(e)),
      );
      await sleep(500);
    };
    // The start enqueues the claims of every cached Server.
    await settle('names-s1', 'names-s2', 'names-dup', 'selects');
    woken.length = 0;

    await mgr.client.mergePatch(Resources.Server, name('s1'), undefined, {
      metadata: { labels: { ...label, rack: 'r1' } },
    });
    await settle('names-s1', 'names-dup', 'selects');
    assert.deepEqual(
      [...new Set(woken)].sort(),
      ['names-dup', 'names-s1', 'selects'],
      'a change of s1 wakes the claims naming it or its UUID and the selecting one',
    );
    woken.length = 0;

    await mgr.client.mergePatch(Resources.Server, name('s2'), undefined, {
      spec: { serverClaimRef: { name: 'names-s2', namespace: ns.name } },
    });
    await settle('names-s2');
    assert.deepEqual([...new Set(woken)], ['names-s2'], 'binding s2 wakes its claim only');
    woken.length = 0;

    await mgr.client.mergePatch(Resources.Server, name('s1'), undefined, {
      spec: { systemUUID: randomUUID() },
    });
    await settle('names-s1', 'selects');
    assert.deepEqual(
      [...new Set(woken)].sort(),
      ['names-dup', 'names-s1', 'selects'],
      's1 leaving its UUID wakes the claim naming dup, which may own that UUID now',
    );
    assert.deepEqual(
      records.filter((r) => r.msg === 'watch map function threw'),
      [],
      'no map function threw',
    );
  } finally {
    for (const s of made) await mgr.client.delete(Resources.Server, s).catch(() => undefined);
    await mgr.stop();
    await ns.cleanup();
  }
});
