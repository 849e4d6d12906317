/**
 * Nothing accepted is lost (docs/ARCHITECTURE.md, 'Failure handling in one place each', case C02): the registry answers 2xx only after the
 * API server stored the write, so killing it (SIGKILL) at any moment loses nothing, and clients that
 * retry on 503 / connection errors, as the agents do, get every callback recorded exactly once.
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import type { SecretRef } from '../../src/bootauth/callback-key-secret.js';
import type { KubeClient } from '../../src/runtime/client.js';
import { Informer } from '../../src/runtime/informer.js';
import { Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { stablePorts } from '../harness/ports.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';
import {
  bearer,
  deleteSeededServers,
  newTestClient,
  type Seeded,
  seedBootTarget,
  spawnRegistry,
  storedRegistration,
  storeTestCallbackKey,
} from './fixture.js';

// A file run on its own started a private control plane: stop it, or the process never exits.
after(releaseSharedCluster);

let client: KubeClient;
let ns: { name: string; cleanup(): Promise<void> };
let kubeconfigPath: string;
let keyRef: SecretRef;
const children = new Set<ChildProcess>();

async function startRegistry(port: number): Promise<ChildProcess> {
  const c = await spawnRegistry(kubeconfigPath, port, keyRef);
  children.add(c);
  c.once('exit', () => children.delete(c));
  return c;
}

/** Posts until a 2xx, retrying 503 and connection errors with a short backoff (bounded at 60 s). */
async function postWithRetry(
  url: string,
  body: unknown,
  token: string,
): Promise<{ status: number; tries: number }> {
  const end = Date.now() + 60_000;
  for (let tries = 1; ; tries++) {
    let status = 0;
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...bearer(token) },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(10_000),
      });
      await res.arrayBuffer();
      status = res.status;
    } catch {
      status = 0; // connection refused or reset: the registry is down; retry
    }
    if (status !== 0 && status !== 503) {
      assert.ok(status < 500, `unexpected ${status}`);
      return { status, tries };
    }
    if (Date.now() > end) throw new Error(`gave up after ${tries} tries`);
    await new Promise((ok) => setTimeout(ok, Math.min(50 * tries, 500)));
  }
}

describe('registry restart safety', () => {
  before(async () => {
    const cluster = await sharedCluster();
    kubeconfigPath = cluster.kubeconfigPath;
    client = newTestClient(cluster.kubeConfig());
    ns = await testNamespace(cluster.kubeConfig(), 'restart');
    keyRef = await storeTestCallbackKey(client, ns.name);
  });
  after(async () => {
    for (const c of children) c.kill('SIGKILL');
    if (ns && client) await deleteSeededServers(client, ns.name);
    await ns?.cleanup();
    await client?.close();
  });

  it('C02: /bootstate and /register answered 2xx survive a SIGKILL of the registry before anything else ran', async () => {
    const [port] = await stablePorts(1);
    const s = await seedBootTarget(client, ns.name);
    let registry = await startRegistry(port!);
    const url = `http://127.0.0.1:${port}`;
    await waitFor('registry cache has the server', 10_000, async () => {
      const r = await fetch(`${url}/systems/${s.uuid}`, { headers: { authorization: `Bearer ${s.token}` } });
      return r.status === 404 && ((await r.json()) as { reason?: string }).reason === 'NoRegistration';
    });
    const reg = await postWithRetry(
      `${url}/register`,
      { systemUUID: s.uuid, data: { nics: [{ name: 'eth0' }] } },
      s.token,
    );
    assert.equal(reg.status, 201);
    const boot = await postWithRetry(`${url}/bootstate`, { systemUUID: s.uuid, booted: true }, s.token);
    assert.equal(boot.status, 200);
    registry.kill('SIGKILL');
    await new Promise((ok) => registry.once('exit', ok));
    // The only copy is in the API server: read it there, then from a fresh registry process.
    const sbc = await client.get<ServerBootConfiguration>(
      Resources.ServerBootConfiguration,
      s.sbc.metadata.name!,
      ns.name,
    );
    assert.equal(sbc?.status?.conditions?.find((c) => c.type === 'BootStateReceived')?.status, 'True');
    const stored = await storedRegistration(client, s.server.metadata.name!);
    assert.deepEqual(stored.payload, { nics: [{ name: 'eth0' }] }, 'the payload in its ConfigMap');
    assert.equal(stored.record?.attempt, 1, "the Server's record names the attempt");
    registry = await startRegistry(port!);
    const sys = await fetch(`${url}/systems/${s.uuid}`, { headers: { authorization: `Bearer ${s.token}` } });
    assert.equal(sys.status, 200);
    assert.deepEqual(await sys.json(), { nics: [{ name: 'eth0' }] });
    registry.kill('SIGKILL');
  });

  it('500 callbacks while the registry is SIGKILLed and restarted 3 times: all recorded, each written exactly once', async () => {
    const N = 500;
    const [port] = await stablePorts(1);
    const url = `http://127.0.0.1:${port}`;
    const seeded: Seeded[] = [];
    for (let i = 0; i < N; i += 50) {
      seeded.push(
        ...(await Promise.all(
          Array.from({ length: Math.min(50, N - i) }, () => seedBootTarget(client, ns.name)),
        )),
      );
    }
    // Every write of BootStateReceived, as the API server streams it: a callback recorded twice (a
    // retry after a kill written again) shows up as a second change of the condition.
    const ours = new Set(seeded.map((s) => s.sbc.metadata.name!));
    const writes = new Map<string, number>();
    const watcher = new Informer<ServerBootConfiguration>(client, Resources.ServerBootConfiguration, {
      namespace: ns.name,
    });
    const bootState = (x: ServerBootConfiguration | undefined) =>
      JSON.stringify(x?.status?.conditions?.find((c) => c.type === 'BootStateReceived') ?? null);
    const count = (obj: ServerBootConfiguration, old?: ServerBootConfiguration) => {
      const name = obj.metadata.name!;
      if (ours.has(name) && bootState(obj) !== bootState(old)) writes.set(name, (writes.get(name) ?? 0) + 1);
    };
    watcher.on('add', (obj) => {
      if (bootState(obj) !== 'null') count(obj);
    });
    watcher.on('update', count);
    await watcher.start();
    const firstOk = new Map<string, number>();
    let registry = await startRegistry(port!);
    const t0 = Date.now();
    let kills = 0;
    let done = 0;
    // Kill at a quarter, half and three quarters of the stream, so every kill lands mid-stream
    // whatever the machine's speed.
    const killer = (async () => {
      for (const share of [0.25, 0.5, 0.75]) {
        while (done < N * share) await new Promise((ok) => setTimeout(ok, 10));
        registry.kill('SIGKILL');
        await new Promise((ok) => registry.once('exit', ok));
        kills++;
        registry = await startRegistry(port!);
      }
    })();
    let totalTries = 0;
    const queue = [...seeded];
    await Promise.all(
      Array.from({ length: 25 }, async () => {
        for (let s = queue.shift(); s; s = queue.shift()) {
          const r = await postWithRetry(`${url}/bootstate`, { systemUUID: s.uuid, booted: true }, s.token);
          assert.equal(r.status, 200);
          firstOk.set(s.sbc.metadata.name!, Date.now());
          totalTries += r.tries;
          done++;
        }
      }),
    );
    await killer;
    const wall = Date.now() - t0;
    registry.kill('SIGKILL');
    const list = await client.list<ServerBootConfiguration>(Resources.ServerBootConfiguration, {
      namespace: ns.name,
    });
    // The watch has caught up once it saw the last object version the LIST returned.
    await waitFor('watch caught up', 10_000, () =>
      list.items.every(
        (x) =>
          watcher.get(x.metadata.name!, ns.name)?.metadata.resourceVersion === x.metadata.resourceVersion,
      ),
    );
    watcher.stop();
    let recorded = 0;
    for (const sbc of list.items.filter((x) => ours.has(x.metadata.name!))) {
      const name = sbc.metadata.name!;
      const cond = sbc.status?.conditions?.find((c) => c.type === 'BootStateReceived');
      if (cond?.status === 'True') recorded++;
      assert.equal(
        writes.get(name),
        1,
        `BootStateReceived of ${name} written ${writes.get(name) ?? 0} times`,
      );
      // Written before the first 2xx answer and never after it (lastTransitionTime has 1 s resolution).
      const ltt = Date.parse(cond?.lastTransitionTime ?? '');
      assert.ok(
        ltt <= firstOk.get(name)!,
        `${name}: lastTransitionTime ${cond?.lastTransitionTime} after the first 2xx`,
      );
    }
    console.log(
      JSON.stringify({
        test: 'restart-safety',
        callbacks: N,
        recorded,
        kills,
        wallMs: wall,
        requests: totalTries,
      }),
    );
    assert.ok(kills >= 3, `only ${kills} kills happened mid-stream`);
    assert.equal(recorded, N);
  });
});
