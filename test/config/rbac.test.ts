/**
 * What the RBAC and network manifests under config/ may grant (security review S8, S9): read as
 * data, so a widened rule fails here before any cluster sees it. The deploy test (deploy.test.ts)
 * proves the same rules are enough for the manager to do its whole job.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';

interface Rule {
  apiGroups?: string[];
  resources?: string[];
  verbs?: string[];
  resourceNames?: string[];
}
interface Doc {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  rules?: Rule[];
  roleRef?: { kind: string; name: string };
  subjects?: { kind: string; name: string; namespace?: string }[];
  spec?: Record<string, unknown>;
}

const CONFIG = join(process.cwd(), 'config');

function docs(): Doc[] {
  const out: Doc[] = [];
  const walk = (d: string) => {
    for (const f of readdirSync(d)) {
      const p = join(d, f);
      if (statSync(p).isDirectory()) walk(p);
      else if (f.endsWith('.yaml') && f !== 'kustomization.yaml')
        for (const doc of parseAllDocuments(readFileSync(p, 'utf8'))) {
          const j = doc.toJSON() as Doc | null;
          if (j) out.push(j);
        }
    }
  };
  walk(CONFIG);
  return out;
}

const grants = (r: Rule, group: string, resource: string, verb: string) =>
  (r.apiGroups ?? []).some((g) => g === group || g === '*') &&
  (r.resources ?? []).some((x) => x === resource || x === '*') &&
  (r.verbs ?? []).some((v) => v === verb || v === '*');

/** Every verb the Kubernetes API authorizes on a resource (API conventions, "Verbs on Resources"). */
const KUBE_VERBS = ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete', 'deletecollection'];

const all = docs();
const clusterRoles = all.filter((d) => d.kind === 'ClusterRole');
const role = (name: string) => all.find((d) => d.kind === 'ClusterRole' && d.metadata.name === name);

describe('config/ RBAC and network policy', () => {
  it('S9: no ClusterRole grants delete on Secrets', () => {
    assert.ok(clusterRoles.length >= 1);
    for (const cr of clusterRoles) {
      for (const r of cr.rules ?? []) {
        for (const verb of ['delete', 'deletecollection'])
          assert.ok(
            !grants(r, '', 'secrets', verb),
            `ClusterRole ${cr.metadata.name} grants ${verb} on secrets`,
          );
      }
    }
  });

  it('S9: ConfigMaps only through a Role in the manager namespace, for the manager ServiceAccount', () => {
    // No verb at all (`*` included, which `grants` matches for any verb asked): list/watch would
    // read every ConfigMap of the cluster as surely as get.
    for (const cr of clusterRoles)
      for (const r of cr.rules ?? [])
        for (const verb of [...KUBE_VERBS, '*'])
          assert.ok(
            !grants(r, '', 'configmaps', verb),
            `ClusterRole ${cr.metadata.name} grants ${verb} on ConfigMaps (${JSON.stringify(r)})`,
          );
    const roles = all.filter(
      (d) => d.kind === 'Role' && (d.rules ?? []).some((r) => grants(r, '', 'configmaps', 'watch')),
    );
    assert.equal(roles.length, 1, 'one Role for the image catalog ConfigMap');
    assert.equal(roles[0]!.metadata.namespace, 'metal-system');
    const binding = all.find((d) => d.kind === 'RoleBinding' && d.roleRef?.name === roles[0]!.metadata.name);
    assert.deepEqual(
      binding?.subjects?.map((s) => s.name),
      ['metal-operator-controller-manager'],
    );
  });

  it('S9: the standalone registry and boot server have their own ServiceAccounts and read-only Secrets', () => {
    for (const name of ['metal-registry', 'metal-bootserver']) {
      const dep = all.find((d) => d.kind === 'Deployment' && d.metadata.name === name);
      assert.ok(dep, `Deployment ${name}`);
      const pod = (dep.spec as { template: { spec: { serviceAccountName: string } } }).template.spec;
      assert.equal(pod.serviceAccountName, name);
      const cr = role(name);
      assert.ok(cr, `ClusterRole ${name}`);
      for (const verb of ['create', 'update', 'patch', 'delete'])
        assert.ok(
          !(cr.rules ?? []).some((r) => grants(r, '', 'secrets', verb)),
          `${name} may ${verb} Secrets`,
        );
      for (const r of cr.rules ?? []) {
        const writes = (r.verbs ?? []).filter((v) => !['get', 'list', 'watch'].includes(v));
        if (writes.length === 0) continue;
        // Writes only on status subresources (its own conditions) and Events.
        for (const res of r.resources ?? [])
          assert.ok(res.endsWith('/status') || res === 'events', `${name} may ${writes.join(',')} ${res}`);
      }
      const binding = all.find((d) => d.kind === 'ClusterRoleBinding' && d.roleRef?.name === name);
      assert.deepEqual(
        binding?.subjects?.map((s) => s.name),
        [name],
      );
    }
  });

  it('N9: no ClusterRole may list, watch or write Secrets; only get by name', () => {
    for (const cr of clusterRoles)
      for (const r of cr.rules ?? [])
        for (const verb of [...KUBE_VERBS, '*'].filter((v) => v !== 'get'))
          assert.ok(
            !grants(r, '', 'secrets', verb),
            `ClusterRole ${cr.metadata.name} grants ${verb} on Secrets (${JSON.stringify(r)})`,
          );
  });

  it('N9: the registry reads no Secret but the callback key; Secret writes only create, in metal-system', () => {
    // The registry: no Secret access cluster-wide, one Role naming the key (resourceNames).
    assert.ok(
      !(role('metal-registry')?.rules ?? []).some((r) => grants(r, '', 'secrets', 'get')),
      'metal-registry ClusterRole reads Secrets',
    );
    const secretRoles = all.filter(
      (d) =>
        d.kind === 'Role' && (d.rules ?? []).some((r) => KUBE_VERBS.some((v) => grants(r, '', 'secrets', v))),
    );
    const boundTo = (name: string) =>
      all
        .filter((d) => d.kind === 'RoleBinding' && d.roleRef?.name === name)
        .flatMap((b) => (b.subjects ?? []).map((x) => x.name));
    for (const r of secretRoles) {
      assert.equal(r.metadata.namespace, 'metal-system', `Role ${r.metadata.name}`);
      for (const rule of r.rules ?? []) {
        if (!KUBE_VERBS.some((v) => grants(rule, '', 'secrets', v))) continue;
        if (boundTo(r.metadata.name).includes('metal-registry')) {
          assert.deepEqual(rule.verbs, ['get'], `Role ${r.metadata.name}`);
          assert.deepEqual(rule.resourceNames, ['metal-callback-key'], `Role ${r.metadata.name}`);
        } else {
          // The manager creates the key; create cannot be narrowed by name, update/delete are not granted.
          assert.deepEqual(rule.verbs, ['create'], `Role ${r.metadata.name}`);
          assert.deepEqual(boundTo(r.metadata.name), ['metal-operator-controller-manager']);
        }
      }
    }
    assert.ok(
      secretRoles.some((r) => boundTo(r.metadata.name).includes('metal-registry')),
      'a Role lets the registry read the callback key',
    );
  });

  it('N9: the NetworkPolicy admits the boot ports from ipBlocks only (not from any pod by selector)', () => {
    const np = all.find((d) => d.kind === 'NetworkPolicy');
    assert.ok(np, 'a NetworkPolicy');
    const ingress = (
      np.spec as { ingress: { ports: { port: number }[]; from?: Record<string, unknown>[] }[] }
    ).ingress;
    const boot = ingress.find((i) => i.ports.some((p) => p.port === 8082));
    assert.ok(boot?.from?.length, 'the boot ports rule has a from');
    for (const f of boot.from) assert.deepEqual(Object.keys(f), ['ipBlock'], JSON.stringify(f));
  });

  it('S9: a NetworkPolicy admits only the registry, boot server and (in-namespace) metrics ports', () => {
    const np = all.find((d) => d.kind === 'NetworkPolicy');
    assert.ok(np, 'a NetworkPolicy');
    const spec = np.spec as {
      podSelector: { matchLabels: Record<string, string> };
      ingress: { ports: { port: number }[]; from?: unknown[] }[];
    };
    assert.equal(spec.podSelector.matchLabels['app.kubernetes.io/name'], 'metal-operator');
    // The boot network's ports by address (ipBlock), 8080 from pods: nothing else.
    const byAddress = spec.ingress
      .filter((i) => !i.from || i.from.every((f) => Object.keys(f as object).join() === 'ipBlock'))
      .flatMap((i) => i.ports.map((p) => p.port));
    assert.deepEqual(byAddress.sort(), [10000, 8082]);
    assert.deepEqual(spec.ingress.flatMap((i) => i.ports.map((p) => p.port)).sort(), [10000, 8080, 8082]);
  });

  it('S8: the manager may set owner references with blockOwnerDeletion on Servers (servers/finalizers)', () => {
    const cr = role('metal-operator-manager');
    assert.ok(cr);
    assert.ok(
      (cr.rules ?? []).some((r) => grants(r, 'metal.ironcore.dev', 'servers/finalizers', 'update')),
      'update on servers/finalizers',
    );
  });
});
