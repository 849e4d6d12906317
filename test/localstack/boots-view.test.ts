/** `metalctl boots` lines: one per attempt, durations power-on → script → ignition → booted (pure). */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attemptLine } from '../../src/localstack/fleet-view.js';

describe('attemptLine', () => {
  it('prints each step from the previous one and the total', () => {
    const line = attemptLine({
      attempt: 2,
      startedAt: '2026-01-01T12:00:00.000Z',
      poweredOnAt: '2026-01-01T12:00:00.400Z',
      signals: {
        IPXEScriptFetched: '2026-01-01T12:00:03.500Z',
        IgnitionDataFetched: '2026-01-01T12:00:04.100Z',
        BootStateReceived: '2026-01-01T12:00:09.100Z',
      },
      endedAt: '2026-01-01T12:00:09.500Z',
      result: 'BootCompleted',
    });
    assert.equal(
      line,
      'attempt 2  started 12:00:00  power-on +0.4s → script 3.1s → ignition 0.6s → booted 5.0s  = 9.1s  BootCompleted',
    );
  });
  it('shows a running attempt and one that never fetched', () => {
    assert.match(
      attemptLine({ attempt: 1, startedAt: '2026-01-01T12:00:00Z', poweredOnAt: '2026-01-01T12:00:01Z' }),
      /attempt 1 {2}started 12:00:00 {2}power-on \+1\.0s {2}\(running\)$/,
    );
    assert.match(
      attemptLine({
        attempt: 1,
        startedAt: '2026-01-01T12:00:00Z',
        poweredOnAt: '2026-01-01T12:00:00Z',
        endedAt: '2026-01-01T12:05:00Z',
        result: 'NetbootNotObserved',
      }),
      /= 5m00s {2}NetbootNotObserved$/,
    );
  });
});
