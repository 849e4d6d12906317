/**
 * Upstream compatibility of the generated CRDs (pure comparison, no API server): every upstream
 * property path, type, format, enum, constraint, CEL rule, short name, scope and printer column is
 * present in ours; our additions are optional.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parse } from 'yaml';
import { buildCRD } from '../../src/api/crd.js';
import { KINDS } from '../../src/api/v1alpha1/index.js';
import { compareCRDs } from './schema-compat.js';

const UPSTREAM = join(process.cwd(), '..', 'shared', 'upstream', 'metal-operator', 'crds');
// biome-ignore lint/suspicious/noExplicitAny: YAML documents are untyped until compared.
const upstreamCRDs = readdirSync(UPSTREAM).map((f) => parse(readFileSync(join(UPSTREAM, f), 'utf8')) as any);
const ours = new Map(KINDS.map((k) => [k.kind, buildCRD(k)]));

describe('CRD compatibility with upstream metal-operator', () => {
  it('serves every upstream kind', () => {
    assert.ok(upstreamCRDs.length >= 6);
    for (const up of upstreamCRDs)
      assert.ok(ours.has(up.spec.names.kind), `missing kind ${up.spec.names.kind}`);
  });

  for (const up of upstreamCRDs) {
    it(`${up.spec.names.kind}: every upstream field, rule and column exists with the same type`, () => {
      const problems = compareCRDs(up, ours.get(up.spec.names.kind) as never);
      assert.deepEqual(problems, []);
    });
  }

  it('detects a single missing upstream field (the check can fail)', () => {
    const up = upstreamCRDs.find((c) => c.spec.names.kind === 'ServerClaim');
    const mine = structuredClone(ours.get('ServerClaim')) as never as {
      spec: {
        versions: {
          schema: {
            openAPIV3Schema: { properties: Record<string, { properties: Record<string, unknown> }> };
          };
        }[];
      };
    };
    delete mine.spec.versions[0]!.schema.openAPIV3Schema.properties.spec!.properties.power;
    const problems = compareCRDs(up, mine as never);
    assert.ok(
      problems.some((p) => p.startsWith('v1alpha1.spec.power: missing')),
      problems.join('\n'),
    );
  });

  it('detects a changed enum, a dropped CEL rule and a changed printer column', () => {
    const up = upstreamCRDs.find((c) => c.spec.names.kind === 'BMC');
    // biome-ignore lint/suspicious/noExplicitAny: mutating a generated document on purpose.
    const mine = structuredClone(ours.get('BMC')) as any;
    const spec = mine.spec.versions[0].schema.openAPIV3Schema.properties.spec;
    spec.properties.consoleProtocol.properties.name.enum = ['IPMI'];
    spec['x-kubernetes-validations'] = [];
    mine.spec.versions[0].additionalPrinterColumns[0].jsonPath = '.status.mac';
    const problems = compareCRDs(up, mine);
    assert.ok(
      problems.some((p) => p.includes('consoleProtocol.name: enum')),
      problems.join('\n'),
    );
    assert.ok(
      problems.some((p) => p.includes('CEL rule missing: has(self.access) != has(self.endpointRef)')),
    );
    assert.ok(problems.some((p) => p.includes('default printer columns')));
  });

  it('our additions are optional: no required field that upstream lacks', () => {
    for (const def of KINDS) {
      const crd = buildCRD(def) as never as {
        spec: { versions: { schema: { openAPIV3Schema: unknown } }[] };
      };
      const up = upstreamCRDs.find((c) => c.spec.names.kind === def.kind);
      assert.deepEqual(
        compareCRDs(up, crd as never).filter((p) => p.includes('ours requires')),
        [],
      );
    }
  });
});
