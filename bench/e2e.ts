/**
 * Where end-to-end boot time goes, per firmware and boot method (`--shapes`, default
 * `bios-pxe,uefi-pxe,uefi-http`): for each, one QEMU VM (TCG unless KVM proved to work), one claim
 * at a time from creation to Booted, split into phases. PXE shapes run on the bridged test network
 * where it can be made (else QEMU user networking); `uefi-http` needs it; `uefi-vmedia` (on request)
 * boots the ISO the BMC inserted. Each run is cut into steps (bench/e2e-timeline.ts), each on its own
 * row as min / median / max over the runs: our code's (`ours:` — bind, boot configuration, the gaps
 * between the Redfish requests of the power-on, the boot server's answers, the /bootstate callback to
 * the claim's Booted) and the rest (the virtual BMC's answers, the Reset's included, which starts
 * QEMU; firmware with DHCP, whose log has seconds only, so it stays inside the firmware's step;
 * downloads at the firmware's pace; kernel; the agent). The rows add up to the total.
 *
 * Event times, all in ms: the manager's JSON log lines (run at LOG_LEVEL=debug unless set, for the
 * `request served` lines that give each boot-server request's start and end), the virtual BMC's
 * request records, and this benchmark's own watch of the claims and boot configurations. No poll.
 * The virtual BMC runs in this process: its largest event-loop delay per run is printed too (a
 * stall here delays the BMC's request times, which would show as our gaps).
 *
 * Usage: node dist/bench/e2e.js [--runs 3] [--shapes bios-pxe,uefi-pxe,uefi-http] [--keep]
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Command } from 'commander';
import pino from 'pino';
import { API_VERSION } from '../src/api/v1alpha1/schema.js';
import type { Server } from '../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../src/api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../src/api/v1alpha1/serverclaim.js';
import { LocalStack } from '../src/localstack/local-stack.js';
import { OS_IMAGE } from '../src/localstack/vm-artefacts.js';
import { Informer } from '../src/runtime/informer.js';
import { Resources } from '../src/runtime/resource.js';
import { buildTimeline, readManagerLog } from './e2e-timeline.js';
import { printTable, summarize } from './stats.js';

const SHAPES = {
  'bios-pxe': { firmware: 'bios', bootMethod: 'pxe' },
  'uefi-pxe': { firmware: 'uefi', bootMethod: 'pxe' },
  'uefi-http': { firmware: 'uefi', bootMethod: 'http' },
  'uefi-vmedia': { firmware: 'uefi', bootMethod: 'vmedia' },
} as const;
type Shape = keyof typeof SHAPES;

const o = new Command('e2e')
  .option('--runs <n>', 'claims booted one after another, per shape', (v) => Number(v), 3)
  .option(
    '--shapes <list>',
    `comma-separated: ${Object.keys(SHAPES).join(', ')}`,
    'bios-pxe,uefi-pxe,uefi-http',
  )
  .option('--keep', "keep each shape's stack directory (manager log, bmc-requests.json) and print its path")
  .parse()
  .opts<{ runs: number; shapes: string; keep?: boolean }>();
const load0 = loadavg()[0]!;
const shapes = o.shapes.split(',').map((x) => x.trim()) as Shape[];
for (const sh of shapes) if (!(sh in SHAPES)) throw new Error(`unknown shape ${sh}`);

// The boot server's and registry's `request served` lines (debug) give each request's start and end.
process.env.LOG_LEVEL ??= 'debug';

const results: Record<string, Record<string, { min: number; median: number; max: number }>> = {};
for (const shape of shapes) {
  const phases = await benchShape(shape);
  const rows: [string, string][] = Object.entries(phases).map(([k, v]) => {
    const sorted = [...v].sort((a, b) => a - b);
    const f = (x: number) => String(Math.round(x)).padStart(6);
    return [k, `min ${f(sorted[0]!)} ms   median ${f(summarize(v).p50)} ms   max ${f(sorted.at(-1)!)} ms`];
  });
  console.log(`\n${shape}`);
  printTable([['runs', String(o.runs)], ...rows]);
  results[shape] = Object.fromEntries(
    Object.entries(phases).map(([k, v]) => [
      k,
      { min: Math.min(...v), median: Math.round(summarize(v).p50), max: Math.max(...v) },
    ]),
  );
}
console.log(JSON.stringify({ bench: 'e2e', runs: o.runs, load: [load0, loadavg()[0]], shapes: results }));
console.log(`load average (1 min): ${load0.toFixed(2)} at start, ${loadavg()[0]!.toFixed(2)} at end`);

/** What a failed run leaves to read: the claim's and SBC's conditions are in the API, this is the rest. */
async function diagnosis(stack: LocalStack): Promise<string> {
  const manager = readFileSync(stack.managerLog, 'utf8').trim().split('\n').slice(-40).join('\n');
  const vms = await Promise.all(
    stack.hosts.map((h) => ('diagnosis' in h && typeof h.diagnosis === 'function' ? h.diagnosis(40) : '')),
  );
  return [`manager log (last 40 lines):`, manager, ...vms].join('\n');
}

/** Boots `--runs` claims on a fresh stack of `shape`; returns each phase's times in ms. */
async function benchShape(shape: Shape): Promise<Record<string, number[]>> {
  const { firmware, bootMethod } = SHAPES[shape];
  const dir = mkdtempSync(join(tmpdir(), 'metal-bench-e2e-'));
  const stack = await LocalStack.start({
    servers: 1,
    backend: 'qemu',
    dir,
    firmware,
    bootMethod,
    network: bootMethod === 'http' ? 'bridge' : 'auto',
    progress: (l) => console.error(`[e2e ${shape}] ${l}`),
  });
  const phases: Record<string, number[]> = {};
  const add = (k: string, ms: number) => {
    phases[k] ??= [];
    phases[k].push(ms);
  };
  try {
    const [srv] = await stack.waitForDiscovery(1, 300_000);
    const server = srv!;
    await stack.client.create(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'bench-ignition', namespace: 'default' },
      data: { ignition: Buffer.from('{"ignition":{"version":"3.4.0"}}').toString('base64') },
    });
    const watch = await watchRuns(stack);
    for (let run = 1; run <= o.runs; run++) {
      const name = `bench-e2e-${run}`;
      // The virtual BMC answers in this process: a stalled event loop here would show as our gaps.
      const lag = monitorEventLoopDelay({ resolution: 10 });
      lag.enable();
      const t0 = Date.now();
      await stack.client.create(Resources.ServerClaim, {
        apiVersion: API_VERSION,
        kind: 'ServerClaim',
        metadata: { name, namespace: 'default' },
        spec: {
          power: 'On',
          image: OS_IMAGE,
          serverRef: { name: server.metadata.name },
          ignitionSecretRef: { name: 'bench-ignition' },
          ...(bootMethod === 'vmedia' ? { bootMethod: 'VirtualMedia' } : {}),
        },
      });
      const steps = await timeRun(stack, watch, name, server.spec.systemUUID, t0, lag);
      let ours = 0;
      let theirs = 0;
      for (const st of steps) {
        add(st.label, Math.round(st.ms));
        if (st.ours) ours += Math.round(st.ms);
        else theirs += Math.round(st.ms);
      }
      add('total (claim created → Booted)', ours + theirs);
      add('OUR CODE (sum of ours: rows)', ours);
      add('not ours (firmware, DHCP, kernel, agent, BMC)', theirs);
      add('(no step) benchmark process event-loop delay, max', Math.round(lag.max / 1e6));
      console.error(`[e2e ${shape}] run ${run}: ${ours + theirs} ms, ours ${ours} ms`);
      // Free the server for the next run.
      await stack.client.delete(Resources.ServerClaim, name, 'default');
      const end = Date.now() + 180_000;
      for (;;) {
        const s = await stack.client.get<Server>(Resources.Server, server.metadata.name!);
        if (s?.status?.state === 'Available' && !s.spec.serverClaimRef) break;
        if (Date.now() > end) throw new Error('server did not return to Available');
        await new Promise((ok) => setTimeout(ok, 200));
      }
    }
    watch.stop();
    if (o.keep) writeFileSync(join(dir, 'bmc-requests.json'), JSON.stringify(stack.vbmc.requests(), null, 1));
    return phases;
  } finally {
    await stack.stop();
    if (o.keep) console.error(`[e2e ${shape}] kept ${dir}`);
    else rmSync(dir, { recursive: true, force: true });
  }
}

/** The benchmark's own watch: when each claim turned Booted and each SBC appeared (arrival, ms). */
interface RunWatch {
  booted: Map<string, number>;
  sbcCreated: Map<string, number>;
  stop(): void;
}

async function watchRuns(stack: LocalStack): Promise<RunWatch> {
  const quiet = { namespace: 'default', log: pino({ level: 'silent' }) };
  const claims = new Informer<ServerClaim>(stack.client, Resources.ServerClaim, quiet);
  const sbcs = new Informer<ServerBootConfiguration>(stack.client, Resources.ServerBootConfiguration, quiet);
  const w: RunWatch = {
    booted: new Map(),
    sbcCreated: new Map(),
    stop: () => {
      claims.stop();
      sbcs.stop();
    },
  };
  const onClaim = (c: ServerClaim) => {
    const n = c.metadata.name!;
    if (!w.booted.has(n) && c.status?.conditions?.some((x) => x.type === 'Booted' && x.status === 'True'))
      w.booted.set(n, Date.now());
  };
  claims.on('add', onClaim);
  claims.on('update', onClaim);
  sbcs.on('add', (b) => {
    if (!w.sbcCreated.has(b.metadata.name!)) w.sbcCreated.set(b.metadata.name!, Date.now());
  });
  await Promise.all([claims.start(), sbcs.start()]);
  return w;
}

/**
 * Waits (bounded, 300 s) for claim `name` to be Booted (then stops `lag`, the event-loop delay
 * monitor) and its evidence to be complete, then returns its steps. The registry logs the callback after its write and the request line after
 * that, so the claim can be Booted before those lines reach the log file: that wait is bounded too.
 */
async function timeRun(
  stack: LocalStack,
  w: RunWatch,
  name: string,
  uuid: string,
  t0: number,
  lag: { disable(): unknown },
) {
  while (!w.booted.has(name)) {
    if (Date.now() - t0 > 300_000) {
      const claim = await stack.client.get<ServerClaim>(Resources.ServerClaim, name, 'default');
      throw new Error(
        `claim ${name} not Booted after 300 s: ${JSON.stringify(claim?.status)}\n${await diagnosis(stack)}`,
      );
    }
    await new Promise((ok) => setTimeout(ok, 50));
  }
  lag.disable(); // reading the log below stalls this process, after the run
  const evidence = () => ({
    claim: name,
    systemUUID: uuid,
    t0,
    sbcCreated: w.sbcCreated.get(name),
    booted: w.booted.get(name)!,
    bmc: stack.vbmc.requests().filter((r) => r.at >= t0),
    log: readManagerLog(stack.managerLog, t0),
  });
  for (const end = Date.now() + 10_000; ; ) {
    try {
      return buildTimeline(evidence());
    } catch (err) {
      if (Date.now() > end) throw err;
      await new Promise((ok) => setTimeout(ok, 100));
    }
  }
}
