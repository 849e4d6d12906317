/**
 * Every shipped YAML file and every kustomization in config/ as kubectl reads it (issue: an
 * unquoted `enum: [On, Off]` in the generated ServerClaim CRD became [true, false] for kubectl, so
 * every claim was refused, while tests that installed the CRDs from the TypeScript objects passed;
 * and `kubectl apply -k config/default` failed on kustomize's load restrictor). No API server:
 * kubectl kustomize builds offline, and YAML 1.1 is read by the yaml package's 1.1 schema.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { buildCRD, crdFileName } from '../../src/api/crd.js';
import { KINDS } from '../../src/api/v1alpha1/index.js';
import { CONFIG, kustomize, readAsKubectl, readAsWritten } from './kubectl.js';

function walk(dir: string, out: string[] = []): string[] {
  for (const f of readdirSync(dir)) {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) walk(p, out);
    else if (f.endsWith('.yaml') || f.endsWith('.yml')) out.push(p);
  }
  return out;
}

const files = walk(CONFIG);
const kustomizations = files.filter((f) => f.endsWith('/kustomization.yaml')).map((f) => join(f, '..'));

describe('config/ as kubectl reads it', () => {
  it('finds the shipped files and kustomizations', () => {
    assert.ok(files.length >= 20, `${files.length} YAML files`);
    for (const d of ['crd', 'default', 'manager', 'rbac', 'signals', 'prometheus'])
      assert.ok(kustomizations.includes(join(CONFIG, d)), `config/${d} has a kustomization.yaml`);
  });

  for (const file of files) {
    it(`${relative(process.cwd(), file)}: YAML 1.1 (kubectl) reads what YAML 1.2 reads`, () => {
      const text = readFileSync(file, 'utf8');
      assert.deepEqual(readAsKubectl(text), readAsWritten(text));
    });
  }

  for (const dir of kustomizations) {
    it(`kubectl kustomize ${relative(process.cwd(), dir)} builds, and kubectl reads its output as written`, () => {
      const out = kustomize(dir);
      const docs = readAsKubectl(out);
      assert.ok(docs.length > 0, 'the build has objects');
      assert.deepEqual(docs, readAsWritten(out));
    });
  }

  it('the CRDs that kubectl applies from config/crd are the generated ones, field by field', () => {
    const built = readAsKubectl(kustomize(join(CONFIG, 'crd')));
    for (const def of KINDS) {
      const want = buildCRD(def) as unknown as { metadata: { name: string } };
      const got = built.find((o) => o.metadata.name === want.metadata.name);
      assert.ok(got, `${crdFileName(def)} is in the build`);
      assert.deepEqual(got, JSON.parse(JSON.stringify(want)));
    }
  });

  it('config/default and config/signals carry no placeholder image tag', () => {
    for (const d of ['default', 'signals']) {
      const images = readAsKubectl(kustomize(join(CONFIG, d)))
        .filter((o) => o.kind === 'Deployment')
        .flatMap(
          (o) =>
            (o as unknown as { spec: { template: { spec: { containers: { image: string }[] } } } }).spec
              .template.spec.containers,
        )
        .map((c) => c.image);
      assert.ok(images.length > 0, d);
      for (const i of images) assert.doesNotMatch(i, /:latest$|^[^:]*$/, `${d}: ${i}`);
    }
  });
});
