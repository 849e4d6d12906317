/**
 * The Helm chart renders what the kustomizations build (issue 27: "helm template renders the same
 * objects as kustomize up to labels"): `helm lint` is clean; `helm template` with the default values
 * gives the objects of `kubectl kustomize config/default` (and with signals.enabled=true those of
 * config/signals), compared by kind/namespace/name and field by field after dropping labels and
 * annotations (Helm adds its own; the selectors, and the pod labels they select, must stay equal);
 * and each documented value lands where it should. No API server: both tools render offline, and
 * both outputs are read as kubectl reads YAML (1.1).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { CHART, helm, helmInstallArgs, helmTemplate, helmValuesFor, NAMESPACE } from './helm.js';
import { CONFIG, kustomize, type Manifest, readAsKubectl } from './kubectl.js';

type Obj = Record<string, unknown>;
type Container = {
  name: string;
  image: string;
  args?: string[];
  env?: Obj[];
  volumeMounts?: Obj[];
  [k: string]: unknown;
};
type PodSpec = { containers: Container[]; volumes?: Obj[] };

const keyOf = (o: Manifest) => `${o.kind} ${o.metadata.namespace ?? '-'}/${o.metadata.name}`;

function byKey(docs: Manifest[]): Map<string, Manifest> {
  const m = new Map<string, Manifest>();
  for (const d of docs) {
    assert.ok(!m.has(keyOf(d)), `${keyOf(d)} rendered once`);
    m.set(keyOf(d), d);
  }
  return m;
}

/** A copy without metadata.labels/annotations and pod-template labels (returned beside it). */
function withoutLabels(o: Manifest): { bare: Manifest; podLabels?: Record<string, string> } {
  const bare = structuredClone(o);
  delete bare.metadata.labels;
  delete (bare.metadata as Obj).annotations;
  const tmpl = (
    bare.spec as { template?: { metadata?: { labels?: Record<string, string>; annotations?: unknown } } }
  )?.template;
  const podLabels = tmpl?.metadata?.labels;
  if (tmpl?.metadata) {
    delete tmpl.metadata.labels;
    delete tmpl.metadata.annotations;
  }
  return { bare, podLabels };
}

/** Asserts that `rendered` holds exactly the objects of `built`, equal up to labels and annotations. */
function assertSameObjects(rendered: Manifest[], built: Manifest[]): void {
  const got = byKey(rendered);
  const want = byKey(built);
  assert.deepEqual([...got.keys()].sort(), [...want.keys()].sort(), 'the same kind/namespace/name set');
  for (const [key, w] of want) {
    const g = withoutLabels(got.get(key) as Manifest);
    const k = withoutLabels(w);
    assert.deepEqual(g.bare, k.bare, `${key} equal up to labels and annotations`);
    // The pod labels the selectors (Deployments, Services, PDBs, NetworkPolicy) match are kept.
    for (const [name, value] of Object.entries(k.podLabels ?? {}))
      assert.equal(g.podLabels?.[name], value, `${key}: pod label ${name}`);
    // And kustomize's object labels (the ServiceMonitor selects component=metrics) are kept too.
    for (const [name, value] of Object.entries(w.metadata.labels ?? {}))
      assert.equal(got.get(key)?.metadata.labels?.[name], value, `${key}: label ${name}`);
  }
}

const render = (values: Record<string, string> = {}, ns?: string) => readAsKubectl(helmTemplate(values, ns));
const find = (docs: Manifest[], kind: string, name: string) => {
  const o = docs.find((d) => d.kind === kind && d.metadata.name === name);
  assert.ok(o, `${kind} ${name} is rendered`);
  return o;
};
const pod = (d: Manifest) => (d.spec as { template: { spec: PodSpec } }).template.spec;
const container = (docs: Manifest[], name: string) =>
  pod(find(docs, 'Deployment', name)).containers[0] as Container;
const envValue = (c: Container, name: string) =>
  (c.env?.find((e) => e.name === name) as { value?: string })?.value;
const deployments = ['metal-operator-controller-manager', 'metal-registry', 'metal-bootserver'];

describe('charts/metal-operator', () => {
  it('helm lint is clean, with the defaults and with signals.enabled=true', () => {
    for (const set of [[], ['--set', 'signals.enabled=true'], ['--set', 'tls.secretName=metal-tls']]) {
      const out = helm(['lint', '--strict', CHART, ...set]);
      assert.match(out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
      assert.doesNotMatch(out, /\[(WARNING|ERROR)\]/, out);
    }
  });

  it('the defaults render the objects of kubectl kustomize config/default (the Namespace with namespace.create=true)', () => {
    const built = readAsKubectl(kustomize(join(CONFIG, 'default')));
    assertSameObjects(render({ 'namespace.create': 'true' }), built);
    // Without namespace.create (Helm's `--create-namespace` convention) only the Namespace is missing.
    assertSameObjects(
      render(),
      built.filter((o) => o.kind !== 'Namespace'),
    );
  });

  it('signals.enabled=true renders the objects of kubectl kustomize config/signals', () => {
    const built = readAsKubectl(kustomize(join(CONFIG, 'signals')));
    assertSameObjects(render({ 'namespace.create': 'true', 'signals.enabled': 'true' }), built);
  });

  it('image, boot-network URLs, replicas and node ports land in every Deployment, the ConfigMap and the Services', () => {
    const docs = render({
      'signals.enabled': 'true',
      'image.repository': 'registry.example:5000/metal/manager',
      'image.tag': 'v9.9.9',
      'image.pullPolicy': 'Always',
      'bootNetwork.registryUrl': 'http://192.0.2.10:30100',
      'bootNetwork.bootserverUrl': 'http://192.0.2.10:30082',
      'bootNetwork.probeImage': 'registry.example:5000/metal/probe:v1',
      'bootNetwork.allowedRegistries': 'ghcr.io,registry.example:5000',
      'bootNetwork.insecureRegistries': 'registry.example:5000',
      replicas: '2',
      'signals.replicas': '3',
      'nodePorts.registry': '31100',
      'nodePorts.bootserver': '31082',
    });
    for (const name of deployments) {
      const c = container(docs, name);
      assert.equal(c.image, 'registry.example:5000/metal/manager:v9.9.9', name);
      assert.equal(c.imagePullPolicy, 'Always', name);
    }
    assert.deepEqual(find(docs, 'ConfigMap', 'metal-boot-network').data, {
      'registry-url': 'http://192.0.2.10:30100',
      'bootserver-url': 'http://192.0.2.10:30082',
      'probe-image': 'registry.example:5000/metal/probe:v1',
      'allowed-registries': 'ghcr.io,registry.example:5000',
      'insecure-registries': 'registry.example:5000',
    });
    const replicas = (name: string) => (find(docs, 'Deployment', name).spec as { replicas: number }).replicas;
    assert.equal(replicas('metal-operator-controller-manager'), 2);
    assert.equal(replicas('metal-registry'), 3);
    assert.equal(replicas('metal-bootserver'), 3);
    const nodePort = (name: string) =>
      (find(docs, 'Service', name).spec as { ports: { nodePort: number }[] }).ports[0]?.nodePort;
    assert.equal(nodePort('metal-registry'), 31100);
    assert.equal(nodePort('metal-bootserver'), 31082);
    // The default tag is the chart's appVersion, as config/default's `images:` pins it.
    assert.equal(
      container(render(), 'metal-operator-controller-manager').image,
      'ghcr.io/metal-operator-ts/manager:v0.1.0',
    );
  });

  it('resources go to their container, and the V8 heap limit follows limits.memory (75 %)', () => {
    const docs = render({
      'signals.enabled': 'true',
      'resources.requests.cpu': '250m',
      'resources.limits.memory': '1Gi',
      'signals.registry.resources.limits.memory': '400Mi',
      'signals.bootserver.resources.limits.memory': '2Gi',
    });
    const m = container(docs, 'metal-operator-controller-manager');
    assert.deepEqual(m.resources, {
      requests: { cpu: '250m', memory: '128Mi', 'ephemeral-storage': '9Gi' },
      limits: { memory: '1Gi', 'ephemeral-storage': '11Gi' },
    });
    assert.equal(envValue(m, 'NODE_OPTIONS'), '--max-old-space-size=768');
    assert.equal(envValue(container(docs, 'metal-registry'), 'NODE_OPTIONS'), '--max-old-space-size=300');
    assert.equal(
      envValue(container(docs, 'metal-bootserver'), 'NODE_OPTIONS'),
      '--max-old-space-size=1536 --max-semi-space-size=4',
    );
    assert.throws(
      () => render({ 'resources.limits.memory': '1G' }),
      /limits\.memory must be set in Mi or Gi/,
    );
  });

  it('tls.secretName mounts the Secret and passes --tls-cert-file/--tls-key-file to the registry and boot server', () => {
    const docs = render({ 'signals.enabled': 'true', 'tls.secretName': 'metal-tls' });
    for (const name of deployments) {
      const spec = pod(find(docs, 'Deployment', name));
      const c = spec.containers[0] as Container;
      assert.ok(c.args?.includes('--tls-cert-file=/etc/metal-operator/tls/tls.crt'), `${name}: ${c.args}`);
      assert.ok(c.args?.includes('--tls-key-file=/etc/metal-operator/tls/tls.key'), `${name}: ${c.args}`);
      assert.deepEqual(
        c.volumeMounts?.find((v) => v.name === 'tls'),
        { name: 'tls', mountPath: '/etc/metal-operator/tls', readOnly: true },
        name,
      );
      assert.deepEqual(
        spec.volumes?.find((v) => v.name === 'tls'),
        { name: 'tls', secret: { secretName: 'metal-tls' } },
      );
    }
    assert.ok(
      !container(render(), 'metal-operator-controller-manager').args?.some((a) => a.startsWith('--tls')),
    );
  });

  it('cleanupImage, logLevel and leaderElect become the manager flags (LOG_LEVEL for the signal servers)', () => {
    const docs = render({
      'signals.enabled': 'true',
      cleanupImage: 'registry.example/metal/cleanup:v1',
      logLevel: 'debug',
      leaderElect: 'false',
    });
    const args = container(docs, 'metal-operator-controller-manager').args ?? [];
    assert.ok(args.includes('--cleanup-image=registry.example/metal/cleanup:v1'), String(args));
    assert.ok(args.includes('--log-level=debug'), String(args));
    assert.ok(!args.includes('--leader-elect'), String(args));
    assert.equal(envValue(container(docs, 'metal-registry'), 'LOG_LEVEL'), 'debug');
    assert.equal(envValue(container(docs, 'metal-bootserver'), 'LOG_LEVEL'), 'debug');
    assert.throws(
      () => render({ replicas: '2', leaderElect: 'false' }),
      /replicas > 1 needs leaderElect=true/,
    );
  });

  it('the release namespace replaces metal-system everywhere, flags and RBAC subjects included', () => {
    const text = helmTemplate({ 'signals.enabled': 'true' }, 'metal-other');
    assert.doesNotMatch(text, new RegExp(NAMESPACE));
    const docs = readAsKubectl(text);
    const args = container(docs, 'metal-operator-controller-manager').args ?? [];
    assert.ok(args.includes('--manager-namespace=metal-other'));
    assert.ok(args.includes('--image-catalog-configmap=metal-other/metal-image-catalog'));
    for (const d of docs.filter((o) => o.kind.endsWith('Binding')))
      for (const s of d.subjects as { namespace: string }[])
        assert.equal(s.namespace, 'metal-other', keyOf(d));
  });

  it('the toggles leave out CRDs, RBAC, metrics Services, NetworkPolicy and PDBs; CRDs are kept on uninstall', () => {
    const all = render({ 'signals.enabled': 'true' });
    for (const crd of all.filter((o) => o.kind === 'CustomResourceDefinition'))
      assert.equal((crd.metadata as { annotations?: Obj }).annotations?.['helm.sh/resource-policy'], 'keep');
    const kinds = (docs: Manifest[]) => new Set(docs.map((d) => d.kind));
    const off = render({
      'signals.enabled': 'true',
      'crds.install': 'false',
      'rbac.enable': 'false',
      'metrics.enable': 'false',
      'networkPolicy.enable': 'false',
      'pdb.enable': 'false',
    });
    for (const k of [
      'CustomResourceDefinition',
      'ClusterRole',
      'ClusterRoleBinding',
      'Role',
      'RoleBinding',
      'NetworkPolicy',
      'PodDisruptionBudget',
    ])
      assert.ok(kinds(all).has(k) && !kinds(off).has(k), k);
    assert.deepEqual(
      off
        .filter((o) => o.kind === 'Service')
        .map((o) => o.metadata.name)
        .sort(),
      ['metal-bootserver', 'metal-registry'],
    );
    assert.equal(off.filter((o) => o.kind === 'ServiceAccount').length, 3, 'ServiceAccounts stay');
  });

  it('helmInstallArgs is the documented `helm install` line, commas in values escaped for --set', () => {
    assert.deepEqual(helmInstallArgs({ 'bootNetwork.allowedRegistries': 'ghcr.io,registry.example:5000' }), [
      'install',
      'metal-operator',
      CHART,
      '--namespace',
      'metal-system',
      '--create-namespace',
      '--wait',
      '--timeout',
      '5m',
      '--set',
      'bootNetwork.allowedRegistries=ghcr.io\\,registry.example:5000',
    ]);
  });

  it('helmValuesFor gives the image and ConfigMap metal-boot-network a kustomize overlay would set', () => {
    const data = {
      'registry-url': 'http://10.0.0.1:30100',
      'bootserver-url': 'http://10.0.0.1:30082',
      'probe-image': '10.0.0.1:5000/metal/probe:v1',
      'allowed-registries': '10.0.0.1:5000,ghcr.io',
      'insecure-registries': '10.0.0.1:5000',
    };
    const docs = render(helmValuesFor('localhost/metal-operator:dev-1', data, 'signals'));
    assert.deepEqual(find(docs, 'ConfigMap', 'metal-boot-network').data, data);
    for (const name of deployments)
      assert.equal(container(docs, name).image, 'localhost/metal-operator:dev-1');
    assert.throws(() => helmValuesFor('x:y', { 'registry-uri': 'z' }), /has no key registry-uri/);
  });
});
