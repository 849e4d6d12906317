/**
 * The rule the end-to-end tests check each boot with (`assertConditionsOfCurrentAttempt` in
 * scenario.ts), on hand-made SBC statuses: it must refuse a condition of an earlier attempt and
 * one whose generations are missing, not only accept the good case. No VM involved.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { assertConditionsOfCurrentAttempt } from './scenario.js';

const cond = (type: string, observedGeneration?: number) => ({
  type,
  status: 'True' as const,
  reason: 'Signal',
  message: '',
  lastTransitionTime: '2026-01-01T00:00:00Z',
  ...(observedGeneration === undefined ? {} : { observedGeneration }),
});

describe('assertConditionsOfCurrentAttempt', () => {
  it('accepts conditions observed at the attempt generation or later', () => {
    assertConditionsOfCurrentAttempt(
      {
        metadata: { generation: 3 },
        status: { attemptGeneration: 2, conditions: [cond('A', 2), cond('B', 3)] },
      },
      ['A', 'B'],
    );
    // A brand-new SBC: its attempt began at metadata.generation.
    assertConditionsOfCurrentAttempt(
      { metadata: { generation: 1 }, status: { conditions: [cond('A', 1)] } },
      ['A'],
    );
  });

  it('refuses a condition of an earlier attempt', () => {
    assert.throws(
      () =>
        assertConditionsOfCurrentAttempt(
          { metadata: { generation: 2 }, status: { attemptGeneration: 2, conditions: [cond('A', 1)] } },
          ['A'],
        ),
      /A belongs to the current attempt/,
    );
  });

  it('refuses when the generations are missing', () => {
    assert.throws(
      () => assertConditionsOfCurrentAttempt({ metadata: {}, status: { conditions: [cond('A')] } }, ['A']),
      /the SBC has an attempt generation/,
    );
    assert.throws(
      () =>
        assertConditionsOfCurrentAttempt(
          { metadata: { generation: 1 }, status: { conditions: [cond('A')] } },
          ['A'],
        ),
      /A belongs to the current attempt/,
    );
  });

  it('refuses a condition that is missing or not True', () => {
    assert.throws(
      () =>
        assertConditionsOfCurrentAttempt({ metadata: { generation: 1 }, status: { conditions: [] } }, ['A']),
      /A:/,
    );
  });
});
