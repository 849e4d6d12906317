/**
 * KubeClient against a real kube-apiserver: CRUD, status subresource, patches, server-side apply,
 * delete preconditions, the 409 + retryOnConflict path, finalizers, connection reuse across deletions,
 * and status 0 when unreachable.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import { after, before, describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { ApiError, KubeClient, retryOnConflict } from '../../src/runtime/client.js';
import { type Condition, findCondition, setCondition } from '../../src/runtime/conditions.js';
import { addFinalizer, hasFinalizer, removeFinalizer } from '../../src/runtime/finalizers.js';
import { type KObject, Resources } from '../../src/runtime/resource.js';
import { stablePorts } from '../harness/ports.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';

// A file run on its own started a private control plane: stop it, or the process never exits.
after(releaseSharedCluster);

interface ConfigMap extends KObject {
  data?: Record<string, string>;
}
interface Server extends KObject {
  spec: { systemUUID: string };
  status?: { manufacturer?: string; model?: string; conditions?: Condition[] };
}

const suffix = randomBytes(3).toString('hex');
let client: KubeClient;
let ns: { name: string; cleanup(): Promise<void> };
const servers: string[] = [];

function newServer(name: string): Server {
  servers.push(name);
  return {
    apiVersion: 'metal.ironcore.dev/v1alpha1',
    kind: 'Server',
    metadata: { name, labels: { 'test.metal/suite': `client-${suffix}` } },
    spec: { systemUUID: '3f1a9a6c-8d1e-4a44-9d6e-2c7a2f0e1b55' },
  };
}

describe('KubeClient (real API server)', () => {
  before(async () => {
    const kc = (await sharedCluster()).kubeConfig();
    client = new KubeClient(kc, { fieldManager: 'runtime-test' });
    ns = await testNamespace(kc, 'rt-client');
  });
  after(async () => {
    for (const s of servers) await client.delete(Resources.Server, s).catch(() => undefined);
    await ns.cleanup();
    await client.close();
  });

  it('creates, gets, lists, updates, patches and deletes', async () => {
    const created = await client.create<ConfigMap>(Resources.ConfigMap, {
      metadata: { name: 'a', namespace: ns.name, labels: { app: 'x' } },
      data: { k: 'v' },
    });
    assert.ok(created.metadata.uid);
    assert.equal((await client.get<ConfigMap>(Resources.ConfigMap, 'a', ns.name))?.data?.k, 'v');
    assert.equal(await client.get(Resources.ConfigMap, 'missing', ns.name), undefined);

    const listed = await client.list<ConfigMap>(Resources.ConfigMap, {
      namespace: ns.name,
      labelSelector: 'app=x',
    });
    assert.deepEqual(
      listed.items.map((i) => [i.kind, i.metadata.name]),
      [['ConfigMap', 'a']],
    );
    assert.ok(listed.resourceVersion);

    created.data = { k: 'v2' };
    const updated = await client.update(Resources.ConfigMap, created);
    assert.equal(updated.data?.k, 'v2');
    // The old resourceVersion is a precondition: a second PUT of the stale copy is a 409.
    await assert.rejects(
      client.update(Resources.ConfigMap, created),
      (e: unknown) => e instanceof ApiError && e.conflict,
    );

    const merged = await client.mergePatch<ConfigMap>(Resources.ConfigMap, 'a', ns.name, {
      data: { m: '1' },
    });
    assert.deepEqual(merged.data, { k: 'v2', m: '1' });

    const jp = await client.jsonPatch<ConfigMap>(Resources.ConfigMap, 'a', ns.name, [
      { op: 'test', path: '/data/m', value: '1' },
      { op: 'replace', path: '/data/m', value: '2' },
    ]);
    assert.equal(jp.data?.m, '2');
    // A failing `test` op rejects the whole patch.
    await assert.rejects(
      client.jsonPatch(Resources.ConfigMap, 'a', ns.name, [
        { op: 'test', path: '/data/m', value: '1' },
        { op: 'replace', path: '/data/m', value: '3' },
      ]),
      (e: unknown) => e instanceof ApiError && e.status >= 400 && e.status < 500,
    );

    await assert.rejects(
      client.delete(Resources.ConfigMap, 'a', ns.name, { preconditionUid: 'not-the-uid' }),
      (e: unknown) => e instanceof ApiError && e.status === 409,
    );
    assert.equal(
      await client.delete(Resources.ConfigMap, 'a', ns.name, { preconditionUid: created.metadata.uid }),
      true,
    );
    assert.equal(await client.delete(Resources.ConfigMap, 'a', ns.name), false);
  });

  it('paginates lists with limit/continue', async () => {
    await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        client.create(Resources.ConfigMap, {
          metadata: { name: `p${i}`, namespace: ns.name, labels: { page: 'y' } },
        }),
      ),
    );
    const first = await client.list(Resources.ConfigMap, {
      namespace: ns.name,
      labelSelector: 'page=y',
      limit: 2,
    });
    assert.equal(first.items.length, 2);
    assert.ok(first.continue);
    const rest = await client.list(Resources.ConfigMap, {
      namespace: ns.name,
      labelSelector: 'page=y',
      limit: 10,
      continue: first.continue,
    });
    assert.equal(rest.items.length, 3);
    assert.equal(rest.continue, undefined);
  });

  it('server-side apply: creates, owns fields, reports conflicts unless forced', async () => {
    const a = await client.apply<ConfigMap>(Resources.ConfigMap, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'ssa', namespace: ns.name },
      data: { owner: 'a' },
    });
    assert.equal(a.data?.owner, 'a');
    const intent = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'ssa', namespace: ns.name },
      data: { owner: 'b' },
    };
    await assert.rejects(
      client.apply(Resources.ConfigMap, intent, { fieldManager: 'other' }),
      (e: unknown) => e instanceof ApiError && e.conflict,
    );
    const b = await client.apply<ConfigMap>(Resources.ConfigMap, intent, {
      fieldManager: 'other',
      force: true,
    });
    assert.equal(b.data?.owner, 'b');
  });

  it('status update with a stale resourceVersion gets 409; retryOnConflict retries with a fresh read', async () => {
    const name = `rt-status-${suffix}`;
    const s = await client.create<Server>(Resources.Server, newServer(name));
    // Another writer moves the object on.
    const other = await client.updateStatus<Server>(Resources.Server, {
      ...s,
      status: { manufacturer: 'Other' },
    });
    assert.notEqual(other.metadata.resourceVersion, s.metadata.resourceVersion);

    await assert.rejects(
      client.updateStatus(Resources.Server, { ...s, status: { model: 'stale' } }),
      (e: unknown) => e instanceof ApiError && e.status === 409 && e.reason === 'Conflict',
    );

    let reads = 0;
    let stale = true;
    const result = await retryOnConflict(async () => {
      // First attempt deliberately uses the stale copy; later ones re-read, as the contract requires.
      const cur = stale ? s : await client.get<Server>(Resources.Server, name);
      if (!stale) reads++;
      stale = false;
      return client.updateStatus<Server>(Resources.Server, {
        ...cur!,
        status: { ...cur!.status, model: 'M1' },
      });
    });
    assert.equal(reads, 1);
    // state: the CRD's default (a Server nobody moved reads Initial), applied on every read.
    assert.deepEqual(result.status, { manufacturer: 'Other', model: 'M1', state: 'Initial' });
    // Status writes go to the status subresource only: spec is untouched.
    assert.equal(result.spec.systemUUID, s.spec.systemUUID);

    const viaPatch = await client.mergePatch<Server>(
      Resources.Server,
      name,
      undefined,
      { status: { model: 'M2' } },
      { subresource: 'status' },
    );
    assert.equal(viaPatch.status?.model, 'M2');
  });

  it('adds and removes finalizers, re-reading on conflict', async () => {
    const name = `rt-fin-${suffix}`;
    const s = await client.create<Server>(Resources.Server, newServer(name));
    await client.mergePatch(Resources.Server, name, undefined, { metadata: { labels: { touched: 'yes' } } }); // s is stale now
    const withF = await addFinalizer(client, Resources.Server, s, 'metal.ironcore.dev/test');
    assert.equal(hasFinalizer(withF, 'metal.ironcore.dev/test'), true);
    assert.equal(withF.metadata.labels?.touched, 'yes');
    const again = await addFinalizer(client, Resources.Server, withF, 'metal.ironcore.dev/test');
    assert.equal(again, withF, 'no write when already present');

    await client.delete(Resources.Server, name);
    const deleting = await client.get<Server>(Resources.Server, name);
    assert.ok(deleting?.metadata.deletionTimestamp, 'finalizer holds the object');
    await removeFinalizer(client, Resources.Server, deleting!, 'metal.ironcore.dev/test');
    assert.equal(await client.get(Resources.Server, name), undefined, 'gone after the last finalizer');
    assert.equal(
      await removeFinalizer(client, Resources.Server, deleting!, 'metal.ironcore.dev/test'),
      undefined,
    );
  });

  it('conditions round-trip through the status subresource; lastTransitionTime moves only on a status change', async () => {
    const name = `rt-cond-${suffix}`;
    let s = await client.create<Server>(Resources.Server, newServer(name));
    const ready = {
      type: 'Ready',
      status: 'True' as const,
      reason: 'Up',
      message: 'fine',
      observedGeneration: s.metadata.generation,
    };
    let r = setCondition(s.status?.conditions, ready, new Date('2025-01-01T00:00:00.500Z'));
    s = await client.updateStatus<Server>(Resources.Server, {
      ...s,
      status: { ...s.status, conditions: r.conditions },
    });
    assert.deepEqual(s.status?.conditions, r.conditions, 'stored exactly as written');

    r = setCondition(s.status?.conditions, ready, new Date('2025-01-01T01:00:00Z'));
    assert.equal(r.changed, false, 'an identical signal needs no write');

    r = setCondition(
      s.status?.conditions,
      { ...ready, message: 'still fine' },
      new Date('2025-01-01T02:00:00Z'),
    );
    s = await client.updateStatus<Server>(Resources.Server, {
      ...s,
      status: { ...s.status, conditions: r.conditions },
    });
    assert.equal(findCondition(s.status?.conditions, 'Ready')?.lastTransitionTime, '2025-01-01T00:00:00Z');

    r = setCondition(
      s.status?.conditions,
      { ...ready, status: 'False', reason: 'Down' },
      new Date('2025-01-01T03:00:00Z'),
    );
    s = await client.updateStatus<Server>(Resources.Server, {
      ...s,
      status: { ...s.status, conditions: r.conditions },
    });
    assert.equal(findCondition(s.status?.conditions, 'Ready')?.lastTransitionTime, '2025-01-01T03:00:00Z');
  });

  it('deletions keep the connection: sequential creates and deletes use one TLS connection', async () => {
    // undici closes a connection after a request with a body whose method expects none unless told
    // not to; a DELETE carries DeleteOptions, so each deletion cost a new TLS handshake.
    const port = Number(new URL((await sharedCluster()).kubeConfig().getCurrentCluster()!.server).port);
    const connected: number[] = [];
    const onConnect = (m: unknown) => {
      const p = (m as { connectParams?: { port?: string | number } }).connectParams?.port;
      if (Number(p) === port) connected.push(Number(p));
    };
    diagnostics.subscribe('undici:client:connected', onConnect);
    const one = new KubeClient((await sharedCluster()).kubeConfig(), { maxConnections: 1 });
    try {
      for (let i = 0; i < 5; i++) {
        await one.create<ConfigMap>(Resources.ConfigMap, {
          metadata: { name: `del-${i}`, namespace: ns.name },
          data: { k: 'v' },
        });
        assert.equal(await one.delete(Resources.ConfigMap, `del-${i}`, ns.name), true);
      }
      assert.equal(await one.delete(Resources.ConfigMap, 'del-0', ns.name), false);
    } finally {
      diagnostics.unsubscribe('undici:client:connected', onConnect);
      await one.close();
    }
    assert.equal(connected.length, 1, `${connected.length} TLS connections for 6 deletions and 5 creates`);
  });

  it('reports status 0 (unreachable) when nothing listens', async () => {
    const [port] = await stablePorts(1);
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: `https://127.0.0.1:${port}`, skipTLSVerify: true }],
      users: [{ name: 'u', token: 'secret-token' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    const dead = new KubeClient(kc, { timeoutMs: 2_000 });
    const err = await dead.get(Resources.ConfigMap, 'x', 'y').catch((e: unknown) => e);
    assert.ok(err instanceof ApiError, String(err));
    assert.equal(err.status, 0);
    assert.equal(err.unreachable, true);
    assert.equal(err.reason, 'ConnectionRefused');
    assert.doesNotMatch(err.message, /secret-token/);
    await dead.close();
  });
});
