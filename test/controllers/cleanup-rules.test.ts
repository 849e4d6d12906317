/**
 * The pure rules of the cleanup boot (src/controllers/server/cleanup.ts, taints.ts): when a release runs
 * one, what counts as a cleanup still owed, and that leaving Maintenance cannot skip it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { cleanupPending, cleanupPlan } from '../../src/controllers/server/cleanup.js';
import { maintenanceTransition } from '../../src/controllers/server/taints.js';

const at = '2026-01-01T00:00:00Z';
const server = (
  mode?: 'metadata' | 'disabled',
  cleaned?: { status: 'True' | 'False'; reason: string },
): Server => ({
  metadata: { name: 's' },
  spec: {
    systemUUID: '11111111-2222-3333-4444-555555555555',
    ...(mode ? { automatedCleaningMode: mode } : {}),
  },
  status: {
    conditions: [
      { type: 'Discovered', status: 'True', reason: 'Registered', message: '', lastTransitionTime: at },
      ...(cleaned ? [{ type: 'Cleaned', ...cleaned, message: '', lastTransitionTime: at }] : []),
    ],
  },
});

test('cleanupPlan: the manager flag turns it on, the Server field overrides', () => {
  const img = { cleanupImage: 'reg/metal/cleanup:1' };
  assert.deepEqual(cleanupPlan(server(), {}), { run: false }, 'no flag, no field: as upstream');
  assert.deepEqual(cleanupPlan(server(), img), { run: true, image: 'reg/metal/cleanup:1' });
  assert.deepEqual(cleanupPlan(server('disabled'), img), { run: false });
  assert.deepEqual(
    cleanupPlan(server('metadata'), {}),
    { run: true, image: undefined },
    'wanted, no image: not skipped',
  );
  assert.deepEqual(cleanupPlan(server('metadata'), img), { run: true, image: 'reg/metal/cleanup:1' });
});

test('cleanupPending: Cleaned=False for any reason but CleanupDisabled', () => {
  assert.equal(cleanupPending(server()), false);
  assert.equal(cleanupPending(server(undefined, { status: 'True', reason: 'CleanupCompleted' })), false);
  assert.equal(cleanupPending(server(undefined, { status: 'False', reason: 'CleanupDisabled' })), false);
  for (const reason of [
    'Cleaning',
    'CleanupTimedOut',
    'CleanupAttemptsExhausted',
    'CleanupImageNotConfigured',
  ])
    assert.equal(cleanupPending(server(undefined, { status: 'False', reason })), true, reason);
});

test('leaving Maintenance with a cleanup owed goes to Cleaning, not Available; Cleaning finishes before a cordon', () => {
  const owed = server(undefined, { status: 'False', reason: 'CleanupAttemptsExhausted' });
  assert.equal(maintenanceTransition(owed, 'Maintenance'), 'Cleaning');
  const done = server(undefined, { status: 'True', reason: 'CleanupCompleted' });
  assert.equal(maintenanceTransition(done, 'Maintenance'), 'Available');
  const cordoned = { ...owed, spec: { ...owed.spec, taints: [{ key: 'metal.ironcore.dev/maintenance' }] } };
  assert.equal(maintenanceTransition(cordoned, 'Cleaning'), undefined, 'the cleanup finishes first');
  assert.equal(maintenanceTransition(cordoned, 'Error'), 'Maintenance');
});
