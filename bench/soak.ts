/**
 * Soak under faults: N simulated servers (default 200, over several virtual BMCs) are claimed and
 * released in a loop for `--minutes` (default 20) while, at random intervals (exponential, mean
 * `--fault-every` s), one of these faults is injected: the manager is SIGKILLed (and started again),
 * kube-apiserver is restarted, a registry replica is SIGKILLed (and started again), a virtual BMC
 * answers 503 / drops connections / answers slowly. The registry and the boot server run as 2
 * replicas each behind Service stand-ins (src/localstack/signal-replicas.ts), as deployed.
 *
 * Half of the servers are claimed by `serverRef`, the others in pairs by `serverSelector` (two
 * workers competing for two Servers), so that binding races happen.
 *
 * Invariants, checked as the run goes and printed at the end (exit status 1 on any violation):
 * 1. every claim ends `Booted=True` or `Booted=False` reason `AttemptsExhausted`, with a reason; stuck
 *    = no change of the claim for `maxAttempts × boot timeout` + 5 min (or 45 min in all);
 * 2. no attempt gets two power actions: accepted (2xx) `ComputerSystem.Reset` POSTs per system, from
 *    the virtual BMCs' request hook, attributed to the claim's attempts by `status.boot.history[].startedAt`;
 * 3. no accepted callback is lost: every 2xx a sim host got for `/bootstate` is reflected in the
 *    attempt it belongs to (`history[].signals.BootStateReceived`) and the claim ends Booted; every 2xx
 *    for `/register` is followed by the Server reaching Available;
 * 4. attempts never exceed maxAttempts (`status.boot.attempt − firstAttempt + 1`, every claim update);
 * 5. no Server is bound to two claims (claims not being deleted with `Bound=True`, every claim update);
 * 6. the manager's RSS at the end is at most 10 % above its RSS after warm-up (same process: manager
 *    SIGKILLs happen only in the first half of the run; "after warm-up" = the first 5-s sample once
 *    that process has run min(3 min, a quarter of the run) and seen as many claims complete as there
 *    are servers; no such sample is a violation too).
 * Times are not invariants: a loaded machine only makes the run do fewer cycles.
 *
 * Hosts that misbehave (issue 30 item 5): before each claim of a `serverRef` worker, with probability
 * `--misbehave`, its host is given one behaviour for that round (cleared once the claim ended):
 * firmware that ignores the network boot override once (`ignoreOverrideBoots: 1`) or always
 * (`bootFromDisk`), an image that never posts `/bootstate` (`neverCallBack`; sim.ts), a BMC that
 * refuses the system's PATCHes with 503 for 5–40 s or with 400 for the whole claim (`patchRefusals`;
 * virtualbmc/faults.ts). The fault loop adds `bmc-dead`: a virtual BMC stops answering
 * (`unresponsive`) for 10–60 s and comes back (it always comes back: a release powers the
 * Server off through it). The invariants of bench/soak-invariants.ts are checked every 2 s from the
 * claim and Server watches and the virtual BMCs' request hook: no power-on outside an attempt,
 * power-ons ≤ attempts, every series ends within maxAttempts × timeout + `--series-slack`, BMC
 * requests per system and writes per claim/Server per minute bounded, no claim without history. A
 * claim may end `Booted=True`, `AttemptsExhausted`, `BootRefused` or `BootMethodUnsupported`.
 *
 * `--self-test` (default 6 min): reserves four `serverRef` hosts and seeds one violation per
 * invariant through real parts — an extra `ComputerSystem.Reset` sent to the virtual BMC while no
 * attempt runs, and another inside an attempt; the manager SIGKILLed (restarted after the bound) while
 * a claim with a 10 s, 1-attempt series runs; a Booted claim's `status.boot.history` deleted; the
 * claim's annotations written in a loop; a system's GET sent in a loop — and fails (exit 1) unless
 * every seeded violation was detected. No manager or kube-apiserver restarts from the fault loop then.
 *
 * Usage: node dist/bench/soak.js [--minutes 20] [--servers 200] [--fault-every 20] [--seed 1]
 *        [--misbehave 0.5] [--self-test]
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Command } from 'commander';
import { pino } from 'pino';
import { API_VERSION } from '../src/api/v1alpha1/schema.js';
import type { Server } from '../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../src/api/v1alpha1/serverclaim.js';
import { LocalStack } from '../src/localstack/local-stack.js';
import { OS_IMAGE } from '../src/localstack/vm-artefacts.js';
import { isApiStatus } from '../src/runtime/client.js';
import { Informer } from '../src/runtime/informer.js';
import { Resources } from '../src/runtime/resource.js';
import type { RequestRecord, VirtualBmc } from '../src/virtualbmc/server.js';
import type { SimHost } from '../src/virtualbmc/sim.js';
import { INVARIANTS, type Invariant, SoakInvariants, systemOfPath } from './soak-invariants.js';
import { printTable } from './stats.js';

const o = new Command('soak')
  .option('--minutes <n>', 'duration of the claim loop and fault injection', Number, 20)
  .option('--servers <n>', 'simulated servers', Number, 200)
  .option('--bmcs <n>', 'virtual BMCs the servers are spread over', Number, 4)
  .option('--fault-every <s>', 'mean seconds between injected faults (exponential)', Number, 20)
  .option('--max-attempts <n>', 'the manager’s --boot-max-attempts', Number, 3)
  .option('--boot-timeout <s>', 'the manager’s --boot-timeout, seconds', Number, 90)
  .option(
    '--pause-ms <ms>',
    'a worker waits up to this long (uniform) between release and its next claim',
    Number,
    5000,
  )
  .option('--seed <n>', 'random seed (faults, pauses)', Number, 1)
  .option('--misbehave <p>', 'probability that a serverRef host misbehaves in a round', Number, 0.5)
  .option(
    '--series-slack <s>',
    'a series must end within maxAttempts × timeout + this, seconds (self-test: 20)',
    Number,
  )
  .option('--bmc-requests-per-minute <n>', 'bound of BMC requests per system in any 60 s', Number, 400)
  .option('--writes-per-minute <n>', 'bound of versions per claim and per Server in any 60 s', Number, 240)
  .option('--self-test', 'seed one violation per invariant; fail unless each is detected')
  .parse()
  .opts<{
    minutes: number;
    servers: number;
    bmcs: number;
    faultEvery: number;
    maxAttempts: number;
    bootTimeout: number;
    pauseMs: number;
    seed: number;
    misbehave: number;
    seriesSlack?: number;
    bmcRequestsPerMinute: number;
    writesPerMinute: number;
    selfTest?: boolean;
  }>();
if (o.selfTest && !process.argv.includes('--minutes')) o.minutes = 6;
const seriesSlackMs = (o.seriesSlack ?? (o.selfTest ? 20 : 120)) * 1000;

/** mulberry32: a small seeded PRNG, so a run's fault schedule can be repeated. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const random = rng(o.seed);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
const between = (lo: number, hi: number) => Math.round(lo + random() * (hi - lo));

const NS = 'default';
/** Booted=False reasons that end a series (besides Booted=True). */
const ENDS = new Set(['AttemptsExhausted', 'BootRefused', 'BootMethodUnsupported']);
const POWER_ON = new Set(['On', 'ForceOn', 'ForceRestart', 'GracefulRestart', 'PowerCycle']);
const FAULTS = [
  'manager-sigkill',
  'apiserver-restart',
  'registry-sigkill',
  'bmc-503',
  'bmc-drop',
  'bmc-slow',
  'bmc-dead',
] as const;
type Fault = (typeof FAULTS)[number];

/** What a serverRef host does wrong for one round (one claim). */
const BEHAVIOURS = [
  'ignores-override-once',
  'ignores-override-always',
  'never-posts-bootstate',
  'bmc-refuses-patch-for-a-while',
  'bmc-refuses-patch-for-good',
] as const;
type Behaviour = 'normal' | (typeof BEHAVIOURS)[number];

interface Violation {
  invariant: string;
  detail: string;
}
const violations: Violation[] = [];
const violate = (invariant: string, detail: string) => {
  violations.push({ invariant, detail });
  console.error(`[soak] VIOLATION ${invariant}: ${detail}`);
};
const say = (line: string) => console.error(`[soak ${new Date().toISOString().slice(11, 19)}] ${line}`);

const invariants = new SoakInvariants({
  maxAttempts: o.maxAttempts,
  bootTimeoutMs: o.bootTimeout * 1000,
  seriesSlackMs,
  bmcRequestsPerMinute: o.bmcRequestsPerMinute,
  writesPerMinute: o.writesPerMinute,
});
/** Redfish system Id (lower case) → system UUID; filled once the stack runs. */
const idToUuid = new Map<string, string>();
/** The checker is fed from the start of the claim loop (discovery is the stack's warm-up). */
let checking = false;
/** Findings per invariant, and the self-test's seeds. */
const findings: { invariant: Invariant; subject: string; at: number; detail: string }[] = [];

/** Accepted power actions per system UUID (lower case): time of arrival and ResetType. */
const powerLog = new Map<string, { at: number; type: string }[]>();
function onBmcRequest(_bmc: number, r: RequestRecord): void {
  if (checking) invariants.observeBmcRequest(systemOfPath(r.path, idToUuid), r);
  if (r.method !== 'POST' || !r.path.endsWith('/Actions/ComputerSystem.Reset')) return;
  if (r.status < 200 || r.status >= 300) return;
  const m = /\/Systems\/([^/]+)\/Actions/.exec(r.path);
  if (!m) return;
  const uuid = decodeURIComponent(m[1]!).toLowerCase();
  const type = String((r.body as { ResetType?: unknown } | undefined)?.ResetType ?? '?');
  const list = powerLog.get(uuid) ?? [];
  list.push({ at: r.at, type });
  powerLog.set(uuid, list);
}

/** 2xx callbacks sim hosts got, by system UUID. */
const accepted = new Map<string, { at: number; route: 'bootstate' | 'register' }[]>();

/** One claim from creation to its end. */
interface Cycle {
  claim: string;
  worker: number;
  createdAt: number;
  endedAt?: number;
  server?: string;
  uuid?: string;
  booted?: boolean;
  reason?: string;
  final?: ServerClaim;
  behaviour: Behaviour;
}
const cycles: Cycle[] = [];

const dir = mkdtempSync(join(tmpdir(), 'metal-soak-'));
const bootTimeoutMs = o.bootTimeout * 1000;
const stack = await LocalStack.start({
  servers: o.servers,
  backend: 'sim',
  dir,
  bmcs: o.bmcs,
  signalReplicas: 2,
  onBmcRequest,
  simTiming: { firmwareMs: 200, kernelMs: 500 },
  managerArgs: [
    `--boot-timeout=${o.bootTimeout}s`,
    `--netboot-timeout=${Math.round(o.bootTimeout / 2)}s`,
    `--boot-max-attempts=${o.maxAttempts}`,
    '--discovery-timeout=10m',
  ],
  progress: (l) => say(l),
});
const faultCounts: Record<Fault, number> = Object.fromEntries(FAULTS.map((f) => [f, 0])) as Record<
  Fault,
  number
>;
let exitCode = 1;
const informers: Informer<never>[] = [];
try {
  for (const h of stack.hosts as SimHost[]) {
    h.onBootFinished((host, boot) => {
      if (boot.callbackStatus === undefined || boot.callbackStatus >= 300 || boot.mode === undefined) return;
      const uuid = host.identity.uuid.toLowerCase();
      const list = accepted.get(uuid) ?? [];
      list.push({ at: Date.now(), route: boot.mode === 'probe' ? 'register' : 'bootstate' });
      accepted.set(uuid, list);
    });
  }
  say(`waiting for ${o.servers} servers to be discovered`);
  const discovered = await stack.waitForDiscovery(o.servers, 30 * 60_000);
  const serverNames = discovered.map((s) => s.metadata.name).sort();
  const uuidOf = new Map(discovered.map((s) => [s.metadata.name, s.spec.systemUUID.toLowerCase()]));
  /** System UUID → its sim host and its virtual BMC. */
  const hostOf = new Map<string, SimHost>();
  const vbmcOf = new Map<string, VirtualBmc>();
  for (const b of stack.vbmcs) {
    for (const sy of b.systems) {
      idToUuid.set(sy.id.toLowerCase(), sy.uuid);
      hostOf.set(sy.uuid, sy.host as SimHost);
      vbmcOf.set(sy.uuid, b);
    }
  }
  /** Per virtual BMC, the systems whose PATCHes it refuses now (the knob replaces the whole map). */
  const refusals = new Map<VirtualBmc, Record<string, number>>();
  const setRefusal = (uuid: string, status: number | undefined) => {
    const b = vbmcOf.get(uuid)!;
    const m = { ...refusals.get(b) };
    if (status === undefined) delete m[uuid];
    else m[uuid] = status;
    refusals.set(b, m);
    b.setFaults({ patchRefusals: m });
  };
  /** Gives the host of `uuid` one behaviour for a round; returns what clears it. */
  const misbehave = (uuid: string, b: Behaviour): (() => void) => {
    const host = hostOf.get(uuid)!;
    switch (b) {
      case 'normal':
        return () => {};
      case 'ignores-override-once':
        host.setFaults({ ignoreOverrideBoots: 1 });
        return () => host.setFaults({ ignoreOverrideBoots: 0 });
      case 'ignores-override-always':
        host.setFaults({ bootFromDisk: true });
        return () => host.setFaults({ bootFromDisk: false });
      case 'never-posts-bootstate':
        host.setFaults({ neverCallBack: true });
        return () => host.setFaults({ neverCallBack: false });
      case 'bmc-refuses-patch-for-a-while': {
        setRefusal(uuid, 503);
        const t = setTimeout(() => setRefusal(uuid, undefined), between(5, 40) * 1000);
        return () => {
          clearTimeout(t);
          setRefusal(uuid, undefined);
        };
      }
      case 'bmc-refuses-patch-for-good':
        // For the whole claim; cleared before the claim is deleted, so that the release is not refused.
        setRefusal(uuid, 400);
        return () => setRefusal(uuid, undefined);
    }
  };
  // Pairs for the selector workers: label soak-pair=<k> on two Servers each.
  const half = Math.floor(serverNames.length / 2) & ~1;
  for (let i = 0; i < half; i++) {
    await stack.client.mergePatch(Resources.Server, serverNames[i]!, undefined, {
      metadata: { labels: { 'soak-pair': `p${Math.floor(i / 2)}` } },
    });
  }
  await stack.client.create(Resources.Secret, {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: 'soak-ignition', namespace: NS },
    data: { ignition: Buffer.from('{"ignition":{"version":"3.4.0"}}').toString('base64') },
  });

  // The benchmark's own watches reconnect through API server restarts without logging to stdout.
  const quiet = pino({ level: 'silent' });
  const claimWatch = new Informer<ServerClaim>(stack.client, Resources.ServerClaim, {
    namespace: NS,
    log: quiet,
  });
  const serverWatch = new Informer<Server>(stack.client, Resources.Server, { log: quiet });
  informers.push(claimWatch as unknown as Informer<never>, serverWatch as unknown as Informer<never>);
  /** Server name → the times it was seen Available (for the /register check). */
  const availableSeen = new Map<string, number>();
  serverWatch.on('update', (s) => {
    if (s.status?.state === 'Available') availableSeen.set(s.metadata.name!, Date.now());
  });
  const reported = new Set<string>();
  const checkClaims = () => {
    const boundTo = new Map<string, string[]>();
    for (const c of claimWatch.list()) {
      const b = c.status?.boot;
      if (b && b.attempt - (b.firstAttempt ?? 1) + 1 > o.maxAttempts) {
        const key = `attempts/${c.metadata.name ?? ''}`;
        if (!reported.has(key)) {
          reported.add(key);
          violate(
            'attempts ≤ maxAttempts',
            `${c.metadata.name}: attempt ${b.attempt}, firstAttempt ${b.firstAttempt ?? 1}, max ${o.maxAttempts}`,
          );
        }
      }
      const bound = c.status?.conditions?.some((x) => x.type === 'Bound' && x.status === 'True');
      if (bound && !c.metadata.deletionTimestamp && c.spec.serverRef?.name) {
        const l = boundTo.get(c.spec.serverRef.name) ?? [];
        l.push(c.metadata.name ?? '');
        boundTo.set(c.spec.serverRef.name, l);
      }
    }
    for (const [server, claims] of boundTo) {
      if (claims.length < 2) continue;
      const key = `double/${server}/${claims.sort().join(',')}`;
      if (reported.has(key)) continue;
      reported.add(key);
      violate('one claim per Server', `Server ${server} bound to ${claims.join(' and ')}`);
    }
  };
  claimWatch.on('add', checkClaims);
  claimWatch.on('update', checkClaims);
  const claimUuid = (c: ServerClaim) =>
    c.spec.serverRef?.name ? uuidOf.get(c.spec.serverRef.name) : undefined;
  const seeClaim = (c: ServerClaim) => {
    if (checking) invariants.observeClaim(c, Date.now(), claimUuid(c));
  };
  claimWatch.on('add', seeClaim);
  claimWatch.on('update', seeClaim);
  claimWatch.on('delete', (c) => {
    if (checking) invariants.claimDeleted(c, Date.now());
  });
  const seeServer = (sv: Server) => {
    if (checking) invariants.observeServer(sv, Date.now());
  };
  serverWatch.on('add', seeServer);
  serverWatch.on('update', seeServer);
  await Promise.all([claimWatch.start(), serverWatch.start()]);
  checking = true;
  const checkingSince = Date.now();
  for (const sv of serverWatch.list()) invariants.observeServer(sv, Date.now());
  const checkInvariants = () => {
    for (const f of invariants.check(Date.now())) {
      findings.push(f);
      violate(f.invariant, `${f.subject}: ${f.detail}`);
    }
  };
  const checkTimer = setInterval(checkInvariants, 2_000);

  const runMs = o.minutes * 60_000;
  const t0 = Date.now();
  const end = t0 + runMs;
  // A claim that changes nothing for this long is stuck; one that keeps changing may take up to
  // claimLimitMs. Measured from the last change, not from creation: on a loaded machine binding and
  // the first reconcile after a manager restart alone took minutes (not a violation of anything).
  const claimDeadlineMs = o.maxAttempts * bootTimeoutMs + 5 * 60_000;
  const claimLimitMs = 45 * 60_000;

  // --- manager RSS, per process ---
  let managerStartedAt = t0;
  /** Claims completed while the current manager process ran: warm once it handled a full round. */
  let completedByManager = 0;
  let warmRss: number | undefined;
  let managerStarts = 0;
  const warmupMs = Math.min(180_000, runMs / 4);
  const rssOf = (pid: number) =>
    Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
  /** V8 heap used / total of the manager (its /metrics), MiB: tells live objects from RSS. */
  let warmHeap: HeapFigures | undefined;
  const rssTimer = setInterval(() => {
    try {
      if (
        warmRss === undefined &&
        Date.now() - managerStartedAt >= warmupMs &&
        completedByManager >= o.servers
      ) {
        warmRss = rssOf(stack.manager.pid!);
        void heapOf(stack.metricsUrl).then((h) => {
          warmHeap = h;
        });
      }
    } catch {
      // the manager is being restarted
    }
  }, 5_000);

  // --- faults ---
  const inject = async (fault: Fault) => {
    const bmc = pick(stack.vbmcs);
    switch (fault) {
      case 'manager-sigkill': {
        say('fault: SIGKILL manager');
        await stack.killManager();
        await sleep(between(500, 5_000));
        await stack.startManager();
        managerStartedAt = Date.now();
        completedByManager = 0;
        warmRss = undefined;
        warmHeap = undefined;
        managerStarts++;
        return;
      }
      case 'apiserver-restart': {
        say('fault: restart kube-apiserver');
        await stack.cp.stopApiServer();
        await sleep(between(500, 5_000));
        await stack.cp.startApiServer();
        return;
      }
      case 'registry-sigkill': {
        const r = pick(stack.signals!.of('registry'));
        say(`fault: SIGKILL ${r.name}`);
        await stack.signals!.kill(r);
        await sleep(between(500, 10_000));
        await stack.signals!.startReplica(r);
        return;
      }
      case 'bmc-503': {
        const n = between(3, 30);
        say(`fault: ${bmc.url} answers the next ${n} requests 503`);
        bmc.setFaults({ unavailableRequests: n, retryAfterSeconds: between(0, 2) });
        return;
      }
      case 'bmc-drop': {
        const n = between(2, 15);
        say(`fault: ${bmc.url} drops the next ${n} connections`);
        bmc.setFaults({ dropConnections: n });
        return;
      }
      case 'bmc-dead': {
        const sec = between(10, 60);
        say(`fault: ${bmc.url} stops answering for ${sec} s`);
        bmc.setFaults({ unresponsive: true });
        await sleep(sec * 1000);
        bmc.setFaults({ unresponsive: false });
        say(`${bmc.url} answers again`);
        return;
      }
      case 'bmc-slow': {
        const n = between(5, 40);
        const ms = between(1_000, 8_000);
        say(`fault: ${bmc.url} answers the next ${n} requests ${ms} ms late`);
        bmc.setFaults({ slowRequests: n, slowResponseMs: ms });
        return;
      }
    }
  };

  const faultLoop = (async () => {
    while (Date.now() < end) {
      await sleep(Math.min(-Math.log(1 - random()) * o.faultEvery * 1000, Math.max(0, end - Date.now())));
      if (Date.now() >= end) break;
      const managerKillAllowed = Date.now() < t0 + runMs / 2;
      // The self-test restarts the manager itself (a seed); restarts from here would blur what it shows.
      const fault = pick(
        FAULTS.filter(
          (f) =>
            (managerKillAllowed && !o.selfTest) ||
            (f !== 'manager-sigkill' && !(o.selfTest && f === 'apiserver-restart')),
        ),
      );
      faultCounts[fault]++;
      try {
        await inject(fault);
      } catch (err) {
        say(`fault ${fault} failed to inject: ${String(err)}`);
      }
    }
  })();
  // --- claim loop ---
  /** Retries an API call through API server restarts (bounded: 5 min). */
  const retrying = async <T>(what: string, f: () => Promise<T>): Promise<T> => {
    const until = Date.now() + 5 * 60_000;
    for (let delay = 200; ; delay = Math.min(delay * 2, 5_000)) {
      try {
        return await f();
      } catch (err) {
        if (Date.now() > until) throw new Error(`${what}: ${String(err)}`);
        await sleep(delay);
      }
    }
  };
  /** Polls `check` until true, or until `stuckMs` passed without `progress()` changing (or `limitMs` in all). */
  const waitUntil = async (
    stuckMs: number,
    check: () => boolean,
    progress: () => string = () => '',
    limitMs = stuckMs,
  ): Promise<boolean> => {
    const limit = Date.now() + limitMs;
    let until = Date.now() + stuckMs;
    let seen = progress();
    while (Date.now() < until && Date.now() < limit) {
      if (check()) return true;
      const now = progress();
      if (now !== seen) {
        seen = now;
        until = Date.now() + stuckMs;
      }
      await sleep(250);
    }
    return check();
  };
  // The self-test's seeds use four serverRef hosts of their own.
  const reserved = o.selfTest ? serverNames.slice(-4) : [];
  const workers = serverNames
    .map((name, w) => ({
      w,
      serverRef: w >= half ? name : undefined,
      pair: w < half ? `p${Math.floor(w / 2)}` : undefined,
    }))
    .filter((wk) => !wk.serverRef || !reserved.includes(wk.serverRef));
  let completed = 0;
  const worker = async (wk: (typeof workers)[number]) => {
    for (let n = 0; Date.now() < end; n++) {
      const name = `soak-${wk.w}-${n}`;
      const hostUuid = wk.serverRef ? uuidOf.get(wk.serverRef) : undefined;
      const behaviour: Behaviour = hostUuid && random() < o.misbehave ? pick(BEHAVIOURS) : 'normal';
      const cycle: Cycle = { claim: name, worker: wk.w, createdAt: Date.now(), behaviour };
      cycles.push(cycle);
      const clearBehaviour = hostUuid ? misbehave(hostUuid, behaviour) : () => {};
      await retrying(`create ${name}`, async () => {
        try {
          await stack.client.create(Resources.ServerClaim, {
            apiVersion: API_VERSION,
            kind: 'ServerClaim',
            metadata: { name, namespace: NS },
            spec: {
              power: 'On',
              image: OS_IMAGE,
              ignitionSecretRef: { name: 'soak-ignition' },
              ...(wk.serverRef
                ? { serverRef: { name: wk.serverRef } }
                : { serverSelector: { matchLabels: { 'soak-pair': wk.pair! } } }),
            },
          });
        } catch (err) {
          if (!isApiStatus(err, 409)) throw err; // created before the connection broke
        }
      });
      const ended = await waitUntil(
        claimDeadlineMs,
        () => {
          const c = claimWatch.get(name, NS);
          const booted = c?.status?.conditions?.find((x) => x.type === 'Booted');
          if (!c || !booted) return false;
          if (booted.status === 'True' || ENDS.has(booted.reason ?? '')) {
            cycle.endedAt = Date.now();
            cycle.booted = booted.status === 'True';
            cycle.reason = booted.reason;
            cycle.final = structuredClone(c);
            cycle.server = c.spec.serverRef?.name;
            cycle.uuid = cycle.server ? uuidOf.get(cycle.server) : undefined;
            return true;
          }
          return false;
        },
        () => claimWatch.get(name, NS)?.metadata.resourceVersion ?? '',
        claimLimitMs,
      );
      clearBehaviour();
      if (!ended) {
        const c = claimWatch.get(name, NS);
        cycle.final = c;
        violate(
          'claim ends (Booted, exhausted or refused)',
          `${name}: no change for ${Math.round(claimDeadlineMs / 1000)} s (or ${claimLimitMs / 60_000} min in all): phase ${c?.status?.boot?.phase}, conditions ${JSON.stringify(c?.status?.conditions?.map((x) => [x.type, x.status, x.reason]))}`,
        );
      } else {
        completed++;
        completedByManager++;
        if (!cycle.reason) violate('claim ends with a reason', `${name}: Booted condition without reason`);
      }
      await retrying(`delete ${name}`, async () => {
        try {
          await stack.client.delete(Resources.ServerClaim, name, NS);
        } catch (err) {
          if (!isApiStatus(err, 404)) throw err;
        }
      });
      const gone = await waitUntil(10 * 60_000, () => claimWatch.get(name, NS) === undefined);
      if (!gone) {
        violate('claim released', `${name} still there 10 min after its deletion`);
        return;
      }
      await sleep(random() * o.pauseMs);
    }
  };
  // --- self-test: one seeded violation per invariant, through the real parts ---
  const seeds: { invariant: Invariant; subject: string; seededAt: number; how: string }[] = [];
  const runSelfTest = async () => {
    const [hostA, hostB, hostC, hostD] = reserved as [string, string, string, string];
    const secret = await stack.client.get<{ data: Record<string, string> } & Server>(
      Resources.BMCSecret,
      'local-bmc-credentials',
    );
    const dec = (k: string) => Buffer.from(secret?.data[k] ?? '', 'base64').toString();
    const auth = `Basic ${Buffer.from(`${dec('username')}:${dec('password')}`).toString('base64')}`;
    const sys = (server: string) => {
      const uuid = uuidOf.get(server)!;
      const b = vbmcOf.get(uuid)!;
      return { uuid, url: `${b.url}${b.systems.find((x) => x.uuid === uuid)!.uri}` };
    };
    const redfish = async (method: string, url: string, body?: unknown) => {
      const r = await fetch(url, {
        method,
        headers: { authorization: auth, 'content-type': 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(10_000),
      });
      await r.arrayBuffer();
      return r.status;
    };
    /** `from`: when the seeding action began (a finding may come while it still runs). */
    const seed = (invariant: Invariant, subject: string, how: string, from: number) => {
      seeds.push({ invariant, subject, seededAt: from, how });
      say(`self-test: seeded ${invariant} (${subject}): ${how}`);
    };
    const claimOn = (name: string, server: string, extra: Record<string, unknown> = {}) =>
      retrying(`create ${name}`, () =>
        stack.client.create(Resources.ServerClaim, {
          apiVersion: API_VERSION,
          kind: 'ServerClaim',
          metadata: { name, namespace: NS },
          spec: {
            power: 'On',
            image: OS_IMAGE,
            ignitionSecretRef: { name: 'soak-ignition' },
            serverRef: { name: server },
            ...extra,
          },
        }),
      );
    const waitClaim = async (name: string, pred: (c: ServerClaim) => boolean, what: string) => {
      const ok = await waitUntil(180_000, () => {
        const c = claimWatch.get(name, NS);
        return c !== undefined && pred(c);
      });
      if (!ok) throw new Error(`self-test: ${name} never ${what}`);
    };
    const inAttempt = (c: ServerClaim) =>
      c.status?.boot?.poweredOnAt !== undefined &&
      ['AwaitingNetboot', 'AwaitingSignals'].includes(c.status?.boot?.phase ?? '');
    await Promise.all([
      (async () => {
        // A: a power-on no attempt asked for, then a request loop on one system.
        const a = sys(hostA);
        // The Server's discovery attempt counts as ended when the checker first saw it finished (at
        // checkingSince); a power-on within its grace (1 s) would still be "in an attempt".
        await sleep(Math.max(0, checkingSince + 3_000 - Date.now()));
        const fromReset = Date.now();
        const st = await redfish('POST', `${a.url}/Actions/ComputerSystem.Reset`, { ResetType: 'On' });
        seed(
          'power-outside-attempt',
          `system ${a.uuid}`,
          `Reset On (HTTP ${st}) to ${hostA}, claimed by nobody`,
          fromReset,
        );
        const n = o.bmcRequestsPerMinute + 10;
        const fromGets = Date.now();
        for (let i = 0; i < n; i++) await redfish('GET', a.url);
        seed(
          'bmc-requests-per-minute',
          `system ${a.uuid}`,
          `${n} GETs of ${hostA}'s system in a row`,
          fromGets,
        );
      })(),
      (async () => {
        // B: a second power-on inside a claim's attempt (its image never calls back, so it stays open).
        hostOf.get(uuidOf.get(hostB)!)!.setFaults({ neverCallBack: true });
        await claimOn('selftest-extra-power', hostB);
        await waitClaim('selftest-extra-power', inAttempt, 'was powered on');
        // Only once the manager's own power-on was accepted: a Reset before it finds the system On and
        // the manager sends none (one power-on in the attempt, no violation; seen in a run).
        const uuidB = uuidOf.get(hostB)!;
        const started = Date.parse(
          claimWatch.get('selftest-extra-power', NS)?.status?.boot?.attemptStartedAt ?? '',
        );
        if (
          !(await waitUntil(120_000, () =>
            (powerLog.get(uuidB) ?? []).some((p) => POWER_ON.has(p.type) && p.at >= started - 1_000),
          ))
        )
          throw new Error('self-test: the manager never powered selftest-extra-power on');
        const from = Date.now();
        const st = await redfish('POST', `${sys(hostB).url}/Actions/ComputerSystem.Reset`, {
          ResetType: 'ForceRestart',
        });
        seed(
          'power-ons-exceed-attempts',
          `claim ${NS}/selftest-extra-power`,
          `ForceRestart (HTTP ${st}) during attempt ${claimWatch.get('selftest-extra-power', NS)?.status?.boot?.attempt}`,
          from,
        );
      })(),
      (async () => {
        // D: a Booted claim loses its history; then its annotations are written in a loop.
        await claimOn('selftest-history', hostD);
        await waitClaim(
          'selftest-history',
          (c) => c.status?.conditions?.some((x) => x.type === 'Booted' && x.status === 'True') ?? false,
          'booted',
        );
        const fromHistory = Date.now();
        await stack.client.mergePatch(
          Resources.ServerClaim,
          'selftest-history',
          NS,
          { status: { boot: { history: null } } },
          { subresource: 'status' },
        );
        seed(
          'claim-without-history',
          `claim ${NS}/selftest-history`,
          'status.boot.history deleted (merge patch, null)',
          fromHistory,
        );
        const n = o.writesPerMinute + 10;
        const fromWrites = Date.now();
        for (let i = 0; i < n; i++) {
          await stack.client.mergePatch(Resources.ServerClaim, 'selftest-history', NS, {
            metadata: { annotations: { 'soak.metal.ironcore.dev/self-test-write': String(i) } },
          });
        }
        seed(
          'writes-per-minute',
          `claim ${NS}/selftest-history`,
          `${n} annotation writes in a row`,
          fromWrites,
        );
      })(),
    ]);
    // C (after the others: it stops the manager): a 10 s, 1-attempt series the manager cannot end.
    hostOf.get(uuidOf.get(hostC)!)!.setFaults({ neverCallBack: true });
    await claimOn('selftest-unbounded', hostC, { bootCompletion: { timeout: '10s', maxAttempts: 1 } });
    await waitClaim('selftest-unbounded', inAttempt, 'was powered on');
    const fromKill = Date.now();
    await stack.killManager();
    const downMs = 10_000 + seriesSlackMs + 10_000;
    seed(
      'series-unbounded',
      `claim ${NS}/selftest-unbounded`,
      `manager SIGKILLed for ${downMs / 1000} s during a series bounded at ${(10_000 + seriesSlackMs) / 1000} s`,
      fromKill,
    );
    await sleep(downMs);
    await stack.startManager();
    say('self-test: manager started again');
  };
  const selfTestRun = o.selfTest
    ? runSelfTest().catch((err: unknown) => say(`self-test failed to seed: ${String(err)}`))
    : Promise.resolve();

  say(`claim loop: ${workers.length} workers for ${o.minutes} min, a fault every ~${o.faultEvery} s`);
  const progress = setInterval(() => {
    void heapOf(stack.metricsUrl).then((h) => {
      let rss = '-';
      try {
        rss = rssOf(stack.manager.pid!).toFixed(0);
      } catch {
        // the manager is being restarted
      }
      say(
        `claims completed ${completed}, faults ${JSON.stringify(faultCounts)}, violations ${violations.length}; ` +
          `manager RSS ${rss} MiB, heap ${heapText(h)}`,
      );
    });
  }, 30_000);
  await Promise.all([...workers.map(worker), faultLoop, selfTestRun]);
  clearInterval(progress);
  for (const b of stack.vbmcs)
    b.setFaults({
      unavailableRequests: 0,
      dropConnections: 0,
      slowRequests: 0,
      unresponsive: false,
      patchRefusals: {},
    });
  // The last power-ons are judged once settled (the checker's settleMs, 10 s).
  await sleep(11_000);
  checkInvariants();
  clearInterval(checkTimer);
  const endRss = rssOf(stack.manager.pid!);
  const endHeap = await heapOf(stack.metricsUrl);
  clearInterval(rssTimer);

  // --- invariants checked after the run ---
  const attemptsOf = (c: ServerClaim) =>
    (c.status?.boot?.history ?? []).filter((h) => h.attempt >= (c.status?.boot?.firstAttempt ?? 1));
  const attemptAt = (c: ServerClaim, t: number) => {
    let found: ReturnType<typeof attemptsOf>[number] | undefined;
    for (const h of attemptsOf(c)) if (h.startedAt && Date.parse(h.startedAt) <= t) found = h;
    return found ?? attemptsOf(c)[0];
  };
  let powerActions = 0;
  let acceptedBootstates = 0;
  for (const cy of cycles) {
    if (!cy.final || !cy.uuid || cy.endedAt === undefined) continue;
    // From this claim's first attempt on: a claim by selector waits for its pair's Server, and the
    // power-ons and callbacks of the pair's claim on that Server before then are not this claim's
    // (the intent, with the attempt's start, is stored before every power-on of an attempt).
    const starts = attemptsOf(cy.final)
      .map((h) => Date.parse(h.startedAt ?? ''))
      .filter(Number.isFinite);
    const from = starts.length ? Math.max(cy.createdAt, Math.min(...starts)) : cy.createdAt;
    const actions = (powerLog.get(cy.uuid) ?? []).filter(
      (p) => p.at >= from && p.at <= cy.endedAt! && POWER_ON.has(p.type),
    );
    powerActions += actions.length;
    const perAttempt = new Map<number, string[]>();
    for (const p of actions) {
      const a = attemptAt(cy.final, p.at)?.attempt ?? -1;
      perAttempt.set(a, [...(perAttempt.get(a) ?? []), `${p.type}@${new Date(p.at).toISOString()}`]);
    }
    for (const [a, list] of perAttempt) {
      if (list.length > 1)
        violate(
          'one power action per attempt',
          `${cy.claim} (${cy.server}) attempt ${a}: ${list.join(', ')}`,
        );
    }
    // The next claim's first attempt on the same Server (its host may answer within the grace).
    const next = Math.min(
      ...cycles
        .filter((o) => o !== cy && o.uuid === cy.uuid && o.final)
        .flatMap((o) => attemptsOf(o.final!).map((h) => Date.parse(h.startedAt ?? '')))
        .filter((t) => Number.isFinite(t) && t > from),
    );
    for (const cb of accepted.get(cy.uuid) ?? []) {
      if (cb.route !== 'bootstate' || cb.at < from || cb.at > cy.endedAt + 2_000) continue;
      // A callback once the next claim's attempt began is that claim's (soak-15-0 was charged with
      // soak-15-1's /bootstate, answered 0.8 s after soak-15-1's attempt 1 started, in the 2 s grace).
      if (cb.at >= next) continue;
      acceptedBootstates++;
      const a = attemptAt(cy.final, cb.at);
      if (!cy.booted || !a?.signals?.['BootStateReceived'])
        violate(
          'no accepted callback lost',
          `${cy.claim}: /bootstate answered 2xx at ${new Date(cb.at).toISOString()}, claim ${cy.booted ? 'Booted' : cy.reason}, attempt ${a?.attempt} signals ${JSON.stringify(a?.signals ?? {})}`,
        );
    }
  }
  let acceptedRegisters = 0;
  for (const [uuid, list] of accepted) {
    for (const cb of list) {
      if (cb.route !== 'register') continue;
      acceptedRegisters++;
      const name = [...uuidOf].find(([, u]) => u === uuid)?.[0];
      const server = name ? serverWatch.get(name) : undefined;
      const availableAfter = name !== undefined && (availableSeen.get(name) ?? 0) >= cb.at;
      const discoveredAtStart = cb.at < t0; // discovery of the warm-up: waitForDiscovery saw all Available
      if (!discoveredAtStart && !availableAfter && server?.status?.state !== 'Available')
        violate(
          'no accepted callback lost',
          `/register of ${uuid} at ${new Date(cb.at).toISOString()} answered 2xx, Server ${name} never Available afterwards`,
        );
    }
  }
  // Growth is what a leak shows; a smaller RSS at the end (a late GC) is no violation, and is printed.
  const rssOk = warmRss !== undefined && endRss - warmRss <= warmRss * 0.1;
  if (o.selfTest) {
    // The self-test restarts the manager on purpose: no RSS rule.
  } else if (warmRss === undefined)
    violate(
      'manager RSS',
      'no warm-up sample of the last manager process (it saw fewer than one round of claims)',
    );
  else if (!rssOk)
    violate(
      'manager RSS',
      `end ${endRss.toFixed(0)} MiB vs after warm-up ${warmRss.toFixed(0)} MiB (> 10 %)`,
    );

  const ended = cycles.filter((c) => c.endedAt !== undefined);
  const booted = ended.filter((c) => c.booted).length;
  const checked = new Set<string>(INVARIANTS);
  const byInvariant = (name: string) =>
    violations.filter((v) => v.invariant.startsWith(name) && !checked.has(v.invariant)).length;
  const byChecked = (name: Invariant) => findings.filter((f) => f.invariant === name).length;
  /** How the claims of each behaviour ended. */
  const outcomes = new Map<Behaviour, Map<string, number>>();
  for (const c of cycles) {
    const m = outcomes.get(c.behaviour) ?? new Map<string, number>();
    const how = c.endedAt === undefined ? 'not ended' : c.booted ? 'Booted' : (c.reason ?? '?');
    m.set(how, (m.get(how) ?? 0) + 1);
    outcomes.set(c.behaviour, m);
  }
  const peaks = invariants.peaks();
  console.log(
    `\nsoak: ${o.servers} servers, ${o.bmcs} virtual BMCs, 2 registry + 2 boot server replicas, ${o.minutes} min, seed ${o.seed}`,
  );
  printTable([
    ...FAULTS.map((f) => [`faults injected: ${f}`, faultCounts[f]] as [string, number]),
    ['manager processes started during the run', managerStarts],
    [
      'claims completed (Booted / AttemptsExhausted)',
      `${ended.length} (${booted} / ${ended.length - booted})`,
    ],
    ['accepted power-on actions (2xx Reset)', powerActions],
    ['accepted /bootstate callbacks during claims', acceptedBootstates],
    ['accepted /register callbacks', acceptedRegisters],
    ['manager RSS after warm-up / at end (MiB)', `${warmRss?.toFixed(0) ?? '-'} / ${endRss.toFixed(0)}`],
    ['manager V8 heap used/total after warm-up; at end (MiB)', `${heapText(warmHeap)}; ${heapText(endHeap)}`],
    ...[...outcomes].map(
      ([b, m]) =>
        [`claims with host behaviour ${b}`, [...m].map(([k, v]) => `${k} ${v}`).join(', ')] as [
          string,
          string,
        ],
    ),
    [
      `peak BMC requests / system / 60 s (bound ${o.bmcRequestsPerMinute})`,
      `${peaks.bmcPerSystem} (${peaks.bmcSystem})`,
    ],
    [
      `peak versions / claim, / Server, in 60 s (bound ${o.writesPerMinute})`,
      `${peaks.writesPerClaim} (${peaks.writesClaim}), ${peaks.writesPerServer} (${peaks.writesServer})`,
    ],
    [
      'power-ons judged: in claims / in Server attempts / all',
      `${invariants.counts.powerOnsInClaims} / ${invariants.counts.powerOnsInServerAttempts} / ${invariants.counts.powerOns}`,
    ],
    ...INVARIANTS.map((i) => [`violations: ${i}`, byChecked(i)] as [string, number]),
    ['violations: claim ends (Booted, exhausted or refused)', byInvariant('claim ends')],
    ['violations: claim released', byInvariant('claim released')],
    ['violations: one power action per attempt', byInvariant('one power')],
    ['violations: no accepted callback lost', byInvariant('no accepted')],
    ['violations: attempts ≤ maxAttempts', byInvariant('attempts')],
    ['violations: one claim per Server', byInvariant('one claim')],
    ['violations: manager RSS within 10 %', byInvariant('manager RSS')],
    ['violations (total)', violations.length],
  ]);
  console.log(
    JSON.stringify({
      bench: 'soak',
      servers: o.servers,
      minutes: o.minutes,
      seed: o.seed,
      faults: faultCounts,
      claimsCompleted: ended.length,
      booted,
      exhausted: ended.length - booted,
      powerOnActions: powerActions,
      acceptedBootstates,
      acceptedRegisters,
      managerRssMiB: { warm: warmRss, end: endRss },
      managerHeapMiB: { warm: warmHeap, end: endHeap },
      behaviours: Object.fromEntries([...outcomes].map(([b, m]) => [b, Object.fromEntries(m)])),
      peaks,
      selfTest: o.selfTest ? seeds : undefined,
      violations,
    }),
  );
  exitCode = violations.length === 0 ? 0 : 1;
  if (o.selfTest) {
    // Each seed must be found: same invariant, same subject, after it was seeded.
    const rows = seeds.map((sd) => {
      const f = findings.find(
        (x) => x.invariant === sd.invariant && x.subject === sd.subject && x.at >= sd.seededAt,
      );
      return { sd, f };
    });
    const missing = INVARIANTS.filter((i) => !rows.some((r) => r.sd.invariant === i && r.f));
    console.log('\nself-test: one seeded violation per invariant');
    printTable(
      rows.map(({ sd, f }) => [
        `${sd.invariant}: ${sd.how}`,
        f ? `detected after ${((f.at - sd.seededAt) / 1000).toFixed(1)} s: ${f.detail}` : 'NOT DETECTED',
      ]),
    );
    const unseeded = violations.length - rows.filter((r) => r.f).length;
    console.log(
      `self-test: ${INVARIANTS.length - missing.length}/${INVARIANTS.length} invariants' seeded violations detected; ` +
        `${unseeded} violation(s) not seeded${missing.length ? `; undetected: ${missing.join(', ')}` : ''}`,
    );
    exitCode = missing.length === 0 ? 0 : 1;
  }
} finally {
  for (const i of informers) i.stop();
  await stack.stop().catch((err) => say(`stop: ${String(err)}`));
  // A violation keeps the logs (manager.log, registry-N.log, bootserver-N.log): its evidence.
  if (process.env.METAL_BENCH_KEEP || exitCode !== 0)
    say(`kept ${dir} (manager, registry and boot server logs)`);
  else rmSync(dir, { recursive: true, force: true });
}
process.exit(exitCode);

interface HeapFigures {
  usedMiB: number;
  totalMiB: number;
}

/**
 * `nodejs_heap_size_used_bytes` / `nodejs_heap_size_total_bytes` from a /metrics page (prom-client's
 * default metrics), MiB; undefined when the page cannot be read (a restart).
 */
async function heapOf(metricsUrl: string): Promise<HeapFigures | undefined> {
  try {
    const text = await (await fetch(`${metricsUrl}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
    const read = (name: string) => Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1]) / 2 ** 20;
    const h = {
      usedMiB: read('nodejs_heap_size_used_bytes'),
      totalMiB: read('nodejs_heap_size_total_bytes'),
    };
    return Number.isFinite(h.usedMiB) ? h : undefined;
  } catch {
    return undefined;
  }
}

function heapText(h: HeapFigures | undefined): string {
  return h ? `${h.usedMiB.toFixed(0)} / ${h.totalMiB.toFixed(0)}` : '-';
}
