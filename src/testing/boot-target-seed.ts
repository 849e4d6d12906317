/**
 * Seeds a boot target for tests and benchmarks (not used by the product): a Server and its SBC in
 * state Ready for attempt 1, optionally a ServerClaim owning the SBC and its ignition Secret, the
 * owner's record of the power-on, and the callback key the tokens are derived from
 * ({@link TEST_CALLBACK_KEY}, also storable as the `metal-callback-key` Secret for child processes).
 * Writes through the given KubeClient; API errors propagate.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import { CALLBACK_KEY_DATA_KEY, type SecretRef } from '../bootauth/callback-key-secret.js';
import { CallbackKey } from '../bootauth/callback-token.js';
import { ImageCatalog } from '../oci/image-catalog.js';
import type { KubeClient } from '../runtime/client.js';
import { Resources, type SecretObject } from '../runtime/resource.js';

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
  if (opts.withIgnition) await createIgnitionSecret(client, namespace, `${sbcName}-ignition`);
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

/** The ignition Secret of a seeded SBC: a minimal Ignition 3.4 config with one user. */
async function createIgnitionSecret(client: KubeClient, namespace: string, name: string): Promise<void> {
  await client.create<SecretObject>(Resources.Secret, {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name, namespace },
    data: {
      format: Buffer.from('ignition').toString('base64'),
      ignition: Buffer.from(
        JSON.stringify({ ignition: { version: '3.4.0' }, passwd: { users: [{ name: 'core' }] } }),
      ).toString('base64'),
    },
  });
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
