/**
 * Benchmark: N simulated hosts (default 1,000) behind one virtual BMC, network-booted through the
 * Redfish client (boot override Pxe/Once + power on, per system) against an in-process stand-in boot
 * server and registry; waits until every host's callback was accepted. Prints wall times and memory
 * (RSS, heap) as a table and as one JSON line.
 *
 *   node dist/bench/sim-hosts.js [--hosts 1000] [--concurrency 32] [--connections 16] [--mode probe|os]
 */

import { parseArgs } from 'node:util';
import { RedfishBMC } from '../src/bmc/redfish-bmc.js';
import { startStandin } from '../src/testing/standin-boot-server.js';
import { startVirtualBmc } from '../src/virtualbmc/server.js';
import { createSimFleet } from '../src/virtualbmc/sim-fleet.js';

const { values } = parseArgs({
  options: {
    hosts: { type: 'string', default: '1000' },
    concurrency: { type: 'string', default: '32' },
    connections: { type: 'string', default: '16' },
    mode: { type: 'string', default: 'probe' },
    'timeout-ms': { type: 'string', default: '120000' },
  },
});
const hosts = Number(values.hosts);
const concurrency = Number(values.concurrency);
const connections = Number(values.connections);
const mode = values.mode === 'os' ? 'os' : 'probe';
const timeoutMs = Number(values['timeout-ms']);

const mib = (bytes: number): number => Math.round((bytes / 1024 / 1024) * 10) / 10;
const now = (): number => performance.now();

/** Runs `fn` over `items` with at most `limit` in flight. */
async function pool<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++]!;
      await fn(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

async function main(): Promise<void> {
  const memBefore = process.memoryUsage();
  const t0 = now();
  const standin = await startStandin({ mode: () => mode });
  const fleet = createSimFleet({ count: hosts, bootServerUrl: standin.url, seed: 'bench' });
  const vbmc = await startVirtualBmc({ hosts: fleet.hosts, username: 'admin', password: 'bench' });
  const bmc = new RedfishBMC({
    endpoint: vbmc.url,
    username: 'admin',
    password: 'bench',
    maxConnections: connections,
    budgetMs: 60_000,
  });
  const memIdle = process.memoryUsage();
  // Done = the host itself saw its callback answered (the registry answering is not enough).
  let finished = 0;
  const allFinished = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`only ${finished} of ${hosts} hosts finished booting`)),
      timeoutMs,
    );
    for (const h of fleet.hosts) {
      h.onBootFinished(() => {
        if (++finished === hosts) {
          clearTimeout(timer);
          resolve();
        }
      });
    }
  });
  const tSetup = now();

  const systems = await bmc.listSystems();
  await pool(systems, concurrency, async (s) => {
    await bmc.setBootOverride(s.uri, { target: 'Pxe', enabled: 'Once' });
    await bmc.powerOn(s.uri);
  });
  const tPowered = now();
  await allFinished;
  const tCallbacks = now();
  const memDone = process.memoryUsage();

  const booted = fleet.hosts.filter(
    (h) => h.lastBoot?.phase === 'up' && h.lastBoot.callbackStatus === 200,
  ).length;
  const redfishRequests = vbmc.requests().length;

  await bmc.close();
  await vbmc.close();
  await fleet.close();
  await standin.close();

  const result = {
    bench: 'sim-hosts',
    hosts,
    mode,
    concurrency,
    booted,
    setupMs: Math.round(tSetup - t0),
    redfishPhaseMs: Math.round(tPowered - tSetup),
    firstPowerOnToLastCallbackMs: Math.round(tCallbacks - tSetup),
    wallMs: Math.round(tCallbacks - t0),
    redfishRequestsRecorded: redfishRequests,
    callbacksReceived: standin.callbacks.length,
    rssBeforeMiB: mib(memBefore.rss),
    rssIdleMiB: mib(memIdle.rss),
    rssDoneMiB: mib(memDone.rss),
    maxRssMiB: mib(process.resourceUsage().maxRSS * 1024),
    heapUsedIdleMiB: mib(memIdle.heapUsed),
    heapUsedDoneMiB: mib(memDone.heapUsed),
    node: process.version,
  };
  console.log(`sim-hosts benchmark: ${hosts} hosts, mode ${mode}`);
  console.table({
    'setup (BMC + fleet + stand-in)': { value: result.setupMs, unit: 'ms' },
    'Redfish phase (override + power on, all hosts)': { value: result.redfishPhaseMs, unit: 'ms' },
    'first power-on to last callback': { value: result.firstPowerOnToLastCallbackMs, unit: 'ms' },
    'wall time': { value: result.wallMs, unit: 'ms' },
    'hosts booted with callback 200': { value: booted, unit: 'hosts' },
    'RSS before / idle fleet / done': {
      value: `${result.rssBeforeMiB} / ${result.rssIdleMiB} / ${result.rssDoneMiB}`,
      unit: 'MiB',
    },
    'peak RSS': { value: result.maxRssMiB, unit: 'MiB' },
    'heap used idle fleet / done': {
      value: `${result.heapUsedIdleMiB} / ${result.heapUsedDoneMiB}`,
      unit: 'MiB',
    },
  });
  console.log(JSON.stringify(result));
  if (booted !== hosts) process.exitCode = 1;
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
