/**
 * The attempt rule and the completion-signal rule of src/api/vocabulary.ts (pure, no control plane).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  attemptGenerationOf,
  BootSignal,
  countsForCurrentAttempt,
  currentAttemptCondition,
  isCompletionSignal,
} from '../../src/api/vocabulary.js';
import type { Condition } from '../../src/runtime/conditions.js';

const t = '2026-01-01T00:00:00Z';
const cond = (type: string, status: Condition['status'], observedGeneration?: number): Condition => ({
  type,
  status,
  reason: 'r',
  message: 'm',
  lastTransitionTime: t,
  ...(observedGeneration !== undefined ? { observedGeneration } : {}),
});
const sbc = (generation: number, attemptGeneration: number | undefined, conditions: Condition[]) => ({
  metadata: { generation },
  status: { ...(attemptGeneration !== undefined ? { attemptGeneration } : {}), conditions },
});

describe('countsForCurrentAttempt', () => {
  it('counts a True condition written at or after the attempt generation', () => {
    const s = sbc(5, 4, [cond('IPXEScriptFetched', 'True', 4), cond('BootStateReceived', 'True', 5)]);
    assert.equal(countsForCurrentAttempt(s, 'IPXEScriptFetched'), true);
    assert.equal(countsForCurrentAttempt(s, 'BootStateReceived'), true);
  });
  it('does not count a signal of an earlier attempt, a False one, a missing one or one without observedGeneration', () => {
    const s = sbc(5, 5, [cond('A', 'True', 4), cond('B', 'False', 5), cond('C', 'True')]);
    assert.equal(countsForCurrentAttempt(s, 'A'), false, 'earlier attempt');
    assert.equal(countsForCurrentAttempt(s, 'B'), false, 'False');
    assert.equal(countsForCurrentAttempt(s, 'C'), false, 'no observedGeneration');
    assert.equal(countsForCurrentAttempt(s, 'D'), false, 'absent');
    assert.equal(currentAttemptCondition(s, 'A'), undefined);
  });
  it('uses metadata.generation until the attempt generation is stamped', () => {
    const s = sbc(3, undefined, [cond('A', 'True', 2), cond('B', 'True', 3)]);
    assert.equal(attemptGenerationOf(s), 3);
    assert.equal(countsForCurrentAttempt(s, 'A'), false);
    assert.equal(currentAttemptCondition(s, 'B')?.type, 'B');
  });
});

describe('isCompletionSignal', () => {
  it('accepts the boot signals a claim receives and External<Name> types, nothing else', () => {
    for (const s of Object.values(BootSignal))
      assert.equal(isCompletionSignal(s), s !== BootSignal.RegistrationReceived, s);
    assert.equal(isCompletionSignal('ExternalHealthCheckPassed'), true);
    for (const s of ['Ready', 'BootCompleted', 'Booted', 'External', 'externalX', 'BootStateReceivd'])
      assert.equal(isCompletionSignal(s), false, s);
  });
});
