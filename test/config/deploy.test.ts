/**
 * The deployable manifests against a real API server: `kubectl apply -k config/signals` (the whole
 * layout, config/default included) and `kubectl apply -k config/samples` as a user runs them (not
 * dry-run; kubectl's own YAML reading: a sample claim with `power: "On"` is refused by a CRD whose
 * enum kubectl read as booleans), then the manager runs the way it does in a cluster, with the ServiceAccount's token from
 * the TokenRequest API and only the RBAC of `config/rbac/`, and does its whole job: discovery of a
 * simulated system and a claim to Booted, with no request forbidden. The API server runs the
 * `OwnerReferencesPermissionEnforcement` admission plugin (OpenShift's default): setting an owner
 * reference with `blockOwnerDeletion` needs `update` on the owner's `finalizers` (security review S8).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse, stringify } from 'yaml';
import { API_VERSION } from '../../src/api/v1alpha1/schema.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { apiRequest, ControlPlane, kubeconfigYaml, waitFor } from '../../src/localstack/control-plane.js';
import { OS_IMAGE, PROBE_IMAGE, writeImageCatalog } from '../../src/localstack/vm-artefacts.js';
import { KubeClient } from '../../src/runtime/client.js';
import { loadKubeConfig as kubeConfigFile } from '../../src/runtime/kubeconfig.js';
import { Resources } from '../../src/runtime/resource.js';
import { startVirtualBmc, type VirtualBmc } from '../../src/virtualbmc/server.js';
import { createSimFleet, type SimFleet } from '../../src/virtualbmc/sim-fleet.js';
import { stablePorts } from '../harness/ports.js';
import { CONFIG, kubectl, kustomize, type Manifest, readAsKubectl } from './kubectl.js';

/** What `kubectl apply -k config/signals` applies (the whole layout: config/default plus the replicas), as kubectl reads it. */
function manifests(): Manifest[] {
  return readAsKubectl(kustomize(join(CONFIG, 'signals')));
}

/**
 * `$(VAR)` in a container's args expanded from its env as the kubelet does (values, and
 * configMapKeyRef from the applied ConfigMaps); unknown variables stay as written.
 */
function expandArgs(container: Container, objects: Manifest[]): string[] {
  const env = new Map<string, string>();
  for (const e of container.env ?? []) {
    const ref = e.valueFrom?.configMapKeyRef;
    const cm = ref && objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === ref.name);
    const v =
      e.value ?? (cm ? (cm as unknown as { data: Record<string, string> }).data[ref!.key] : undefined);
    if (v !== undefined) env.set(e.name, v);
  }
  return container.args.map((a) => a.replace(/\$\((\w+)\)/g, (m, n: string) => env.get(n) ?? m));
}

type Container = {
  args: string[];
  env?: { name: string; value?: string; valueFrom?: { configMapKeyRef?: { name: string; key: string } } }[];
};

/** `kubectl apply -k config/signals`, then `-k config/samples` once the CRDs are Established: the install path of the README. */
async function deployConfig(): Promise<{ created: number; kinds: Set<string> }> {
  const kubeconfig = ['--kubeconfig', cp.kubeconfigPath];
  const out = kubectl([...kubeconfig, 'apply', '-k', join(CONFIG, 'signals')]);
  kubectl([...kubeconfig, 'wait', '--for=condition=Established', 'crd', '--all', '--timeout=60s']);
  const samples = kubectl([...kubeconfig, 'apply', '-k', join(CONFIG, 'samples')]);
  const lines = `${out}${samples}`.split('\n').filter((l) => / (created|configured|unchanged)$/.test(l));
  const kinds = new Set(
    [...manifests(), ...readAsKubectl(readFileSync(join(CONFIG, 'samples', 'example.yaml'), 'utf8'))].map(
      (o) => o.kind,
    ),
  );
  return { created: lines.length, kinds };
}

let cp: ControlPlane;
let deployed: { created: number; kinds: Set<string> };
let admin: KubeClient;
let dir: string;
let manager: ChildProcess | undefined;
let vbmc: VirtualBmc | undefined;
let fleet: SimFleet | undefined;

describe('config/ deployed on a real API server', { timeout: 240_000 }, () => {
  before(async () => {
    cp = await ControlPlane.start({
      installCRDs: false,
      apiServerArgs: ['--enable-admission-plugins=OwnerReferencesPermissionEnforcement'],
    });
    admin = new KubeClient(cp.kubeConfig(), { fieldManager: 'test' });
    dir = mkdtempSync(join(tmpdir(), 'metal-config-'));
    deployed = await deployConfig();
  });
  after(async () => {
    if (manager && manager.exitCode === null) {
      manager.kill('SIGTERM');
      await new Promise((ok) => manager!.once('exit', ok));
    }
    await vbmc?.close();
    await fleet?.close();
    await admin?.close();
    await cp?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('creates every object under config/', async () => {
    // The creation itself runs in `before` (the next test needs the objects whatever runs first).
    assert.ok(deployed.created >= 15, `created ${deployed.created} objects`);
    assert.ok(
      deployed.kinds.has('Deployment') && deployed.kinds.has('ConfigMap'),
      [...deployed.kinds].join(),
    );
  });

  it('N9: what each ServiceAccount could read of Secrets, asked of the API server (kubectl auth can-i)', () => {
    // `can-i` prints yes (exit 0) or no (exit 1); anything else is an error of the question.
    const can = (sa: string, what: string[]) => {
      const r = spawnSync(
        'kubectl',
        [
          '--kubeconfig',
          cp.kubeconfigPath,
          'auth',
          'can-i',
          `--as=system:serviceaccount:metal-system:${sa}`,
          ...what,
        ],
        { encoding: 'utf8' },
      );
      const answer = r.stdout.trim();
      if (answer !== 'yes' && answer !== 'no')
        throw new Error(`can-i ${what.join(' ')}: ${r.stdout}${r.stderr}`);
      return answer === 'yes';
    };
    const cases: [string, boolean, string[]][] = [
      // The registry: the callback key by name and nothing else.
      ['metal-registry', true, ['get', 'secrets/metal-callback-key', '-n', 'metal-system']],
      ['metal-registry', false, ['get', 'secrets/tenant-ignition', '-n', 'default']],
      ['metal-registry', false, ['get', 'secrets/other', '-n', 'metal-system']],
      ['metal-registry', false, ['list', 'secrets', '-n', 'metal-system']],
      // The boot server: Secrets by name (ignition, pull Secret), never a listing.
      ['metal-bootserver', true, ['get', 'secrets/tenant-ignition', '-n', 'default']],
      ['metal-bootserver', false, ['list', 'secrets', '--all-namespaces']],
      ['metal-bootserver', false, ['watch', 'secrets', '--all-namespaces']],
      ['metal-bootserver', false, ['update', 'secrets/tenant-ignition', '-n', 'default']],
      // The manager: by name; creates only in its namespace (the key); never update or list.
      ['metal-operator-controller-manager', true, ['get', 'secrets/tenant-ignition', '-n', 'default']],
      ['metal-operator-controller-manager', true, ['create', 'secrets', '-n', 'metal-system']],
      ['metal-operator-controller-manager', false, ['create', 'secrets', '-n', 'default']],
      ['metal-operator-controller-manager', false, ['update', 'secrets/tenant-ignition', '-n', 'default']],
      [
        'metal-operator-controller-manager',
        false,
        ['update', 'secrets/metal-callback-key', '-n', 'metal-system'],
      ],
      ['metal-operator-controller-manager', false, ['list', 'secrets', '--all-namespaces']],
      [
        'metal-operator-controller-manager',
        false,
        ['delete', 'secrets/metal-callback-key', '-n', 'metal-system'],
      ],
    ];
    const wrong = cases.filter(([sa, want, what]) => can(sa, what) !== want);
    assert.deepEqual(
      wrong.map(([sa, want, what]) => `${sa} ${want ? 'cannot' : 'can'} ${what.join(' ')}`),
      [],
    );
  });

  it('S8: the manager does its job with the ServiceAccount token and config/rbac alone, owner references enforced', async () => {
    const kc = cp.kubeConfig();
    const tr = await apiRequest(
      kc,
      'POST',
      '/api/v1/namespaces/metal-system/serviceaccounts/metal-operator-controller-manager/token',
      {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenRequest',
        spec: { expirationSeconds: 3600 },
      },
    );
    assert.equal(tr.status, 201, tr.text);
    const token = (tr.json as { status: { token: string } }).status.token;
    const saKubeconfig = join(dir, 'sa-kubeconfig');
    writeFileSync(saKubeconfig, kubeconfigYaml(cp.server, cp.caFile, token));
    // The token is not an admin: listing Nodes is forbidden to it.
    const nodes = await apiRequest(kubeConfigFile(saKubeconfig), 'GET', '/api/v1/nodes');
    assert.equal(nodes.status, 403);

    writeFileSync(join(dir, 'vmlinuz'), 'sim');
    writeFileSync(join(dir, 'initramfs.cpio.gz'), 'sim');
    const [rp, bp, mp] = (await stablePorts(3)) as [number, number, number];
    fleet = createSimFleet({
      count: 1,
      bootServerUrl: `http://127.0.0.1:${bp}`,
      seed: 'config',
      timing: { firmwareMs: 100, kernelMs: 200 },
    });
    vbmc = await startVirtualBmc({ hosts: fleet.hosts, username: 'admin', password: 'pw', port: 0 });
    // The Deployment's own flags, so the ConfigMap catalog (its informer and RBAC) is what runs;
    // only the listen addresses and advertised URLs move to loopback ports of this test.
    const objects = manifests();
    const deployment = objects.find(
      (o) => o.kind === 'Deployment' && o.metadata.name === 'metal-operator-controller-manager',
    ) as unknown as { spec: { template: { spec: { containers: Container[] } } } };
    // Where a user edits ConfigMap metal-boot-network, and the listen addresses and cache folder of
    // this test's process (the Deployment's are a pod's).
    const local: Record<string, string> = {
      '--registry-addr': `127.0.0.1:${rp}`,
      '--registry-url': `http://127.0.0.1:${rp}`,
      '--bootserver-addr': `127.0.0.1:${bp}`,
      '--bootserver-url': `http://127.0.0.1:${bp}`,
      '--metrics-port': String(mp),
      '--probe-image': PROBE_IMAGE,
      '--image-cache-dir': join(dir, 'blobs'),
    };
    const manifestArgs = expandArgs(deployment.spec.template.spec.containers[0]!, objects);
    assert.ok(
      !manifestArgs.some((a) => a.includes('$(')),
      `every $(VAR) has a value: ${manifestArgs.join(' ')}`,
    );
    // The probe joins the (empty) shipped catalog as a user adds it, before the manager starts.
    const fullCatalog = readFileSync(writeImageCatalog(dir, join(dir, 'images.yaml')), 'utf8');
    const probeOnly = {
      images: {
        [PROBE_IMAGE]: (parse(fullCatalog) as { images: Record<string, unknown> }).images[PROBE_IMAGE],
      },
    };
    await admin.mergePatch(Resources.ConfigMap, 'metal-image-catalog', 'metal-system', {
      data: { 'images.yaml': stringify(probeOnly) },
    });
    assert.ok(
      manifestArgs.includes('--image-catalog-configmap=metal-system/metal-image-catalog'),
      manifestArgs.join(' '),
    );
    const args = manifestArgs.map((a) => {
      const [flag] = a.split('=');
      return flag && local[flag] !== undefined ? `${flag}=${local[flag]}` : a;
    });
    // The sample claims proved they apply; left in place they would bind the one simulated server first.
    for (const o of manifests().filter((x) => x.kind === 'ServerClaim')) {
      const md = (o as { metadata: { name: string; namespace?: string } }).metadata;
      await admin.delete(Resources.ServerClaim, md.name, md.namespace ?? 'default');
    }
    const log = join(dir, 'manager.log');
    const fd = openSync(log, 'a');
    manager = spawn(
      process.execPath,
      [join(process.cwd(), 'dist', 'src', 'cmd', 'manager.js'), `--kubeconfig=${saKubeconfig}`, ...args],
      { stdio: ['ignore', fd, fd] },
    );
    closeSync(fd);
    await admin.create(Resources.BMCSecret, {
      apiVersion: API_VERSION,
      kind: 'BMCSecret',
      metadata: { name: 'cfg-bmc' },
      data: {
        username: Buffer.from('admin').toString('base64'),
        password: Buffer.from('pw').toString('base64'),
      },
    });
    // The sample claims (config/samples) would race cfg-claim for the one discovered Server.
    for (const c of (await admin.list<ServerClaim>(Resources.ServerClaim)).items) {
      await admin.delete(Resources.ServerClaim, c.metadata.name ?? '', c.metadata.namespace);
    }
    await admin.create(Resources.BMC, {
      apiVersion: API_VERSION,
      kind: 'BMC',
      metadata: { name: 'cfg-bmc' },
      spec: {
        access: { ip: '127.0.0.1' },
        bmcSecretRef: { name: 'cfg-bmc' },
        protocol: { name: 'Redfish', port: Number(new URL(vbmc.url).port), scheme: 'http' },
      },
    });
    const uuid = fleet.hosts[0]!.identity.uuid;
    let server: Server | undefined;
    await waitFor('discovered server Available', 90_000, async () => {
      server = (await admin.list<Server>(Resources.Server)).items.find((s) => s.spec.systemUUID === uuid);
      return server?.status?.state === 'Available';
    }).catch((err) => {
      throw new Error(`${String(err)}\n${readFileSync(log, 'utf8').split('\n').slice(-15).join('\n')}`);
    });
    // The OS image joins the catalog through the ConfigMap while the manager runs.
    await admin.mergePatch(Resources.ConfigMap, 'metal-image-catalog', 'metal-system', {
      data: { 'images.yaml': fullCatalog },
    });
    await admin.create(Resources.ServerClaim, {
      apiVersion: API_VERSION,
      kind: 'ServerClaim',
      metadata: { name: 'cfg-claim', namespace: 'default' },
      spec: { power: 'On', image: OS_IMAGE, serverRef: { name: server!.metadata.name } },
    });
    await waitFor('claim Booted', 90_000, async () => {
      const c = await admin.get<ServerClaim>(Resources.ServerClaim, 'cfg-claim', 'default');
      return c?.status?.conditions?.some((x) => x.type === 'Booted' && x.status === 'True') ?? false;
    }).catch(async (err) => {
      const c = await admin.get<ServerClaim>(Resources.ServerClaim, 'cfg-claim', 'default');
      throw new Error(
        `${String(err)}\nclaim conditions: ${JSON.stringify(c?.status?.conditions)}\n${readFileSync(log, 'utf8').split('\n').slice(-15).join('\n')}`,
      );
    });
    // Leader election used the Lease in metal-system.
    const lease = await admin.get(Resources.Lease, 'metal-operator', 'metal-system');
    assert.ok(lease, 'leader Lease exists');
    // Every API request the manager made, by status code, from its own metrics.
    const metrics = await (await fetch(`http://127.0.0.1:${mp}/metrics`)).text();
    const codes = new Map<string, number>();
    for (const m of metrics.matchAll(/^rest_client_requests_total\{([^}]*)\} (\d+(?:\.\d+)?)$/gm)) {
      const code = /code="(\d+)"/.exec(m[1]!)?.[1] ?? '?';
      codes.set(code, (codes.get(code) ?? 0) + Number(m[2]));
    }
    assert.ok(
      (codes.get('200') ?? 0) > 0 && (codes.get('201') ?? 0) > 0,
      `requests by code: ${JSON.stringify([...codes])}`,
    );
    assert.equal(codes.get('403') ?? 0, 0, 'no request of the manager was forbidden');
    assert.equal(codes.get('401') ?? 0, 0, 'no request of the manager was unauthenticated');
  });
});
