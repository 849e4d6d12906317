/**
 * The claim floor: what the claim phase's request set alone costs kube-apiserver here. N Servers as
 * a discovered fleet has them; for each, the requests the controllers send from claim creation to
 * Booted (`--set fleet`, 16 per server counting the claim's creation: finalizer, binding, Reserved
 * with the Server's Booted, SBC, ignition Secret read, SBC Ready, the claim's first status write with
 * its power-on intent, powerState, the three signals, the claim's progress and Booted writes, the
 * Server's Booted copy, the Event; `--set trace` adds 3 reads and writes an older trace had), sent in
 * order with the resourceVersions the answers gave, `--concurrency` servers at a time, with no
 * controller running. Prints time to the last Booted write and to an informer seeing all Booted,
 * requests/s, and kube-apiserver / etcd CPU, min / median / max of `--runs`. bench/fleet.ts runs it
 * after each point and prints claims → all Booted over this floor. Keep the set in step with the
 * controllers (test/controllers/claim-writes.test.ts pins theirs).
 *
 * Usage: node dist/bench/claim-floor.js [--servers 1000] [--runs 3] [--concurrency 64] [--set fleet]
 *        [--payload-kib 0]
 */
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { Command } from 'commander';
import { API_VERSION } from '../src/api/v1alpha1/schema.js';
import type { ServerClaim } from '../src/api/v1alpha1/serverclaim.js';
import { BOOTSERVER_COMPONENT } from '../src/bootserver/server.js';
import { CONTROLLER_COMPONENT } from '../src/controllers/common/owned-conditions.js';
import { CLAIM_FINALIZER } from '../src/controllers/serverclaim/serverclaim.js';
import { hardwareFromRegistration } from '../src/inventory/registration-hardware.js';
import {
  type RegistrationRecord,
  registrationConfigMapName,
  registrationDigest,
} from '../src/inventory/registration-record.js';
import { ControlPlane, waitFor } from '../src/localstack/control-plane.js';
import { OS_IMAGE } from '../src/localstack/vm-artefacts.js';
import { REGISTRY_COMPONENT } from '../src/registry/server.js';
import { KubeClient } from '../src/runtime/client.js';
import { Informer } from '../src/runtime/informer.js';
import { type KObject, Resources } from '../src/runtime/resource.js';
import { metalprobeLikePayload } from '../src/virtualbmc/probe-payload.js';
import { registrationData } from '../src/virtualbmc/sim.js';
import { simIdentity } from '../src/virtualbmc/sim-fleet.js';
import { discoveredStatus, NS, runTime, server } from './fleet-objects.js';
import { pool, printTable } from './stats.js';

const o = new Command('claim-floor')
  .option('--servers <n>', 'Servers, one claim each', (v) => Number(v), 1000)
  .option('--runs <n>', 'runs (min / median / max printed)', (v) => Number(v), 3)
  .option('--concurrency <n>', 'servers whose sequences run at a time', (v) => Number(v), 64)
  .option('--set <set>', 'request set: fleet (16 per server) or trace (19)', 'fleet')
  .option('--settle-seconds <n>', 'quiet time after setup and after each reset', (v) => Number(v), 5)
  .option(
    '--payload-kib <n>',
    "the Servers' upstream fields mapped from a metalprobe-like payload of ~n KiB (0: the sim host's)",
    (v) => Number(v),
    0,
  )
  .parse()
  .opts<{
    servers: number;
    runs: number;
    concurrency: number;
    set: string;
    settleSeconds: number;
    payloadKib: number;
  }>();
if (o.set !== 'trace' && o.set !== 'fleet') throw new Error(`--set must be fleet or trace, not ${o.set}`);
const FULL = o.set === 'trace';
const REQUESTS_PER_SERVER = FULL ? 19 : 16;

const N = o.servers;
const BMC_NAME = 'local-bmc';
const indexes = [...Array(N).keys()];
const ids = indexes.map((i) => simIdentity(i));
const serverName = (i: number) => `${BMC_NAME}-${ids[i]!.uuid}`;
const claimName = (i: number) => `fleet-${serverName(i)}`.slice(0, 63);

/** CPU seconds (user + system) of a process, from /proc/PID/stat (fields 14 and 15, clock ticks of 10 ms). */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}
const ownCpuSeconds = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

// --- values as the trace has them (image digests of the local stack's OS image, 2026-12-01) ---

const DIGEST = 'sha256:4b377c7aa7d1a82c6a85a11709bc65f2d25b1be6dbc776f4fed6ebec7bfd05bb';
const KERNEL = 'sha256:507a9a8be3d145a86daa9644b28bf42a8dc0720d8baeabdf0406c393692bf082';
const IMAGE_MESSAGE = `image ${OS_IMAGE} (${DIGEST}) resolved; ignition fleet-ignition valid`;
/** RFC 3339 to the second, as condition times are written. */
const seconds = (d: Date) => d.toISOString().replace(/\.\d{3}Z$/, 'Z');
/** `eventTime` (MicroTime): microseconds. */
const micro = (d: Date) => d.toISOString().replace(/Z$/, '000Z');

function cond(type: string, status: string, reason: string, message: string, at: string) {
  return { type, status, reason, message, observedGeneration: 1, lastTransitionTime: at };
}

interface Attempt {
  startedAt: string;
  poweredOnAt: string;
  deadline: string;
  bound: string;
}

function boot(a: Attempt, phase: string, extra: Record<string, unknown>): Record<string, unknown> {
  return {
    attempt: 1,
    phase,
    series: 1,
    firstAttempt: 1,
    attemptStartedAt: a.startedAt,
    poweredOnAt: a.poweredOnAt,
    netbootDeadline: null,
    deadline: a.deadline,
    completedAt: null,
    adoptedAt: null,
    ...extra,
  };
}

function event(
  name: string,
  involved: KObject,
  reason: string,
  message: string,
  now: Date,
  run: number,
): KObject {
  return {
    apiVersion: 'v1',
    kind: 'Event',
    metadata: { name: `${name}.r${run}${reason.toLowerCase()}`, namespace: NS },
    involvedObject: {
      apiVersion: API_VERSION,
      kind: involved.kind,
      name: involved.metadata.name,
      namespace: NS,
      uid: involved.metadata.uid,
      resourceVersion: involved.metadata.resourceVersion,
    },
    type: 'Normal',
    reason,
    message,
    action: reason,
    eventTime: micro(now),
    firstTimestamp: seconds(now),
    lastTimestamp: seconds(now),
    count: 1,
    source: { component: 'metal-operator' },
    reportingComponent: 'metal-operator',
    reportingInstance: 'metal-operator-floor',
  } as KObject;
}

/**
 * The claim phase of server `i`: the requests of the trace in order, each with the resourceVersion
 * the previous answer gave (as the manager's writes carry the version it read). Resolves the time
 * (performance.now()) of the Booted status write's answer.
 */
async function claimPhase(client: KubeClient, i: number, serverRv: string, run: number): Promise<number> {
  const srv = serverName(i);
  const name = claimName(i);
  const bound = `bound to Server ${srv}`;
  const ready = cond('BootConfigurationReady', 'True', 'Ready', IMAGE_MESSAGE, '');
  const claim = await client.create<ServerClaim>(Resources.ServerClaim, {
    apiVersion: API_VERSION,
    kind: 'ServerClaim',
    metadata: { name, namespace: NS },
    spec: {
      power: 'On',
      image: OS_IMAGE,
      serverRef: { name: srv },
      ignitionSecretRef: { name: 'fleet-ignition' },
    },
  } as ServerClaim);
  const c1 = await client.mergePatch(Resources.ServerClaim, name, NS, {
    metadata: { resourceVersion: claim.metadata.resourceVersion, finalizers: [CLAIM_FINALIZER] },
  });
  await client.mergePatch(Resources.Server, srv, undefined, {
    metadata: { resourceVersion: serverRv },
    spec: {
      serverClaimRef: { name, namespace: NS },
      bootConfigurationRef: { name, namespace: NS },
      power: 'On',
    },
  });
  const start = new Date();
  const t0 = seconds(start);
  const a: Attempt = { startedAt: start.toISOString(), poweredOnAt: '', deadline: '', bound: t0 };
  /** The claim controller's status write (Bound, BootConfigurationReady, Booted and `rest`), guarded by `prev`'s resourceVersion. */
  const claimStatus = (
    prev: KObject,
    configReady: ReturnType<typeof cond>,
    booted: ReturnType<typeof cond>,
    rest: Record<string, unknown>,
  ) =>
    client.mergePatch<KObject>(
      Resources.ServerClaim,
      name,
      NS,
      {
        metadata: { resourceVersion: prev.metadata.resourceVersion },
        status: {
          conditions: [cond('Bound', 'True', 'ServerBound', bound, t0), configReady, booted],
          ...rest,
        },
      },
      { subresource: 'status' },
    );
  // Reserved, with the Server's Booted (Booting) for the claim in the same write (server.ts).
  const booting = cond(
    'Booted',
    'False',
    'Booting',
    `ServerClaim ${NS}/${name}: reserved for this claim; its boot has not started yet`,
    t0,
  );
  await client.jsonPatch(
    Resources.Server,
    srv,
    undefined,
    [
      { op: 'test', path: '/status/state', value: 'Available' },
      { op: 'test', path: '/status/discovery', value: discoveryOf(0) },
      { op: 'add', path: '/status/state', value: 'Reserved' },
      // The first run adds the condition, later ones replace the last claim's (index 1, after Discovered).
      ...(run === 0
        ? [{ op: 'add', path: '/status/conditions/-', value: booting }]
        : [
            { op: 'test', path: '/status/conditions/1/type', value: 'Booted' },
            { op: 'replace', path: '/status/conditions/1', value: booting },
          ]),
    ],
    { subresource: 'status' },
  );
  const _sbc = await client.create(Resources.ServerBootConfiguration, {
    apiVersion: API_VERSION,
    kind: 'ServerBootConfiguration',
    metadata: {
      name,
      namespace: NS,
      labels: {},
      annotations: { 'metal.ironcore.dev/attempt-key': 'a1' },
      ownerReferences: [
        {
          apiVersion: API_VERSION,
          kind: 'ServerClaim',
          name,
          uid: claim.metadata.uid!,
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    spec: {
      serverRef: { name: srv },
      image: OS_IMAGE,
      ignitionSecretRef: { name: 'fleet-ignition' },
      bootPolicy: 'NetBootOnce',
      bootAttempt: 1,
    },
  } as KObject);
  if (FULL) await client.get(Resources.ServerClaim, name, NS);
  await client.get(Resources.Secret, 'fleet-ignition', NS);
  const readyAt = seconds(new Date());
  ready.lastTransitionTime = readyAt;
  const sbc1 = await client.apply(
    Resources.ServerBootConfiguration,
    {
      apiVersion: API_VERSION,
      kind: 'ServerBootConfiguration',
      metadata: { name, namespace: NS },
      status: {
        state: 'Ready',
        image: {
          reference: OS_IMAGE,
          digest: DIGEST,
          manifest: DIGEST,
          kernel: KERNEL,
          initrd: KERNEL,
          commandLine: 'console=ttyS0 quiet',
          bootAttempt: 1,
        },
        conditions: [cond('Ready', 'True', 'Ready', IMAGE_MESSAGE, readyAt)],
      },
    } as KObject,
    { subresource: 'status', fieldManager: `${CONTROLLER_COMPONENT}-Ready`, force: true },
  );
  if (FULL)
    await client.create(
      Resources.Event,
      event(
        name,
        sbc1,
        'ImageResolved',
        `attempt 1: ${OS_IMAGE} resolved to ${DIGEST}; boot configuration Ready`,
        new Date(),
        run,
      ),
    );
  const on = new Date();
  a.poweredOnAt = on.toISOString();
  a.deadline = new Date(on.getTime() + 5 * 60_000).toISOString();
  const history = (extra: Record<string, unknown>) => [
    { attempt: 1, startedAt: a.startedAt, poweredOnAt: a.poweredOnAt, ...extra },
  ];
  // The first status write: Bound, the first series and its power-on intent (claim-attempt.ts).
  const c3 = await claimStatus(
    c1,
    ready,
    cond(
      'Booted',
      'False',
      'Booting',
      `attempt 1/3: arrived []; waiting for the network boot (IPXEScriptFetched) until ${a.deadline}`,
      t0,
    ),
    { phase: 'Bound', boot: boot(a, 'AwaitingNetboot', { history: history({}) }) },
  );
  await client.mergePatch(
    Resources.Server,
    srv,
    undefined,
    { status: { powerState: 'On' } },
    { subresource: 'status' },
  );
  const signal = (prev: KObject, type: string, reason: string, message: string, component: string) =>
    client.apply(
      Resources.ServerBootConfiguration,
      {
        apiVersion: API_VERSION,
        kind: 'ServerBootConfiguration',
        metadata: {
          name,
          namespace: NS,
          resourceVersion: prev.metadata.resourceVersion,
          uid: prev.metadata.uid,
        },
        status: { conditions: [cond(type, 'True', reason, message, seconds(new Date()))] },
      } as KObject,
      { subresource: 'status', fieldManager: `${component}-${type}`, force: true },
    );
  const sbc2 = await signal(
    sbc1,
    'IPXEScriptFetched',
    'ScriptServed',
    'script for attempt 1 served to 127.0.0.1',
    BOOTSERVER_COMPONENT,
  );
  const ipxeAt = seconds(new Date());
  const sbc3 = await signal(
    sbc2,
    'IgnitionDataFetched',
    'IgnitionServed',
    'ignition for attempt 1 served to 127.0.0.1',
    BOOTSERVER_COMPONENT,
  );
  const c4 = await claimStatus(
    c3,
    ready,
    cond(
      'Booted',
      'False',
      'Booting',
      `attempt 1/3: arrived [IPXEScriptFetched]; waiting for BootStateReceived until ${a.deadline}`,
      t0,
    ),
    { boot: boot(a, 'AwaitingSignals', { history: history({ signals: { IPXEScriptFetched: ipxeAt } }) }) },
  );
  await signal(
    sbc3,
    'BootStateReceived',
    'Booted',
    'attempt 1: agent reported booted=true',
    REGISTRY_COMPONENT,
  );
  const done = new Date();
  const doneAt = seconds(done);
  const c5 = await claimStatus(
    c4,
    ready,
    cond('Booted', 'True', 'BootCompleted', 'attempt 1/3 completed: BootStateReceived', doneAt),
    {
      boot: boot(a, 'Completed', {
        completedAt: done.toISOString(),
        history: history({
          signals: { IPXEScriptFetched: ipxeAt, IgnitionDataFetched: ipxeAt, BootStateReceived: doneAt },
          endedAt: done.toISOString(),
          result: 'BootCompleted',
        }),
      }),
    },
  );
  const bootedAt = performance.now();
  // The Server's copy of the claim's Booted (server-boot-condition.ts).
  await client.apply(
    Resources.Server,
    {
      apiVersion: API_VERSION,
      kind: 'Server',
      metadata: { name: srv },
      status: {
        conditions: [
          cond(
            'Booted',
            'True',
            'BootCompleted',
            `ServerClaim ${NS}/${name}: attempt 1/3 completed: BootStateReceived`,
            doneAt,
          ),
        ],
      },
    } as KObject,
    { subresource: 'status', fieldManager: `${CONTROLLER_COMPONENT}-Booted`, force: true },
  );
  if (FULL)
    await client.apply(
      Resources.ServerBootConfiguration,
      {
        apiVersion: API_VERSION,
        kind: 'ServerBootConfiguration',
        metadata: { name, namespace: NS },
        status: {
          conditions: [cond('BootCompleted', 'True', 'ClaimBooted', 'claim booted in attempt 1', doneAt)],
        },
      } as KObject,
      { subresource: 'status', fieldManager: `${CONTROLLER_COMPONENT}-BootCompleted`, force: true },
    );
  await client.create(
    Resources.Event,
    event(
      name,
      c5,
      'BootCompleted',
      `bound Server ${srv}; powered on ${a.poweredOnAt}; attempt 1/3 completed (BootStateReceived)`,
      new Date(),
      run,
    ),
  );
  return bootedAt;
}

/** `status.discovery` of a discovered Server (what the Reserved JSON patch tests). */
function discoveryOf(run: number): unknown {
  return (discoveredStatus(ids[0]!, run) as { discovery: unknown }).discovery;
}

/** The Servers' spec and status as before a claim: Available, powered off, no references. Answers the new resourceVersions. */
async function resetServers(client: KubeClient): Promise<string[]> {
  const rvs: string[] = [];
  await pool(indexes, 32, async (i) => {
    await client.mergePatch(Resources.Server, serverName(i), undefined, {
      spec: { serverClaimRef: null, bootConfigurationRef: null, power: 'Off' },
    });
    const s = await client.mergePatch(
      Resources.Server,
      serverName(i),
      undefined,
      { status: { state: 'Available', powerState: 'Off' } },
      { subresource: 'status' },
    );
    rvs[i] = s.metadata.resourceVersion!;
  });
  return rvs;
}

const isBooted = (c: ServerClaim) =>
  c.status?.conditions?.some((x) => x.type === 'Booted' && x.status === 'True') === true;

interface RunResult {
  secondsToLastBootedWrite: number;
  secondsToAllBootedSeen: number;
  secondsToLastRequest: number;
  apiServerCpuSeconds: number;
  etcdCpuSeconds: number;
  controllerManagerCpuSeconds: number;
  benchmarkCpuSeconds: number;
  requestsPerSecond: number;
  apiServerCpuMsPerServer: number;
  loadAverage: [number, number];
}

async function main(): Promise<void> {
  const cp = await ControlPlane.start({ garbageCollector: true });
  try {
    const kc = cp.kubeConfig();
    const client = new KubeClient(kc, { fieldManager: 'metal-operator' });
    const registry = new KubeClient(kc, { fieldManager: REGISTRY_COMPONENT });
    const pids = {
      api: cp.apiServer!.pid!,
      etcd: cp.etcd!.pid!,
      kcm: cp.controllerManager?.pid,
    };

    console.error(`[claim-floor] creating the BMC, ${N} Servers and fleet-ignition`);
    const bmc = await client.create(Resources.BMC, {
      apiVersion: API_VERSION,
      kind: 'BMC',
      metadata: { name: BMC_NAME },
      spec: {
        access: { ip: '127.0.0.1' },
        bmcSecretRef: { name: `${BMC_NAME}-credentials` },
        protocol: { name: 'Redfish', port: 8000, scheme: 'http' },
      },
    } as KObject);
    const owner = { name: BMC_NAME, uid: bmc.metadata.uid! };
    await pool(indexes, 32, async (i) => {
      const s = server(serverName(i), ids[i]!, false, owner) as KObject & { spec: Record<string, unknown> };
      delete s.spec.bootConfigurationRef;
      s.spec.power = 'Off';
      await client.create(Resources.Server, s);
      // As discovery leaves it (inventory/registration-record.ts): upstream's fields from the
      // payload's mapping and the registry's small record; the payload itself is in a ConfigMap the
      // claim phase never touches, so none is made here.
      const data =
        o.payloadKib > 0
          ? metalprobeLikePayload(registrationData(ids[i]!), ids[i]!, o.payloadKib)
          : registrationData(ids[i]!);
      await client.mergePatch(
        Resources.Server,
        serverName(i),
        undefined,
        {
          status: {
            ...discoveredStatus(ids[i]!, 0, { state: 'Available', powerState: 'Off' }),
            ...hardwareFromRegistration(data),
          },
        },
        { subresource: 'status' },
      );
      const record: RegistrationRecord = {
        receivedAt: runTime(0),
        clientAddress: '127.0.0.1',
        digest: registrationDigest(data),
        authenticated: true,
        attempt: 1,
        bootConfigurationUID: '00000000-0000-4000-8000-000000000000',
        payload: { namespace: NS, name: registrationConfigMapName(serverName(i)) },
      };
      await registry.jsonPatch(
        Resources.Server,
        serverName(i),
        undefined,
        [{ op: 'add', path: '/status/registration', value: record }],
        { subresource: 'status' },
      );
    });
    await client.create(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'fleet-ignition', namespace: NS },
      data: { ignition: Buffer.from('{"ignition":{"version":"3.4.0"}}').toString('base64') },
    } as KObject);

    // The manager's informers (src/controllers/setup.ts), idle watches like its, and the benchmark's own.
    const informers = [
      new Informer(client, Resources.Server),
      new Informer(client, Resources.ServerClaim),
      new Informer(client, Resources.ServerBootConfiguration),
      new Informer(client, Resources.BMC),
    ];
    const claims = new Informer<ServerClaim>(client, Resources.ServerClaim, { namespace: NS });
    await Promise.all([...informers, claims].map((inf) => inf.start()));
    const [, , sbcInformer] = informers;

    let booted = new Set<string>();
    let allBootedAt = 0;
    const count = (c: ServerClaim) => {
      if (!isBooted(c) || booted.has(c.metadata.name!)) return;
      booted.add(c.metadata.name!);
      if (booted.size === N) allBootedAt = performance.now();
    };
    claims.on('add', count);
    claims.on('update', count);

    let serverRvs = await resetServers(client);
    await sleep(o.settleSeconds * 1000);

    const results: RunResult[] = [];
    for (let run = 0; run < o.runs; run++) {
      booted = new Set();
      allBootedAt = 0;
      const load0 = loadavg()[0]!;
      const cpu0 = {
        api: cpuSeconds(pids.api),
        etcd: cpuSeconds(pids.etcd),
        kcm: pids.kcm ? cpuSeconds(pids.kcm) : 0,
        own: ownCpuSeconds(),
      };
      const t0 = performance.now();
      let lastBooted = 0;
      await pool(indexes, o.concurrency, async (i) => {
        const at = await claimPhase(client, i, serverRvs[i]!, run);
        if (at > lastBooted) lastBooted = at;
      });
      const tRequests = performance.now();
      await waitFor(`${N} claims Booted in the informer`, 120_000, () => allBootedAt > 0);
      const r: RunResult = {
        secondsToLastBootedWrite: round1((lastBooted - t0) / 1000),
        secondsToAllBootedSeen: round1((allBootedAt - t0) / 1000),
        secondsToLastRequest: round1((tRequests - t0) / 1000),
        apiServerCpuSeconds: round1(cpuSeconds(pids.api) - cpu0.api),
        etcdCpuSeconds: round1(cpuSeconds(pids.etcd) - cpu0.etcd),
        controllerManagerCpuSeconds: round1((pids.kcm ? cpuSeconds(pids.kcm) : 0) - cpu0.kcm),
        benchmarkCpuSeconds: round1(ownCpuSeconds() - cpu0.own),
        requestsPerSecond: Math.round((N * REQUESTS_PER_SERVER) / ((tRequests - t0) / 1000)),
        apiServerCpuMsPerServer: 0,
        loadAverage: [round1(load0), round1(loadavg()[0]!)],
      };
      r.apiServerCpuMsPerServer = round1((r.apiServerCpuSeconds * 1000) / N);
      results.push(r);
      console.log(
        `\nrun ${run + 1}/${o.runs}: N=${N}, ${REQUESTS_PER_SERVER} requests per server (--set ${o.set}), concurrency ${o.concurrency}`,
      );
      printRun(r);
      console.log(
        JSON.stringify({ bench: 'claim-floor', servers: N, set: o.set, concurrency: o.concurrency, ...r }),
      );

      if (run < o.runs - 1) {
        console.error('[claim-floor] resetting (unmeasured)');
        await cleanup(client, run);
        await waitFor('claims and SBCs gone', 300_000, () => {
          return claims.list().length === 0 && sbcInformer!.list().length === 0;
        });
        serverRvs = await resetServers(client);
        await sleep(o.settleSeconds * 1000);
      }
    }

    const spread = (f: (r: RunResult) => number) => {
      const v = results.map(f).sort((x, y) => x - y);
      return `${v[0]} / ${v[Math.floor((v.length - 1) / 2)]} / ${v[v.length - 1]}`;
    };
    console.log(
      `\nclaim-phase floor, N=${N}, ${REQUESTS_PER_SERVER} requests per server (--set ${o.set}), concurrency ${o.concurrency}: min / median / max of ${results.length} run(s)`,
    );
    printTable([
      ['first claim create → last Booted write (s)', spread((r) => r.secondsToLastBootedWrite)],
      ['first claim create → informer shows all Booted (s)', spread((r) => r.secondsToAllBootedSeen)],
      ['first claim create → last request answered (s)', spread((r) => r.secondsToLastRequest)],
      ['requests/s', spread((r) => r.requestsPerSecond)],
      ['kube-apiserver CPU s', spread((r) => r.apiServerCpuSeconds)],
      ['etcd CPU s', spread((r) => r.etcdCpuSeconds)],
      ['kube-controller-manager (GC) CPU s', spread((r) => r.controllerManagerCpuSeconds)],
      ['this process CPU s', spread((r) => r.benchmarkCpuSeconds)],
      ['kube-apiserver CPU ms per server', spread((r) => r.apiServerCpuMsPerServer)],
      ['load average at start / end of each run', results.map((r) => r.loadAverage.join(' / ')).join(', ')],
    ]);
    for (const inf of [...informers, claims]) inf.stop();
    await client.close();
    await registry.close();
  } finally {
    await cp.stop();
  }
}

function printRun(r: RunResult): void {
  printTable([
    ['first claim create → last Booted write (s)', r.secondsToLastBootedWrite],
    ['first claim create → informer shows all Booted (s)', r.secondsToAllBootedSeen],
    ['first claim create → last request answered (s)', r.secondsToLastRequest],
    ['requests/s', r.requestsPerSecond],
    [
      'CPU s kube-apiserver / etcd / kube-controller-manager / this process',
      `${r.apiServerCpuSeconds} / ${r.etcdCpuSeconds} / ${r.controllerManagerCpuSeconds} / ${r.benchmarkCpuSeconds}`,
    ],
    ['kube-apiserver CPU ms per server', r.apiServerCpuMsPerServer],
    ['load average at start / end (1 min)', `${r.loadAverage[0]} / ${r.loadAverage[1]}`],
  ]);
}

/** Deletes the run's claims (finalizer removed first), SBCs and Events. */
async function cleanup(client: KubeClient, run: number): Promise<void> {
  await pool(indexes, 32, async (i) => {
    const name = claimName(i);
    await client.mergePatch(Resources.ServerClaim, name, NS, { metadata: { finalizers: null } });
    await client.delete(Resources.ServerClaim, name, NS);
    await client.delete(Resources.ServerBootConfiguration, name, NS);
    for (const reason of FULL ? ['imageresolved', 'bootcompleted'] : ['bootcompleted'])
      await client.delete(Resources.Event, `${name}.r${run}${reason}`, NS);
  });
}

const round1 = (v: number) => Math.round(v * 10) / 10;

await main();
