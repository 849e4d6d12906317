/**
 * The generated CRDs against a real kube-apiserver: upstream samples are created unchanged, and the
 * API server's own validation (OpenAPI + CEL) accepts or rejects objects of every kind as designed.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type KubernetesObject, KubernetesObjectApi } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { apiRequest } from '../harness/control-plane.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';

// A file run on its own started a private control plane: stop it, or the process never exits.
after(releaseSharedCluster);

const SAMPLES = join(process.cwd(), '..', 'shared', 'upstream', 'metal-operator', 'samples');
const API = 'metal.ironcore.dev/v1alpha1';

type Obj = KubernetesObject & Record<string, unknown>;
let api: KubernetesObjectApi;
let ns: { name: string; cleanup(): Promise<void> };
const suffix = Math.random().toString(36).slice(2, 7);
/** Cluster-scoped objects this file created, deleted in `after`. */
const clusterScoped: Obj[] = [];

/** Deletes `obj` if it exists (left over from an earlier run) and waits until it is gone. */
async function deleteLeftover(obj: Obj): Promise<void> {
  const ref = { apiVersion: obj.apiVersion!, kind: obj.kind!, metadata: { name: obj.metadata!.name! } };
  await api.delete(ref).catch(() => undefined);
  for (let i = 0; i < 100; i++) {
    try {
      await api.read(ref);
    } catch {
      return;
    }
    await new Promise((ok) => setTimeout(ok, 100));
  }
  throw new Error(`${obj.kind} ${obj.metadata!.name} left over from an earlier run is not going away`);
}

/** Creates `obj`; resolves to undefined on success or the API server's error message. */
async function tryCreate(obj: Obj): Promise<string | undefined> {
  try {
    await api.create(obj);
    return undefined;
  } catch (err) {
    const e = err as { code?: number; body?: string };
    assert.ok(e.code && e.code >= 400 && e.code < 500, `expected a 4xx verdict, got ${String(err)}`);
    return typeof e.body === 'string' ? e.body : JSON.stringify(e.body);
  }
}

function loadSample(file: string): Obj[] {
  return parseAllDocuments(readFileSync(join(SAMPLES, file), 'utf8'))
    .map((d) => d.toJSON() as Obj)
    .filter(Boolean);
}

const claim = (name: string, extra: Record<string, unknown> = {}): Obj => ({
  apiVersion: API,
  kind: 'ServerClaim',
  metadata: { name, namespace: ns.name },
  spec: { power: 'On', image: 'os-image:latest', serverRef: { name: 'srv-x' }, ...extra },
});

describe('CRDs on a real API server', () => {
  before(async () => {
    const kc = (await sharedCluster()).kubeConfig();
    api = KubernetesObjectApi.makeApiClient(kc);
    ns = await testNamespace(kc, 'crd');
  });
  after(async () => {
    // Cluster-scoped objects outlive the namespace; a second run against the same cluster must not meet them.
    for (const o of clusterScoped.reverse()) await api.delete(o).catch(() => undefined);
    await ns.cleanup();
  });

  it('creates every upstream sample unchanged (samples/*.yaml)', async () => {
    const order = [
      'metal_v1alpha1_endpoint.yaml',
      'metal_v1alpha1_bmcsecret.yaml',
      'metal_v1alpha1_bmc.yaml',
      'metal_v1alpha1_server.yaml',
      'metal_v1alpha1_serverbootconfiguration.yaml',
      'metal_v1alpha1_serverclaim.yaml',
      'metal_v1alpha1_bmcuser.yaml',
      'metal_v1alpha1_serverreadinessrule.yaml',
    ];
    for (const file of order) {
      for (const obj of loadSample(file)) {
        if (obj.kind === 'ServerReadinessRule') {
          // Upstream's sample writes `requiredStatus: True` unquoted: YAML 1.1 (kubectl) and 1.2 both
          // read a boolean, which upstream's own CRD (enum of strings) refuses too. Same verdict here,
          // then the object as its author meant it.
          const verdict = await tryCreate(obj);
          assert.match(verdict ?? 'accepted', /requiredStatus in body must be of type string/);
          const spec = obj.spec as { conditions: { requiredStatus: unknown }[] };
          for (const c of spec.conditions)
            c.requiredStatus = String(c.requiredStatus) === 'true' ? 'True' : c.requiredStatus;
        }
        const namespaced = ['ServerClaim', 'ServerBootConfiguration'].includes(obj.kind!);
        if (namespaced) obj.metadata!.namespace = ns.name;
        else {
          // Samples have fixed names: an earlier run against this cluster may have left one.
          await deleteLeftover(obj);
          clusterScoped.push(obj);
        }
        const created = await api.create(obj);
        assert.equal(created.metadata?.name, obj.metadata?.name, file);
      }
    }
    // The Secret samples are owned by the sample SBC; their owner uid is a placeholder to fill in.
    const sbc = await api.read({
      apiVersion: API,
      kind: 'ServerBootConfiguration',
      metadata: { name: 'serverbootconfiguration-sample', namespace: ns.name },
    });
    const ignition = loadSample('ignition_secret.yaml')[0]!;
    ignition.metadata!.namespace = ns.name;
    ignition.metadata!.ownerReferences![0]!.uid = sbc.metadata!.uid!;
    await api.create(ignition);
    // ssh_secret.yaml carries truncated placeholders ("U2tINW...") that are not base64: the API server
    // refuses it for that reason alone, whatever CRDs are installed.
    const ssh = loadSample('ssh_secret.yaml')[0]!;
    ssh.metadata!.namespace = ns.name;
    ssh.metadata!.ownerReferences![0]!.uid = sbc.metadata!.uid!;
    const verdict = await tryCreate(ssh);
    assert.match(verdict ?? '', /base64|illegal/i);
  });

  it('prints upstream printer columns for srv, scl, sbc, bmc, bmcsec (Table API, as kubectl asks)', async () => {
    const kc = (await sharedCluster()).kubeConfig();
    const want: Record<string, string[]> = {
      servers: ['Name', 'SystemUUID', 'Manufacturer', 'Model', 'Memory', 'PowerState', 'State', 'Age'],
      serverclaims: ['Name', 'Server', 'Ignition', 'Image', 'Phase', 'Age'],
      serverbootconfigurations: ['Name', 'ServerRef', 'Image', 'IgnitionRef', 'State', 'Age'],
      bmcs: ['Name', 'MACAddress', 'IP', 'Model', 'State', 'PowerState', 'Age'],
      bmcsecrets: ['Name', 'Age'],
    };
    for (const [plural, columns] of Object.entries(want)) {
      const res = await apiRequest(kc, 'GET', `/apis/${API}/${plural}`, undefined, {
        accept: 'application/json;as=Table;v=v1;g=meta.k8s.io',
      });
      assert.equal(res.status, 200, plural);
      const table = res.json as { columnDefinitions: { name: string; priority: number }[] };
      const shown = table.columnDefinitions.filter((c) => !c.priority).map((c) => c.name);
      assert.deepEqual(shown, columns, plural);
    }
  });

  describe('validation verdicts', () => {
    it('BMC: exactly one of access or endpointRef', async () => {
      const base = { bmcSecretRef: { name: 's' }, protocol: { name: 'Redfish', port: 8000 } };
      const both = await tryCreate({
        apiVersion: API,
        kind: 'BMC',
        metadata: { name: `bmc-both-${suffix}` },
        spec: { ...base, access: { ip: '127.0.0.1' }, endpointRef: { name: 'e' } },
      });
      assert.match(both ?? 'accepted', /exactly one of access or endpointRef/);
      const neither = await tryCreate({
        apiVersion: API,
        kind: 'BMC',
        metadata: { name: `bmc-none-${suffix}` },
        spec: base,
      });
      assert.match(neither ?? 'accepted', /exactly one of access or endpointRef/);
      const ok = await tryCreate({
        apiVersion: API,
        kind: 'BMC',
        metadata: { name: `bmc-ok-${suffix}` },
        spec: { ...base, access: { ip: '127.0.0.1' } },
      });
      assert.equal(ok, undefined);
      clusterScoped.push({ apiVersion: API, kind: 'BMC', metadata: { name: `bmc-ok-${suffix}` } });
    });

    it('ServerClaim: serverRef is immutable', async () => {
      await api.create(claim('immutable'));
      const current = (await api.read({
        apiVersion: API,
        kind: 'ServerClaim',
        metadata: { name: 'immutable', namespace: ns.name },
      })) as Obj;
      (current.spec as Record<string, unknown>).serverRef = { name: 'other' };
      await assert.rejects(api.replace(current), (err: { body?: unknown }) =>
        /serverRef is immutable/.test(String(err.body)),
      );
    });

    it('ServerClaim: bootCompletion and bootPolicy are validated', async () => {
      const cases: [string, Record<string, unknown>, RegExp][] = [
        ['max0', { bootCompletion: { maxAttempts: 0 } }, /maxAttempts/],
        ['max11', { bootCompletion: { maxAttempts: 11 } }, /maxAttempts/],
        ['policy', { bootPolicy: 'NetBootSometimes' }, /bootPolicy/],
        ['timeout', { bootCompletion: { timeout: 'soon' } }, /timeout/],
        ['condtype', { bootCompletion: { conditions: ['not a type!'] } }, /conditions/],
        ['condempty', { bootCompletion: { conditions: [] } }, /conditions/],
      ];
      for (const [name, extra, field] of cases) {
        const verdict = await tryCreate(claim(`bad-${name}`, extra));
        assert.match(verdict ?? 'accepted', field, name);
      }
      const ok = await tryCreate(
        claim('good', {
          bootPolicy: 'NetBootOnce',
          bootCompletion: {
            conditions: ['IPXEScriptFetched', 'BootStateReceived'],
            timeout: '1h30m',
            maxAttempts: 10,
          },
        }),
      );
      assert.equal(ok, undefined);
    });

    it('ServerClaim: image and power are required', async () => {
      // Each one alone: an alternation over both would pass when only one of them were required.
      const noImage = await tryCreate({
        apiVersion: API,
        kind: 'ServerClaim',
        metadata: { name: 'noimage', namespace: ns.name },
        spec: { power: 'On', serverRef: { name: 'x' } },
      });
      assert.match(noImage ?? 'accepted', /spec\.image: Required/);
      const noPower = await tryCreate({
        apiVersion: API,
        kind: 'ServerClaim',
        metadata: { name: 'nopower', namespace: ns.name },
        spec: { image: 'os-image:latest', serverRef: { name: 'x' } },
      });
      assert.match(noPower ?? 'accepted', /spec\.power: Required/);
    });

    it('Server: systemUUID required, taint effect enum, claimRef immutable', async () => {
      const noUUID = await tryCreate({
        apiVersion: API,
        kind: 'Server',
        metadata: { name: `srv-nouuid-${suffix}` },
        spec: {},
      });
      assert.match(noUUID ?? 'accepted', /systemUUID/);
      const badTaint = await tryCreate({
        apiVersion: API,
        kind: 'Server',
        metadata: { name: `srv-taint-${suffix}` },
        spec: {
          systemUUID: '0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d',
          taints: [{ key: 'k', effect: 'Sometimes' }],
        },
      });
      assert.match(badTaint ?? 'accepted', /effect/);
      const name = `srv-claimref-${suffix}`;
      await api.create({
        apiVersion: API,
        kind: 'Server',
        metadata: { name },
        spec: {
          systemUUID: '0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5e',
          serverClaimRef: { name: 'a', namespace: 'n' },
        },
      });
      const current = (await api.read({ apiVersion: API, kind: 'Server', metadata: { name } })) as Obj;
      (current.spec as { serverClaimRef: { name: string } }).serverClaimRef.name = 'b';
      await assert.rejects(api.replace(current), (err: { code?: number; body?: unknown }) => {
        assert.equal(err.code, 422, String(err.body));
        assert.match(String(err.body), /serverClaimRef/);
        return true;
      });
      clusterScoped.push({ apiVersion: API, kind: 'Server', metadata: { name } });
    });

    it('ServerBootConfiguration: bootAttempt >= 1 and bootPolicy enum', async () => {
      const sbc = (name: string, extra: Record<string, unknown>): Obj => ({
        apiVersion: API,
        kind: 'ServerBootConfiguration',
        metadata: { name, namespace: ns.name },
        spec: { serverRef: { name: 's' }, image: 'i', ...extra },
      });
      assert.match((await tryCreate(sbc('a0', { bootAttempt: 0 }))) ?? 'accepted', /bootAttempt/);
      assert.match((await tryCreate(sbc('pol', { bootPolicy: 'Always' }))) ?? 'accepted', /bootPolicy/);
      assert.equal(await tryCreate(sbc('ok', { bootAttempt: 2, bootPolicy: 'NetBootAlways' })), undefined);
    });

    it('BMCSecret: data must be base64', async () => {
      const bad = await tryCreate({
        apiVersion: API,
        kind: 'BMCSecret',
        metadata: { name: `sec-bad-${suffix}` },
        data: { username: 'not base64!!' },
      } as Obj);
      // The schema's `format: byte` refusal for that key (a bare /data/ would match any message
      // mentioning the field, e.g. an unknown-field or type error).
      assert.match(bad ?? 'accepted', /data\.username in body must be of type byte/);
      const good = await tryCreate({
        apiVersion: API,
        kind: 'BMCSecret',
        metadata: { name: `sec-good-${suffix}` },
        data: { username: Buffer.from('admin').toString('base64') },
      } as Obj);
      assert.equal(good, undefined, 'the same object with base64 data is accepted');
    });
  });
});
