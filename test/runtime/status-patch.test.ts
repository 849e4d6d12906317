/**
 * The status writer (src/runtime/status-patch.ts): the request each guard plans (pure), and the
 * same patches against a real kube-apiserver — one request per commit, none when nothing changed,
 * 409 when the snapshot is stale (resourceVersion) or a tested field moved (JSON-patch `test`), and
 * a condition appended beside another writer's entry without dropping it.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { ApiError, KubeClient } from '../../src/runtime/client.js';
import type { Condition } from '../../src/runtime/conditions.js';
import { type KObject, Resources } from '../../src/runtime/resource.js';
import { planStatusPatch, StatusPatch } from '../../src/runtime/status-patch.js';
import { releaseSharedCluster, sharedCluster } from '../harness/shared.js';

after(releaseSharedCluster);

const cond = (type: string, status: 'True' | 'False', reason = 'R'): Condition => ({
  type,
  status,
  reason,
  message: '',
  observedGeneration: 1,
  lastTransitionTime: '2026-01-01T00:00:00Z',
});

describe('planStatusPatch (pure)', () => {
  it('plans nothing for an unchanged status', () => {
    const s = { state: 'Available', conditions: [cond('A', 'True')] };
    assert.equal(planStatusPatch(s, structuredClone(s), 'resourceVersion', '7'), undefined);
  });

  it('resourceVersion: a merge patch of the changed fields, removed keys null, conditions whole', () => {
    const before = {
      phase: 'Unbound',
      boot: { attempt: 1, deadline: 'x' },
      conditions: [cond('A', 'False')],
    };
    const after = { phase: 'Bound', boot: { attempt: 2 }, conditions: [cond('A', 'True')] };
    assert.deepEqual(planStatusPatch(before, after, 'resourceVersion', '7'), {
      type: 'merge',
      body: {
        metadata: { resourceVersion: '7' },
        status: { phase: 'Bound', boot: { attempt: 2, deadline: null }, conditions: after.conditions },
      },
    });
  });

  it('none: a merge patch without precondition', () => {
    assert.deepEqual(planStatusPatch({ powerState: 'Off' }, { powerState: 'On' }, 'none', '7'), {
      type: 'merge',
      body: { status: { powerState: 'On' } },
    });
  });

  it('test: tests the guarded fields, touches only the changed condition entries', () => {
    const before = {
      state: 'Discovery',
      discovery: { attempt: 1 },
      conditions: [cond('A', 'True'), cond('B', 'False'), cond('C', 'True')],
    };
    const after = {
      state: 'Available',
      conditions: [cond('A', 'True'), cond('B', 'True'), cond('D', 'True')],
    };
    const plan = planStatusPatch(before, after, { test: ['state', 'discovery', 'cleanup'] }, '7');
    assert.deepEqual(plan, {
      type: 'json',
      ops: [
        { op: 'test', path: '/status/state', value: 'Discovery' },
        { op: 'test', path: '/status/discovery', value: { attempt: 1 } },
        { op: 'add', path: '/status/state', value: 'Available' },
        { op: 'remove', path: '/status/discovery' },
        { op: 'test', path: '/status/conditions/1/type', value: 'B' },
        { op: 'replace', path: '/status/conditions/1', value: cond('B', 'True') },
        { op: 'test', path: '/status/conditions/2/type', value: 'C' },
        { op: 'remove', path: '/status/conditions/2' },
        { op: 'add', path: '/status/conditions/-', value: cond('D', 'True') },
      ],
    });
  });

  it('test: falls back to the resourceVersion with no list to test against, or when asked', () => {
    const guard = {
      test: ['state'],
      resourceVersionWhen: (s: Record<string, unknown>) => s.state === 'Initial',
    };
    assert.equal(
      planStatusPatch(
        { state: 'Discovery' },
        { state: 'Discovery', conditions: [cond('A', 'True')] },
        guard,
        '3',
      )?.type,
      'merge',
    );
    assert.equal(planStatusPatch({ state: 'Initial' }, { state: 'Discovery' }, guard, '3')?.type, 'merge');
    assert.equal(planStatusPatch({ state: 'Discovery' }, { state: 'Error' }, guard, '3')?.type, 'json');
  });
});

interface Server extends KObject {
  spec: { systemUUID: string };
  status?: { state?: string; powerState?: string; conditions?: Condition[] };
}

describe('StatusPatch (real API server)', () => {
  let client: KubeClient;
  let requests = 0;
  const name = `status-patch-${randomBytes(3).toString('hex')}`;
  before(async () => {
    client = new KubeClient((await sharedCluster()).kubeConfig(), { fieldManager: 'status-patch-test' });
    client.onObject(() => {
      requests++;
    });
  });
  after(async () => {
    await client.delete(Resources.Server, name).catch(() => undefined);
    await client.close();
  });

  it('writes once per commit, never without a change, and refuses a stale or moved snapshot', async () => {
    const created = await client.create<Server>(Resources.Server, {
      apiVersion: 'metal.ironcore.dev/v1alpha1',
      kind: 'Server',
      metadata: { name },
      spec: { systemUUID: '0b7f3c52-3a8e-4d59-9f0e-6d1f2a7c4b11' },
    });
    const guard = { test: ['state'] } as const;
    const first = await new StatusPatch(client, Resources.Server, created)
      .set({ state: 'Discovery' })
      .setCondition({ type: 'A', status: 'True', reason: 'R', message: '' })
      .commit();
    assert.equal(first.status?.state, 'Discovery');

    const n = requests;
    assert.equal(
      await new StatusPatch(client, Resources.Server, first, guard).set({ state: 'Discovery' }).commit(),
      first,
    );
    assert.equal(requests, n, 'an unchanged status sends no request');

    // Another writer's condition, appended after our snapshot: ours lands beside it.
    await client.jsonPatch(
      Resources.Server,
      name,
      undefined,
      [
        {
          op: 'add',
          path: '/status/conditions/-',
          value: { ...cond('Other', 'True'), observedGeneration: 1 },
        },
      ],
      { subresource: 'status' },
    );
    const second = await new StatusPatch(client, Resources.Server, first, guard)
      .setCondition({ type: 'A', status: 'False', reason: 'Q', message: 'm' })
      .setCondition({ type: 'B', status: 'True', reason: 'R', message: '' })
      .commit();
    assert.deepEqual(
      second.status?.conditions?.map((c) => `${c.type}=${c.status}`),
      ['A=False', 'Other=True', 'B=True'],
    );

    // The stale snapshot under the resourceVersion guard: 409.
    await assert.rejects(
      new StatusPatch(client, Resources.Server, first).set({ powerState: 'On' }).commit(),
      (e: unknown) => e instanceof ApiError && e.status === 409,
    );
    // A tested field that moved: 409 (the API server's 422 for a failed `test`), nothing written.
    await client.mergePatch(
      Resources.Server,
      name,
      undefined,
      { status: { state: 'Available' } },
      { subresource: 'status' },
    );
    await assert.rejects(
      new StatusPatch(client, Resources.Server, second, guard).set({ powerState: 'On' }).commit(),
      (e: unknown) => e instanceof ApiError && e.status === 409,
    );
    const stored = await client.get<Server>(Resources.Server, name);
    assert.equal(stored?.status?.powerState, undefined);
    // A type another writer added meanwhile is refused as a duplicate (list-map key), not doubled.
    const cur = (await client.get<Server>(Resources.Server, name)) as Server;
    const addC = (status: 'True' | 'False') =>
      new StatusPatch(client, Resources.Server, cur, guard)
        .setCondition({ type: 'C', status, reason: 'R', message: '' })
        .commit();
    await addC('True');
    await assert.rejects(addC('False'), (e: unknown) => e instanceof ApiError && e.status === 409);
    const last = await client.get<Server>(Resources.Server, name);
    assert.equal(last?.status?.conditions?.filter((c) => c.type === 'C').length, 1);
  });
});
