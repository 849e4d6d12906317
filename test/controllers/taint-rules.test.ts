/** Unit tests of the taint rules (pure functions of src/controllers/server/taints.ts). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import {
  evictingTaint,
  MAINTENANCE_TAINT_KEY,
  maintenanceTransition,
  taintText,
  withMaintenanceTaint,
} from '../../src/controllers/server/taints.js';

const server = (taints: Server['spec']['taints'], extra: Partial<Server> = {}): Server => ({
  metadata: { name: 's' },
  spec: { systemUUID: '11111111-2222-3333-4444-555555555555', taints },
  ...extra,
});
const claim = (tolerations: ServerClaim['spec']['tolerations'] = []): ServerClaim => ({
  metadata: { name: 'c', namespace: 'ns' },
  spec: { power: 'On', image: 'i', tolerations },
});

test('taints print as kubectl does', () => {
  assert.equal(taintText({ key: 'k', value: 'v', effect: 'Evict' }), 'k=v:Evict');
  assert.equal(taintText({ key: 'k' }), 'k:NoBind');
});

test('only an untolerated Evict taint evicts', () => {
  const evict = { key: 'gpu', effect: 'Evict' as const };
  assert.deepEqual(evictingTaint(claim(), server([{ key: 'x' }, evict])), evict);
  assert.equal(evictingTaint(claim(), server([{ key: 'x', effect: 'NoBind' }])), undefined);
  assert.equal(evictingTaint(claim([{ key: 'gpu', operator: 'Exists' }]), server([evict])), undefined);
  assert.equal(
    evictingTaint(claim([{ key: 'gpu', operator: 'Exists', effect: 'Evict' }]), server([evict])),
    undefined,
  );
  assert.deepEqual(
    evictingTaint(claim([{ key: 'gpu', operator: 'Exists', effect: 'NoBind' }]), server([evict])),
    evict,
  );
});

test('the maintenance taint moves unclaimed Servers in and out of Maintenance', () => {
  const m = [{ key: MAINTENANCE_TAINT_KEY, value: 'disk', effect: 'NoBind' as const }];
  assert.equal(maintenanceTransition(server(m), 'Available'), 'Maintenance');
  assert.equal(maintenanceTransition(server(m), 'Error'), 'Maintenance');
  assert.equal(maintenanceTransition(server(m), 'Discovery'), undefined, 'discovery finishes first');
  assert.equal(maintenanceTransition(server(m), 'Maintenance'), undefined);
  const claimed = server(m);
  claimed.spec.serverClaimRef = { name: 'c', namespace: 'ns' };
  assert.equal(
    maintenanceTransition(claimed, 'Reserved'),
    undefined,
    'a claimed Server stays with its claim',
  );
  const discovered = server([], {
    status: {
      conditions: [
        {
          type: 'Discovered',
          status: 'True',
          reason: 'Registered',
          message: '',
          lastTransitionTime: '2026-01-01T00:00:00Z',
        },
      ],
    },
  });
  assert.equal(maintenanceTransition(discovered, 'Maintenance'), 'Available');
  assert.equal(
    maintenanceTransition(server([]), 'Maintenance'),
    'Initial',
    'never discovered: discover first',
  );
});

test('cordon replaces its own taint and keeps the others; uncordon removes only it', () => {
  const other = { key: 'gpu', effect: 'NoBind' as const };
  const once = withMaintenanceTaint([other], true, { reason: 'a' });
  assert.deepEqual(once, [other, { key: MAINTENANCE_TAINT_KEY, value: 'a', effect: 'NoBind' }]);
  assert.deepEqual(withMaintenanceTaint(once, true, { reason: 'b', effect: 'Evict' }), [
    other,
    { key: MAINTENANCE_TAINT_KEY, value: 'b', effect: 'Evict' },
  ]);
  assert.deepEqual(withMaintenanceTaint(once, false), [other]);
});
