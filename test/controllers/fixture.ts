/**
 * Test fixture of the controller tests: the manager (controllers + registry + boot server) started
 * in-process by `runManager` against the run's real API server, a virtual BMC whose systems are
 * simulated hosts (sim back end: they fetch `/ipxe/{uuid}`, the ignition, and post `/register` or
 * `/bootstate` like the real agents), and helpers to wait for and count what happened.
 *
 * Every stack gets its own namespace and its own object-selector label, so test files running in
 * parallel (and other suites' objects) never meet each other's controllers. `withStack` runs a test
 * body against a stack and closes it on every path.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { KubeConfig } from '@kubernetes/client-node';
import type { BMC } from '../../src/api/v1alpha1/bmc.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { type RunningManager, runManager } from '../../src/cmd/manager.js';
import { KubeClient } from '../../src/runtime/client.js';
import { findCondition } from '../../src/runtime/conditions.js';
import { newLogger } from '../../src/runtime/logger.js';
import { Resources } from '../../src/runtime/resource.js';
import type { AccountPolicy } from '../../src/virtualbmc/accounts.js';
import {
  type RequestRecord,
  type ServiceProfile,
  startVirtualBmc,
  type VirtualBmc,
} from '../../src/virtualbmc/server.js';
import type { SimHost, SimHostFaults } from '../../src/virtualbmc/sim.js';
import { createSimFleet, type SimFleet } from '../../src/virtualbmc/sim-fleet.js';
import { callbackTokenOf } from '../harness/callback-token.js';
import { type PausableProxy, startPausableProxy } from '../harness/pausable-proxy.js';
import { sharedCluster, testNamespace } from '../harness/shared.js';
import { stopAfter } from '../harness/stop-after.js';

export const API = 'metal.ironcore.dev/v1alpha1';
export const OS_IMAGE = 'test/os:1.0';
export const PROBE_IMAGE = 'test/probe:1.0';
export const MISSING_IMAGE = 'registry.example/does-not-exist:1.0';
export const SCOPE_LABEL = 'metal-test.ironcore.dev/instance';

/** A catalog file with an OS image and a probe image pointing at small files in a temp folder. */
export function catalogFile(): string {
  const dir = mkdtempSync(join(tmpdir(), 'metal-ctl-'));
  writeFileSync(join(dir, 'vmlinuz'), randomBytes(1024));
  writeFileSync(join(dir, 'initrd'), randomBytes(1024));
  const entry = (mode: string) =>
    `    kernel: ${join(dir, 'vmlinuz')}\n    initrd: ${join(dir, 'initrd')}\n    cmdline: console=ttyS0\n    mode: ${mode}\n`;
  const path = join(dir, 'images.yaml');
  writeFileSync(path, `images:\n  ${OS_IMAGE}:\n${entry('os')}  ${PROBE_IMAGE}:\n${entry('probe')}`);
  return path;
}

export interface StackOptions {
  /** Simulated hosts behind one virtual BMC. */
  hosts: number;
  /** Extra manager flags (after the fixture's defaults, so they win). */
  args?: string[];
  simFaults?: Partial<SimHostFaults>;
  /** Variations of the virtual BMC's Redfish service. */
  profile?: Partial<ServiceProfile>;
  /** Do not start the manager (the caller runs it, e.g. as a child process). */
  noManager?: boolean;
  /** Fixed registry / boot-server ports (the caller's child manager listens there). */
  bootServerUrl?: string;
  /** The virtual BMC's AccountService policy (password lengths, lockout). */
  accounts?: Partial<AccountPolicy>;
  /** The manager reaches kube-apiserver through a proxy the test can pause (`Stack.api`). */
  pausableApi?: boolean;
}

export interface Stack {
  kc: KubeConfig;
  kubeconfigPath: string;
  client: KubeClient;
  ns: string;
  scope: string;
  labels: Record<string, string>;
  catalog: string;
  op: RunningManager | undefined;
  vbmc: VirtualBmc;
  fleet: SimFleet;
  bmcName: string;
  /** Flags the fixture gives the manager (for a child-process manager). */
  managerArgs: string[];
  /** With `pausableApi`: the proxy between the manager and kube-apiserver. */
  api?: PausableProxy;
  close(): Promise<void>;
}

/** Starts manager, sim fleet and virtual BMC, and creates the BMC + BMCSecret objects. */
export async function startStack(name: string, o: StackOptions): Promise<Stack> {
  const cluster = await sharedCluster();
  const kc = cluster.kubeConfig();
  const client = new KubeClient(kc, { fieldManager: 'metal-test' });
  const nsHandle = await testNamespace(kc, name);
  const ns = nsHandle.name;
  const scope = ns;
  const labels = { [SCOPE_LABEL]: scope };
  const catalog = catalogFile();
  const api = o.pausableApi ? await startPausableProxy(kc.getCurrentCluster()!.server) : undefined;
  const viaProxy = api && kubeconfigVia(cluster.kubeconfigPath, kc.getCurrentCluster()!.server, api.url);
  const managerArgs = [
    '--kubeconfig',
    viaProxy ?? cluster.kubeconfigPath,
    '--manager-namespace',
    ns,
    '--probe-image',
    PROBE_IMAGE,
    '--image-catalog',
    catalog,
    '--object-selector',
    `${SCOPE_LABEL}=${scope}`,
    '--registry-addr',
    '127.0.0.1:0',
    '--bootserver-addr',
    '127.0.0.1:0',
    '--metrics-port',
    '0',
    '--boot-timeout',
    '2s',
    '--discovery-timeout',
    '10s',
    '--bmc-call-budget',
    '3s',
    '--bmc-request-timeout',
    '2s',
    ...(o.args ?? []),
  ];
  const log = newLogger('metal-test', { level: process.env.LOG_LEVEL ?? 'warn' });
  const op = o.noManager ? undefined : await runManager(managerArgs, { log });
  const bootServerUrl = o.bootServerUrl ?? op?.bootServerUrl;
  if (!bootServerUrl) throw new Error('startStack: no boot server URL');
  const fleet = createSimFleet({ count: o.hosts, bootServerUrl, seed: ns, faults: o.simFaults });
  const vbmc = await startVirtualBmc({
    hosts: fleet.hosts,
    username: 'admin',
    password: 'secret',
    port: 0,
    profile: o.profile,
    ...(o.accounts ? { accounts: o.accounts } : {}),
  });
  const bmcName = `bmc-${ns}`;
  await client.create(Resources.BMCSecret, {
    apiVersion: API,
    kind: 'BMCSecret',
    metadata: { name: bmcName, labels },
    data: { username: b64('admin'), password: b64('secret') },
  });
  const port = Number(new URL(vbmc.url).port);
  await client.create<BMC>(Resources.BMC, {
    apiVersion: API,
    kind: 'BMC',
    metadata: { name: bmcName, labels },
    spec: {
      access: { ip: '127.0.0.1' },
      bmcSecretRef: { name: bmcName },
      protocol: { name: 'Redfish', port, scheme: 'http' },
    },
  });
  let closed = false;
  return {
    kc,
    kubeconfigPath: cluster.kubeconfigPath,
    client,
    ns,
    scope,
    labels,
    catalog,
    op,
    vbmc,
    fleet,
    bmcName,
    managerArgs,
    ...(api ? { api } : {}),
    async close() {
      if (closed) return;
      closed = true;
      const t0 = Date.now();
      const step = async (what: string, p: Promise<unknown> | undefined) => {
        await p;
        if (Date.now() - t0 > 5_000)
          console.error(`stack ${ns}: close slow at ${what}: ${Date.now() - t0} ms`);
      };
      // Hosts first: their keep-alive connections would otherwise hold the manager's HTTP servers open.
      await step('sim fleet', fleet.close());
      api?.resume(); // a held manager could not stop
      await step('manager', op?.stop());
      await step('API proxy', api?.close());
      if (viaProxy) rmSync(dirname(viaProxy), { recursive: true, force: true });
      await step('virtual BMC', vbmc.close());
      // The BMC owns its Servers, but the test control plane runs no garbage collector: delete the
      // cluster-scoped objects this stack made, or a second run against the same cluster meets them.
      await client.delete(Resources.BMC, bmcName).catch(() => undefined);
      await client.delete(Resources.BMCSecret, bmcName).catch(() => undefined);
      const { items } = await client
        .list<Server>(Resources.Server, { labelSelector: `${SCOPE_LABEL}=${scope}` })
        .catch(() => ({ items: [] as Server[] }));
      await Promise.all(
        items.map(async (x) => {
          // The manager is gone: nothing would remove the finalizer of a claimed Server.
          if (x.metadata.finalizers?.length)
            await client
              .mergePatch(Resources.Server, x.metadata.name!, undefined, { metadata: { finalizers: null } })
              .catch(() => undefined);
          await client.delete(Resources.Server, x.metadata.name!).catch(() => undefined);
        }),
      );
      await step('namespace', nsHandle.cleanup());
      await client.close();
    },
  };
}

/** A copy of the kubeconfig at `path` whose server `from` is replaced by `to`; returns its path. */
function kubeconfigVia(path: string, from: string, to: string): string {
  const text = readFileSync(path, 'utf8');
  if (!text.includes(from)) throw new Error(`kubeconfigVia: ${from} not in ${path}`);
  const dir = mkdtempSync(join(tmpdir(), 'metal-kc-'));
  const out = join(dir, 'kubeconfig');
  writeFileSync(out, text.split(from).join(to), { mode: 0o600 });
  return out;
}

/**
 * {@link startStack}, `body(stack)`, then `stack.close()` on every path (test/harness/stop-after.ts):
 * the body's failure stays the test's error, a close failing after it is logged, not thrown.
 */
export async function withStack<T>(
  name: string,
  o: StackOptions,
  body: (stack: Stack) => Promise<T>,
): Promise<T> {
  const s = await startStack(name, o);
  return stopAfter(
    s,
    () => s.close(),
    body,
    (err) =>
      console.error(
        `stack ${s.ns}: close failed after the test had failed (the test error is reported):`,
        err,
      ),
  );
}

export function b64(s: string): string {
  return Buffer.from(s, 'utf8').toString('base64');
}

/**
 * Polls `check` every 50 ms until it returns a value other than undefined/false; throws with `what`
 * after `timeoutMs`. A failed assertion inside `check` (`AssertionError`, code `ERR_ASSERTION`) is
 * a verdict, not a state to wait out: it is rethrown at once. Other errors (an API call failing
 * while the stack settles) are retried and reported with the timeout.
 */
export async function eventually<T>(
  what: string,
  timeoutMs: number,
  check: () => Promise<T | undefined | false> | T | undefined | false,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined && v !== false) return v;
    } catch (err) {
      if ((err as { code?: string }).code === 'ERR_ASSERTION') throw err;
      last = err;
    }
    if (Date.now() > end)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`,
      );
    await new Promise((ok) => setTimeout(ok, 50));
  }
}

/**
 * Sum of the manager's samples of metric `name` whose label text includes every one of `labels`
 * (e.g. `controller="serverclaim"`), read from its /metrics (Prometheus text format).
 */
export async function managerMetric(s: Stack, name: string, ...labels: string[]): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${s.op!.metricsPort}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) || !labels.every((l) => line.includes(l))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** How many reconciles controller `controller` (e.g. `serverclaim`) has finished, any result. */
export function reconciles(s: Stack, controller: string): Promise<number> {
  return managerMetric(s, 'controller_runtime_reconcile_total', `controller="${controller}"`);
}

/**
 * The positive control of a "nothing more happens" check, in place of a fixed window: waits until
 * `controller` has finished at least `more` reconciles beyond `since` (taken before the change) and
 * none is running or queued. Whatever the change would make the controller do (a power action, a
 * write) is done inside those reconciles, so it is visible when this returns. Busy controllers
 * (resyncs, NetBootAlways power reads) never go quiet for long, so the evidence is a count, not a
 * silence. Throws after `timeoutMs` with the last counts seen.
 */
export async function settled(
  s: Stack,
  controller: string,
  since: number,
  { more = 3, timeoutMs = 30_000 }: { more?: number; timeoutMs?: number } = {},
): Promise<void> {
  let seen = '';
  const done = async () => {
    const [n, depth, active] = await Promise.all([
      reconciles(s, controller),
      managerMetric(s, 'workqueue_depth', `name="${controller}"`),
      managerMetric(s, 'controller_runtime_active_workers', `controller="${controller}"`),
    ]);
    seen = `reconciles ${n}, queued ${depth}, running ${active}`;
    return n >= since + more && depth === 0 && active === 0;
  };
  try {
    await eventually(`${more} ${controller} reconciles after ${since}, then idle`, timeoutMs, done);
  } catch (err) {
    throw new Error(`${(err as Error).message} (last seen: ${seen})`);
  }
}

/**
 * A positive control by touch: records `controller`'s reconcile count, edits annotation
 * `metal-test.ironcore.dev/poke` of the claim `name` (in the stack's namespace) and waits
 * ({@link settled}) for one more reconcile and an idle queue, `times` times. Whatever the controller
 * would do with the object as it stands is done when this returns.
 */
export async function pokeClaim(s: Stack, name: string, times = 2): Promise<void> {
  // One edit, one reconcile, then the next: edits sent together may be one queued key, one reconcile.
  for (let n = 1; n <= times; n++) {
    const since = await reconciles(s, 'serverclaim');
    await s.client.mergePatch(Resources.ServerClaim, name, s.ns, {
      metadata: { annotations: { 'metal-test.ironcore.dev/poke': `${Date.now()}-${n}` } },
    });
    await settled(s, 'serverclaim', since, { more: 1 });
  }
}

/** {@link pokeClaim} for the (cluster-scoped) Server `name` and the `server` controller. */
export async function pokeServer(s: Stack, name: string, times = 2): Promise<void> {
  // One edit, one reconcile, then the next: edits sent together may be one queued key, one reconcile.
  for (let n = 1; n <= times; n++) {
    const since = await reconciles(s, 'server');
    await s.client.mergePatch(Resources.Server, name, undefined, {
      metadata: { annotations: { 'metal-test.ironcore.dev/poke': `${Date.now()}-${n}` } },
    });
    await settled(s, 'server', since, { more: 1 });
  }
}

/**
 * The first Event on object `kind`/`name` (in `namespace`; `default` for cluster-scoped objects)
 * that `match` accepts, waited for: Events are recorded fire-and-forget after the write they tell of,
 * so a list taken right after the condition may not have them yet. Throws after `timeoutMs` with the
 * Events seen.
 */
export async function eventMatching(
  s: Stack,
  kind: string,
  name: string,
  namespace: string,
  match: (e: { type: string; reason: string; message: string }) => boolean,
  timeoutMs = 15_000,
): Promise<{ type: string; reason: string; message: string }> {
  let seen: unknown[] = [];
  try {
    return await eventually(`an Event on ${kind} ${name}`, timeoutMs, async () => {
      const events = await eventsFor(s, kind, name, namespace);
      seen = events;
      return events.find(match);
    });
  } catch (err) {
    throw new Error(`${(err as Error).message} (got ${JSON.stringify(seen)})`);
  }
}

/** The stack's Servers (by the scope label). */
export async function servers(s: Stack): Promise<Server[]> {
  const { items } = await s.client.list<Server>(Resources.Server, {
    labelSelector: `${SCOPE_LABEL}=${s.scope}`,
  });
  return items.sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''));
}

/** Waits until `n` Servers are Available; returns them. */
export function availableServers(s: Stack, n: number, timeoutMs = 30_000): Promise<Server[]> {
  return eventually(`${n} Available servers`, timeoutMs, async () => {
    const list = await servers(s);
    // status.powerState may still be the pre-boot reading: the host itself must be off too.
    const avail = list.filter(
      (x) =>
        x.status?.state === 'Available' &&
        x.status.powerState === 'Off' &&
        s.vbmc.systems.find((h) => h.id === x.spec.systemUUID)?.host.powerState() === 'Off',
    );
    return avail.length >= n ? avail : undefined;
  });
}

export async function getClaim(s: Stack, name: string): Promise<ServerClaim | undefined> {
  return s.client.get<ServerClaim>(Resources.ServerClaim, name, s.ns);
}

export async function getSbc(s: Stack, name: string): Promise<ServerBootConfiguration | undefined> {
  return s.client.get<ServerBootConfiguration>(Resources.ServerBootConfiguration, name, s.ns);
}

/**
 * The SBC `name`'s current attempt and the token a host is given for it (derived with the key
 * the manager keeps in its namespace, the stack's), or undefined while either is not there.
 */
export async function currentToken(
  s: Stack,
  name: string,
): Promise<{ attempt: number; token: string } | undefined> {
  const sbc = await getSbc(s, name);
  if (!sbc) return undefined;
  const token = await callbackTokenOf(s.client, s.ns, sbc);
  return token ? { attempt: sbc.spec.bootAttempt ?? 1, token } : undefined;
}

export function cond(
  obj: { status?: { conditions?: Parameters<typeof findCondition>[0] } } | undefined,
  type: string,
) {
  return findCondition(obj?.status?.conditions, type);
}

export interface ClaimSpec {
  serverRef?: string;
  selector?: Record<string, string>;
  image?: string;
  power?: 'On' | 'Off';
  bootPolicy?: 'NetBootAlways' | 'NetBootOnce';
  completion?: string[];
  timeout?: string;
  maxAttempts?: number;
  ignition?: string;
}

export async function createClaim(s: Stack, name: string, c: ClaimSpec): Promise<ServerClaim> {
  return s.client.create<ServerClaim>(Resources.ServerClaim, {
    apiVersion: API,
    kind: 'ServerClaim',
    metadata: { name, namespace: s.ns, labels: s.labels },
    spec: {
      power: c.power ?? 'On',
      image: c.image ?? OS_IMAGE,
      ...(c.serverRef ? { serverRef: { name: c.serverRef } } : {}),
      ...(c.selector ? { serverSelector: { matchLabels: c.selector } } : {}),
      ...(c.bootPolicy ? { bootPolicy: c.bootPolicy } : {}),
      ...(c.ignition ? { ignitionSecretRef: { name: c.ignition } } : {}),
      ...(c.completion || c.timeout || c.maxAttempts
        ? {
            bootCompletion: {
              ...(c.completion ? { conditions: c.completion } : {}),
              ...(c.timeout ? { timeout: c.timeout } : {}),
              ...(c.maxAttempts ? { maxAttempts: c.maxAttempts } : {}),
            },
          }
        : {}),
    },
  });
}

/** Requests to one system of the virtual BMC. */
export function systemRequests(s: Stack, uuid: string): RequestRecord[] {
  const sys = s.vbmc.systems.find((x) => x.id === uuid.toLowerCase());
  if (!sys) throw new Error(`no system ${uuid}`);
  return s.vbmc.requests().filter((r) => r.path.startsWith(sys.uri) && r.status > 0 && r.status < 300);
}

/** ResetTypes accepted by the virtual BMC for a system, in order. */
export function resets(s: Stack, uuid: string): string[] {
  return systemRequests(s, uuid)
    .filter((r) => r.method === 'POST' && r.path.endsWith('/Actions/ComputerSystem.Reset'))
    .map((r) => String((r.body as { ResetType?: string } | undefined)?.ResetType));
}

/**
 * Every ResetType the manager sent to a system, accepted or refused (any status, dropped
 * connections included): what a "no power action" check must count, since a refused POST is still
 * an attempt to power the host. {@link resets} counts the accepted ones only.
 */
export function resetsSent(s: Stack, uuid: string): string[] {
  const sys = s.vbmc.systems.find((x) => x.id === uuid.toLowerCase());
  if (!sys) throw new Error(`no system ${uuid}`);
  return s.vbmc
    .requests()
    .filter((r) => r.method === 'POST' && r.path === `${sys.uri}/Actions/ComputerSystem.Reset`)
    .map((r) => String((r.body as { ResetType?: string } | undefined)?.ResetType));
}

/** Every boot-override PATCH sent to a system, accepted or refused (see {@link resetsSent}). */
export function overridesSent(s: Stack, uuid: string): Record<string, string>[] {
  const sys = s.vbmc.systems.find((x) => x.id === uuid.toLowerCase());
  if (!sys) throw new Error(`no system ${uuid}`);
  return s.vbmc
    .requests()
    .filter((r) => r.method === 'PATCH' && r.path.startsWith(sys.uri))
    .map((r) => (r.body as { Boot?: Record<string, string> } | undefined)?.Boot ?? {});
}

/** Boot override PATCHes accepted for a system (their `Boot` bodies). */
export function overrides(s: Stack, uuid: string): Record<string, string>[] {
  return systemRequests(s, uuid)
    .filter((r) => r.method === 'PATCH')
    .map((r) => (r.body as { Boot?: Record<string, string> } | undefined)?.Boot ?? {});
}

/** Sets faults on every sim host (after discovery, so the probe still registers). */
export function setSimFaults(s: Stack, f: Partial<SimHostFaults>): void {
  for (const h of s.fleet.hosts) h.setFaults(f);
}

/** The sim host of a Server. */
export function hostOf(s: Stack, server: Server): SimHost {
  const sys = s.vbmc.systems.find((x) => x.id === server.spec.systemUUID);
  if (!sys) throw new Error(`no host for ${server.metadata.name}`);
  return sys.host as SimHost;
}

/** Events about an object, oldest first. */
export async function eventsFor(
  s: Stack,
  kind: string,
  name: string,
  namespace = s.ns,
): Promise<{ type: string; reason: string; message: string }[]> {
  const { items } = await s.client.list<{
    metadata: Record<string, string>;
    involvedObject?: { kind?: string; name?: string };
    type: string;
    reason: string;
    message: string;
    eventTime?: string;
    firstTimestamp?: string;
  }>(Resources.Event, { namespace });
  return items
    .filter((e) => e.involvedObject?.kind === kind && e.involvedObject?.name === name)
    .sort((a, b) =>
      String(a.eventTime ?? a.firstTimestamp).localeCompare(String(b.eventTime ?? b.firstTimestamp)),
    )
    .map((e) => ({ type: e.type, reason: e.reason, message: e.message }));
}
