/** Condition helpers: lastTransitionTime semantics, idempotency, the observedGeneration rule. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  type Condition,
  findCondition,
  removeCondition,
  setCondition,
} from '../../src/runtime/conditions.js';

const t1 = new Date('2025-01-01T00:00:00.123Z');
const t2 = new Date('2025-01-01T00:05:00Z');
const t3 = new Date('2025-01-01T00:10:00Z');
const ready = {
  type: 'Ready',
  status: 'True' as const,
  reason: 'Done',
  message: 'ok',
  observedGeneration: 1,
};

describe('conditions', () => {
  it('adds a condition with lastTransitionTime = now at second precision', () => {
    const r = setCondition(undefined, ready, t1);
    assert.equal(r.changed, true);
    assert.deepEqual(r.conditions, [{ ...ready, lastTransitionTime: '2025-01-01T00:00:00Z' }]);
  });

  it('is idempotent: the same condition again is no change and keeps the time', () => {
    const a = setCondition(undefined, ready, t1).conditions;
    const b = setCondition(a, ready, t2);
    assert.equal(b.changed, false);
    assert.deepEqual(b.conditions, a);
  });

  it('moves lastTransitionTime only when status changes', () => {
    const a = setCondition(undefined, ready, t1).conditions;
    const msg = setCondition(a, { ...ready, message: 'still ok', observedGeneration: 2 }, t2);
    assert.equal(msg.changed, true);
    assert.equal(findCondition(msg.conditions, 'Ready')!.lastTransitionTime, '2025-01-01T00:00:00Z');
    assert.equal(findCondition(msg.conditions, 'Ready')!.observedGeneration, 2);
    const flip = setCondition(msg.conditions, { ...ready, status: 'False', reason: 'Broken' }, t3);
    assert.equal(flip.changed, true);
    assert.equal(findCondition(flip.conditions, 'Ready')!.lastTransitionTime, '2025-01-01T00:10:00Z');
  });

  it('keeps other conditions and their order, never mutates the input', () => {
    const base: Condition[] = [
      { type: 'A', status: 'True', reason: 'r', message: '', lastTransitionTime: 'x' },
      { type: 'B', status: 'False', reason: 'r', message: '', lastTransitionTime: 'y' },
    ];
    const copy = structuredClone(base);
    const r = setCondition(base, { type: 'A', status: 'False', reason: 'r', message: '' }, t1);
    assert.deepEqual(base, copy);
    assert.deepEqual(
      r.conditions.map((c) => c.type),
      ['A', 'B'],
    );
    assert.equal(removeCondition(r.conditions, 'A').conditions.length, 1);
    assert.equal(removeCondition(r.conditions, 'Z').changed, false);
  });

  it('uses an explicit lastTransitionTime on a transition', () => {
    const r = setCondition(undefined, { ...ready, lastTransitionTime: '2020-02-02T02:02:02Z' }, t1);
    assert.equal(r.conditions[0]!.lastTransitionTime, '2020-02-02T02:02:02Z');
  });
});
