/**
 * Hand-made ServerBootConfigurations, created as upstream users and other controllers do (the shape
 * of upstream's sample: `serverRef`, `image`, `ignitionSecretRef`; no `bootAttempt`), against the
 * real API server, the manager and a simulated host behind the virtual BMC: the SBC becomes Ready
 * without anything written into its spec and without a Secret (its callback token is derived from
 * its uid and attempt 1, security review N9), and the host boots through the boot server to every
 * signal authenticated with that token.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, test } from 'node:test';
import { parse } from 'yaml';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import { attemptSignals } from '../../src/controllers/common/boot-configuration.js';
import { MAINTENANCE_TAINT_KEY } from '../../src/controllers/server/taints.js';
import { Resources, type SecretObject } from '../../src/runtime/resource.js';
import { callbackTokenOf } from '../harness/callback-token.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  cond,
  eventsFor,
  eventually,
  getSbc,
  hostOf,
  OS_IMAGE,
  type Stack,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

const SIGNALS = ['IPXEScriptFetched', 'IgnitionDataFetched', 'BootStateReceived'];

/** Upstream's sample SBC (../shared/upstream), placed in the stack's namespace and scope. */
function upstreamSampleSbc(
  s: Stack,
  name: string,
  server: string,
  ignition: string | undefined,
): ServerBootConfiguration {
  const sample = parse(
    readFileSync(
      '../shared/upstream/metal-operator/samples/metal_v1alpha1_serverbootconfiguration.yaml',
      'utf8',
    ),
  ) as ServerBootConfiguration;
  assert.deepEqual(Object.keys(sample.spec).sort(), ['ignitionSecretRef', 'image', 'serverRef']);
  const spec: Record<string, unknown> = { ...sample.spec, serverRef: { name: server }, image: OS_IMAGE };
  if (ignition) spec.ignitionSecretRef = { name: ignition };
  else delete spec.ignitionSecretRef;
  return {
    ...sample,
    metadata: {
      ...sample.metadata,
      name,
      namespace: s.ns,
      labels: { ...sample.metadata.labels, ...s.labels },
    },
    spec: spec as ServerBootConfiguration['spec'],
  };
}

test('N9: a hand-made upstream-style SBC needs no callback Secret and boots a sim host to all signals', {
  timeout: 90_000,
}, async () => {
  await withStack('handmade', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const serverName = srv!.metadata.name!;
    await s.client.create<SecretObject>(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'my-ignition', namespace: s.ns, labels: s.labels },
      data: {
        ignition: Buffer.from(JSON.stringify({ ignition: { version: '3.4.0' } })).toString('base64'),
      },
    });
    const sbcBody = upstreamSampleSbc(s, 'handmade', serverName, 'my-ignition');
    assert.equal(sbcBody.spec.bootAttempt, undefined);
    const secretsBefore = (await s.client.list<SecretObject>(Resources.Secret, { namespace: s.ns })).items
      .length;
    await s.client.create(Resources.ServerBootConfiguration, sbcBody);

    const sbc = await eventually('SBC Ready', 20_000, async () => {
      const b = await getSbc(s, 'handmade');
      return b?.status?.state === 'Ready' ? b : undefined;
    });
    assert.equal(sbc.metadata.generation, 1, 'nothing written into the spec');
    assert.equal(
      (await s.client.list<SecretObject>(Resources.Secret, { namespace: s.ns })).items.length,
      secretsBefore,
      'no Secret created for its callbacks',
    );
    assert.equal(sbc.status?.attemptGeneration, sbc.metadata.generation);
    assert.equal(sbc.spec.image, OS_IMAGE, 'the user spec is kept');
    // No claim or Server tells this SBC's story: its Ready keeps an Event of its own.
    const ready = await eventually('Ready Event on the hand-made SBC', 10_000, async () =>
      (await eventsFor(s, 'ServerBootConfiguration', 'handmade')).find(
        (e) => e.reason === 'BootConfigurationReady',
      ),
    );
    assert.equal(ready.type, 'Normal');

    // As upstream's users and controllers do: point the Server at the SBC and network-boot it. The
    // Server is cordoned (the documented way into Maintenance), where this operator leaves power to
    // whoever runs the boot.
    await s.client.mergePatch(Resources.Server, serverName, undefined, {
      spec: {
        taints: [{ key: MAINTENANCE_TAINT_KEY, value: 'handmade-boot', effect: 'NoBind' }],
        bootConfigurationRef: { name: 'handmade', namespace: s.ns },
      },
    });
    await eventually('Server in Maintenance', 20_000, async () => {
      const x = await s.client.get<Server>(Resources.Server, serverName);
      return x?.status?.state === 'Maintenance';
    });
    const host = hostOf(s, srv!);
    const before = host.bootCount;
    await host.powerOn('Pxe');
    const done = await eventually('all signals of the attempt', 30_000, async () => {
      const b = await getSbc(s, 'handmade');
      return b && attemptSignals(b, SIGNALS).missing.length === 0 ? b : undefined;
    });
    assert.deepEqual(attemptSignals(done, SIGNALS).arrived, SIGNALS);
    assert.equal(cond(done, 'BootStateReceived')?.reason, 'Booted', 'authenticated with the derived token');
    const token = await callbackTokenOf(s.client, s.ns, done);
    assert.equal(token?.split('.')[0], '1', 'the token of attempt 1');
    await eventually('host up', 10_000, () => host.lastBoot?.phase === 'up');
    assert.equal(host.bootCount, before + 1);
    assert.equal(host.lastBoot?.source, 'network');
    assert.equal(host.lastBoot?.callbackStatus, 200);
  });
});

test('a hand-made SBC without ignitionSecretRef is Ready and says "no ignition configured"', {
  timeout: 60_000,
}, async () => {
  await withStack('handmade-noign', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    await s.client.create(
      Resources.ServerBootConfiguration,
      upstreamSampleSbc(s, 'no-ignition', srv!.metadata.name!, undefined),
    );
    const sbc = await eventually('SBC Ready', 20_000, async () => {
      const b = await getSbc(s, 'no-ignition');
      return b?.status?.state === 'Ready' ? b : undefined;
    });
    assert.match(cond(sbc, 'Ready')?.message ?? '', /no ignition configured/);
  });
});
