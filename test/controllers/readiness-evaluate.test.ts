/**
 * The pure rule evaluation of src/controllers/server/readiness-rules.ts (upstream's
 * serverreadinessruleserver_controller.go semantics), no control plane.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerReadinessRule } from '../../src/api/v1alpha1/serverreadinessrule.js';
import { evaluate, sameTaint } from '../../src/controllers/server/readiness-rules.js';

const rule = (mode: 'Continuous' | 'BootstrapOnly', extra: Partial<ServerReadinessRule['metadata']> = {}) =>
  ({
    metadata: { name: 'r', ...extra },
    spec: {
      serverSelector: { matchLabels: { rack: 'a' } },
      conditions: [{ type: 'X', requiredStatus: 'True' }],
      enforcementMode: mode,
      taint: { key: 'k', value: 'v', effect: 'NoBind' },
    },
  }) as ServerReadinessRule;
const server = (
  status?: 'True' | 'False',
  x: { taints?: Server['spec']['taints']; ann?: Record<string, string>; rack?: string } = {},
) =>
  ({
    metadata: { name: 's', labels: { rack: x.rack ?? 'a' }, annotations: x.ann ?? {} },
    spec: { systemUUID: 'u', taints: x.taints ?? [] },
    status: status
      ? { conditions: [{ type: 'X', status, reason: 'r', message: 'm', lastTransitionTime: 't' }] }
      : {},
  }) as unknown as Server;

describe('evaluate', () => {
  it('taints a selected Server without the condition (a missing condition fails the rule)', () => {
    assert.deepEqual(evaluate(server(), [rule('Continuous')])?.taints, [
      { key: 'k', value: 'v', effect: 'NoBind' },
    ]);
    assert.equal(
      evaluate(server('False', { taints: [{ key: 'k', value: 'v', effect: 'NoBind' }] }), [
        rule('Continuous'),
      ]),
      undefined,
    );
  });
  it('untaints once the condition holds; BootstrapOnly also marks the Server, then skips it', () => {
    const t = [{ key: 'k', value: 'v', effect: 'NoBind' as const }, { key: 'other' }];
    assert.deepEqual(evaluate(server('True', { taints: t }), [rule('Continuous')]), {
      taints: [{ key: 'other' }],
      annotations: {},
    });
    const b = evaluate(server('True', { taints: t }), [rule('BootstrapOnly')]);
    assert.deepEqual(b?.annotations, { 'readiness.metal.ironcore.dev/bootstrap-completed-r': 'true' });
    const marked = server('False', { ann: { 'readiness.metal.ironcore.dev/bootstrap-completed-r': 'true' } });
    assert.equal(evaluate(marked, [rule('BootstrapOnly')]), undefined);
  });
  it('leaves unselected Servers and deleted rules alone', () => {
    assert.equal(evaluate(server(undefined, { rack: 'b' }), [rule('Continuous')]), undefined);
    assert.equal(evaluate(server(), [rule('Continuous', { deletionTimestamp: 't' })]), undefined);
  });
  it('a taint without effect is the NoBind taint', () => {
    assert.equal(sameTaint({ key: 'k', value: 'v' }, { key: 'k', value: 'v', effect: 'NoBind' }), true);
    assert.equal(sameTaint({ key: 'k', value: 'v', effect: 'Evict' }, { key: 'k', value: 'v' }), false);
  });
});
