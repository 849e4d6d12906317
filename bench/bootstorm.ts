/**
 * Boot storm: N hosts post `/bootstate` at once, against the API server's own write rate.
 *
 * Real control plane (etcd + kube-apiserver on loopback), N Servers with current SBCs and callback
 * tokens (derived from a key the registry reads from its Secret), the registry as its own process (as deployed), N clients posting `/bootstate` with at most
 * C in flight and retrying on 503 / connection errors as the agent does. In the same run, the
 * baseline: the same N condition writes (server-side apply of one SBC status condition) sent straight
 * to the API server by a minimal client at the same concurrency. Prints a table and one JSON line.
 *
 * Usage: node dist/bench/bootstorm.js [--callbacks 2000] [--concurrency 200]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { Agent, request } from 'undici';
import type { ServerBootConfiguration } from '../src/api/v1alpha1/serverbootconfiguration.js';
import { ControlPlane, freePorts, waitFor } from '../src/localstack/control-plane.js';
import { KubeClient } from '../src/runtime/client.js';
import { Resources } from '../src/runtime/resource.js';
import { type Seeded, seedBootTarget, storeTestCallbackKey } from '../src/testing/boot-target-seed.js';
import { pool, printTable, summarize } from './stats.js';

const o = new Command('bootstorm')
  .option('--callbacks <n>', 'callbacks (one per server)', (v) => Number(v), 2000)
  .option('--concurrency <n>', 'callbacks in flight', (v) => Number(v), 200)
  .option('--profile <dir>', 'run the registry under node --cpu-prof, writing the profile here')
  .parse()
  .opts<{ callbacks: number; concurrency: number; profile?: string }>();

const N = o.callbacks;
const C = o.concurrency;
const cp = await ControlPlane.start();
let registry: ChildProcess | undefined;
try {
  const kc = cp.kubeConfig();
  const client = new KubeClient(kc, { fieldManager: 'bench' });
  const ns = 'bench';
  await client.create(Resources.Namespace, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
  const t0 = Date.now();
  const seeded: Seeded[] = [];
  await pool(
    Array.from({ length: N }, (_, i) => i),
    50,
    async () => {
      seeded.push(await seedBootTarget(client, ns));
    },
  );
  console.error(`seeded ${N} servers with SBCs and tokens in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

  // The registry derives the tokens seedBootTarget handed out from the fixture's key, read from its Secret.
  const key = await storeTestCallbackKey(client, ns);
  const [port] = await freePorts(1);
  registry = spawn(
    process.execPath,
    [
      ...(o.profile ? ['--cpu-prof', `--cpu-prof-dir=${o.profile}`] : []),
      join(process.cwd(), 'dist', 'src', 'cmd', 'registry.js'),
      '--kubeconfig',
      cp.kubeconfigPath,
      `--callback-key-secret=${key.namespace}/${key.name}`,
      '--addr',
      `127.0.0.1:${port}`,
    ],
    { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, LOG_LEVEL: 'error' } },
  );
  const url = `http://127.0.0.1:${port}`;
  await waitFor('registry', 60_000, async () => {
    try {
      await (await fetch(`${url}/systems/x`)).arrayBuffer();
      return true;
    } catch {
      return false;
    }
  });
  // The registry answers from its caches: wait until it knows every server.
  await waitFor('registry caches', 120_000, async () => {
    const last = seeded[seeded.length - 1]!;
    // With the attempt token (GET /systems needs it): 404 NoRegistration once server and SBC are cached.
    const r = await fetch(`${url}/systems/${last.uuid}`, {
      headers: { authorization: `Bearer ${last.token}` },
    });
    await r.arrayBuffer();
    return r.status === 404 && r.headers.get('content-type')?.includes('json') === true;
  });

  // --- the storm through the registry ---
  const agent = new Agent({ connections: C, pipelining: 1 });
  const latencies: number[] = [];
  let requests = 0;
  let retries503 = 0;
  let failures = 0;
  const stormStart = performance.now();
  await pool(seeded, C, async (s) => {
    const start = performance.now();
    for (let attempt = 0; attempt < 100; attempt++) {
      requests++;
      try {
        const res = await request(`${url}/bootstate`, {
          method: 'POST',
          dispatcher: agent,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${s.token}` },
          body: JSON.stringify({ systemUUID: s.uuid, booted: true }),
        });
        await res.body.dump();
        if (res.statusCode === 200) {
          latencies.push(performance.now() - start);
          return;
        }
        if (res.statusCode !== 503) {
          failures++;
          return;
        }
        retries503++;
      } catch {
        // connection error: retry like the agent
      }
      await new Promise((ok) => setTimeout(ok, 100 * (attempt + 1)));
    }
    failures++;
  });
  const stormSeconds = (performance.now() - stormStart) / 1000;

  // --- baseline: the same N condition writes straight to the API server ---
  const server = kc.getCurrentCluster()!.server;
  const token = kc.getCurrentUser()!.token!;
  const caFile = kc.getCurrentCluster()!.caFile!;
  const apiAgent = new Agent({ connections: C, connect: { ca: readFileSync(caFile) } });
  const baseLat: number[] = [];
  let baseFailures = 0;
  const baseStart = performance.now();
  await pool(seeded, C, async (s) => {
    const start = performance.now();
    const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    const res = await request(
      `${server}/apis/metal.ironcore.dev/v1alpha1/namespaces/${ns}/serverbootconfigurations/${s.sbc.metadata.name}/status?fieldManager=bench-baseline&force=true`,
      {
        method: 'PATCH',
        dispatcher: apiAgent,
        headers: { 'content-type': 'application/apply-patch+yaml', authorization: `Bearer ${token}` },
        body: JSON.stringify({
          apiVersion: 'metal.ironcore.dev/v1alpha1',
          kind: 'ServerBootConfiguration',
          metadata: { name: s.sbc.metadata.name, namespace: ns },
          status: {
            conditions: [
              {
                type: 'BaselineWrite',
                status: 'True',
                reason: 'Baseline',
                message: 'x',
                observedGeneration: 1,
                lastTransitionTime: now,
              },
            ],
          },
        }),
      },
    );
    await res.body.dump();
    if (res.statusCode === 200) baseLat.push(performance.now() - start);
    else baseFailures++;
  });
  const baseSeconds = (performance.now() - baseStart) / 1000;

  // --- verify: every callback recorded once ---
  const list = await client.list<ServerBootConfiguration>(Resources.ServerBootConfiguration, {
    namespace: ns,
  });
  let recorded = 0;
  let duplicates = 0;
  for (const sbc of list.items) {
    const conds = (sbc.status?.conditions ?? []).filter((c) => c.type === 'BootStateReceived');
    if (conds.some((c) => c.status === 'True')) recorded++;
    if (conds.length > 1) duplicates += conds.length - 1;
  }
  const cbPerSec = latencies.length / stormSeconds;
  const basePerSec = baseLat.length / baseSeconds;
  const lat = summarize(latencies);
  const base = summarize(baseLat);
  const result = {
    bench: 'bootstorm',
    callbacks: N,
    concurrency: C,
    recorded,
    lost: N - recorded,
    duplicates,
    failures,
    requests,
    retries503,
    latencyMs: lat,
    callbacksPerSec: Math.round(cbPerSec),
    baselineWritesPerSec: Math.round(basePerSec),
    baselineLatencyMs: base,
    baselineFailures: baseFailures,
    ratio: Math.round((cbPerSec / basePerSec) * 100) / 100,
  };
  printTable([
    ['callbacks', N],
    ['concurrency', C],
    ['recorded', recorded],
    ['lost', N - recorded],
    ['duplicates', duplicates],
    ['HTTP requests (incl. retries)', requests],
    ['503 answers', retries503],
    ['latency p50/p95/p99 ms', `${lat.p50} / ${lat.p95} / ${lat.p99}`],
    ['callbacks/s', Math.round(cbPerSec)],
    ['baseline writes/s', Math.round(basePerSec)],
    ['baseline p50/p95/p99 ms', `${base.p50} / ${base.p95} / ${base.p99}`],
    ['ratio callbacks/baseline', result.ratio],
  ]);
  console.log(JSON.stringify(result));
  await agent.close();
  await apiAgent.close();
  await client.close();
} finally {
  // SIGTERM lets the registry close and write its CPU profile.
  if (registry && registry.exitCode === null) {
    const exited = new Promise((ok) => registry!.once('exit', ok));
    registry.kill('SIGTERM');
    await exited;
  }
  await cp.stop();
}
