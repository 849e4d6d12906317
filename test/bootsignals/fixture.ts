/**
 * Test fixture for the registry and the boot server: seeds what the controllers would have made
 * (a Server pointing at its current SBC, the SBC Ready and controlled by its owner — the Server for
 * a discovery attempt, a ServerClaim for a claim attempt — and the owner's record of the attempt's
 * power-on), starts attempts as the controllers do, and runs the signal servers in-process or as
 * child processes (for SIGKILL tests). Tokens are derived with {@link TEST_CALLBACK_KEY}, the key
 * every stack of this fixture is given (a child process reads it from a Secret, {@link storeTestCallbackKey}). Everything talks to the real
 * API server of the test run. {@link useSignalStack} is a suite's whole lifecycle of an in-process
 * stack: cluster, client, namespace and stack up in `before`, torn down in reverse in `after`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { CALLBACK_KEY_DATA_KEY, type SecretRef } from '../../src/bootauth/callback-key-secret.js';
import { CallbackKey } from '../../src/bootauth/callback-token.js';
import type { AddressMacSource } from '../../src/bootserver/address-source.js';
import { type SignalStack, startSignalStack } from '../../src/cmd/signal-stack.js';
import { ImageCatalog } from '../../src/oci/image-catalog.js';
import { KubeClient } from '../../src/runtime/client.js';
import { newLogger } from '../../src/runtime/logger.js';
import { Resources, type SecretObject } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { stablePorts } from '../harness/ports.js';
import { sharedCluster, type TestCluster, testNamespace } from '../harness/shared.js';

export const API = 'metal.ironcore.dev/v1alpha1';
export const TEST_IMAGE = 'test/os:1.0';
/** Label on every cluster-scoped Server a test seeds: the namespace of the test that owns it. */
export const SEEDED_BY_LABEL = 'metal-test.ironcore.dev/seeded-by';
/** The callback key of every stack this fixture starts (and of the tokens it derives). */
export const TEST_CALLBACK_KEY = CallbackKey.generate();

/** The token of `sbc`'s attempt `attempt` (default: its `spec.bootAttempt`) under {@link TEST_CALLBACK_KEY}. */
export function testToken(sbc: ServerBootConfiguration, attempt?: number): string {
  return TEST_CALLBACK_KEY.tokenFor({
    uid: sbc.metadata.uid!,
    attempt: attempt ?? sbc.spec.bootAttempt ?? 1,
  });
}

/** Stores {@link TEST_CALLBACK_KEY} as Secret `metal-callback-key` in `namespace` (for child processes). */
export async function storeTestCallbackKey(client: KubeClient, namespace: string): Promise<SecretRef> {
  const ref = { namespace, name: 'metal-callback-key' };
  await client.create<SecretObject>(Resources.Secret, {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: ref,
    data: { [CALLBACK_KEY_DATA_KEY]: TEST_CALLBACK_KEY.bytes().toString('base64') },
  });
  return ref;
}

export interface Seeded {
  uuid: string;
  server: Server;
  sbc: ServerBootConfiguration;
  /** The token of attempt 1. */
  token: string;
  /** `discovery`: the SBC is controlled by the Server; `claim`: by the ServerClaim {@link claim}. */
  flow: 'discovery' | 'claim';
  claim?: ServerClaim;
}

/** A catalog with {@link TEST_IMAGE} pointing at small files in a temp folder. */
export function testCatalog(): ImageCatalog {
  const dir = mkdtempSync(join(tmpdir(), 'metal-img-'));
  writeFileSync(join(dir, 'vmlinuz'), randomBytes(4096));
  writeFileSync(join(dir, 'initrd'), randomBytes(2048));
  return ImageCatalog.parse(
    `images:\n  ${TEST_IMAGE}:\n    kernel: ${join(dir, 'vmlinuz')}\n    initrd: ${join(dir, 'initrd')}\n    cmdline: console=ttyS0\n`,
  );
}

/**
 * Creates Server + SBC (state Ready, attempt 1) and, unless `powerOnRecorded` is
 * false, the owner's record of the attempt's power-on. `uuid` may be in any case.
 */
export async function seedBootTarget(
  client: KubeClient,
  namespace: string,
  opts: {
    uuid?: string;
    policy?: 'NetBootAlways' | 'NetBootOnce';
    image?: string;
    withIgnition?: boolean;
    flow?: 'discovery' | 'claim';
    powerOnRecorded?: boolean;
    /** `spec.bootMethod` of the SBC (default: none, i.e. PXE). */
    bootMethod?: 'PXE' | 'HTTPBoot';
  } = {},
): Promise<Seeded> {
  const uuid = opts.uuid ?? randomUUID();
  const flow = opts.flow ?? 'discovery';
  const name = `srv-${uuid.toLowerCase().slice(0, 8)}-${randomBytes(2).toString('hex')}`;
  const sbcName = `${name}-boot`;
  if (opts.withIgnition) {
    await client.create<SecretObject>(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: `${sbcName}-ignition`, namespace },
      data: {
        format: Buffer.from('ignition').toString('base64'),
        ignition: Buffer.from(
          JSON.stringify({ ignition: { version: '3.4.0' }, passwd: { users: [{ name: 'core' }] } }),
        ).toString('base64'),
      },
    });
  }
  const server = await client.create<Server>(Resources.Server, {
    apiVersion: API,
    kind: 'Server',
    metadata: { name, labels: { [SEEDED_BY_LABEL]: namespace } },
    spec: { systemUUID: uuid, bootConfigurationRef: { name: sbcName, namespace } },
  });
  const claim =
    flow === 'claim'
      ? await client.create<ServerClaim>(Resources.ServerClaim, {
          apiVersion: API,
          kind: 'ServerClaim',
          metadata: { name, namespace },
          spec: { power: 'On', image: opts.image ?? TEST_IMAGE, serverRef: { name } },
        })
      : undefined;
  const owner = claim ?? server;
  const created = await client.create<ServerBootConfiguration>(Resources.ServerBootConfiguration, {
    apiVersion: API,
    kind: 'ServerBootConfiguration',
    metadata: {
      name: sbcName,
      namespace,
      ownerReferences: [
        {
          apiVersion: API,
          kind: claim ? 'ServerClaim' : 'Server',
          name,
          uid: owner.metadata.uid!,
          controller: true,
        },
      ],
    },
    spec: {
      serverRef: { name },
      image: opts.image ?? TEST_IMAGE,
      bootAttempt: 1,
      bootPolicy: opts.policy ?? 'NetBootAlways',
      ...(opts.bootMethod ? { bootMethod: opts.bootMethod } : {}),
      ...(opts.withIgnition ? { ignitionSecretRef: { name: `${sbcName}-ignition` } } : {}),
    },
  });
  const sbc = await client.mergePatch<ServerBootConfiguration>(
    Resources.ServerBootConfiguration,
    sbcName,
    namespace,
    { status: { state: 'Ready', attemptGeneration: created.metadata.generation } },
    { subresource: 'status' },
  );
  const seeded: Seeded = { uuid, server, sbc, token: testToken(sbc, 1), flow, claim };
  if (opts.powerOnRecorded !== false) await recordPowerOn(client, seeded, 1);
  return seeded;
}

/**
 * Writes the owner's record of the power-on of `attempt` as the controllers do before they ask the
 * BMC: `poweredOnAt` in `status.discovery` of the Server or `status.boot` of the claim.
 */
export async function recordPowerOn(client: KubeClient, s: Seeded, attempt: number): Promise<void> {
  const at = new Date();
  const book = {
    attempt,
    poweredOnAt: at.toISOString(),
    deadline: new Date(at.getTime() + 600_000).toISOString(),
  };
  if (s.flow === 'claim') {
    await client.mergePatch(
      Resources.ServerClaim,
      s.claim!.metadata.name!,
      s.claim!.metadata.namespace,
      { status: { boot: { series: 1, ...book } } },
      { subresource: 'status' },
    );
  } else {
    await client.mergePatch(
      Resources.Server,
      s.server.metadata.name!,
      undefined,
      { status: { discovery: book } },
      { subresource: 'status' },
    );
  }
}

/**
 * Deletes the cluster-scoped Servers seeded for `namespace` (label {@link SEEDED_BY_LABEL}): the
 * namespace's deletion does not take them along, and a later run against the same cluster would
 * find a second Server with a fixed UUID (409). Call from `after`.
 */
export async function deleteSeededServers(client: KubeClient, namespace: string): Promise<void> {
  const { items } = await client.list<Server>(Resources.Server, {
    labelSelector: `${SEEDED_BY_LABEL}=${namespace}`,
  });
  for (let i = 0; i < items.length; i += 50) {
    await Promise.all(
      items
        .slice(i, i + 50)
        .map((x) => client.delete(Resources.Server, x.metadata.name!).catch(() => undefined)),
    );
  }
}

/** Starts the next attempt as the controllers do: bump bootAttempt (the token changes with it), record attemptGeneration and the power-on. */
export async function nextAttempt(
  client: KubeClient,
  s: Seeded,
): Promise<{ token: string; attempt: number }> {
  const ns = s.sbc.metadata.namespace!;
  const current = await client.get<ServerBootConfiguration>(
    Resources.ServerBootConfiguration,
    s.sbc.metadata.name!,
    ns,
  );
  const next = { attempt: (current!.spec.bootAttempt ?? 1) + 1 };
  const bumped = await client.mergePatch<ServerBootConfiguration>(
    Resources.ServerBootConfiguration,
    s.sbc.metadata.name!,
    ns,
    { spec: { bootAttempt: next.attempt } },
  );
  await client.mergePatch(
    Resources.ServerBootConfiguration,
    s.sbc.metadata.name!,
    ns,
    { status: { attemptGeneration: bumped.metadata.generation } },
    { subresource: 'status' },
  );
  await recordPowerOn(client, s, next.attempt);
  return { token: testToken(bumped), attempt: next.attempt };
}

/** Reads the SBC and returns one condition (or undefined). */
export async function sbcCondition(client: KubeClient, s: Seeded, type: string) {
  const sbc = await client.get<ServerBootConfiguration>(
    Resources.ServerBootConfiguration,
    s.sbc.metadata.name!,
    s.sbc.metadata.namespace,
  );
  return { sbc: sbc!, cond: sbc?.status?.conditions?.find((c) => c.type === type) };
}

/** Waits until the stack's caches hold the seeded objects (the servers read caches only). */
export async function waitCached(stack: SignalStack, s: Seeded): Promise<void> {
  const ns = s.sbc.metadata.namespace;
  await waitFor('informer caches', 10_000, () => {
    const srv = stack.sources.servers.get(s.server.metadata.name!);
    const sbc = stack.sources.sbcs.get(s.sbc.metadata.name!, ns);
    return !!srv && sbc?.status?.state === 'Ready';
  });
}

/** Options of {@link startTestStack}. */
export interface TestStackOptions {
  callbackAuth?: 'required' | 'optional';
  pin?: boolean;
  timeouts?: { requestMs?: number; headersMs?: number; keepAliveMs?: number; idleMs?: number };
  tls?: { cert: string; key: string };
  /** 401 budget per client address (default: the servers' own, see auth-failure-limit.ts). */
  authFailureLimit?: { burst?: number; perSecond?: number };
  /** The boot server's address → MAC source (`--client-mac-source`; default none). */
  clientMacSource?: AddressMacSource;
  /** Where both servers log (default: a `test-signals` logger at LOG_LEVEL, else warn). */
  log?: Logger;
  /** Read {@link TEST_CALLBACK_KEY} from a Secret as the standalone servers do (default: given in-process). */
  callbackKey?: SecretRef;
  /** {@link useSignalStack} only: store the key in the suite's namespace and pass it as {@link callbackKey}. */
  keyFromSecret?: boolean;
}

/** A running {@link startTestStack}: the signal stack and the base URLs of its two servers. */
export type TestStack = SignalStack & { registryUrl: string; bootUrl: string };

/** In-process registry + boot server on free loopback ports. */
export async function startTestStack(kc: KubeConfig, opts: TestStackOptions = {}): Promise<TestStack> {
  const [rp, bp] = await stablePorts(2);
  const registryUrl = `${opts.tls ? 'https' : 'http'}://127.0.0.1:${rp}`;
  const stack = await startSignalStack({
    callbackKey: opts.callbackKey ?? TEST_CALLBACK_KEY,
    kubeConfig: kc,
    log: opts.log ?? newLogger('test-signals', { level: process.env.LOG_LEVEL ?? 'warn' }),
    registry: {
      host: '127.0.0.1',
      port: rp!,
      callbackAuth: opts.callbackAuth ?? 'required',
      timeouts: opts.timeouts,
      tls: opts.tls,
      authFailureLimit: opts.authFailureLimit,
    },
    bootServer: {
      host: '127.0.0.1',
      port: bp!,
      timeouts: opts.timeouts,
      tls: opts.tls,
      authFailureLimit: opts.authFailureLimit,
      registryUrl,
      catalog: (() => {
        const c = testCatalog();
        return () => c;
      })(),
      pinScriptClient: opts.pin ?? true,
      clientMacSource: opts.clientMacSource,
    },
  });
  return { ...stack, registryUrl, bootUrl: stack.bootServer!.url };
}

/** What {@link useSignalStack} sets up for its suite. */
export interface SignalStackFixture {
  cluster: TestCluster;
  client: KubeClient;
  namespace: Awaited<ReturnType<typeof testNamespace>>;
  stack: TestStack;
}

/**
 * Registers `before` and `after` hooks (node:test) on the suite it is called in. `before` attaches
 * to the run's cluster ({@link sharedCluster}), makes a client, a namespace `<prefix>-<random>` and
 * a {@link startTestStack} with `opts` (a function is called first, for options that can only be
 * made then, such as a certificate). `after` closes the stack, deletes the Servers seeded for the
 * namespace ({@link deleteSeededServers}), deletes the namespace and closes the client, each only as
 * far as `before` got; an error of a step fails the hook and skips the steps after it.
 *
 * The returned object is empty until `before` has run: read its fields in tests and later hooks.
 * Stopping the control plane (`releaseSharedCluster`) stays with the test file.
 */
export function useSignalStack(
  prefix: string,
  opts: TestStackOptions | (() => TestStackOptions) = {},
): SignalStackFixture {
  const fixture: Partial<SignalStackFixture> = {};
  before(async () => {
    const stackOpts = typeof opts === 'function' ? opts() : opts;
    fixture.cluster = await sharedCluster();
    const kc = fixture.cluster.kubeConfig();
    fixture.client = newTestClient(kc);
    fixture.namespace = await testNamespace(kc, prefix);
    const callbackKey = stackOpts.keyFromSecret
      ? await storeTestCallbackKey(fixture.client, fixture.namespace.name)
      : stackOpts.callbackKey;
    fixture.stack = await startTestStack(kc, { ...stackOpts, callbackKey });
  });
  after(async () => {
    const { stack, client, namespace } = fixture;
    await stack?.close();
    if (namespace && client) await deleteSeededServers(client, namespace.name);
    await namespace?.cleanup();
    await client?.close();
  });
  return fixture as SignalStackFixture;
}

/** A registry child process (`dist/src/cmd/registry.js`) on a fixed port, for SIGKILL tests. */
export async function spawnRegistry(
  kubeconfigPath: string,
  port: number,
  key: SecretRef,
): Promise<ChildProcess> {
  const child = spawn(
    process.execPath,
    [
      join(process.cwd(), 'dist', 'src', 'cmd', 'registry.js'),
      '--kubeconfig',
      kubeconfigPath,
      `--callback-key-secret=${key.namespace}/${key.name}`,
      '--addr',
      `127.0.0.1:${port}`,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } },
  );
  child.stdout!.on('data', () => undefined);
  child.stderr!.on('data', () => undefined);
  // Listening is the signal: the registry starts listening only after its caches synced.
  await waitFor('registry child listening', 30_000, async () => {
    if (child.exitCode !== null) return true;
    try {
      await (await fetch(`http://127.0.0.1:${port}/systems/x`)).arrayBuffer();
      return true;
    } catch {
      return false;
    }
  });
  if (child.exitCode !== null) throw new Error(`registry exited with ${child.exitCode}`);
  return child;
}

/** GET from a chosen loopback source address (127.0.0.0/8 is all local on Linux). */
export function getFrom(
  url: string,
  localAddress: string,
  headers: Record<string, string> = {},
  method = 'GET',
): Promise<{ status: number; text: string; headers: Record<string, unknown> }> {
  return new Promise((ok, fail) => {
    const req = request(url, { localAddress, headers, method }, (res) => {
      let text = '';
      res.on('data', (c) => {
        text += c;
      });
      res.on('end', () => ok({ status: res.statusCode ?? 0, text, headers: res.headers }));
    });
    req.on('error', fail);
    req.end();
  });
}

/** POST JSON; returns status, parsed body and headers. Never throws on HTTP status. */
export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, text, headers: res.headers };
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

export function newTestClient(kc: KubeConfig): KubeClient {
  return new KubeClient(kc, { fieldManager: 'metal-test' });
}
