/**
 * Benchmark: 50 simulated servers (default) fetching one boot image (default 200 MiB: kernel 40 MiB +
 * initramfs 160 MiB, random bytes) through the boot server's `/oci/{uuid}/{attempt}/{layer}`, against
 * the same 50 clients downloading the blobs directly from the registry. Real parts: a control plane
 * (kube-apiserver + etcd), Debian's docker-registry on loopback, the standalone boot server
 * (`dist/src/cmd/bootserver.js`, its own process so its memory is its own) with a cold blob cache
 * per run. Each run prints; the summary gives min/median/max over `--runs`:
 *
 * - registry blob GETs per run through the boot server: of the two layers (target: 1 per layer),
 *   and of other blobs (the image config, which the boot server reads for its `commandLine`;
 *   target 1),
 * - MB/s (aggregate over all clients) through the boot server vs. direct (target ratio ≥ 0.8),
 * - boot server peak RSS (VmHWM), and its RSS once listening, before the first layer request (what
 *   the process costs without transfers: most of it is loading @kubernetes/client-node),
 * - CPU seconds per GB served by the boot server (through) and by the registry (direct), and by the
 *   clients in each phase: what each side costs, less sensitive to other load than MB/s.
 *
 *   node dist/bench/oci-pull.js [--servers 50] [--mib 200] [--runs 3] [--profile DIR]
 *     [--node-options "<flags>"]
 *
 * `--profile DIR` runs the boot server under `node --cpu-prof`, one `.cpuprofile` per run in DIR.
 * The boot server runs with the `NODE_OPTIONS` of its Deployment (config/signals/bootserver.yaml,
 * as the local stack starts it: its V8 heap behaves as deployed); `--node-options` replaces them
 * (`--node-options ""`: none, V8 sizing its heap from this machine's memory).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { API_VERSION } from '../src/api/v1alpha1/schema.js';
import type { ServerBootConfiguration } from '../src/api/v1alpha1/serverbootconfiguration.js';
import { CALLBACK_KEY_SECRET_NAME, ensureCallbackKey } from '../src/bootauth/callback-key-secret.js';
import { layerCapability } from '../src/bootauth/layer-capability.js';
import { ControlPlane, freePorts, REPO_ROOT, waitFor } from '../src/localstack/control-plane.js';
import { nodeOptions, SIGNAL_MANIFESTS } from '../src/localstack/deployment-node-options.js';
import { OciRegistry } from '../src/localstack/oci-registry.js';
import { pushBootImage } from '../src/oci/push.js';
import { KubeClient } from '../src/runtime/client.js';
import { Resources } from '../src/runtime/resource.js';
import { printTable } from './stats.js';

const { values } = parseArgs({
  options: {
    servers: { type: 'string', default: '50' },
    mib: { type: 'string', default: '200' },
    runs: { type: 'string', default: '3' },
    profile: { type: 'string' },
    'node-options': { type: 'string' },
  },
});
const SERVERS = Number(values.servers);
const MIB = Number(values.mib);
const RUNS = Number(values.runs);
const NODE_FLAGS =
  values['node-options'] !== undefined
    ? values['node-options'].split(/\s+/).filter(Boolean)
    : nodeOptions(SIGNAL_MANIFESTS.bootserver, 'bootserver');
const NS = 'default';
const r1 = (x: number) => Math.round(x * 10) / 10;
const r2 = (x: number) => Math.round(x * 100) / 100;
const stats = (xs: number[], r = r1) => {
  const s = [...xs].sort((a, b) => a - b);
  return { min: r(s[0]!), median: r(s[Math.floor((s.length - 1) / 2)]!), max: r(s[s.length - 1]!) };
};

/**
 * Downloads every URL with one client per entry of `urlsPerClient`, all at once, each client its own
 * connection (its own undici Agent: an Agent's `connections` limit is per origin, so one shared Agent
 * with `connections: 1` would put every client on one connection, one download at a time). The same
 * code serves both sides of the comparison. Returns MB/s (aggregate), bytes and seconds.
 */
async function fetchAll(
  urlsPerClient: string[][],
): Promise<{ mbps: number; bytes: number; seconds: number }> {
  const agents = urlsPerClient.map(
    () => new Agent({ connections: 1, pipelining: 0, bodyTimeout: 300_000, headersTimeout: 300_000 }),
  );
  const t0 = performance.now();
  let bytes = 0;
  await Promise.all(
    urlsPerClient.map(async (urls, i) => {
      for (const url of urls) {
        const res = await request(url, { dispatcher: agents[i] });
        if (res.statusCode !== 200) throw new Error(`${url}: ${res.statusCode} ${await res.body.text()}`);
        for await (const c of res.body) bytes += (c as Buffer).length;
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  await Promise.all(agents.map((a) => a.close()));
  return { mbps: bytes / 1e6 / seconds, bytes, seconds };
}

/** CPU seconds (user + system) process `pid` used so far (`/proc/<pid>/stat`, clock ticks at 100 Hz). */
function cpuSeconds(pid: number | undefined): number {
  if (!pid) return Number.NaN;
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

/** CPU seconds this (client) process used so far. */
function ownCpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/** `VmHWM` (peak) or `VmRSS` (now) of `p` in MiB. */
function rssOf(p: ChildProcess, field: 'VmHWM' | 'VmRSS' = 'VmHWM'): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${p.pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

async function main(): Promise<void> {
  const cp = await ControlPlane.start();
  const reg = await new OciRegistry({ accessLog: true }).start();
  const client = new KubeClient(cp.kubeConfig(), { fieldManager: 'bench' });
  const children: ChildProcess[] = [];
  try {
    const kernelBytes = Math.round(MIB * 0.2) * 1024 * 1024;
    const initrdBytes = MIB * 1024 * 1024 - kernelBytes;
    const img = await pushBootImage(
      { registryUrl: reg.url, repository: 'bench/os' },
      {
        layers: [
          { mediaType: 'application/vnd.ironcore.image.kernel', data: randomBytes(kernelBytes) },
          { mediaType: 'application/vnd.ironcore.image.initramfs', data: randomBytes(initrdBytes) },
        ],
      },
      'latest',
    );
    const manifest = (await (
      await fetch(`${reg.url}/v2/bench/os/manifests/${img.digest}`, {
        headers: { accept: 'application/vnd.oci.image.manifest.v1+json' },
      })
    ).json()) as { layers: { digest: string }[] };
    const [kernel, initrd] = manifest.layers.map((l) => l.digest) as [string, string];
    // 50 Servers, each with an SBC whose image the controller would have resolved for attempt 1; the
    // layer URLs carry their capabilities, as the script's do.
    const key = await ensureCallbackKey(client, { namespace: NS, name: CALLBACK_KEY_SECRET_NAME });
    const layerPaths: string[][] = [];
    for (let i = 0; i < SERVERS; i++) {
      const uuid = `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
      const name = `bench-${i}`;
      const sbc = await client.create<ServerBootConfiguration>(Resources.ServerBootConfiguration, {
        apiVersion: API_VERSION,
        kind: 'ServerBootConfiguration',
        metadata: { name, namespace: NS },
        spec: { serverRef: { name }, image: `${reg.host}/bench/os:latest`, bootAttempt: 1 },
      });
      // The attempt's token as every holder of the callback key derives it.
      const token = key.tokenFor({ uid: sbc.metadata.uid!, attempt: 1 });
      const path = (layer: 'kernel' | 'initrd', digest: string) =>
        `/oci/${uuid}/1/${layer}?cap=${layerCapability(token, { uuid, attempt: 1, layer, digest })}`;
      layerPaths.push([path('kernel', kernel), path('initrd', initrd)]);
      await client.mergePatch(
        Resources.ServerBootConfiguration,
        name,
        NS,
        {
          status: {
            state: 'Ready',
            image: {
              reference: `${reg.host}/bench/os:latest`,
              digest: img.digest,
              kernel,
              initrd,
              bootAttempt: 1,
            },
          },
        },
        { subresource: 'status' },
      );
      await client.create(Resources.Server, {
        apiVersion: API_VERSION,
        kind: 'Server',
        metadata: { name },
        spec: { systemUUID: uuid, bootConfigurationRef: { name, namespace: NS } },
      });
    }
    const runs: {
      through: number;
      direct: number;
      ratio: number;
      blobRequests: number;
      otherBlobGets: number;
      rss: number;
      idleRss: number;
      bootServerCpuPerGB: number;
      registryCpuPerGB: number;
      clientCpuPerGB: string;
    }[] = [];
    for (let run = 1; run <= RUNS; run++) {
      const cache = mkdtempSync(join(tmpdir(), 'metal-bench-blobs-'));
      const [port] = (await freePorts(1)) as [number];
      const child = spawn(
        process.execPath,
        [
          ...NODE_FLAGS,
          ...(values.profile ? ['--cpu-prof', `--cpu-prof-dir=${values.profile}`] : []),
          join(REPO_ROOT, 'dist', 'src', 'cmd', 'bootserver.js'),
          `--kubeconfig=${cp.kubeconfigPath}`,
          `--callback-key-secret=${NS}/${CALLBACK_KEY_SECRET_NAME}`,
          `--addr=127.0.0.1:${port}`,
          '--registry-url=http://127.0.0.1:1',
          `--allowed-registries=${reg.host}`,
          `--insecure-registries=${reg.host}`,
          `--image-cache-dir=${cache}`,
        ],
        { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } },
      );
      children.push(child);
      let out = '';
      child.stdout!.on('data', (b: Buffer) => {
        out += b.toString();
      });
      child.stderr!.on('data', (b: Buffer) => {
        out += b.toString();
      });
      const boot = `http://127.0.0.1:${port}`;
      await waitFor('boot server listening', 30_000, async () => {
        if (child.exitCode !== null) throw new Error(`boot server exited: ${out}`);
        try {
          const res = await fetch(`${boot}/ipxe`);
          await res.arrayBuffer();
          return res.status === 200;
        } catch {
          return false;
        }
      });
      const idleRss = rssOf(child, 'VmRSS');
      const before = await registryBlobGets(reg, [kernel, initrd]);
      const cpu0 = { server: cpuSeconds(child.pid), client: ownCpuSeconds() };
      const through = await fetchAll(layerPaths.map((paths) => paths.map((p) => `${boot}${p}`)));
      const throughCpu = {
        server: cpuSeconds(child.pid) - cpu0.server,
        client: ownCpuSeconds() - cpu0.client,
      };
      const after = await registryBlobGets(reg, [kernel, initrd]);
      const blobRequests = after.layers - before.layers;
      const otherBlobGets = after.other - before.other;
      const rss = rssOf(child);
      child.kill('SIGTERM');
      await new Promise((ok) => child.once('exit', ok));
      rmSync(cache, { recursive: true, force: true });
      const cpu1 = { server: cpuSeconds(reg.pid), client: ownCpuSeconds() };
      const direct = await fetchAll(
        layerPaths.map(() => [
          `${reg.url}/v2/bench/os/blobs/${kernel}`,
          `${reg.url}/v2/bench/os/blobs/${initrd}`,
        ]),
      );
      const directCpu = {
        server: cpuSeconds(reg.pid) - cpu1.server,
        client: ownCpuSeconds() - cpu1.client,
      };
      const gb = through.bytes / 1e9;
      const row = {
        through: r1(through.mbps),
        direct: r1(direct.mbps),
        ratio: Math.round((through.mbps / direct.mbps) * 100) / 100,
        blobRequests,
        otherBlobGets,
        rss: r1(rss),
        idleRss: r1(idleRss),
        // CPU seconds per GB served: the boot server (through) vs the registry (direct), and the
        // clients in each phase. Less sensitive to other load on the machine than MB/s.
        bootServerCpuPerGB: r2(throughCpu.server / gb),
        registryCpuPerGB: r2(directCpu.server / (direct.bytes / 1e9)),
        clientCpuPerGB: `${r2(throughCpu.client / gb)} / ${r2(directCpu.client / (direct.bytes / 1e9))}`,
      };
      runs.push(row);
      console.log(
        `run ${run}: through boot server ${row.through} MB/s (${r1(through.seconds)} s), direct ${row.direct} MB/s (${r1(direct.seconds)} s), ratio ${row.ratio}, registry blob GETs ${blobRequests} of layers + ${otherBlobGets} of others, boot server peak RSS ${row.rss} MiB (${row.idleRss} MiB listening); CPU s/GB: boot server ${row.bootServerCpuPerGB}, registry ${row.registryCpuPerGB}, clients (through / direct) ${row.clientCpuPerGB}; load average ${loadavg()[0]!.toFixed(1)}`,
      );
    }
    const summary = {
      servers: SERVERS,
      nodeFlags: NODE_FLAGS,
      imageMiB: MIB,
      layers: 2,
      runs: RUNS,
      throughMBps: stats(runs.map((r) => r.through)),
      directMBps: stats(runs.map((r) => r.direct)),
      ratio: stats(
        runs.map((r) => r.ratio),
        r2,
      ),
      registryBlobRequests: stats(runs.map((r) => r.blobRequests)),
      registryOtherBlobRequests: stats(runs.map((r) => r.otherBlobGets)),
      bootServerPeakRssMiB: stats(runs.map((r) => r.rss)),
      bootServerListeningRssMiB: stats(runs.map((r) => r.idleRss)),
      bootServerCpuPerGB: stats(
        runs.map((r) => r.bootServerCpuPerGB),
        r2,
      ),
      registryCpuPerGB: stats(
        runs.map((r) => r.registryCpuPerGB),
        r2,
      ),
    };
    const fmt = (s: { min: number; median: number; max: number }) => `${s.min} / ${s.median} / ${s.max}`;
    printTable([
      ['servers × image', `${SERVERS} × ${MIB} MiB (2 layers)`],
      ['boot server node flags', NODE_FLAGS.join(' ') || 'none'],
      ['registry layer blob GETs per run (min/median/max; target 2)', fmt(summary.registryBlobRequests)],
      ['registry other blob GETs per run (the config; target 1)', fmt(summary.registryOtherBlobRequests)],
      ['through boot server MB/s', fmt(summary.throughMBps)],
      ['direct from registry MB/s', fmt(summary.directMBps)],
      ['ratio (target >= 0.8)', fmt(summary.ratio)],
      ['boot server peak RSS MiB (target <= 200)', fmt(summary.bootServerPeakRssMiB)],
      ['boot server RSS once listening MiB', fmt(summary.bootServerListeningRssMiB)],
      ['CPU s per GB served: boot server (through)', fmt(summary.bootServerCpuPerGB)],
      ['CPU s per GB served: registry (direct)', fmt(summary.registryCpuPerGB)],
    ]);
    console.log(JSON.stringify(summary));
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    await client.close();
    await reg.stop();
    await cp.stop();
  }
}

/** Blob GETs the registry answered so far: of the `layers` digests, and of all others. */
async function registryBlobGets(
  reg: OciRegistry,
  layers: string[],
): Promise<{ layers: number; other: number }> {
  // Access log lines are written after the response: give the last ones a moment.
  await new Promise((ok) => setTimeout(ok, 300));
  const ofLayers = layers.reduce((n, d) => n + reg.blobGets(d), 0);
  return { layers: ofLayers, other: reg.blobGets() - ofLayers };
}

await main();
