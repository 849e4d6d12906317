/**
 * The actions behind `metalctl`: `local up|serve|down|status`, `get`, `boots`. Each resolves to an
 * exit code (0 ok, 1 failed) and prints what happened; none throws for an expected failure.
 */
import { spawn } from 'node:child_process';
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import type { KubeConfig } from '@kubernetes/client-node';
import { stringify as stringifyYaml } from 'yaml';
import type { BMC } from '../api/v1alpha1/bmc.js';
import { API_VERSION, type Condition } from '../api/v1alpha1/schema.js';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import { BootedReason, ConditionType, currentAttemptCondition } from '../api/vocabulary.js';
import { REGISTRATION_PAYLOAD_KEY, registrationRecord } from '../inventory/registration-record.js';
import { KubeClient } from '../runtime/client.js';
import { loadKubeConfig } from '../runtime/kubeconfig.js';
import { type KObject, Resources } from '../runtime/resource.js';
import type { AccelChoice } from '../virtualbmc/accel-probe.js';
import type { VendorProfileName } from '../virtualbmc/profile.js';
import type { Firmware } from '../virtualbmc/qemu.js';
import { type ConsoleOptions, runConsole } from './console-command.js';
import { REPO_ROOT } from './control-plane.js';
import { attemptLine, claimsTable, type FleetSnapshot, serversTable, since } from './fleet-view.js';
import { type Backend, LocalStack, SilentVmError } from './local-stack.js';
import {
  alive,
  daemonPidPath,
  defaultLocalDir,
  progressPath,
  readLocalState,
  runningDaemon,
  statePath,
  writeLocalState,
} from './local-state.js';
import { OpError, releaseClaim, requestRetry, setCordon } from './server-ops.js';
import { describeServer, type EventView } from './server-view.js';
import { shapeDifferences } from './stack-shape.js';
import { removeStaleNamespaces } from './test-network.js';
import { OS_IMAGE } from './vm-artefacts.js';

export const EXAMPLE_CLAIM = 'example';
export const EXAMPLE_NS = 'default';

const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));
const stamp = (t0: number) => `[${((Date.now() - t0) / 1000).toFixed(1).padStart(5)}s]`;

async function snapshot(
  client: KubeClient,
  o: { labelSelector?: string; namespace?: string } = {},
): Promise<FleetSnapshot> {
  const [servers, claims, sbcs, bmcs] = await Promise.all([
    client.list<Server>(Resources.Server, { labelSelector: o.labelSelector }),
    client.list<ServerClaim>(Resources.ServerClaim, {
      labelSelector: o.labelSelector,
      namespace: o.namespace,
    }),
    client.list<ServerBootConfiguration>(Resources.ServerBootConfiguration),
    client.list<BMC>(Resources.BMC),
  ]);
  return { servers: servers.items, claims: claims.items, sbcs: sbcs.items, bmcs: bmcs.items };
}

/** Firmware, boot method and network of `local up` / `local serve` (QEMU back end). */
export interface MachineShape {
  firmware?: Firmware;
  bootMethod?: 'pxe' | 'http' | 'vmedia' | 'auto';
  network?: 'user' | 'bridge' | 'auto';
  /** Cleanup boot on release with the pushed cleanup image (`--cleanup-image`). */
  cleanup?: boolean;
  /** The operator deployed into a single-node cluster from config/default (in-cluster-serve.ts). */
  inCluster?: boolean;
}

/** What `local serve` is asked to start. */
type ServeOptions = {
  dir: string;
  servers: number;
  backend: Backend;
  accel?: AccelChoice;
  bmcProfile?: VendorProfileName;
} & MachineShape;

/** The daemon: starts the stack, records it, and runs until SIGTERM/SIGINT, then stops it all. */
export async function localServe(o: ServeOptions): Promise<void> {
  mkdirSync(o.dir, { recursive: true });
  writeFileSync(daemonPidPath(o.dir), String(process.pid));
  const startedAt = new Date().toISOString();
  const say = (line: string) => appendFileSync(progressPath(o.dir), `${line}\n`);
  let stack: LocalStack | undefined;
  let starting: Promise<LocalStack> | undefined;
  const stop = async () => {
    rmSync(statePath(o.dir), { force: true });
    rmSync(daemonPidPath(o.dir), { force: true });
    // A signal during start stops what the start made once it is made (a failed start cleans up itself).
    const made = stack ?? (await starting?.catch(() => undefined));
    await made?.stop().catch(() => undefined);
    process.exit(0);
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  // What a stack that was SIGKILLed (or crashed) left: its test network's namespace with dnsmasq
  // (dnsmasq clears the parent-death signal it was started with, so it outlives its daemon).
  const stale = removeStaleNamespaces();
  if (stale.length) say(`removed what a stopped stack left behind: ${stale.join(', ')}`);
  try {
    starting = startServedStack(o, say);
    stack = await starting;
    say(
      `waiting for discovery of ${o.servers} servers (probe image${o.backend !== 'qemu' ? ', simulated' : stack.bootMethod === 'vmedia' ? ' by virtual media' : ' over iPXE'}, then /register)`,
    );
    await stack.waitForDiscovery(o.servers, 600_000, (servers) =>
      say(
        `discovery: ${servers.map((s) => `${s.metadata.name}=${s.status?.state ?? 'Initial'}`).join(' ') || 'no servers yet'}`,
      ),
    );
    recordServedStack(o, stack, startedAt);
    say('READY');
  } catch (err) {
    reportServeFailure(err, say);
    await stack?.stop().catch(() => undefined);
    rmSync(daemonPidPath(o.dir), { force: true });
    process.exit(1);
  }
  await new Promise(() => undefined);
}

/** The daemon's stack: UEFI firmware, the best boot method and network the machine allows unless asked otherwise. */
function startServedStack(o: ServeOptions, say: (line: string) => void): Promise<LocalStack> {
  return LocalStack.start({
    servers: o.servers,
    backend: o.backend,
    dir: o.dir,
    progress: say,
    // This daemon stops the stack on SIGTERM/SIGINT (localServe's stop); nothing else may exit first.
    handlesSignals: true,
    ...(o.accel ? { accel: o.accel } : {}),
    firmware: o.firmware ?? 'uefi',
    bootMethod: o.bootMethod ?? 'auto',
    network: o.network ?? 'auto',
    ...(o.bmcProfile ? { bmcProfile: o.bmcProfile } : {}),
    ...(o.cleanup ? { cleanup: true } : {}),
  });
}

/** Writes the state file `local up`, `status` and `down` read (local-state.ts). */
function recordServedStack(o: ServeOptions, stack: LocalStack, startedAt: string): void {
  writeLocalState(o.dir, {
    pid: process.pid,
    kubeconfig: stack.kubeconfigPath,
    backend: o.backend,
    servers: o.servers,
    bmcUrl: stack.vbmc.url,
    registryUrl: stack.registryUrl,
    bootServerUrl: stack.bootServerUrl,
    metricsUrl: stack.metricsUrl,
    managerLog: stack.managerLog,
    startedAt,
    osImage: stack.images.osImage,
    shape: {
      firmware: o.firmware ?? 'uefi',
      network: { requested: o.network ?? 'auto', resolved: stack.network ? 'bridge' : 'user' },
      bootMethod: { requested: o.bootMethod ?? 'auto', resolved: stack.bootMethod },
      bmcProfile: o.bmcProfile ?? 'none',
    },
  });
}

/** The FAILED progress line `local up` prints (a silent VM's diagnosis first). */
function reportServeFailure(err: unknown, say: (line: string) => void): void {
  if (err instanceof SilentVmError) {
    for (const line of err.diagnosis.split('\n')) say(`  ${line}`);
    say(
      `FAILED: VM ${err.uuid} shows no sign of life (empty serial console, no boot); if KVM was used, run local down and retry with --accel tcg`,
    );
  } else {
    say(`FAILED: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** What `local up` is asked for: the stack's shape, the overall deadline (s) and whether to claim. */
type UpOptions = ServeOptions & { timeout: number; claim: boolean };

/** `--dir <dir>` for the hints printed, empty for the default folder. */
const dirFlagOf = (dir: string) => (dir === defaultLocalDir() ? '' : ` --dir ${dir}`);

/** `local up`: start or reuse the daemon, apply the example claim, follow it to Booted. */
export async function localUp(o: UpOptions): Promise<number> {
  const t0 = Date.now();
  const end = t0 + o.timeout * 1000;
  let state = readLocalState(o.dir);
  if (!state && runningDaemon(o.dir)) {
    console.error(
      `a local stack is still starting (pid ${runningDaemon(o.dir)}); wait, or run npm run metalctl -- local down --dir ${o.dir}`,
    );
    return 1;
  }
  const differences = state ? shapeDifferences(state, o) : [];
  if (differences.length) {
    console.error(
      `a local stack of another shape is already running in ${o.dir} (pid ${state!.pid}):\n${differences.map((d) => `  ${d}`).join('\n')}\nstop it first (npm run metalctl -- local down${dirFlagOf(o.dir)}) or pick another --dir`,
    );
    return 1;
  }
  if (state) {
    console.log(
      `${stamp(t0)} reusing the running local stack (pid ${state.pid}, ${state.servers} ${state.backend} servers)`,
    );
  } else {
    const code = await startDaemon(o, t0, end);
    if (code !== undefined) return code;
    state = readLocalState(o.dir)!;
  }
  const client = new KubeClient(kubeConfigFrom(state.kubeconfig), { fieldManager: 'metalctl' });
  try {
    console.log(`${stamp(t0)} servers discovered:\n${serversTable(await snapshot(client))}`);
    if (!o.claim) return 0;
    const image = state.osImage ?? OS_IMAGE;
    await applyExampleClaim(client, image);
    console.log(
      `${stamp(t0)} applied ServerClaim ${EXAMPLE_NS}/${EXAMPLE_CLAIM} (image ${image}, NetBootOnce); following it:`,
    );
    const code = await followExampleClaim(client, t0, end);
    if (code !== 0) return code;
    console.log(
      `\nThe stack keeps running. kubectl works against it:\n  export KUBECONFIG=${state.kubeconfig}\n  kubectl get srv,scl,sbc,bmc,bmcsec -A\nStop it with: npm run metalctl -- local down${dirFlagOf(o.dir)}`,
    );
    return 0;
  } finally {
    await client.close();
  }
}

/**
 * Starts `local serve` detached and echoes its progress until READY (undefined); 1 when it failed,
 * exited, or missed `end` (then it is stopped).
 */
async function startDaemon(o: UpOptions, t0: number, end: number): Promise<number | undefined> {
  mkdirSync(o.dir, { recursive: true });
  rmSync(progressPath(o.dir), { force: true });
  const log = openSync(join(o.dir, 'serve.log'), 'a');
  const daemon = spawn(process.execPath, serveArgs(o), { detached: true, stdio: ['ignore', log, log] });
  daemon.unref();
  console.log(`${stamp(t0)} local stack starting in the background (pid ${daemon.pid}; logs in ${o.dir})`);
  let shown = 0;
  let lastBeat = Date.now();
  for (;;) {
    const lines = existsSync(progressPath(o.dir))
      ? readFileSync(progressPath(o.dir), 'utf8').split('\n').filter(Boolean)
      : [];
    for (const line of lines.slice(shown)) {
      if (line !== 'READY' && !line.startsWith('FAILED')) console.log(`${stamp(t0)} ${line}`);
      lastBeat = Date.now();
    }
    shown = lines.length;
    const failed = lines.find((l) => l.startsWith('FAILED'));
    if (failed) {
      console.error(`${stamp(t0)} ${failed}\n(see ${join(o.dir, 'serve.log')})`);
      return 1;
    }
    if (lines.includes('READY')) return undefined;
    if (!alive(daemon.pid!)) {
      console.error(`${stamp(t0)} the local stack exited; see ${join(o.dir, 'serve.log')}`);
      return 1;
    }
    if (Date.now() > end) {
      console.error(`${stamp(t0)} timed out; stopping`);
      await localDown({ dir: o.dir });
      return 1;
    }
    if (Date.now() - lastBeat > 5_000) {
      console.log(`${stamp(t0)} … still working`);
      lastBeat = Date.now();
    }
    await sleep(300);
  }
}

/** The `metalctl local serve` command line of `local up`'s options. */
function serveArgs(o: UpOptions): string[] {
  return [
    join(REPO_ROOT, 'dist', 'src', 'cmd', 'metalctl.js'),
    'local',
    'serve',
    '--dir',
    o.dir,
    '--servers',
    String(o.servers),
    '--backend',
    o.backend,
    ...(o.accel ? ['--accel', o.accel] : []),
    ...(o.firmware ? ['--firmware', o.firmware] : []),
    ...(o.bootMethod ? ['--boot-method', o.bootMethod] : []),
    ...(o.network ? ['--network', o.network] : []),
    ...(o.cleanup ? ['--cleanup'] : []),
    ...(o.inCluster ? ['--in-cluster'] : []),
    ...(o.bmcProfile ? ['--bmc-profile', o.bmcProfile] : []),
  ];
}

/**
 * Shows the servers and claims (redrawn on a TTY, else printed when they change) until the example
 * claim is Booted=True (0); 1 when it ran out of attempts or `end` passed.
 */
async function followExampleClaim(client: KubeClient, t0: number, end: number): Promise<number> {
  const tty = process.stdout.isTTY;
  let lastView = '';
  for (;;) {
    const snap = await snapshot(client);
    const claim = snap.claims.find(
      (c) => c.metadata.name === EXAMPLE_CLAIM && c.metadata.namespace === EXAMPLE_NS,
    );
    const booted = claim?.status?.conditions?.find((c: Condition) => c.type === ConditionType.Booted);
    const view = `${serversTable(snap)}\n\n${claimsTable(snap)}`;
    if (tty)
      process.stdout.write(`\x1b[2J\x1b[H${stamp(t0)} following ${EXAMPLE_NS}/${EXAMPLE_CLAIM}\n${view}\n`);
    else if (view.replace(/\d+m?\d*s\b/g, '') !== lastView.replace(/\d+m?\d*s\b/g, ''))
      console.log(`${stamp(t0)}\n${view}\n`);
    lastView = view;
    if (booted?.status === 'True') {
      if (tty) console.log('');
      console.log(
        `${stamp(t0)} ServerClaim ${EXAMPLE_NS}/${EXAMPLE_CLAIM} is Booted=True (${booted.reason})`,
      );
      return 0;
    }
    if (booted?.reason === BootedReason.AttemptsExhausted) {
      console.error(`${stamp(t0)} the claim ran out of attempts: ${booted.message}`);
      return 1;
    }
    if (Date.now() > end) {
      console.error(`${stamp(t0)} timed out waiting for Booted`);
      return 1;
    }
    await sleep(1_000);
  }
}

/** Applies the example claim booting `image` (the local registry's OCI image; a catalog name also works). */
async function applyExampleClaim(client: KubeClient, image: string): Promise<void> {
  const existing = await client.get<ServerClaim>(Resources.ServerClaim, EXAMPLE_CLAIM, EXAMPLE_NS);
  if (existing) return;
  const servers = (await client.list<Server>(Resources.Server)).items
    .filter((s) => s.status?.state === 'Available')
    .sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''));
  if (!servers[0]) throw new Error('no Available server to claim');
  await client.create(Resources.Secret, {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: `${EXAMPLE_CLAIM}-ignition`, namespace: EXAMPLE_NS },
    data: {
      format: Buffer.from('ignition').toString('base64'),
      ignition: Buffer.from(JSON.stringify({ ignition: { version: '3.4.0' } })).toString('base64'),
    },
  });
  await client.create(Resources.ServerClaim, {
    apiVersion: API_VERSION,
    kind: 'ServerClaim',
    metadata: { name: EXAMPLE_CLAIM, namespace: EXAMPLE_NS },
    spec: {
      power: 'On',
      image,
      serverRef: { name: servers[0].metadata.name },
      ignitionSecretRef: { name: `${EXAMPLE_CLAIM}-ignition` },
      bootPolicy: 'NetBootOnce',
      bootCompletion: { conditions: ['BootStateReceived'], timeout: '5m', maxAttempts: 3 },
    },
  });
}

/**
 * `local down`: SIGTERM to the daemon, which stops every process it started; after 60 s SIGKILL to
 * its whole process group (the daemon is a group leader: `local up` starts it detached), which
 * includes dnsmasq (it does not die with its parent). Then the test network of a daemon that did
 * not finish its shutdown is removed (its namespace, and whatever still runs inside).
 */
export async function localDown(o: { dir: string }): Promise<number> {
  const pid = readLocalState(o.dir)?.pid ?? runningDaemon(o.dir);
  if (!pid) {
    console.log('no local stack is running');
    return 0;
  }
  process.kill(pid, 'SIGTERM');
  const end = Date.now() + 60_000;
  while (alive(pid) && Date.now() < end) await sleep(200);
  if (alive(pid)) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      process.kill(pid, 'SIGKILL'); // not a group leader (started by hand as `local serve`)
    }
    while (alive(pid)) await sleep(100);
  }
  const stale = removeStaleNamespaces();
  if (stale.length) console.log(`removed test network ${stale.join(', ')}`);
  rmSync(statePath(o.dir), { force: true });
  rmSync(daemonPidPath(o.dir), { force: true });
  console.log(`local stack (pid ${pid}) stopped`);
  return 0;
}

export async function localStatus(o: { dir: string }): Promise<number> {
  const state = readLocalState(o.dir);
  if (!state) {
    console.log('no local stack is running (metalctl local up starts one)');
    return 1;
  }
  console.log(
    [
      `pid ${state.pid}, ${state.servers} ${state.backend} servers, up ${since(state.startedAt)}`,
      `kubeconfig:  ${state.kubeconfig}`,
      `virtual BMC: ${state.bmcUrl}`,
      `registry:    ${state.registryUrl}${hostSide(state.registryUrl)}`,
      `boot server: ${state.bootServerUrl}${hostSide(state.bootServerUrl)}`,
      `metrics:     ${state.metricsUrl}/metrics`,
      `manager log: ${state.managerLog}`,
      '',
    ].join('\n'),
  );
  const client = new KubeClient(kubeConfigFrom(state.kubeconfig));
  try {
    const snap = await snapshot(client);
    console.log(`${serversTable(snap)}\n\n${claimsTable(snap)}`);
  } finally {
    await client.close();
  }
  return 0;
}

/** ` (from this host: http://127.0.0.1:P)` for a URL as QEMU guests see it (10.0.2.2). */
function hostSide(url: string): string {
  const u = new URL(url);
  return u.hostname === '10.0.2.2' ? ` (as the VMs see it; from this host: http://127.0.0.1:${u.port})` : '';
}

function kubeConfigFrom(path: string): KubeConfig {
  return loadKubeConfig(path);
}

/** kubeconfig as kubectl would pick it (--kubeconfig, then KUBECONFIG), else the local stack's, else ~/.kube/config. */
function resolveKubeConfig(o: { kubeconfig?: string; dir: string }): KubeConfig {
  if (o.kubeconfig) return loadKubeConfig(o.kubeconfig);
  if (process.env.KUBECONFIG) return loadKubeConfig();
  return loadKubeConfig(readLocalState(o.dir)?.kubeconfig);
}

/** Options of `metalctl get|describe`. */
export interface GetOptions {
  kubeconfig?: string;
  dir: string;
  /** `wide`, `json` or `yaml`; default: the table. */
  output?: string;
  /** Label selector (`-l`). */
  selector?: string;
  /** Claims of this namespace only (`-n`); default, and with `-A`: all namespaces. */
  namespace?: string;
  allNamespaces?: boolean;
}

const SERVER_KINDS = ['servers', 'server', 'srv'];
const CLAIM_KINDS = ['claims', 'claim', 'scl', 'serverclaims', 'serverclaim'];

/** Client for a one-shot command; prints the reason and resolves undefined when there is no kubeconfig. */
function commandClient(o: { kubeconfig?: string; dir: string }): KubeClient | undefined {
  try {
    return new KubeClient(resolveKubeConfig(o), { fieldManager: 'metalctl' });
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    return undefined;
  }
}

/** A list or one object as `kubectl get -o json|yaml` prints it. */
function printObjects(items: object[], single: boolean, format: string): void {
  // As kubectl (--show-managed-fields=false): managedFields are bookkeeping, not state.
  const shown = items.map((i) => {
    const { managedFields: _, ...metadata } = (i as KObject).metadata as KObject['metadata'] & {
      managedFields?: unknown;
    };
    return { ...i, metadata };
  });
  const doc = single ? shown[0] : { apiVersion: 'v1', kind: 'List', items: shown };
  console.log(
    format === 'json' ? JSON.stringify(doc, null, 2) : stringifyYaml(doc, { lineWidth: 0 }).trimEnd(),
  );
}

/** `get servers|claims [NAME]` with `-o wide|json|yaml`, `-l`, `-n`/`-A`. Exit 0, 1 (not found, API), 2 (usage). */
export async function getCommand(what: string, name: string | undefined, o: GetOptions): Promise<number> {
  const servers = SERVER_KINDS.includes(what);
  if (!servers && !CLAIM_KINDS.includes(what)) {
    console.error(`unknown kind ${what}: use servers or claims`);
    return 2;
  }
  if (o.output && !['wide', 'json', 'yaml'].includes(o.output)) {
    console.error(`-o ${o.output}: use wide, json or yaml`);
    return 2;
  }
  const client = commandClient(o);
  if (!client) return 1;
  try {
    const snap = await snapshot(client, {
      labelSelector: o.selector,
      namespace: o.allNamespaces ? undefined : o.namespace,
    });
    if (servers) snap.servers = name ? snap.servers.filter((x) => x.metadata.name === name) : snap.servers;
    else snap.claims = name ? snap.claims.filter((x) => x.metadata.name === name) : snap.claims;
    const items: object[] = servers ? snap.servers : snap.claims;
    if (name && items.length === 0) {
      console.error(`${servers ? 'Server' : 'ServerClaim'} ${name} not found`);
      return 1;
    }
    if (o.output === 'json' || o.output === 'yaml') printObjects(items, !!name, o.output);
    else if (items.length === 0)
      // As kubectl: no table of headers only, a line on stderr, exit 0.
      console.error(
        `No resources found${!servers && o.namespace && !o.allNamespaces ? ` in ${o.namespace} namespace` : ''}.`,
      );
    else
      console.log(
        servers
          ? serversTable(snap, Date.now(), { wide: o.output === 'wide' })
          : claimsTable(snap, Date.now(), { wide: o.output === 'wide' }),
      );
    return 0;
  } catch (err) {
    console.error(String(err));
    return 1;
  } finally {
    await client.close();
  }
}

/** Events about one object (cluster-scoped objects' Events live in `default`), as `describe` shows them. */
async function eventsAbout(
  client: KubeClient,
  kind: string,
  name: string,
  namespace = 'default',
): Promise<EventView[]> {
  const { items } = await client.list<KObject & Record<string, unknown>>(Resources.Event, {
    namespace,
    fieldSelector: `involvedObject.kind=${kind},involvedObject.name=${name}`,
  });
  return items.map((e) => {
    const ev = e as {
      type?: string;
      reason?: string;
      message?: string;
      note?: string;
      count?: number;
      series?: { count?: number; lastObservedTime?: string };
      eventTime?: string;
      lastTimestamp?: string;
      reportingComponent?: string;
      source?: { component?: string };
    };
    return {
      type: ev.type ?? '',
      reason: ev.reason ?? '',
      message: ev.message ?? ev.note ?? '',
      count: ev.series?.count ?? ev.count,
      time: ev.series?.lastObservedTime ?? ev.lastTimestamp ?? ev.eventTime,
      source: ev.reportingComponent || ev.source?.component,
    };
  });
}

/** The text of `describe server NAME` from the cluster (undefined when there is no such Server). */
export async function describeServerFrom(
  client: KubeClient,
  name: string,
  now = Date.now(),
): Promise<string | undefined> {
  const server = await client.get<Server>(Resources.Server, name);
  if (!server) return undefined;
  const bmc = server.spec.bmcRef?.name
    ? await client.get<BMC>(Resources.BMC, server.spec.bmcRef.name)
    : undefined;
  const ref = server.spec.bootConfigurationRef;
  const sbc = ref?.name
    ? await client.get<ServerBootConfiguration>(Resources.ServerBootConfiguration, ref.name, ref.namespace)
    : undefined;
  return describeServer(
    server,
    bmc,
    await eventsAbout(client, 'Server', name),
    now,
    sbc,
    await payloadOf(client, server),
  );
}

/** The registration payload the Server's record names (its ConfigMap's JSON), if any. */
async function payloadOf(client: KubeClient, server: Server): Promise<unknown> {
  const at = registrationRecord(server)?.payload;
  if (!at) return undefined;
  const cm = await client.get<KObject & { data?: Record<string, string> }>(
    Resources.ConfigMap,
    at.name,
    at.namespace,
  );
  const json = cm?.data?.[REGISTRATION_PAYLOAD_KEY];
  try {
    return json === undefined ? undefined : JSON.parse(json);
  } catch {
    return undefined; // a damaged ConfigMap costs the speed column, not the describe
  }
}

/** `describe server NAME`. Exit 0, 1 (not found, API), 2 (usage). */
export async function describeCommand(
  what: string,
  name: string,
  o: { kubeconfig?: string; dir: string },
): Promise<number> {
  if (!SERVER_KINDS.includes(what)) {
    console.error(`describe ${what}: only servers (kubectl describe serverclaim works for claims)`);
    return 2;
  }
  const client = commandClient(o);
  if (!client) return 1;
  try {
    const text = await describeServerFrom(client, name);
    if (text === undefined) {
      console.error(`Server ${name} not found`);
      return 1;
    }
    console.log(text);
    return 0;
  } catch (err) {
    console.error(String(err));
    return 1;
  } finally {
    await client.close();
  }
}

/**
 * The namespace of claim `name`: `namespace` when given, else the only namespace holding a claim of
 * that name. Throws `OpError` (exit 1 none, 2 several: `-n` needed).
 */
export async function claimNamespace(client: KubeClient, name: string, namespace?: string): Promise<string> {
  if (namespace) return namespace;
  const { items } = await client.list<ServerClaim>(Resources.ServerClaim, {
    fieldSelector: `metadata.name=${name}`,
  });
  const found = items.map((c) => c.metadata.namespace ?? '').sort();
  if (found.length === 1) return found[0]!;
  if (found.length === 0) throw new OpError(`ServerClaim ${name} not found in any namespace`);
  throw new OpError(`ServerClaim ${name} exists in namespaces ${found.join(', ')}: pick one with -n`, 2);
}

/**
 * `boots <claim>`: the claim's boot attempts, one line per attempt from `status.boot.history` with
 * the durations power-on → script → ignition → booted (see {@link attemptLine}), then the current
 * phase. The attempt number is the SBC's `spec.bootAttempt` (one numbering everywhere). With
 * `--watch` it follows until the claim is Booted (exit 0) or AttemptsExhausted (exit 2).
 */
export async function bootsCommand(
  name: string,
  o: { namespace?: string; watch?: boolean; kubeconfig?: string; dir: string },
): Promise<number> {
  try {
    const client = new KubeClient(resolveKubeConfig(o));
    let namespace: string;
    try {
      namespace = await claimNamespace(client, name, o.namespace);
    } finally {
      await client.close();
    }
    return await followBoots(name, { ...o, namespace });
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    return err instanceof OpError ? err.exitCode : 1;
  }
}

/** Exit status of `boots` when the claim's attempts are exhausted. */
export const BOOTS_EXHAUSTED_EXIT = 2;

async function followBoots(
  name: string,
  o: { namespace: string; watch?: boolean; kubeconfig?: string; dir: string },
): Promise<number> {
  const client = new KubeClient(resolveKubeConfig(o));
  const seen = new Set<string>();
  try {
    for (;;) {
      const claim = await client.get<ServerClaim>(Resources.ServerClaim, name, o.namespace);
      if (!claim) {
        console.error(`ServerClaim ${o.namespace}/${name} not found`);
        return 1;
      }
      const boot = claim.status?.boot;
      for (const r of boot?.history ?? []) {
        const line = attemptLine(r);
        if (seen.has(line)) continue;
        // A running attempt's line grows: print it again only once it changed.
        seen.add(line);
        console.log(line);
      }
      const booted = claim.status?.conditions?.find((c) => c.type === ConditionType.Booted);
      const state = `${o.namespace}/${name}: attempt ${boot?.attempt ?? '-'} phase ${boot?.phase ?? '-'}  Booted=${booted?.status ?? '-'} (${booted?.reason ?? '-'}) ${booted?.message ?? ''}`;
      if (!seen.has(state)) {
        seen.add(state);
        console.log(state);
      }
      // Refused fetches of the current attempt (the boot server's FetchRefused, issue 28).
      // The claim's current SBC: its Server's bootConfigurationRef when it points into the claim's namespace.
      const serverName = claim.spec.serverRef?.name;
      const ref = serverName
        ? (await client.get<Server>(Resources.Server, serverName))?.spec.bootConfigurationRef
        : undefined;
      const sbc =
        ref?.name && ref.namespace === o.namespace
          ? await client.get<ServerBootConfiguration>(
              Resources.ServerBootConfiguration,
              ref.name,
              ref.namespace,
            )
          : undefined;
      const refused = sbc ? currentAttemptCondition(sbc, ConditionType.FetchRefused) : undefined;
      const refusedLine = refused && `  refused: ${refused.reason}: ${refused.message}`;
      if (refusedLine && !seen.has(refusedLine)) {
        seen.add(refusedLine);
        console.log(refusedLine);
      }
      if (booted?.reason === BootedReason.AttemptsExhausted) return BOOTS_EXHAUSTED_EXIT;
      if (!o.watch || booted?.status === 'True') return 0;
      await sleep(500);
    }
  } finally {
    await client.close();
  }
}

/** Runs one write action against the cluster; prints its result line. */
async function runOp(
  o: { kubeconfig?: string; dir: string },
  action: (client: KubeClient) => Promise<string>,
): Promise<number> {
  let client: KubeClient;
  try {
    client = new KubeClient(resolveKubeConfig(o), { fieldManager: 'metalctl' });
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    return 1;
  }
  try {
    console.log(await action(client));
    return 0;
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    return err instanceof OpError ? err.exitCode : 1;
  } finally {
    await client.close();
  }
}

/** `cordon|uncordon <server>`: the maintenance taint (see src/localstack/server-ops.ts). */
export function cordonCommand(
  name: string,
  cordon: boolean,
  o: { kubeconfig?: string; dir: string; reason?: string; evict?: boolean },
): Promise<number> {
  return runOp(o, (c) => setCordon(c, name, cordon, { reason: o.reason, evict: o.evict }));
}

/** `release <claim> [--force]`: deletes the claim (forced: without power Off observed). */
export function releaseCommand(
  name: string,
  o: { kubeconfig?: string; dir: string; namespace?: string; force?: boolean },
): Promise<number> {
  return runOp(o, (c) => releaseClaim(c, name, o.namespace ?? 'default', !!o.force));
}

/** `retry server|claim <name>`: the retry operation annotation. */
export function retryCommand(
  kind: string,
  name: string,
  o: { kubeconfig?: string; dir: string; namespace?: string; reprovision?: boolean },
): Promise<number> {
  const k = ['server', 'servers', 'srv'].includes(kind)
    ? 'server'
    : ['claim', 'claims', 'scl', 'serverclaim'].includes(kind)
      ? 'claim'
      : undefined;
  if (!k) {
    console.error(`unknown kind ${kind}: use server or claim`);
    return Promise.resolve(2);
  }
  return runOp(o, (c) => requestRetry(c, k, name, o.namespace ?? 'default', { reprovision: o.reprovision }));
}

/** `console <server>`: the Server's serial console through its BMC (see console-command.ts). Exit 0 or 1. */
export async function consoleCommand(
  name: string,
  o: ConsoleOptions & { kubeconfig?: string; dir: string },
): Promise<number> {
  const client = commandClient(o);
  if (!client) return 1;
  try {
    return await runConsole(client, name, o);
  } finally {
    await client.close();
  }
}
