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
import { request } from 'node:http';
import { join } from 'node:path';
import { after, before } from 'node:test';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import type { SecretRef } from '../../src/bootauth/callback-key-secret.js';
import type { AddressMacSource } from '../../src/bootserver/address-source.js';
import { type SignalStack, startSignalStack } from '../../src/cmd/signal-stack.js';
import type { BlobCache } from '../../src/oci/blob-cache.js';
import type { BootImages } from '../../src/oci/boot-images.js';
import { KubeClient } from '../../src/runtime/client.js';
import { newLogger } from '../../src/runtime/logger.js';
import { Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { stablePorts } from '../harness/ports.js';
import { sharedCluster, type TestCluster, testNamespace } from '../harness/shared.js';

export {
  API,
  recordPowerOn,
  SEEDED_BY_LABEL,
  type Seeded,
  seedBootTarget,
  storeTestCallbackKey,
  TEST_CALLBACK_KEY,
  TEST_IMAGE,
  testCatalog,
  testToken,
} from '../../src/testing/boot-target-seed.js';
export { storedRegistration } from '../../src/testing/stored-registration.js';

import {
  recordPowerOn,
  SEEDED_BY_LABEL,
  type Seeded,
  storeTestCallbackKey,
  TEST_CALLBACK_KEY,
  testCatalog,
  testToken,
} from '../../src/testing/boot-target-seed.js';

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
  /** The boot server's UKI prebuilds (`BootServerOptions.prebuildUki`; default on). */
  prebuildUki?: boolean;
  /** OCI images behind the boot server's `/oci/...` route (default: none, catalog images only). */
  oci?: { images: BootImages; cache: BlobCache };
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
      prebuildUki: opts.prebuildUki,
      oci: opts.oci,
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
      // A body the server cut off (its connection closed after the headers) fails, never hangs.
      res.on('error', fail);
      res.on('close', () => {
        if (!res.complete)
          fail(
            new Error(`${method} ${url}: connection closed after status ${res.statusCode}, body incomplete`),
          );
      });
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
