/**
 * Benchmark (issue 35): time to first byte of `GET /httpboot/{uuid}/{attempt}/uki.efi` with 50 hosts
 * (default) HTTP-booting at once, with UKI prebuilds (the default) and without (`bootserver
 * --no-prebuild-uki`), target ≤ 50 ms p99 with prebuilds. Real parts: a control plane (kube-apiserver
 * + etcd), the standalone boot server (`dist/src/cmd/bootserver.js`, its own process, a fresh one
 * per run so its UKI cache starts cold) and real objcopy builds of a catalog image (random bytes,
 * `--kernel-mib` + `--initrd-mib`).
 *
 * Per run and mode: N Servers, each with a ServerClaim owning a Ready `bootMethod: HTTPBoot` SBC
 * and the claim's record of the attempt's power-on (the route's gate), seeded with the boot server
 * already watching; with prebuilds the bench waits until the boot server's
 * `metal_uki_prebuilds_total{result="built"}` reached N (its `/metrics`) and prints how long that
 * took. Then N clients, each from its own loopback address (the first-address pin: 127.0.0.0/8 is
 * all local on Linux) and its own connections, fetch their attempt's URL at once as OVMF does:
 * HEAD (the size), then GET; a 503 is retried after its `Retry-After` (at most 10 times), as
 * firmware told to wait would. Printed per run: HEAD to its response headers, GET to the first
 * body byte of the file (p50 / p99 / max ms, retries included) and to its last byte (p50 / max: the
 * download firmware waits for), 503 answers, UKI builds the boot
 * server ran (`metal_uki_builds_total`) and how many of them happened after the first request; the
 * summary gives min / median / max over `--runs` and the 1-min load average at start and end (the
 * machine may be shared: times are noisy, counts not). A GET's first bytes, the UKI's PE headers,
 * leave while the `HTTPBootFileFetched` pin is written to the API server; the sections wait for it
 * (http-boot.ts, pe-headers.ts); the power-on gate answers from the boot server's ServerClaim informer (its default);
 * `--no-claims-cache` (the boot server's flag of that name) makes both requests wait for a claim read.
 *
 * `--client-processes`: each host's client runs in a process of its own (started before the run,
 * all told to go at once), so a client's times do not include the bench process's event loop
 * receiving the other 49 files; without it all clients share the bench process.
 *
 *   node dist/bench/http-boot.js [--servers 50] [--runs 3] [--kernel-mib 8] [--initrd-mib 24]
 *     [--modes prebuild,on-request] [--no-claims-cache] [--client-processes | --curl]
 *
 * `--curl`: the clients are one `curl --parallel` process per phase instead ({@link withCurl}).
 *
 * Throws (exit 1) when a client gets no file after its retries, a file is short, or a run's
 * prebuilds do not finish within 120 s.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ControlPlane, freePorts, REPO_ROOT, waitFor } from '../src/localstack/control-plane.js';
import { KubeClient } from '../src/runtime/client.js';
import { Resources } from '../src/runtime/resource.js';
import {
  type Seeded,
  seedBootTarget,
  storeTestCallbackKey,
  TEST_IMAGE,
} from '../src/testing/boot-target-seed.js';
import { pool, printTable, summarize } from './stats.js';

const { values } = parseArgs({
  options: {
    servers: { type: 'string', default: '50' },
    runs: { type: 'string', default: '3' },
    'kernel-mib': { type: 'string', default: '8' },
    'initrd-mib': { type: 'string', default: '24' },
    modes: { type: 'string', default: 'prebuild,on-request' },
    // The boot server's default since 2026-12-07; kept so earlier command lines still parse.
    'claims-cache': { type: 'boolean', default: false },
    'no-claims-cache': { type: 'boolean', default: false },
    'client-processes': { type: 'boolean', default: false },
    curl: { type: 'boolean', default: false },
    // Internal: this process is one host's client (--client-processes).
    'client-url': { type: 'string' },
    'client-from': { type: 'string' },
  },
});
const SERVERS = Number(values.servers);
if (values.curl && values['client-processes'])
  throw new Error('--curl and --client-processes exclude each other');
const RUNS = Number(values.runs);
const MODES = values.modes.split(',') as ('prebuild' | 'on-request')[];
const MiB = 1024 * 1024;
const MAX_TRIES = 10;
const load = () => loadavg()[0]!.toFixed(1);

interface Fetched {
  /** ms from the client's first HEAD to the headers of its 200 (retries included). */
  head: number;
  /** ms from the client's first GET to the first body byte of the file (retries included). */
  ttfb: number;
  /** ms from the client's first GET to the last body byte (the whole download, as firmware waits for it). */
  done: number;
  busy: number;
}

interface Answer {
  status: number;
  retryAfter: number;
  /** ms to the response headers. */
  headers: number;
  /** ms to the first body byte (NaN without a body). */
  firstByte: number;
  /** ms to the end of the body. */
  end: number;
  bytes: number;
  length: number;
}

/** One request from `from` on its own connection. */
function once(url: string, from: string, method: 'HEAD' | 'GET'): Promise<Answer> {
  const t0 = performance.now();
  return new Promise((ok, fail) => {
    const req = request(url, { localAddress: from, agent: false, method }, (res) => {
      const headers = performance.now() - t0;
      let firstByte = Number.NaN;
      let bytes = 0;
      res.on('data', (c: Buffer) => {
        if (bytes === 0) firstByte = performance.now() - t0;
        bytes += c.length;
      });
      res.on('end', () =>
        ok({
          status: res.statusCode ?? 0,
          retryAfter: Number(res.headers['retry-after'] ?? 1),
          headers,
          firstByte,
          end: performance.now() - t0,
          bytes,
          length: Number(res.headers['content-length'] ?? -1),
        }),
      );
      res.on('error', fail);
    });
    req.on('error', fail);
    req.end();
  });
}

/**
 * `method` until 200 (503: wait its Retry-After; at most {@link MAX_TRIES}); ms from the first try
 * to the headers (HEAD) or the first body byte (GET) of the 200, and the 503s. Throws otherwise.
 */
async function until200(
  url: string,
  from: string,
  method: 'HEAD' | 'GET',
): Promise<{ ms: number; end: number; busy: number }> {
  const t0 = performance.now();
  for (let busy = 0; busy < MAX_TRIES; busy++) {
    const start = performance.now() - t0;
    const r = await once(url, from, method);
    if (r.status === 200) {
      if (method === 'GET' && r.bytes !== r.length)
        throw new Error(`${url}: ${r.bytes} of ${r.length} bytes`);
      return { ms: start + (method === 'GET' ? r.firstByte : r.headers), end: start + r.end, busy };
    }
    if (r.status !== 503) throw new Error(`${method} ${url} from ${from}: ${r.status}`);
    await new Promise((ok) => setTimeout(ok, r.retryAfter * 1000));
  }
  throw new Error(`${method} ${url}: still 503 after ${MAX_TRIES} tries`);
}

/** A host as OVMF fetches: HEAD (the size), then GET. */
async function bootFile(url: string, from: string): Promise<Fetched> {
  const head = await until200(url, from, 'HEAD');
  const get = await until200(url, from, 'GET');
  return { head: head.ms, ttfb: get.ms, done: get.end, busy: head.busy + get.busy };
}

/** The boot server's counter `name` (summed over labels matching `label`), from its /metrics. */
async function scrape(metricsUrl: string, name: string, label = ''): Promise<number> {
  const text = await (await fetch(`${metricsUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(name) && l.includes(label))
    .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

interface RunResult {
  head: ReturnType<typeof summarize>;
  ttfb: ReturnType<typeof summarize>;
  done: ReturnType<typeof summarize>;
  busy: number;
  builds: number;
  buildsAfterRequests: number;
  prebuildSeconds: number;
}

async function main(): Promise<void> {
  const loadStart = load();
  const cp = await ControlPlane.start();
  const client = new KubeClient(cp.kubeConfig(), { fieldManager: 'bench' });
  const dir = mkdtempSync(join(tmpdir(), 'metal-bench-httpboot-'));
  const children: ChildProcess[] = [];
  try {
    writeFileSync(join(dir, 'vmlinuz'), randomBytes(Number(values['kernel-mib']) * MiB));
    writeFileSync(join(dir, 'initrd'), randomBytes(Number(values['initrd-mib']) * MiB));
    writeFileSync(
      join(dir, 'catalog.yaml'),
      `images:\n  ${TEST_IMAGE}:\n    kernel: ${join(dir, 'vmlinuz')}\n    initrd: ${join(dir, 'initrd')}\n    cmdline: console=ttyS0\n`,
    );
    await client.create(Resources.Namespace, {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: 'bench' },
    });
    const key = await storeTestCallbackKey(client, 'bench');
    const results: Record<string, RunResult[]> = {};
    let round = 0;
    for (let run = 1; run <= RUNS; run++) {
      for (const mode of MODES) {
        round++;
        const [port, metricsPort] = (await freePorts(2)) as [number, number];
        const child = spawn(
          process.execPath,
          [
            join(REPO_ROOT, 'dist', 'src', 'cmd', 'bootserver.js'),
            `--kubeconfig=${cp.kubeconfigPath}`,
            `--callback-key-secret=${key.namespace}/${key.name}`,
            `--addr=127.0.0.1:${port}`,
            `--metrics-addr=127.0.0.1:${metricsPort}`,
            '--registry-url=http://127.0.0.1:1',
            `--image-catalog=${join(dir, 'catalog.yaml')}`,
            `--image-cache-dir=${join(dir, `blobs-${round}`)}`,
            ...(mode === 'prebuild' ? [] : ['--no-prebuild-uki']),
            ...(values['no-claims-cache'] ? ['--no-claims-cache'] : []),
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
        const metrics = `http://127.0.0.1:${metricsPort}`;
        await waitFor('boot server listening', 30_000, async () => {
          if (child.exitCode !== null) throw new Error(`boot server exited: ${out}`);
          try {
            // /metrics answers from the start; /readyz once the boot server listens.
            return (await fetch(`${metrics}/readyz`)).status === 200;
          } catch {
            return false;
          }
        });
        const r = await oneRun(client, boot, metrics, mode, round);
        child.kill('SIGTERM');
        await new Promise((ok) => child.once('exit', ok));
        results[mode] = [...(results[mode] ?? []), r];
        console.log(
          `run ${run} ${mode}: HEAD to headers p50 / p99 / max ${r.head.p50} / ${r.head.p99} / ${r.head.max} ms; GET to first byte p50 / p99 / max ${r.ttfb.p50} / ${r.ttfb.p99} / ${r.ttfb.max} ms; to last byte p50 / max ${r.done.p50} / ${r.done.max} ms; 503 answers ${Number.isNaN(r.busy) ? 'not counted (curl retries them)' : r.busy}; UKI builds ${r.builds} (${r.buildsAfterRequests} after the first request)${mode === 'prebuild' ? `; all prebuilt ${r.prebuildSeconds} s after the last SBC turned Ready` : ''}; load ${load()}`,
        );
      }
    }
    summary(results, loadStart);
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    await client.close();
    await cp.stop();
  }
}

/** Seeds N HTTP-boot targets, waits for prebuilds (mode `prebuild`), fires N clients at once, cleans up. */
async function oneRun(
  client: KubeClient,
  boot: string,
  metrics: string,
  mode: string,
  round: number,
): Promise<RunResult> {
  const seeded: Seeded[] = [];
  await pool(
    Array.from({ length: SERVERS }, (_, i) => i),
    10,
    async () => {
      seeded.push(await seedBootTarget(client, 'bench', { flow: 'claim', bootMethod: 'HTTPBoot' }));
    },
  );
  const readyAt = performance.now();
  let prebuildSeconds = Number.NaN;
  if (mode === 'prebuild') {
    await waitFor(
      'prebuilds',
      120_000,
      async () => (await scrape(metrics, 'metal_uki_prebuilds_total', 'built')) >= SERVERS,
    );
    prebuildSeconds = Math.round((performance.now() - readyAt) / 100) / 10;
  }
  const buildsBefore = await scrape(metrics, 'metal_uki_builds_total');
  const hosts = seeded.map((s, i) => ({
    url: `${boot}/httpboot/${s.uuid}/1/uki.efi`,
    from: `127.${100 + (round % 100)}.${Math.floor(i / 200)}.${(i % 200) + 2}`,
  }));
  const fetched = values.curl
    ? await withCurl(hosts)
    : values['client-processes']
      ? await inProcesses(hosts)
      : await Promise.all(hosts.map((h) => bootFile(h.url, h.from)));
  const builds = await scrape(metrics, 'metal_uki_builds_total');
  await pool(seeded, 10, async (s) => {
    await client.delete(Resources.ServerBootConfiguration, s.sbc.metadata.name!, 'bench');
    await client.delete(Resources.ServerClaim, s.claim!.metadata.name!, 'bench');
    await client.delete(Resources.Server, s.server.metadata.name!);
  });
  return {
    ttfb: summarize(fetched.map((f) => f.ttfb)),
    done: summarize(fetched.map((f) => f.done)),
    head: summarize(fetched.map((f) => f.head)),
    busy: fetched.reduce((n, f) => n + f.busy, 0),
    builds,
    buildsAfterRequests: builds - buildsBefore,
    prebuildSeconds,
  };
}

/**
 * Each host's {@link bootFile} in a process of its own: all are started and report `ready` first,
 * then all get `go` at once; each prints its {@link Fetched} as JSON. Throws when one fails.
 */
async function inProcesses(hosts: { url: string; from: string }[]): Promise<Fetched[]> {
  const kids = hosts.map((h) => {
    const child = spawn(
      process.execPath,
      [process.argv[1]!, '--client-url', h.url, '--client-from', h.from],
      {
        stdio: ['pipe', 'pipe', 'inherit'],
      },
    );
    let out = '';
    const ready = new Promise<void>((ok, fail) => {
      child.stdout!.on('data', (b: Buffer) => {
        out += b.toString();
        if (out.startsWith('ready\n')) ok();
      });
      child.once('exit', (code) => fail(new Error(`client ${h.from} exited ${code} before ready`)));
    });
    const done = new Promise<Fetched>((ok, fail) =>
      child.once('exit', (code) => {
        if (code !== 0) fail(new Error(`client ${h.from} exited ${code}: ${out}`));
        else ok(JSON.parse(out.slice('ready\n'.length)) as Fetched);
      }),
    );
    return { child, ready, done };
  });
  try {
    await Promise.all(kids.map((k) => k.ready));
    for (const k of kids) k.child.stdin!.end('go\n');
    return await Promise.all(kids.map((k) => k.done));
  } finally {
    for (const k of kids) if (k.child.exitCode === null) k.child.kill('SIGKILL');
  }
}

/**
 * `--curl`: the hosts' requests from one `curl --parallel` process per phase, a C event loop that
 * spends next to nothing per received chunk, as a host's own firmware on its own CPU would not
 * take the server's two cores: first the HEADs of all hosts at once, then the GETs of all hosts at
 * once (harder on the first byte than the Node clients, whose GETs follow their HEADs one by one).
 * Each transfer binds its host's address (`--interface`); a 503 is retried by curl itself
 * (`--retry`, which honours `Retry-After`), so a time is of the last try and `busy` is not known
 * (NaN). Times are curl's `time_starttransfer` (the first byte of the response: the boot server
 * sends its status line and headers with the first body bytes) and `time_total`. Throws when a
 * transfer ends without 200 or a GET is short.
 */
async function withCurl(hosts: { url: string; from: string }[]): Promise<Fetched[]> {
  // curl 7.88 starts at most 300 transfers at once, whatever --parallel-max says.
  if (hosts.length > 300) throw new Error('--curl: at most 300 servers (curl --parallel-max)');
  const phase = async (method: 'HEAD' | 'GET') => {
    const args = ['--silent', '--show-error', '--parallel', '--parallel-immediate'];
    args.push('--parallel-max', String(hosts.length));
    hosts.forEach((h, i) => {
      if (i > 0) args.push('--next');
      args.push('--interface', h.from, '--retry', String(MAX_TRIES), '--output', '/dev/null');
      if (method === 'HEAD') args.push('--head');
      args.push(
        '--write-out',
        '%{local_ip} %{http_code} %{time_starttransfer} %{time_total} %{size_download}\\n',
      );
      args.push(h.url);
    });
    const out = await new Promise<string>((ok, fail) => {
      const child = spawn('curl', args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let text = '';
      let err = '';
      child.stdout.on('data', (b: Buffer) => {
        text += b.toString();
      });
      child.stderr.on('data', (b: Buffer) => {
        err += b.toString();
      });
      child.once('error', fail);
      child.once('exit', (code) => (code === 0 ? ok(text) : fail(new Error(`curl exited ${code}: ${err}`))));
    });
    const byHost = new Map<string, { status: number; first: number; total: number; bytes: number }>();
    for (const line of out.trim().split('\n')) {
      const [ip, status, first, total, bytes] = line.split(' ');
      byHost.set(ip!, {
        status: Number(status),
        first: Number(first) * 1000,
        total: Number(total) * 1000,
        bytes: Number(bytes),
      });
    }
    return hosts.map((h) => {
      const r = byHost.get(h.from);
      if (r?.status !== 200)
        throw new Error(`${method} ${h.url} from ${h.from}: ${r?.status ?? 'no answer'}`);
      return r;
    });
  };
  const heads = await phase('HEAD');
  const gets = await phase('GET');
  const size = Number(values['kernel-mib']) * MiB + Number(values['initrd-mib']) * MiB;
  return hosts.map((h, i) => {
    // The UKI is the kernel and initrd plus a stub and the command line: never shorter than both.
    if (gets[i]!.bytes < size)
      throw new Error(`${h.url}: ${gets[i]!.bytes} bytes, fewer than the ${size} of kernel and initrd`);
    return { head: heads[i]!.first, ttfb: gets[i]!.first, done: gets[i]!.total, busy: Number.NaN };
  });
}

/** One host's client process (--client-processes): `ready`, wait for `go` on stdin, fetch, print JSON. */
async function clientMain(url: string, from: string): Promise<void> {
  process.stdout.write('ready\n');
  await new Promise<void>((ok) => process.stdin.once('data', () => ok()));
  process.stdout.write(JSON.stringify(await bootFile(url, from)));
}

function summary(results: Record<string, RunResult[]>, loadStart: string): void {
  const mmm = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    return { min: s[0]!, median: s[Math.floor((s.length - 1) / 2)]!, max: s[s.length - 1]! };
  };
  const fmt = (xs: number[]) => {
    const m = mmm(xs);
    return `${m.min} / ${m.median} / ${m.max}`;
  };
  const rows: [string, string][] = [
    [
      'hosts × image',
      `${SERVERS} × ${values['kernel-mib']} + ${values['initrd-mib']} MiB, ${RUNS} runs per mode; clients ${values.curl ? 'curl --parallel' : values['client-processes'] ? 'one process each' : 'in the bench process'}`,
    ],
  ];
  const json: Record<string, unknown> = {
    servers: SERVERS,
    runs: RUNS,
    claimsCache: !values['no-claims-cache'],
    clientProcesses: values['client-processes'],
    curl: values.curl,
    loadStart,
    loadEnd: load(),
  };
  for (const [mode, rs] of Object.entries(results)) {
    rows.push(
      [`${mode}: HEAD to headers p50 ms (min/median/max of runs)`, fmt(rs.map((r) => r.head.p50))],
      [`${mode}: HEAD to headers p99 ms`, fmt(rs.map((r) => r.head.p99))],
      [`${mode}: HEAD to headers max ms`, fmt(rs.map((r) => r.head.max))],
      [`${mode}: GET TTFB p50 ms`, fmt(rs.map((r) => r.ttfb.p50))],
      [
        `${mode}: GET TTFB p99 ms${mode === 'prebuild' ? ' (target <= 50)' : ''}`,
        fmt(rs.map((r) => r.ttfb.p99)),
      ],
      [`${mode}: GET TTFB max ms`, fmt(rs.map((r) => r.ttfb.max))],
      [`${mode}: GET to last byte p50 ms`, fmt(rs.map((r) => r.done.p50))],
      [`${mode}: GET to last byte max ms`, fmt(rs.map((r) => r.done.max))],
      [
        `${mode}: 503 answers per run`,
        values.curl ? 'not counted (curl retries them)' : fmt(rs.map((r) => r.busy)),
      ],
      [`${mode}: UKI builds after the first request`, fmt(rs.map((r) => r.buildsAfterRequests))],
    );
    if (mode === 'prebuild')
      rows.push([`${mode}: s from the last Ready to all prebuilt`, fmt(rs.map((r) => r.prebuildSeconds))]);
    json[mode] = {
      headP50: mmm(rs.map((r) => r.head.p50)),
      headP99: mmm(rs.map((r) => r.head.p99)),
      ttfbP50: mmm(rs.map((r) => r.ttfb.p50)),
      ttfbP99: mmm(rs.map((r) => r.ttfb.p99)),
      ttfbMax: mmm(rs.map((r) => r.ttfb.max)),
      doneP50: mmm(rs.map((r) => r.done.p50)),
      doneMax: mmm(rs.map((r) => r.done.max)),
      busy: mmm(rs.map((r) => r.busy)),
      buildsAfterRequests: mmm(rs.map((r) => r.buildsAfterRequests)),
      ...(mode === 'prebuild' ? { prebuildSeconds: mmm(rs.map((r) => r.prebuildSeconds)) } : {}),
    };
  }
  rows.push(['1-min load average at start / end', `${loadStart} / ${load()}`]);
  printTable(rows);
  console.log(JSON.stringify(json));
}

if (values['client-url']) await clientMain(values['client-url'], values['client-from'] ?? '127.0.0.1');
else await main();
