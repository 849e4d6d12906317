/**
 * What one API request costs kube-apiserver and etcd, by request kind and object shape, on the real
 * control plane (src/localstack/control-plane.ts) with the project's CRDs.
 *
 * For each row (a request kind on objects shaped like the fleet's: a claim's SBC with its four
 * conditions, a Server as the BMC controller creates it, a Server with the status a discovered fleet
 * server has in the registration layout the registry writes — upstream's hardware fields mapped
 * from the payload, conditions, discovery bookkeeping and the small `status.registration` record,
 * the whole payload in its ConfigMap (inventory/registration-record.ts) — for the simulated host's
 * ~1.4 KiB payload and, with `--payload-kib K`, a metalprobe-like payload of about K KiB
 * (src/virtualbmc/probe-payload.ts); plus the registry's one-time ConfigMap apply of each), it sends `--requests` requests at `--concurrency`, waits `--settle-ms` for
 * the API server's asynchronous work (watch cache, fan-out) and reads kube-apiserver's and etcd's CPU
 * time (user + system, `/proc/PID/stat`, 10 ms ticks) before and after. Printed: CPU ms per request
 * with the idle CPU subtracted (the idle rate is measured over `--idle-seconds` before every run and
 * printed), min / median / max over `--runs` runs, and the stored size of each object shape (JSON as
 * a GET returns it, managedFields included). Every write changes the object (values alternate per
 * run), except the row that says no-op.
 *
 * `--watchers K` opens K idle watches on each of servers, serverbootconfigurations and events (as the
 * manager's informers and every signal replica's have) before the runs, to show the watch fan-out's
 * cost; the events they received are counted and printed.
 *
 * The objects live only in this control plane, which is stopped at the end.
 *
 * Usage: node dist/bench/apiserver-cost.js [--requests 300] [--runs 3] [--concurrency 10]
 *        [--payload-kib 56] [--watchers 0] [--idle-seconds 5] [--settle-ms 1000]
 *        [--profile DIR [--profile-seconds 15]]
 */
import { setMaxListeners } from 'node:events';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Command } from 'commander';
import { Agent, request } from 'undici';
import { API_VERSION } from '../src/api/v1alpha1/schema.js';
import type { Server } from '../src/api/v1alpha1/server.js';
import { hardwareFromRegistration } from '../src/inventory/registration-hardware.js';
import {
  type RegistrationRecord,
  registrationConfigMap,
  registrationDigest,
} from '../src/inventory/registration-record.js';
import { ControlPlane } from '../src/localstack/control-plane.js';
import { KubeClient } from '../src/runtime/client.js';
import { type KObject, Resources, type ResourceType } from '../src/runtime/resource.js';
import type { HostIdentity } from '../src/virtualbmc/host.js';
import { metalprobeLikePayload } from '../src/virtualbmc/probe-payload.js';
import { registrationData } from '../src/virtualbmc/sim.js';
import { simIdentity } from '../src/virtualbmc/sim-fleet.js';
import { condition, discoveredStatus, FAKE_UID, NS, runTime, server } from './fleet-objects.js';
import { pool, printTable } from './stats.js';

const o = new Command('apiserver-cost')
  .option('--requests <n>', 'requests per row and run', (v) => Number(v), 300)
  .option('--runs <n>', 'runs (min / median / max printed)', (v) => Number(v), 3)
  .option('--concurrency <n>', 'requests in flight', (v) => Number(v), 10)
  .option(
    '--payload-kib <n>',
    'also a Server with a metalprobe-like registration payload of ~n KiB (0: not)',
    (v) => Number(v),
    0,
  )
  .option(
    '--watchers <n>',
    'idle watches on each of servers, serverbootconfigurations, events',
    (v) => Number(v),
    0,
  )
  .option('--idle-seconds <n>', 'idle window before every run, for the idle CPU rate', (v) => Number(v), 5)
  .option(
    '--settle-ms <n>',
    'wait after each row before reading CPU (asynchronous work)',
    (v) => Number(v),
    1000,
  )
  .option(
    '--profile <dir>',
    "after the runs, a CPU profile of kube-apiserver (pprof) per Server shape's status merge-patch, into dir",
  )
  .option('--profile-seconds <n>', 'length of each profile', (v) => Number(v), 15)
  .parse()
  .opts<{
    requests: number;
    runs: number;
    concurrency: number;
    payloadKib: number;
    watchers: number;
    idleSeconds: number;
    settleMs: number;
    profile?: string;
    profileSeconds: number;
  }>();

const N = o.requests;
const indexes = [...Array(N).keys()];

/** CPU seconds (user + system) of a process, from /proc/PID/stat (fields 14 and 15, clock ticks of 10 ms). */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

// --- object shapes, as the fleet's (bench/README.md "Half the requests"; src/api/v1alpha1) ---

function sbc(name: string): KObject {
  return {
    apiVersion: API_VERSION,
    kind: 'ServerBootConfiguration',
    metadata: {
      name,
      namespace: NS,
      annotations: { 'metal.ironcore.dev/attempt-key': 'a1' },
      ownerReferences: [
        {
          apiVersion: API_VERSION,
          kind: 'ServerClaim',
          name,
          uid: FAKE_UID,
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    spec: {
      bootAttempt: 1,
      bootPolicy: 'NetBootAlways',
      ignitionSecretRef: { name: 'fleet-ignition' },
      image: 'metal/os:latest',
      serverRef: { name: `local-bmc-${simIdentity(0).uuid}` },
    },
  } as KObject;
}

// --- rows ---

interface Row {
  label: string;
  /** Unmeasured preparation before the first run (creates the objects the row writes to). */
  setup?: () => Promise<void>;
  request: (i: number, run: number) => Promise<unknown>;
}

interface Shape {
  label: string;
  rt: ResourceType;
  name: (i: number) => string;
  setup: () => Promise<void>;
}

const onOff = (run: number) => (run % 2 === 0 ? 'Off' : 'On');

async function main(): Promise<void> {
  const cp = await ControlPlane.start({});
  try {
    const kc = cp.kubeConfig();
    const client = new KubeClient(kc);
    const registry = new KubeClient(kc, { fieldManager: 'metal-registry' });
    const apiPid = cp.apiServer!.pid!;
    const etcdPid = cp.etcd!.pid!;
    const each = (fn: (i: number) => Promise<unknown>) =>
      pool(indexes, o.concurrency, async (i) => {
        await fn(i);
      });

    const sbcShape: Shape = {
      label: 'SBC (claim, 4 conditions)',
      rt: Resources.ServerBootConfiguration,
      name: (i) => `cost-sbc-${i}`,
      setup: () =>
        each(async (i) => {
          const name = `cost-sbc-${i}`;
          await client.create(Resources.ServerBootConfiguration, sbc(name));
          await client.mergePatch(
            Resources.ServerBootConfiguration,
            name,
            NS,
            {
              status: {
                state: 'Ready',
                conditions: [condition('Ready', 'Ready', 'image metal/os:latest resolved', 0)],
              },
            },
            { subresource: 'status' },
          );
          for (const [type, reason] of [
            ['IPXEScriptFetched', 'ScriptServed'],
            ['IgnitionDataFetched', 'IgnitionServed'],
            ['BootStateReceived', 'Booted'],
          ] as const) {
            await client.apply(
              Resources.ServerBootConfiguration,
              {
                apiVersion: API_VERSION,
                kind: 'ServerBootConfiguration',
                metadata: { name, namespace: NS },
                status: { conditions: [condition(type, reason, `${type} for attempt 1 from 127.0.0.1`, 0)] },
              },
              { subresource: 'status', fieldManager: `bootserver-${type}`, force: true },
            );
          }
        }),
    };
    const bareShape: Shape = {
      label: 'Server, no status',
      rt: Resources.Server,
      name: (i) => `cost-bare-${i}`,
      setup: () =>
        each((i) => client.create(Resources.Server, server(`cost-bare-${i}`, simIdentity(i, 'bare'), false))),
    };
    // A discovered Server in the registration layout the registry writes: upstream's status fields
    // (the payload's hardware mapping among them), a small record in status.registration, and the
    // whole payload in a ConfigMap written once (inventory/registration-record.ts).
    const payloadOf = new Map<string, (id: HostIdentity) => Record<string, unknown>>();
    const created = new Map<string, Server>();
    const discovered = (
      label: string,
      prefix: string,
      payload: (id: HostIdentity) => Record<string, unknown>,
    ): Shape => {
      payloadOf.set(prefix, payload);
      return {
        label,
        rt: Resources.Server,
        name: (i) => `${prefix}-${i}`,
        setup: () =>
          each(async (i) => {
            const name = `${prefix}-${i}`;
            const id = simIdentity(i, prefix);
            const data = payload(id);
            const srv = await client.create<Server>(Resources.Server, server(name, id, true) as Server);
            created.set(name, srv);
            await client.mergePatch(
              Resources.Server,
              name,
              undefined,
              { status: { ...discoveredStatus(id, 0), ...hardwareFromRegistration(data) } },
              { subresource: 'status' },
            );
            // The registry's writes: the payload's ConfigMap (one apply), then the record.
            const digest = registrationDigest(data);
            const cm = registrationConfigMap(srv, NS, data, digest);
            await registry.apply(Resources.ConfigMap, cm, { force: true });
            const record: RegistrationRecord = {
              receivedAt: runTime(0),
              clientAddress: '127.0.0.1',
              digest,
              authenticated: true,
              attempt: 1,
              bootConfigurationUID: FAKE_UID,
              payload: { namespace: NS, name: cm.metadata.name! },
            };
            await registry.jsonPatch(
              Resources.Server,
              name,
              undefined,
              [{ op: 'add', path: '/status/registration', value: record }],
              { subresource: 'status' },
            );
          }),
      };
    };
    /** The registry's write of a new payload for a discovered shape's Server: one ConfigMap apply. */
    const payloadApply = (s: Shape, prefix: string): Row => ({
      label: `${s.label}: payload ConfigMap apply (new payload)`,
      // The payload is made before the request is sent; only the apply is measured with it.
      request: (i, run) => {
        const data = { ...payloadOf.get(prefix)!(simIdentity(i, prefix)), run };
        const cm = registrationConfigMap(created.get(s.name(i))!, NS, data, registrationDigest(data));
        return registry.apply(Resources.ConfigMap, cm, { force: true });
      },
    });
    const simShape = discovered('Server, discovered (sim payload)', 'cost-sim', registrationData);
    const largeShape =
      o.payloadKib > 0
        ? discovered(`Server, discovered (${o.payloadKib} KiB payload)`, 'cost-big', (id) =>
            metalprobeLikePayload(registrationData(id), id, o.payloadKib),
          )
        : undefined;

    const get = (s: Shape): Row => ({
      label: `${s.label}: GET`,
      request: (i) => client.get(s.rt, s.name(i), s.rt.namespaced ? NS : undefined),
    });
    const statusCondition = (s: Shape, manager: string, type: string): Row => ({
      label: `${s.label}: status apply, 2nd field manager`,
      // First apply by this manager outside the measurement: measured runs update its entry.
      setup: () => each((i) => applyCondition(s, i, manager, type, -1)),
      request: (i, run) => applyCondition(s, i, manager, type, run),
    });
    const applyCondition = (s: Shape, i: number, manager: string, type: string, run: number) =>
      client.apply(
        s.rt,
        {
          apiVersion: API_VERSION,
          kind: s.rt.kind,
          metadata: { name: s.name(i), ...(s.rt.namespaced ? { namespace: NS } : {}) },
          status: { conditions: [condition(type, 'Observed', `run ${run}`, run + 1)] },
        },
        { subresource: 'status', fieldManager: manager, force: true },
      );
    const serverStatusPatch = (s: Shape): Row => ({
      label: `${s.label}: status merge-patch (powerState)`,
      request: (i, run) =>
        client.mergePatch(
          Resources.Server,
          s.name(i),
          undefined,
          { status: { powerState: onOff(run) } },
          { subresource: 'status' },
        ),
    });
    const serverSpecPatch = (s: Shape): Row => ({
      label: `${s.label}: spec merge-patch (power)`,
      request: (i, run) =>
        client.mergePatch(Resources.Server, s.name(i), undefined, { spec: { power: onOff(run) } }),
    });
    const sbcStatus = (run: number) => ({
      status: {
        state: 'Ready',
        conditions: [condition('Ready', 'Ready', `image metal/os:latest resolved (run ${run})`, run + 1)],
      },
    });
    const serverShapes = [bareShape, simShape, ...(largeShape ? [largeShape] : [])];

    const rows: Row[] = [
      get(sbcShape),
      {
        label: 'SBC: create',
        request: (i, run) => client.create(Resources.ServerBootConfiguration, sbc(`cost-new-${run}-${i}`)),
      },
      {
        label: `${sbcShape.label}: status merge-patch (Ready)`,
        request: (i, run) =>
          client.mergePatch(Resources.ServerBootConfiguration, sbcShape.name(i), NS, sbcStatus(run), {
            subresource: 'status',
          }),
      },
      {
        label: `${sbcShape.label}: same status merge-patch again (no-op)`,
        request: (i, run) =>
          client.mergePatch(Resources.ServerBootConfiguration, sbcShape.name(i), NS, sbcStatus(run), {
            subresource: 'status',
          }),
      },
      statusCondition(sbcShape, 'bootserver-IPXEScriptFetched-2', 'IPXEScriptFetched'),
      {
        label: `${sbcShape.label}: spec merge-patch (bootAttempt)`,
        request: (i, run) =>
          client.mergePatch(Resources.ServerBootConfiguration, sbcShape.name(i), NS, {
            spec: { bootAttempt: run + 2 },
          }),
      },
      {
        label: 'Server: create (as the BMC controller)',
        request: (i, run) =>
          client.create(Resources.Server, server(`cost-new-${run}-${i}`, simIdentity(i, `new${run}`), false)),
      },
      ...serverShapes.flatMap((s) => [
        get(s),
        serverStatusPatch(s),
        statusCondition(s, 'metal-cost-second', 'Probed'),
        serverSpecPatch(s),
      ]),
      payloadApply(simShape, 'cost-sim'),
      ...(largeShape ? [payloadApply(largeShape, 'cost-big')] : []),
      {
        label: 'Event: create',
        request: (i, run) =>
          client.create(Resources.Event, {
            apiVersion: 'v1',
            kind: 'Event',
            metadata: { name: `cost-ev-${run}-${i}`, namespace: NS },
            involvedObject: { apiVersion: API_VERSION, kind: 'Server', name: `cost-sim-${i}`, uid: FAKE_UID },
            reason: 'BootAttemptStarted',
            message: 'attempt 1: boot override Pxe set, powered on',
            type: 'Normal',
            source: { component: 'metal-operator' },
            firstTimestamp: runTime(run),
            lastTimestamp: runTime(run),
            count: 1,
          } as KObject),
      },
    ];

    console.error('[apiserver-cost] creating objects');
    for (const s of [sbcShape, ...serverShapes]) await s.setup();
    for (const r of rows) await r.setup?.();
    const sizes: [string, string][] = [];
    for (const s of [sbcShape, ...serverShapes]) {
      const obj = await client.get(s.rt, s.name(0), s.rt.namespaced ? NS : undefined);
      const at = (obj as { status?: { registration?: RegistrationRecord } }).status?.registration?.payload;
      const cm = at ? await client.get(Resources.ConfigMap, at.name, at.namespace) : undefined;
      sizes.push([
        s.label,
        `${JSON.stringify(obj).length} bytes${cm ? ` (its payload ConfigMap ${JSON.stringify(cm).length} bytes)` : ''}`,
      ]);
    }

    const watching = await startWatchers(kc, o.watchers);
    // The setup's aftermath (watch cache, etcd compaction of the burst) inflated the first idle window
    // to 5x the later ones: let it pass before the first measurement.
    await sleep(10_000);

    const loadStart = loadavg()[0]!;
    const results = new Map<string, { api: number[]; etcd: number[]; perSecond: number[] }>();
    const idle: { api: number[]; etcd: number[] } = { api: [], etcd: [] };
    for (let run = 0; run < o.runs; run++) {
      const a0 = cpuSeconds(apiPid);
      const e0 = cpuSeconds(etcdPid);
      await sleep(o.idleSeconds * 1000);
      const idleApi = (cpuSeconds(apiPid) - a0) / o.idleSeconds;
      const idleEtcd = (cpuSeconds(etcdPid) - e0) / o.idleSeconds;
      idle.api.push(idleApi * 1000);
      idle.etcd.push(idleEtcd * 1000);
      for (const row of rows) {
        const api0 = cpuSeconds(apiPid);
        const etcd0 = cpuSeconds(etcdPid);
        const t0 = performance.now();
        await pool(indexes, o.concurrency, async (i) => {
          await row.request(i, run);
        });
        const busy = (performance.now() - t0) / 1000;
        await sleep(o.settleMs);
        const window = (performance.now() - t0) / 1000;
        const r = results.get(row.label) ?? { api: [], etcd: [], perSecond: [] };
        r.api.push(((cpuSeconds(apiPid) - api0 - idleApi * window) * 1000) / N);
        r.etcd.push(((cpuSeconds(etcdPid) - etcd0 - idleEtcd * window) * 1000) / N);
        r.perSecond.push(N / busy);
        results.set(row.label, r);
      }
      console.error(`[apiserver-cost] run ${run + 1}/${o.runs} done`);
    }
    const loadEnd = loadavg()[0]!;
    const received = await watching.stop();
    if (o.profile) {
      for (const s of serverShapes)
        await profileRow(cp, serverStatusPatch(s), s.name(0), o.profile, o.profileSeconds);
    }

    const spread = (v: number[], digits = 2) => {
      const s = [...v].sort((a, b) => a - b);
      const f = (x: number) => x.toFixed(digits);
      return `${f(s[0]!)} / ${f(s[Math.floor((s.length - 1) / 2)]!)} / ${f(s[s.length - 1]!)}`;
    };
    const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor((v.length - 1) / 2)]!;
    console.log(
      `\nCPU ms per request, idle subtracted, min / median / max of ${o.runs} run(s) of ${N} requests at concurrency ${o.concurrency}` +
        (o.watchers ? `, ${o.watchers} idle watch(es) on each of servers, SBCs, events` : ''),
    );
    const w = Math.max(...rows.map((r) => r.label.length));
    console.log(
      `${'request'.padEnd(w)}  ${'kube-apiserver'.padEnd(20)}  ${'etcd'.padEnd(20)}  requests/s (median)`,
    );
    for (const row of rows) {
      const r = results.get(row.label)!;
      console.log(
        `${row.label.padEnd(w)}  ${spread(r.api).padEnd(20)}  ${spread(r.etcd).padEnd(20)}  ${Math.round(median(r.perSecond))}`,
      );
    }
    console.log('\nstored object size (JSON as GET returns it, managedFields included)');
    printTable(sizes);
    console.log('');
    printTable([
      ['idle CPU ms per second kube-apiserver (per run)', idle.api.map((x) => x.toFixed(0)).join(' / ')],
      ['idle CPU ms per second etcd (per run)', idle.etcd.map((x) => x.toFixed(0)).join(' / ')],
      ['load average at start / end (1 min)', `${loadStart.toFixed(1)} / ${loadEnd.toFixed(1)}`],
      ...(o.watchers
        ? [
            [
              'watch events received per watch (servers / SBCs / events)',
              received.map((x) => x.toFixed(0)).join(' / '),
            ] as [string, string],
          ]
        : []),
    ]);
    console.log(
      JSON.stringify({
        bench: 'apiserver-cost',
        requests: N,
        runs: o.runs,
        concurrency: o.concurrency,
        watchers: o.watchers,
        payloadKib: o.payloadKib,
        loadAverage: [loadStart, loadEnd],
        idleCpuMsPerSecond: idle,
        rows: Object.fromEntries(results),
      }),
    );
    await client.close();
    await registry.close();
  } finally {
    await cp.stop();
  }
}

/**
 * Sends `row`'s requests in a loop at `--concurrency` while kube-apiserver records a CPU profile of
 * `seconds` (its `/debug/pprof/profile`, on by default: `--profiling`), and writes it to
 * `dir/<label>.pprof` (read it with `go tool pprof -top`). Throws when the profile cannot be fetched.
 */
async function profileRow(
  cp: ControlPlane,
  row: Row,
  label: string,
  dir: string,
  seconds: number,
): Promise<void> {
  mkdirSync(dir, { recursive: true });
  let stop = false;
  let run = 1000;
  const load = (async () => {
    while (!stop) {
      const r = run++;
      await pool(indexes, o.concurrency, async (i) => {
        await row.request(i, r);
      });
    }
  })();
  try {
    const res = await request(`${cp.server}/debug/pprof/profile?seconds=${seconds}`, {
      headers: { authorization: `Bearer ${cp.token}` },
      // The control plane's own CA signed the serving certificate.
      dispatcher: new Agent({ connect: { ca: readFileSync(cp.caFile) } }),
    });
    const body = Buffer.from(await res.body.arrayBuffer());
    if (res.statusCode !== 200)
      throw new Error(`pprof: HTTP ${res.statusCode}: ${body.toString().slice(0, 200)}`);
    const file = join(dir, `${label.replace(/[^\w.-]+/g, '_')}.pprof`);
    writeFileSync(file, body);
    console.error(`[apiserver-cost] profile of ${row.label}: ${file}`);
  } finally {
    stop = true;
    await load;
  }
}

/**
 * K watches on each of servers, serverbootconfigurations and events from their current version, on
 * a client of their own; `stop()` ends them and answers the events received per watch, per resource.
 */
async function startWatchers(
  kc: ReturnType<ControlPlane['kubeConfig']>,
  k: number,
): Promise<{ stop: () => Promise<number[]> }> {
  const resources = [Resources.Server, Resources.ServerBootConfiguration, Resources.Event];
  const counts = resources.map(() => 0);
  const abort = new AbortController();
  // One listener per watch on the shared signal: 3 K of them is intended.
  setMaxListeners(0, abort.signal);
  if (k === 0) return { stop: async () => counts };
  const watcher = new KubeClient(kc, { fieldManager: 'metal-cost-watch' });
  let connected = 0;
  resources.forEach((rt, r) => {
    for (let j = 0; j < k; j++) {
      void (async () => {
        let rv = (await watcher.list(rt, { limit: 1 })).resourceVersion;
        let first = true;
        while (!abort.signal.aborted) {
          try {
            await watcher.watch(
              rt,
              {
                resourceVersion: rv,
                timeoutSeconds: 3600,
                allowWatchBookmarks: true,
                onConnected: () => {
                  if (first) connected++;
                  first = false;
                },
              },
              (type, obj) => {
                rv = obj?.metadata?.resourceVersion ?? rv;
                if (type !== 'BOOKMARK') counts[r]!++;
              },
              abort.signal,
            );
          } catch (err) {
            if (abort.signal.aborted) return;
            console.error(`[apiserver-cost] watch ${rt.plural}: ${(err as Error).message}; again`);
            await sleep(500);
            rv = (await watcher.list(rt, { limit: 1 })).resourceVersion;
          }
        }
      })();
    }
  });
  const deadline = Date.now() + 60_000;
  while (connected < k * resources.length && Date.now() < deadline) await sleep(100);
  console.error(`[apiserver-cost] ${connected} watches connected`);
  return {
    stop: async () => {
      abort.abort();
      await watcher.close();
      return counts.map((c) => c / k);
    },
  };
}

await main();
