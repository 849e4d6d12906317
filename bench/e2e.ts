/**
 * Where end-to-end boot time goes, per firmware and boot method (`--shapes`, default
 * `bios-pxe,uefi-pxe,uefi-http`): for each, one QEMU VM (TCG unless KVM proved to work), one claim
 * at a time from creation to Booted, split into phases. PXE shapes run on the bridged test network
 * where it can be made (else QEMU user networking); `uefi-http` needs it; `uefi-vmedia` (on request)
 * boots the ISO the BMC inserted, whose first read by the BMC stands for the script fetch (before the power-on). Our code's share (bind, boot configuration, power-on request, and from
 * the boot-state callback to the claim's Booted) is separated from the time spent in firmware,
 * kernel and the agent (power-on → script fetch → ignition fetch → callback).
 *
 * Event times: the API objects as a 20 ms poll observes them, and the manager's own JSON log lines
 * (millisecond timestamps) for power-on and the three signals.
 *
 * Usage: node dist/bench/e2e.js [--runs 3] [--shapes bios-pxe,uefi-pxe,uefi-http]
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { API_VERSION } from '../src/api/v1alpha1/schema.js';
import type { Server } from '../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../src/api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../src/api/v1alpha1/serverclaim.js';
import { LocalStack } from '../src/localstack/local-stack.js';
import { OS_IMAGE } from '../src/localstack/vm-artefacts.js';
import { Resources } from '../src/runtime/resource.js';
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
  .parse()
  .opts<{ runs: number; shapes: string }>();
const shapes = o.shapes.split(',').map((x) => x.trim()) as Shape[];
for (const sh of shapes) if (!(sh in SHAPES)) throw new Error(`unknown shape ${sh}`);

interface LogLine {
  time?: string;
  msg?: string;
  systemUUID?: string;
  server?: string;
}

function logTimes(stack: LocalStack, uuid: string, since: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const raw of readFileSync(stack.managerLog, 'utf8').split('\n')) {
    if (!raw) continue;
    let l: LogLine;
    try {
      l = JSON.parse(raw);
    } catch {
      continue;
    }
    const t = Date.parse(l.time ?? '');
    if (!(t >= since) || l.systemUUID !== uuid) continue;
    for (const [key, msg] of [
      ['powerOn', 'boot started'],
      ['script', 'iPXE script served'],
      ['script', 'HTTP boot file served'],
      ['script', 'virtual-media ISO served'],
      ['ignition', 'ignition served'],
      ['bootstate', 'boot state recorded'],
    ] as const) {
      if (l.msg === msg && out[key] === undefined) out[key] = t;
    }
  }
  return out;
}

const results: Record<string, Record<string, { min: number; median: number; max: number }>> = {};
for (const shape of shapes) {
  const phases = await benchShape(shape);
  const rows: [string, string][] = Object.entries(phases).map(([k, v]) => {
    const sorted = [...v].sort((a, b) => a - b);
    return [k, `min ${sorted[0]} ms   median ${Math.round(summarize(v).p50)} ms   max ${sorted.at(-1)} ms`];
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
console.log(JSON.stringify({ bench: 'e2e', runs: o.runs, shapes: results }));

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
    for (let run = 1; run <= o.runs; run++) {
      const name = `bench-e2e-${run}`;
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
      const seen: Record<string, number> = {};
      while (!seen.booted) {
        const [claim, s] = await Promise.all([
          stack.client.get<ServerClaim>(Resources.ServerClaim, name, 'default'),
          stack.client.get<Server>(Resources.Server, server.metadata.name!),
        ]);
        const now = Date.now();
        if (!seen.bound && claim?.status?.conditions?.some((c) => c.type === 'Bound' && c.status === 'True'))
          seen.bound = now;
        const ref = s?.spec.bootConfigurationRef;
        if (!seen.sbcReady && ref && s?.spec.serverClaimRef?.name === name) {
          const sbc = await stack.client.get<ServerBootConfiguration>(
            Resources.ServerBootConfiguration,
            ref.name,
            ref.namespace,
          );
          if (sbc?.status?.state === 'Ready') seen.sbcReady = Date.now();
        }
        if (claim?.status?.conditions?.some((c) => c.type === 'Booted' && c.status === 'True'))
          seen.booted = now;
        if (now - t0 > 300_000)
          throw new Error(
            `claim ${name} not Booted after 300 s: ${JSON.stringify(claim?.status)}\n${await diagnosis(stack)}`,
          );
        await new Promise((ok) => setTimeout(ok, 20));
      }
      // The registry logs the callback after its write, so the claim can be Booted before that line
      // reaches the log file (seen under load): wait for it, bounded.
      const keys = ['powerOn', 'script', 'ignition', 'bootstate'];
      let log = logTimes(stack, server.spec.systemUUID, t0);
      for (const end = Date.now() + 10_000; keys.some((k) => log[k] === undefined) && Date.now() < end; ) {
        await new Promise((ok) => setTimeout(ok, 100));
        log = logTimes(stack, server.spec.systemUUID, t0);
      }
      for (const k of keys) if (log[k] === undefined) throw new Error(`no ${k} log line`);
      // Ours: everything before the power-on request, and from the callback to the claim's condition.
      // Virtual media: the BMC reads the ISO while the manager inserts it, before the power-on.
      const vmedia = bootMethod === 'vmedia';
      const ours = log.powerOn! - t0 + (seen.booted - log.bootstate!);
      add('1 bind (claim created → Bound)', seen.bound! - t0);
      add('2 SBC Ready (→ boot configuration Ready)', seen.sbcReady! - t0);
      add('3 power on requested (→ Reset sent)', log.powerOn! - t0);
      if (vmedia) {
        add('3a ISO read by the BMC (insert; → first ISO GET)', log.script! - t0);
        add('5 ignition fetched (OVMF CD boot, kernel + initramfs)', log.ignition! - log.powerOn!);
      } else {
        add(
          bootMethod === 'http'
            ? '4 UKI fetched (firmware: POST, DHCP, HTTP download)'
            : '4 iPXE script fetched (firmware: POST, DHCP, iPXE)',
          log.script! - log.powerOn!,
        );
        add('5 ignition fetched (kernel + initramfs boot)', log.ignition! - log.script!);
      }
      add('6 boot state received (agent)', log.bootstate! - log.ignition!);
      add('7 claim Booted (callback → claim condition)', seen.booted - log.bootstate!);
      add('total', seen.booted - t0);
      add('firmware + kernel + agent', log.bootstate! - log.powerOn!);
      add('our code', ours);
      console.error(`[e2e ${shape}] run ${run}: ${seen.booted - t0} ms, ours ${ours} ms`);
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
    return phases;
  } finally {
    await stack.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
