/**
 * Fleet scale: N simulated systems behind a virtual BMC go through discovery to Available, then N
 * claims to Booted, on the real control plane with the manager as its own process.
 *
 * Prints time to all Available, time to all Booted, the manager's API requests per server by verb, manager CPU seconds and peak RSS (from /proc).
 * `--sweep 100,500,2000` runs each size in turn and prints how each figure grows with N.
 *
 * Usage: node dist/bench/fleet.js [--servers 100] [--sweep 100,500,2000]
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { API_VERSION } from '../src/api/v1alpha1/schema.js';
import type { Server } from '../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../src/api/v1alpha1/serverclaim.js';
import { waitFor } from '../src/localstack/control-plane.js';
import { LocalStack } from '../src/localstack/local-stack.js';
import { OS_IMAGE } from '../src/localstack/vm-artefacts.js';
import { Resources } from '../src/runtime/resource.js';
import { pool, printTable } from './stats.js';

const o = new Command('fleet')
  .option('--servers <n>', 'fleet size', (v) => Number(v), 100)
  .option('--sweep <sizes>', 'comma-separated fleet sizes, run one after another')
  .option('--manager-args <args>', 'extra manager flags, space-separated (e.g. "--workers=4")', '')
  .parse()
  .opts<{ servers: number; sweep?: string; managerArgs: string }>();

/**
 * The manager's own API requests by verb (get, list, watch, create, update, patch, apply, delete),
 * from its `rest_client_request_duration_seconds_count` (controllers, registry and boot server share
 * the manager's client). The benchmark's own polling is not in it.
 */
async function apiRequestsByVerb(stack: LocalStack): Promise<Record<string, number>> {
  const text = await (await fetch(`${stack.metricsUrl}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^rest_client_request_duration_seconds_count\{verb="(\w+)"\} (\d+)/gm)) {
    out[m[1]!] = (out[m[1]!] ?? 0) + Number(m[2]);
  }
  return out;
}

/** CPU seconds (user+system) and peak RSS in MiB of a process, from /proc. */
function processUsage(pid: number): { cpuSeconds: number; peakRssMiB: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return {
    cpuSeconds: Math.round((ticks / 100) * 10) / 10,
    peakRssMiB: Math.round(Number(hwm?.[1] ?? 0) / 1024),
  };
}

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
  managerPeakRssMiB: number;
  managerIdleRssMiB: number;
}

async function run(n: number): Promise<FleetResult> {
  const dir = mkdtempSync(join(tmpdir(), 'metal-fleet-'));
  const stack = await LocalStack.start({
    servers: n,
    backend: 'sim',
    dir,
    managerArgs: [
      '--boot-timeout=10m',
      '--discovery-timeout=10m',
      ...o.managerArgs.split(' ').filter(Boolean),
    ],
    simTiming: { firmwareMs: 200, kernelMs: 500 },
    progress: (l) => console.error(`[fleet ${n}] ${l}`),
  });
  try {
    const idle = processUsage(managerPid(stack));
    const before = await apiRequestsByVerb(stack);
    const t0 = performance.now();
    await stack.waitForDiscovery(n, 30 * 60_000, (servers) =>
      console.error(
        `[fleet ${n}] available ${servers.filter((s) => s.status?.state === 'Available').length}/${n}`,
      ),
    );
    const tAvailable = (performance.now() - t0) / 1000;
    const servers = (await stack.client.list<Server>(Resources.Server)).items;
    await stack.client.create(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'fleet-ignition', namespace: 'default' },
      data: { ignition: Buffer.from('{"ignition":{"version":"3.4.0"}}').toString('base64') },
    });
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
    await waitFor(`${n} claims Booted`, 30 * 60_000, async () => {
      const claims = (await stack.client.list<ServerClaim>(Resources.ServerClaim, { namespace: 'default' }))
        .items;
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
    const after = await apiRequestsByVerb(stack);
    const perServer: Record<string, number> = {};
    for (const verb of Object.keys(after)) {
      perServer[verb] = Math.round((((after[verb] ?? 0) - (before[verb] ?? 0)) / n) * 10) / 10;
    }
    const usage = processUsage(managerPid(stack));
    return {
      servers: n,
      secondsToAvailable: Math.round(tAvailable * 10) / 10,
      secondsToBooted: Math.round(tBooted * 10) / 10,
      requestsPerServer: perServer,
      managerCpuSeconds: usage.cpuSeconds,
      managerPeakRssMiB: usage.peakRssMiB,
      managerIdleRssMiB: idle.peakRssMiB,
    };
  } finally {
    await stack.stop();
    // METAL_BENCH_KEEP=1 keeps the manager log and state for a look afterwards.
    if (process.env.METAL_BENCH_KEEP) console.error(`[fleet ${n}] kept ${dir}`);
    else rmSync(dir, { recursive: true, force: true });
  }
}

const sizes = o.sweep ? o.sweep.split(',').map((s) => Number(s.trim())) : [o.servers];
const results: FleetResult[] = [];
for (const n of sizes) {
  const r = await run(n);
  results.push(r);
  printTable([
    ['servers', r.servers],
    ['time to all Available (s)', r.secondsToAvailable],
    ['time claim→all Booted (s)', r.secondsToBooted],
    [
      'API requests per server',
      Object.entries(r.requestsPerServer)
        .map(([v, c]) => `${v}=${c}`)
        .join(' '),
    ],
    ['manager CPU seconds', r.managerCpuSeconds],
    ['manager peak RSS (MiB)', r.managerPeakRssMiB],
    ['manager RSS at start (MiB)', r.managerIdleRssMiB],
    [
      'RSS growth per server (KiB)',
      Math.round(((r.managerPeakRssMiB - r.managerIdleRssMiB) * 1024) / r.servers),
    ],
  ]);
  console.log(JSON.stringify({ bench: 'fleet', ...r }));
}
if (results.length > 1) {
  console.log('\nper-server cost by fleet size');
  for (const r of results) {
    const total = Object.values(r.requestsPerServer).reduce((a, b) => a + b, 0);
    console.log(
      `N=${String(r.servers).padEnd(6)} requests/server=${total.toFixed(1).padEnd(7)} cpu ms/server=${((r.managerCpuSeconds * 1000) / r.servers).toFixed(1).padEnd(7)} booted s=${r.secondsToBooted}`,
    );
  }
  console.log(JSON.stringify({ bench: 'fleet-sweep', results }));
}
