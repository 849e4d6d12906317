/**
 * The binding rule of claims with neither `serverRef` nor `serverSelector`, against the real API
 * server: upstream's "any Available Server" by default, stated where users look (`kubectl explain`,
 * the CRD schema the API server serves), and refused with a clear condition under
 * `--require-server-selection`.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { accessSync, constants, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { after, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { SERVER_SELECTION_REQUIRED_REASON } from '../../src/controllers/common/server-selection.js';
import { KubeClient } from '../../src/runtime/client.js';
import { type KObject, Resources, type ResourceType } from '../../src/runtime/resource.js';
import { releaseSharedCluster, sharedCluster } from '../harness/shared.js';
import { availableServers, cond, createClaim, eventually, getClaim, servers, withStack } from './fixture.js';

after(releaseSharedCluster);

const CRDS: ResourceType = {
  group: 'apiextensions.k8s.io',
  version: 'v1',
  kind: 'CustomResourceDefinition',
  plural: 'customresourcedefinitions',
  namespaced: false,
};
const RULE = /neither serverRef nor serverSelector the claim binds ANY Available Server/;

function onPath(tool: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, tool), constants.X_OK);
      return !!dir;
    } catch {
      return false;
    }
  });
}

test('the binding rule is in the schema the API server serves', {
  timeout: 60_000,
}, async () => {
  const cluster = await sharedCluster();
  const client = new KubeClient(cluster.kubeConfig(), { fieldManager: 'metal-test' });
  try {
    const crd = await client.get<
      KObject & {
        spec: {
          versions: {
            name: string;
            schema: {
              openAPIV3Schema: {
                properties: { spec: { properties: Record<string, { description?: string }> } };
              };
            };
          }[];
        };
      }
    >(CRDS, 'serverclaims.metal.ironcore.dev');
    const props = crd!.spec.versions.find((v) => v.name === 'v1alpha1')!.schema.openAPIV3Schema.properties
      .spec.properties;
    for (const field of ['serverSelector', 'serverRef']) {
      assert.match(props[field]!.description ?? '', RULE, field);
      assert.match(props[field]!.description ?? '', /--require-server-selection/, field);
    }
  } finally {
    await client.close();
  }
});

// Its own test so that a machine without kubectl fails it by name rather than dropping the check.
test('kubectl explain shows the binding rule', { timeout: 60_000 }, async () => {
  assert.ok(
    onPath('kubectl'),
    'kubectl is not on PATH: this test needs it (any kubectl >= 1.27, for OpenAPI v3 explain)',
  );
  const cluster = await sharedCluster();
  // kubectl explain reads the API server's OpenAPI v3 document, built from the CRD.
  const out = execFileSync(
    'kubectl',
    ['--kubeconfig', cluster.kubeconfigPath, 'explain', 'serverclaim.spec.serverSelector'],
    { encoding: 'utf8', timeout: 30_000 },
  ).replace(/\s+/g, ' ');
  assert.match(out, RULE);
  assert.match(out, /ServerSelectionRequired/);
});

test('--require-server-selection refuses a claim with neither serverRef nor serverSelector; {} still binds', {
  timeout: 90_000,
}, async () => {
  await withStack('binding-required', { hosts: 1, args: ['--require-server-selection'] }, async (s) => {
    await availableServers(s, 1);
    await createClaim(s, 'anything', { power: 'Off' });
    const refused = await eventually('claim refused', 15_000, async () => {
      const c = await getClaim(s, 'anything');
      return cond(c, 'Bound')?.status === 'False' ? c : undefined;
    });
    assert.equal(cond(refused, 'Bound')?.reason, SERVER_SELECTION_REQUIRED_REASON);
    assert.match(cond(refused, 'Bound')?.message ?? '', /--require-server-selection/);
    assert.equal(refused.status?.phase, 'Unbound');
    assert.equal(refused.spec.serverRef, undefined);
    const [srv] = await servers(s);
    assert.equal(srv!.spec.serverClaimRef, undefined, 'no Server bound');

    // The sample's two claims: neither field (refused here), and an explicit empty selector, which is
    // a selection ("any Available Server", asked for on purpose).
    // The sample's objects are commented out (`#> `) so that applying config/ takes no Server.
    const sampleFile = readFileSync('config/samples/serverclaim-binding.yaml', 'utf8');
    assert.deepEqual(
      parseAllDocuments(sampleFile).filter((d) => d.toJS() !== null),
      [],
      'applying config/samples creates no claim',
    );
    const sampleText = sampleFile
      .split('\n')
      .filter((l) => l.startsWith('#> '))
      .map((l) => l.slice(3))
      .join('\n');
    const samples = parseAllDocuments(sampleText).map((d) => d.toJS() as ServerClaim);
    assert.deepEqual(
      samples.map((c) => [c.metadata.name, c.spec.serverRef, c.spec.serverSelector]),
      [
        ['any-available-server', undefined, undefined],
        ['any-server-on-purpose', undefined, {}],
      ],
    );
    for (const c of samples) {
      await s.client.create(Resources.ServerClaim, {
        ...c,
        metadata: { ...c.metadata, namespace: s.ns, labels: s.labels },
        spec: { ...c.spec, power: 'Off', image: 'test/os:1.0' },
      });
    }
    const sampleRefused = await eventually('sample without selection refused', 15_000, async () => {
      const c = await getClaim(s, 'any-available-server');
      return cond(c, 'Bound')?.status === 'False' ? c : undefined;
    });
    assert.equal(cond(sampleRefused, 'Bound')?.reason, SERVER_SELECTION_REQUIRED_REASON);
    const bound = await eventually('empty selector binds', 15_000, async () => {
      const c = await getClaim(s, 'any-server-on-purpose');
      return cond(c, 'Bound')?.status === 'True' ? c : undefined;
    });
    assert.equal(bound.spec.serverRef?.name, srv!.metadata.name);
    const after = await getClaim(s, 'anything');
    assert.equal(cond(after, 'Bound')?.reason, SERVER_SELECTION_REQUIRED_REASON, 'still refused');
  });
});

test('by default a claim with neither serverRef nor serverSelector binds any Available Server (upstream)', {
  timeout: 90_000,
}, async () => {
  await withStack('binding-default', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    await createClaim(s, 'anything', { power: 'Off' });
    const bound = await eventually('claim bound', 15_000, async () => {
      const c = await getClaim(s, 'anything');
      return cond(c, 'Bound')?.status === 'True' ? c : undefined;
    });
    assert.equal(bound.spec.serverRef?.name, srv!.metadata.name);
    const fresh = await s.client.get<Server>(Resources.Server, srv!.metadata.name!);
    assert.equal(fresh?.spec.serverClaimRef?.name, 'anything');
  });
});
