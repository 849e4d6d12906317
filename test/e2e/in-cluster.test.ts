/**
 * in-cluster: the operator installed as users install it, in a real single-node cluster
 * (src/localstack/cluster.ts: kubelet + containerd + kube-proxy + scheduler + controller-manager),
 * from the image the repository's Dockerfile builds and the shipped manifests (`kubectl apply -k`
 * of an overlay that changes only the image and ConfigMap metal-boot-network), its pods under
 * their own ServiceAccounts with the shipped RBAC. QEMU VMs on the test network reach the boot
 * server and registry through the Services' NodePorts, are discovered, and claims boot to
 * Booted=True; then the leader is deleted while a claim boots, and the image is rolled while one
 * boots. Figures (time to Booted, failover, rolling update) are printed as `# figure:` lines.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { waitFor } from '../../src/localstack/control-plane.js';
import { InClusterStack, OPERATOR_NAMESPACE } from '../../src/localstack/in-cluster.js';
import { type KObject, Resources } from '../../src/runtime/resource.js';

const MANAGER = 'metal-operator-controller-manager';
type Lease = KObject & { spec?: { holderIdentity?: string; leaseDurationSeconds?: number } };
let stack: InClusterStack;
let dir: string;

function figure(name: string, value: string): void {
  console.log(`# figure: ${name}: ${value}`);
}

async function servers(): Promise<Server[]> {
  return (await stack.client.list<Server>(Resources.Server)).items;
}

async function claim(name: string): Promise<ServerClaim | undefined> {
  return stack.client.get<ServerClaim>(Resources.ServerClaim, name, 'default');
}

function booted(c: ServerClaim | undefined): boolean {
  return c?.status?.conditions?.some((x) => x.type === 'Booted' && x.status === 'True') ?? false;
}

/** A claim applied with kubectl, as a user writes it (`power: "On"` through kubectl's YAML reading). */
async function applyClaim(name: string, server: string): Promise<number> {
  const yaml = [
    'apiVersion: metal.ironcore.dev/v1alpha1',
    'kind: ServerClaim',
    `metadata: { name: ${name}, namespace: default }`,
    'spec:',
    '  power: "On"',
    `  image: ${stack.images.osImage}`,
    `  serverRef: { name: ${server} }`,
    '',
  ].join('\n');
  const f = join(dir, `${name}.yaml`);
  writeFileSync(f, yaml);
  await stack.kubectl(['apply', '-f', f]);
  return Date.now();
}

async function waitBooted(name: string, timeoutMs = 420_000): Promise<ServerClaim> {
  await waitFor(`claim ${name} Booted`, timeoutMs, async () => booted(await claim(name))).catch(
    async (err) => {
      const c = await claim(name);
      const pods = await stack.kubectl(['get', 'pods', '-A', '-o', 'wide']).catch(() => '');
      const logs = await stack
        .kubectl(['logs', '-n', OPERATOR_NAMESPACE, `deploy/${MANAGER}`, '--tail=30'])
        .catch((e: Error) => e.message);
      throw new Error(`${String(err)}\nclaim status: ${JSON.stringify(c?.status)}\n${pods}\n${logs}`);
    },
  );
  return (await claim(name))!;
}

/** Power-on resets the virtual BMC accepted for the system of `server` since `since` (ms). */
function powerOns(server: Server, since: number): number {
  const sys = stack.vbmc.systems.find((s) => s.uuid === server.spec.systemUUID.toLowerCase());
  assert.ok(sys, `system of ${server.metadata.name}`);
  return stack.vbmc
    .requests()
    .filter(
      (r) =>
        r.at >= since &&
        r.method === 'POST' &&
        r.path.startsWith(sys.uri) &&
        r.path.endsWith('/Actions/ComputerSystem.Reset') &&
        r.status > 0 &&
        r.status < 300,
    ).length;
}

async function leaseHolder(): Promise<string> {
  const l = await stack.client.get<Lease>(Resources.Lease, 'metal-operator', OPERATOR_NAMESPACE);
  return l?.spec?.holderIdentity ?? '';
}

async function managerPods(): Promise<string[]> {
  const out = await stack.kubectl([
    'get',
    'pods',
    '-n',
    OPERATOR_NAMESPACE,
    '-l',
    'app.kubernetes.io/component=manager',
    '--field-selector=status.phase=Running',
    '-o',
    'jsonpath={.items[*].metadata.name}',
  ]);
  return out.split(' ').filter(Boolean);
}

describe('in-cluster: the shipped manifests in a real cluster', { timeout: 2_400_000 }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'metal-in-cluster-'));
    const t0 = Date.now();
    stack = await InClusterStack.start({ dir, servers: 2, progress: (l) => console.log(`# ${l}`) });
    figure('cluster, image and VMs ready', `${((Date.now() - t0) / 1000).toFixed(1)} s`);
  });
  after(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  let available: Server[] = [];

  it('in-cluster: kubectl apply -k config/default runs the operator as pods with the shipped RBAC, and VMs are discovered through the NodePorts', async () => {
    const t0 = Date.now();
    await stack.deployKustomize('default');
    figure('kubectl apply -k to rolled out', `${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const pod = JSON.parse(
      await stack.kubectl([
        'get',
        'pods',
        '-n',
        OPERATOR_NAMESPACE,
        '-l',
        'app.kubernetes.io/component=manager',
        '-o',
        'json',
      ]),
    ).items[0];
    assert.equal(pod.spec.serviceAccountName, MANAGER, 'the manager runs under its own ServiceAccount');
    assert.equal(pod.spec.containers[0].securityContext.readOnlyRootFilesystem, true);
    assert.ok(
      pod.spec.volumes.some(
        (v: { name: string; emptyDir?: { sizeLimit?: string } }) => v.emptyDir?.sizeLimit,
      ),
      'writable emptyDirs with a sizeLimit',
    );
    // No binding of the manager's account to cluster-admin (the shipped ClusterRole only).
    const bindings = JSON.parse(await stack.kubectl(['get', 'clusterrolebindings', '-o', 'json'])).items as {
      roleRef: { name: string };
      subjects?: { name: string }[];
    }[];
    for (const b of bindings.filter((x) => x.roleRef.name === 'cluster-admin'))
      assert.ok(!b.subjects?.some((s) => s.name.startsWith('metal-')), 'no metal-* account is cluster-admin');

    const t1 = Date.now();
    await stack.createBmc();
    await waitFor('2 Servers Available', 600_000, async () => {
      available = (await servers()).filter((s) => s.status?.state === 'Available');
      return available.length === 2;
    }).catch(async (err) => {
      throw new Error(
        `${String(err)}\n${JSON.stringify((await servers()).map((s) => s.status?.conditions))}`,
      );
    });
    figure('BMC created to 2 Servers Available (in-cluster)', `${((Date.now() - t1) / 1000).toFixed(1)} s`);
  });

  it('in-cluster: a ServerClaim applied with kubectl (power "On") reaches Booted=True at attempt 1, one power-on', async () => {
    const server = available[0]!;
    const t0 = await applyClaim('in-cluster-a', server.metadata.name!);
    const c = await waitBooted('in-cluster-a');
    figure('claim applied to Booted=True (in-cluster, 1 VM)', `${((Date.now() - t0) / 1000).toFixed(1)} s`);
    assert.equal(c.status?.boot?.attempt, 1);
    assert.equal(powerOns(server, t0), 1, 'exactly one power action for the claim');
  });

  it('in-cluster: two manager replicas; deleting the leader while a claim boots hands over within the Lease duration, nothing powered twice', async () => {
    await stack.kubectl(['scale', '-n', OPERATOR_NAMESPACE, `deploy/${MANAGER}`, '--replicas=2']);
    await stack.waitForRollouts();
    await waitFor('2 manager pods Running', 120_000, async () => (await managerPods()).length === 2);
    const leader = await leaseHolder();
    const pods = await managerPods();
    const leaderPod = pods.find((p) => leader.startsWith(p));
    assert.ok(leaderPod, `the Lease holder ${leader} is one of ${pods.join(', ')}`);

    const server = available[1]!;
    const t0 = await applyClaim('in-cluster-b', server.metadata.name!);
    // The claim is in the middle of its attempt: powered on, its boot not yet reported.
    await waitFor('claim b powered on', 300_000, async () => {
      const phase = (await claim('in-cluster-b'))?.status?.boot?.phase;
      return phase === 'AwaitingNetboot' || phase === 'AwaitingSignals';
    });
    const killedAt = Date.now();
    await stack.kubectl(['delete', 'pod', '-n', OPERATOR_NAMESPACE, leaderPod!, '--wait=false']);
    let takeover = 0;
    await waitFor('another pod holds the Lease', 120_000, async () => {
      const h = await leaseHolder();
      if (h && !h.startsWith(leaderPod!)) takeover = Date.now() - killedAt;
      return takeover > 0;
    });
    const lease = await stack.client.get<Lease>(Resources.Lease, 'metal-operator', OPERATOR_NAMESPACE);
    const durationMs = (lease?.spec?.leaseDurationSeconds ?? 15) * 1000;
    figure(
      'leader pod deleted to new Lease holder',
      `${(takeover / 1000).toFixed(1)} s (Lease duration ${durationMs / 1000} s)`,
    );
    assert.ok(
      takeover <= durationMs + 5_000,
      `takeover ${takeover} ms within the Lease duration ${durationMs} ms`,
    );
    const c = await waitBooted('in-cluster-b');
    assert.equal(c.status?.boot?.attempt, 1, 'the attempt survived the failover');
    assert.equal(powerOns(server, t0), 1, 'the new leader did not power the server again');
  });

  it('in-cluster: a rolling update to another image tag while a claim boots loses no /bootstate and re-provisions nothing', async () => {
    const [a, b] = available as [Server, Server];
    await stack.kubectl([
      'delete',
      'serverclaim',
      '-n',
      'default',
      'in-cluster-b',
      '--wait=true',
      '--timeout=180s',
    ]);
    await waitFor('server b Available again', 300_000, async () => {
      const s = (await servers()).find((x) => x.metadata.name === b.metadata.name!);
      return s?.status?.state === 'Available';
    });
    const tag = 'rolled';
    await stack.tagImage(tag);
    const t0 = await applyClaim('in-cluster-c', b.metadata.name!);
    await waitFor('claim c powered on', 300_000, async () => {
      const phase = (await claim('in-cluster-c'))?.status?.boot?.phase;
      return phase === 'AwaitingNetboot' || phase === 'AwaitingSignals';
    });
    const rollStart = Date.now();
    await stack.deployKustomize('default', tag);
    figure('rolling update to a new tag rolled out', `${((Date.now() - rollStart) / 1000).toFixed(1)} s`);
    const images = await stack.kubectl([
      'get',
      'deploy',
      '-n',
      OPERATOR_NAMESPACE,
      MANAGER,
      '-o',
      'jsonpath={.spec.template.spec.containers[0].image}',
    ]);
    assert.match(images, /:rolled$/);
    const c = await waitBooted('in-cluster-c');
    assert.equal(c.status?.boot?.attempt, 1, 'no retry: the /bootstate of attempt 1 was not lost');
    assert.equal(powerOns(b, t0), 1, 'one power-on for claim c');
    assert.equal(powerOns(a, rollStart), 0, 'the booted claim a was not re-provisioned');
    assert.ok(booted(await claim('in-cluster-a')), 'claim a stays Booted');
  });
});
