/**
 * Fleet scale: N simulated systems behind a virtual BMC go through discovery to Available, then N
 * claims to Booted, on the real control plane with the manager as its own process.
 *
 * Prints time to all Available, time to all Booted, the manager's API requests per server by verb,
 * where they go (per origin — the controller whose reconcile sent them, `other` for informers,
 * registry, boot server and leader election — and per resource, with conflicts (409) and writes that
 * changed nothing, from the manager's `metal_api_requests_total` / `metal_api_noop_writes_total`),
 * manager CPU seconds and RSS (from /proc). Each point runs `--runs` times (default 3) on a fresh
 * stack; the summary prints min / median / max of each figure.
 * `--sweep 100,500,2000` runs each size in turn and prints how each figure grows with N.
 * `--bmcs 10` spreads the simulated systems over 10 virtual BMCs (10 BMC objects).
 * `--payload-kib 56` makes every simulated host register a metalprobe-like payload of ~56 KiB (many
 * NICs, disks, PCI devices, DMI tables; src/virtualbmc/probe-payload.ts) instead of its ~1.4 KiB one.
 * `--replicas 2` runs the registry and the boot server as processes of their own, 2 replicas each,
 * behind Service stand-ins (src/localstack/signal-replicas.ts), as deployed; requests per server then
 * add up the manager's and every replica's requests, and the replicas' RSS is printed too.
 *
 * After each point, unless `--no-floor`, it runs `bench/claim-floor.ts` for the same N, runs and payload (the
 * claim phase's request set sent with no controller, on a fresh control plane of its own) and prints
 * claims → all Booted over that floor, both medians of the same sitting: how far the controllers are
 * from what the requests alone cost kube-apiserver on this machine right now.
 *
 * Usage: node dist/bench/fleet.js [--servers 100] [--sweep 100,500,2000] [--runs 3] [--bmcs 1]
 *        [--replicas 0] [--payload-kib 0] [--manager-args "--workers=4 --kube-api-qps=300"] [--no-floor]
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { API_VERSION } from '../src/api/v1alpha1/schema.js';
import type { ServerClaim } from '../src/api/v1alpha1/serverclaim.js';
import { waitFor } from '../src/localstack/control-plane.js';
import { LocalStack } from '../src/localstack/local-stack.js';
import { OS_IMAGE } from '../src/localstack/vm-artefacts.js';
import { Informer } from '../src/runtime/informer.js';
import { Resources } from '../src/runtime/resource.js';
import { pool, printTable } from './stats.js';

const o = new Command('fleet')
  .option('--servers <n>', 'fleet size', (v) => Number(v), 100)
  .option('--sweep <sizes>', 'comma-separated fleet sizes, run one after another')
  .option('--manager-args <args>', 'extra manager flags, space-separated (e.g. "--workers=4")', '')
  .option('--runs <n>', 'runs per fleet size (min / median / max printed)', (v) => Number(v), 3)
  .option('--breakdown-top <n>', 'rows of the per-origin/resource breakdown printed', (v) => Number(v), 25)
  .option('--bmcs <n>', 'virtual BMCs the systems are spread over', (v) => Number(v), 1)
  .option(
    '--payload-kib <n>',
    "registration payload per host, ~n KiB, metalprobe-like (0: the sim host's ~1.4 KiB)",
    (v) => Number(v),
    0,
  )
  .option(
    '--replicas <n>',
    'registry and boot server as own processes, this many replicas each (0: inside the manager)',
    (v) => Number(v),
    0,
  )
  .option('--no-floor', 'skip the claim floor (bench/claim-floor.ts) run after each point')
  .parse()
  .opts<{
    servers: number;
    sweep?: string;
    managerArgs: string;
    runs: number;
    breakdownTop: number;
    bmcs: number;
    replicas: number;
    floor: boolean;
    payloadKib: number;
  }>();

/** `/metrics` of the manager and of every signal replica, with the origin prefix of the replica's rows. */
function metricsSources(stack: LocalStack): { url: string; origin?: string }[] {
  return [
    { url: `${stack.metricsUrl}/metrics` },
    ...(stack.signals?.replicas ?? []).map((r) => ({
      url: `http://127.0.0.1:${r.metricsPort}/metrics`,
      origin: r.name,
    })),
  ];
}

/**
 * `origin resource verb` → requests, and the conflicts / no-op writes among them; controller →
 * reconciles (whatever their result), the work behind the requests.
 */
interface Breakdown {
  requests: Record<string, number>;
  conflicts: Record<string, number>;
  noops: Record<string, number>;
  reconciles: Record<string, number>;
}

/**
 * Reads the manager's `metal_api_requests_total`, `metal_api_noop_writes_total` and
 * `controller_runtime_reconcile_total`.
 */
async function apiBreakdown(stack: LocalStack): Promise<Breakdown> {
  const out: Breakdown = { requests: {}, conflicts: {}, noops: {}, reconciles: {} };
  const labels = (l: string) =>
    Object.fromEntries([...l.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
  for (const src of metricsSources(stack)) {
    const text = await (await fetch(src.url)).text();
    for (const m of text.matchAll(/^metal_api_requests_total\{([^}]*)\} (\d+)/gm)) {
      const l = labels(m[1]!);
      const key = `${src.origin ?? l.origin} ${l.resource} ${l.verb}`;
      out.requests[key] = (out.requests[key] ?? 0) + Number(m[2]);
      if (l.code === '409') out.conflicts[key] = (out.conflicts[key] ?? 0) + Number(m[2]);
    }
    for (const m of text.matchAll(/^metal_api_noop_writes_total\{([^}]*)\} (\d+)/gm)) {
      const l = labels(m[1]!);
      const key = `${src.origin ?? l.origin} ${l.resource} ${l.verb}`;
      out.noops[key] = (out.noops[key] ?? 0) + Number(m[2]);
    }
    for (const m of text.matchAll(/^controller_runtime_reconcile_total\{([^}]*)\} (\d+)/gm)) {
      const c = labels(m[1]!).controller ?? '';
      out.reconciles[c] = (out.reconciles[c] ?? 0) + Number(m[2]);
    }
  }
  return out;
}

function diffPerServer(
  a: Record<string, number>,
  b: Record<string, number>,
  n: number,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of Object.keys(b)) {
    const d = (b[k] ?? 0) - (a[k] ?? 0);
    if (d > 0) out[k] = Math.round((d / n) * 100) / 100;
  }
  return out;
}

/**
 * The manager's own API requests by verb (get, list, watch, create, update, patch, apply, delete),
 * from its `rest_client_request_duration_seconds_count` (controllers, registry and boot server share
 * the manager's client), plus those of every signal replica when they run on their own. The
 * benchmark's own polling is not in it.
 */
async function apiRequestsByVerb(stack: LocalStack): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const src of metricsSources(stack)) {
    const text = await (await fetch(src.url)).text();
    for (const m of text.matchAll(/^rest_client_request_duration_seconds_count\{verb="(\w+)"\} (\d+)/gm)) {
      out[m[1]!] = (out[m[1]!] ?? 0) + Number(m[2]);
    }
  }
  return out;
}

/** {@link apiRequestsByVerb} once two reads a second apart agree (at most 60 s). */
async function quiescentRequests(stack: LocalStack): Promise<Record<string, number>> {
  let last = await apiRequestsByVerb(stack);
  for (let i = 0; i < 60; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    const now = await apiRequestsByVerb(stack);
    const total = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);
    if (total(now) === total(last)) return now;
    last = now;
  }
  return last;
}

/** CPU seconds (user+system) and peak RSS in MiB of a process, from /proc. */
function processUsage(pid: number): { cpuSeconds: number; peakRssMiB: number; rssMiB: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  const rss = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return {
    cpuSeconds: Math.round((ticks / 100) * 10) / 10,
    peakRssMiB: Math.round(Number(hwm?.[1] ?? 0) / 1024),
    rssMiB: Math.round(Number(rss?.[1] ?? 0) / 1024),
  };
}

const round1 = (v: number) => Math.round(v * 10) / 10;

/** The manager's node process: the child of setpriv shares its pid (setpriv execs). */
function managerPid(stack: LocalStack): number {
  return stack.manager.pid!;
}

interface FleetResult {
  servers: number;
  secondsToAvailable: number;
  secondsToBooted: number;
  requestsPerServer: Record<string, number>;
  managerCpuSeconds: number;
  /** CPU seconds of kube-apiserver and etcd from the start of discovery to the last claim Booted. */
  apiServerCpuSeconds: number;
  etcdCpuSeconds: number;
  /** 1-minute load average when the measurement started and when it ended (other work on the machine). */
  loadAverage: [number, number];
  managerPeakRssMiB: number;
  managerIdleRssMiB: number;
  /** Manager RSS at the end, MiB (VmRSS, not the peak). */
  managerEndRssMiB: number;
  /** Per server: `origin resource verb` → requests, conflicts, no-op writes. */
  breakdown: Breakdown;
  /** Signal replicas (with `--replicas`): name → RSS at the end, MiB. */
  replicaRssMiB: Record<string, number>;
}

async function run(n: number): Promise<FleetResult> {
  const dir = mkdtempSync(join(tmpdir(), 'metal-fleet-'));
  // Deadlines grow with the fleet: at 5,000 servers on a loaded machine one step takes longer than
  // the 10 min the small points allow, and a timed-out attempt would be retried, not measured.
  const minutes = Math.max(10, Math.ceil(n / 100));
  const waitMs = Math.max(30, 2 * minutes) * 60_000;
  const stack = await LocalStack.start({
    servers: n,
    backend: 'sim',
    dir,
    managerArgs: [
      `--boot-timeout=${minutes}m`,
      `--discovery-timeout=${minutes}m`,
      ...o.managerArgs.split(' ').filter(Boolean),
    ],
    simTiming: { firmwareMs: 200, kernelMs: 500 },
    ...(o.payloadKib > 0 ? { simPayloadKib: o.payloadKib } : {}),
    bmcs: o.bmcs,
    signalReplicas: o.replicas,
    progress: (l) => console.error(`[fleet ${n}] ${l}`),
  });
  try {
    const idle = processUsage(managerPid(stack));
    const apiBefore = processUsage(stack.cp.apiServer!.pid!).cpuSeconds;
    const etcdBefore = processUsage(stack.cp.etcd!.pid!).cpuSeconds;
    const loadBefore = loadavg()[0]!;
    const before = await apiRequestsByVerb(stack);
    const breakdownBefore = await apiBreakdown(stack);
    const t0 = performance.now();
    const servers = await stack.waitForDiscovery(n, waitMs, (servers) =>
      console.error(
        `[fleet ${n}] available ${servers.filter((s) => s.status?.state === 'Available').length}/${n}`,
      ),
    );
    const tAvailable = (performance.now() - t0) / 1000;
    await stack.client.create(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'fleet-ignition', namespace: 'default' },
      data: { ignition: Buffer.from('{"ignition":{"version":"3.4.0"}}').toString('base64') },
    });
    // Watched, not listed every 100 ms: the benchmark's polling must not load the API server it measures.
    const claimWatch = new Informer<ServerClaim>(stack.client, Resources.ServerClaim, {
      namespace: 'default',
    });
    // Versions of each claim (its status writes): a claim that loops writes hundreds (issue 30).
    const writesOf = new Map<string, number>();
    claimWatch.on('update', (c, old) => {
      if (c.metadata.resourceVersion === old?.metadata.resourceVersion) return;
      const name = c.metadata.name ?? '';
      writesOf.set(name, (writesOf.get(name) ?? 0) + 1);
    });
    await claimWatch.start();
    const t1 = performance.now();
    await pool(servers, 50, async (srv) => {
      await stack.client.create(Resources.ServerClaim, {
        apiVersion: API_VERSION,
        kind: 'ServerClaim',
        metadata: { name: `fleet-${srv.metadata.name}`.slice(0, 63), namespace: 'default' },
        spec: {
          power: 'On',
          image: OS_IMAGE,
          serverRef: { name: srv.metadata.name },
          ignitionSecretRef: { name: 'fleet-ignition' },
        },
      });
    });
    let lastLog = 0;
    await waitFor(`${n} claims Booted`, waitMs, async () => {
      const claims = claimWatch.list();
      const booted = claims.filter((c) =>
        c.status?.conditions?.some((x) => x.type === 'Booted' && x.status === 'True'),
      ).length;
      if (Date.now() - lastLog > 5_000) {
        lastLog = Date.now();
        console.error(`[fleet ${n}] booted ${booted}/${n}`);
      }
      return booted >= n;
    });
    const tBooted = (performance.now() - t1) / 1000;
    assertEveryClaimClean(claimWatch.list(), writesOf);
    claimWatch.stop();
    // The writes that follow Booted (the Server's copy of the claim's condition, Events) belong to
    // the boot too: count once the manager has sent nothing for a second (at most 60 s).
    const after = await quiescentRequests(stack);
    const breakdownAfter = await apiBreakdown(stack);
    const perServer: Record<string, number> = {};
    for (const verb of Object.keys(after)) {
      perServer[verb] = Math.round((((after[verb] ?? 0) - (before[verb] ?? 0)) / n) * 10) / 10;
    }
    const usage = processUsage(managerPid(stack));
    const apiServerCpuSeconds = round1(processUsage(stack.cp.apiServer!.pid!).cpuSeconds - apiBefore);
    const etcdCpuSeconds = round1(processUsage(stack.cp.etcd!.pid!).cpuSeconds - etcdBefore);
    const replicaRssMiB: Record<string, number> = {};
    for (const r of stack.signals?.replicas ?? [])
      replicaRssMiB[r.name] = processUsage(r.process.pid!).rssMiB;
    return {
      replicaRssMiB,
      servers: n,
      secondsToAvailable: Math.round(tAvailable * 10) / 10,
      secondsToBooted: Math.round(tBooted * 10) / 10,
      requestsPerServer: perServer,
      managerCpuSeconds: usage.cpuSeconds,
      apiServerCpuSeconds,
      etcdCpuSeconds,
      loadAverage: [round1(loadBefore), round1(loadavg()[0]!)],
      managerPeakRssMiB: usage.peakRssMiB,
      managerIdleRssMiB: idle.peakRssMiB,
      managerEndRssMiB: usage.rssMiB,
      breakdown: {
        requests: diffPerServer(breakdownBefore.requests, breakdownAfter.requests, n),
        conflicts: diffPerServer(breakdownBefore.conflicts, breakdownAfter.conflicts, n),
        noops: diffPerServer(breakdownBefore.noops, breakdownAfter.noops, n),
        reconciles: diffPerServer(breakdownBefore.reconciles, breakdownAfter.reconciles, n),
      },
    };
  } finally {
    await stack.stop();
    // METAL_BENCH_KEEP=1 keeps the manager log and state for a look afterwards.
    if (process.env.METAL_BENCH_KEEP) console.error(`[fleet ${n}] kept ${dir}`);
    else rmSync(dir, { recursive: true, force: true });
  }
}

/** A claim of a healthy fleet writes its status a handful of times; more than this is a loop. */
const MAX_CLAIM_WRITES = 20;

/**
 * Every claim of the healthy fleet booted at its first attempt: Booted=True BootCompleted, attempt
 * 1 of series 1, no attempt in its history ended otherwise (TimedOut, NetbootNotObserved,
 * AttemptsExhausted), and at most {@link MAX_CLAIM_WRITES} writes. Throws naming the claims that did not.
 */
function assertEveryClaimClean(claims: ServerClaim[], writesOf: Map<string, number>): void {
  const bad: string[] = [];
  for (const c of claims) {
    const name = c.metadata.name ?? '';
    const booted = c.status?.conditions?.find((x) => x.type === 'Booted');
    const boot = c.status?.boot;
    const why: string[] = [];
    if (booted?.status !== 'True' || booted.reason !== 'BootCompleted')
      why.push(`Booted ${booted?.status}/${booted?.reason}`);
    if (boot?.attempt !== 1 || (boot.series ?? 1) !== 1)
      why.push(`attempt ${boot?.attempt} series ${boot?.series}`);
    const failed = (boot?.history ?? []).filter((h) => h.result && h.result !== 'BootCompleted');
    if (failed.length) why.push(`history ${failed.map((h) => `${h.attempt}:${h.result}`).join(',')}`);
    const w = writesOf.get(name) ?? 0;
    if (w > MAX_CLAIM_WRITES) why.push(`${w} writes (hot loop)`);
    if (why.length) bad.push(`${name}: ${why.join('; ')}`);
  }
  if (bad.length)
    throw new Error(
      `${bad.length} claim(s) did not boot cleanly at attempt 1:\n  ${bad.slice(0, 20).join('\n  ')}`,
    );
}

function printBreakdown(b: Breakdown): void {
  const rows = Object.entries(b.requests).sort((x, y) => y[1] - x[1]);
  console.log('\nrequests per server by origin, resource, verb (409 = conflicts, noop = wrote nothing new)');
  for (const [k, v] of rows.slice(0, o.breakdownTop)) {
    const c = b.conflicts[k] ? `  409=${b.conflicts[k]}` : '';
    const nop = b.noops[k] ? `  noop=${b.noops[k]}` : '';
    console.log(`  ${k.padEnd(58)} ${String(v).padStart(6)}${c}${nop}`);
  }
  const sum = (r: Record<string, number>) =>
    Math.round(Object.values(r).reduce((a, x) => a + x, 0) * 10) / 10;
  console.log(`  total ${sum(b.requests)}, conflicts ${sum(b.conflicts)}, no-op writes ${sum(b.noops)}`);
  const reconciles = Object.entries(b.reconciles).sort((x, y) => y[1] - x[1]);
  console.log(
    `reconciles per server by controller: ${reconciles.map(([c, v]) => `${c} ${v}`).join(', ')} (total ${sum(b.reconciles)})`,
  );
}

function totalRequests(r: FleetResult): number {
  return Math.round(Object.values(r.requestsPerServer).reduce((a, b) => a + b, 0) * 10) / 10;
}

function rssGrowthKiB(r: FleetResult): number {
  return Math.round(((r.managerPeakRssMiB - r.managerIdleRssMiB) * 1024) / r.servers);
}

/** "min / median / max" of one figure over the runs of a point. */
function spread<T>(rs: T[], f: (r: T) => number): string {
  const v = rs.map(f).sort((a, b) => a - b);
  return `${v[0]} / ${v[Math.floor((v.length - 1) / 2)]} / ${v[v.length - 1]}`;
}

/** Medians of a claim-floor run: its JSON lines, one per run, as bench/claim-floor.ts prints them. */
interface FloorRun {
  secondsToAllBootedSeen: number;
  apiServerCpuSeconds: number;
}

/**
 * Runs bench/claim-floor.ts for `n` servers and `runs` runs in a child process (its progress on this
 * stderr) and returns its per-run figures. Throws when it exits non-zero or prints no run.
 */
async function claimFloor(n: number, runs: number): Promise<FloorRun[]> {
  const script = join(dirname(fileURLToPath(import.meta.url)), 'claim-floor.js');
  const args = ['--servers', String(n), '--runs', String(runs), '--payload-kib', String(o.payloadKib)];
  const child = spawn(process.execPath, [script, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  const found = out
    .split('\n')
    .filter((l) => l.startsWith('{"bench":"claim-floor"'))
    .map((l) => JSON.parse(l) as FloorRun);
  if (code !== 0 || found.length === 0) throw new Error(`claim-floor exited ${code}:\n${out.slice(-2000)}`);
  return found;
}

const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor((v.length - 1) / 2)]!;

const sizes = o.sweep ? o.sweep.split(',').map((s) => Number(s.trim())) : [o.servers];
const points: { n: number; runs: FleetResult[] }[] = [];
for (const n of sizes) {
  const runs: FleetResult[] = [];
  for (let i = 0; i < Math.max(1, o.runs); i++) {
    const r = await run(n);
    runs.push(r);
    console.log(
      `\nN=${n} run ${i + 1}/${o.runs} (${o.bmcs} virtual BMC(s), ${o.replicas ? `${o.replicas} replicas each of registry and boot server` : 'registry and boot server in the manager'})`,
    );
    printTable([
      ['servers', r.servers],
      ['time to all Available (s)', r.secondsToAvailable],
      ['time claim→all Booted (s)', r.secondsToBooted],
      [
        'API requests per server',
        `${totalRequests(r)} (${Object.entries(r.requestsPerServer)
          .map(([v, c]) => `${v}=${c}`)
          .join(' ')})`,
      ],
      ['manager CPU seconds', r.managerCpuSeconds],
      [
        'kube-apiserver / etcd CPU seconds (measured phases)',
        `${r.apiServerCpuSeconds} / ${r.etcdCpuSeconds}`,
      ],
      ['load average at start / end (1 min)', `${r.loadAverage[0]} / ${r.loadAverage[1]}`],
      [
        'manager RSS start / peak / end (MiB)',
        `${r.managerIdleRssMiB} / ${r.managerPeakRssMiB} / ${r.managerEndRssMiB}`,
      ],
      ['RSS growth per server (KiB, peak − start)', rssGrowthKiB(r)],
      ...(Object.keys(r.replicaRssMiB).length
        ? [
            [
              'signal replicas RSS at end (MiB)',
              Object.entries(r.replicaRssMiB)
                .map(([k, v]) => `${k}=${v}`)
                .join(' '),
            ] as [string, string],
          ]
        : []),
    ]);
    printBreakdown(r.breakdown);
    console.log(JSON.stringify({ bench: 'fleet', ...r }));
  }
  points.push({ n, runs });
  const floor = o.floor ? await claimFloor(n, runs.length) : undefined;
  console.log(`\nN=${n}: min / median / max of ${runs.length} run(s)`);
  const floorRows: [string, string | number][] = floor
    ? [
        ['claim floor: claim create → all Booted (s)', spread(floor, (f) => f.secondsToAllBootedSeen)],
        [
          'claims → all Booted over the floor (medians)',
          (
            median(runs.map((r) => r.secondsToBooted)) / median(floor.map((f) => f.secondsToAllBootedSeen))
          ).toFixed(3),
        ],
      ]
    : [];
  printTable([
    ['time to all Available (s)', spread(runs, (r) => r.secondsToAvailable)],
    ['time claim→all Booted (s)', spread(runs, (r) => r.secondsToBooted)],
    ['API requests per server', spread(runs, totalRequests)],
    ['manager CPU seconds', spread(runs, (r) => r.managerCpuSeconds)],
    ['kube-apiserver CPU seconds', spread(runs, (r) => r.apiServerCpuSeconds)],
    ['RSS growth per server (KiB)', spread(runs, rssGrowthKiB)],
    ...floorRows,
  ]);
  console.log(
    JSON.stringify({
      bench: 'fleet-point',
      floorSecondsToBooted: floor?.map((f) => f.secondsToAllBootedSeen),
      servers: n,
      runs: runs.length,
      secondsToAvailable: runs.map((r) => r.secondsToAvailable),
      secondsToBooted: runs.map((r) => r.secondsToBooted),
      requestsPerServer: runs.map(totalRequests),
      apiServerCpuMsPerServer: runs.map((r) => Math.round((r.apiServerCpuSeconds * 1000) / r.servers)),
      rssGrowthKiBPerServer: runs.map(rssGrowthKiB),
    }),
  );
}
if (points.length > 1) {
  console.log('\nper-server cost by fleet size (medians)');
  const med = median;
  const perServer = (p: (typeof points)[number], f: (r: FleetResult) => number) =>
    med(p.runs.map((r) => f(r) / r.servers));
  for (const p of points) {
    const cells = [
      `N=${String(p.n).padEnd(6)}`,
      `requests/server=${String(med(p.runs.map(totalRequests))).padEnd(6)}`,
      `manager cpu ms/server=${(perServer(p, (r) => r.managerCpuSeconds) * 1000).toFixed(1).padEnd(6)}`,
      `kube-apiserver cpu ms/server=${(perServer(p, (r) => r.apiServerCpuSeconds) * 1000).toFixed(1).padEnd(6)}`,
      `RSS KiB/server=${String(med(p.runs.map(rssGrowthKiB))).padEnd(5)}`,
      `available s=${med(p.runs.map((r) => r.secondsToAvailable))}`,
      `booted s=${med(p.runs.map((r) => r.secondsToBooted))}`,
    ];
    console.log(cells.join(' '));
  }
}
