import assert from 'node:assert/strict';
import { test } from 'node:test';
import { binarySIQuantity } from '../../src/api/quantity.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import {
  candidates,
  ineligibility,
  selectorMatches,
  tolerates,
} from '../../src/controllers/common/server-selection.js';
import { hardwareFromRegistration } from '../../src/inventory/registration-hardware.js';
import { registrationData } from '../../src/virtualbmc/sim.js';
import { simIdentity } from '../../src/virtualbmc/sim-fleet.js';

const server = (
  name: string,
  over: Partial<Server['spec']> = {},
  labels: Record<string, string> = {},
  state = 'Available',
): Server => ({
  metadata: { name, labels, resourceVersion: '1' },
  spec: { systemUUID: uuidOf(name), ...over },
  status: { state },
});
/** A distinct UUID per name (Servers sharing one are duplicates: system-ownership.ts). */
function uuidOf(name: string): string {
  const hex = Buffer.from(name).toString('hex').padStart(12, '0').slice(-12);
  return `00000000-0000-0000-0000-${hex}`;
}
const claim = (name: string, spec: Partial<ServerClaim['spec']> = {}): ServerClaim => ({
  metadata: { name, namespace: 'ns', uid: `uid-${name}` },
  spec: { power: 'On', image: 'img', ...spec },
});

test('label selectors: matchLabels and every matchExpressions operator', () => {
  const l = { a: '1', b: '2' };
  assert.ok(selectorMatches({}, l));
  assert.ok(selectorMatches({ matchLabels: { a: '1' } }, l));
  assert.ok(!selectorMatches({ matchLabels: { a: '2' } }, l));
  assert.ok(selectorMatches({ matchExpressions: [{ key: 'a', operator: 'In', values: ['1', '3'] }] }, l));
  assert.ok(!selectorMatches({ matchExpressions: [{ key: 'c', operator: 'In', values: ['1'] }] }, l));
  assert.ok(selectorMatches({ matchExpressions: [{ key: 'a', operator: 'NotIn', values: ['2'] }] }, l));
  assert.ok(selectorMatches({ matchExpressions: [{ key: 'c', operator: 'NotIn', values: ['2'] }] }, l));
  assert.ok(selectorMatches({ matchExpressions: [{ key: 'b', operator: 'Exists' }] }, l));
  assert.ok(!selectorMatches({ matchExpressions: [{ key: 'b', operator: 'DoesNotExist' }] }, l));
  assert.ok(!selectorMatches({ matchExpressions: [{ key: 'b', operator: 'Bogus' }] }, l));
});

test('taints, tolerations, unclaimable and state decide eligibility', () => {
  const c = claim('c', { tolerations: [{ key: 'gpu', operator: 'Exists' }] });
  assert.ok(tolerates(c.spec.tolerations, { key: 'gpu', value: 'a100' }));
  assert.ok(!tolerates(c.spec.tolerations, { key: 'ssd' }));
  assert.ok(tolerates([{ key: 'k', value: 'v', effect: 'NoBind' }], { key: 'k', value: 'v' }));
  assert.ok(!tolerates([{ key: 'k', value: 'v', effect: 'Evict' }], { key: 'k', value: 'v' }));
  assert.equal(ineligibility(c, server('s', { taints: [{ key: 'gpu' }] })), undefined);
  assert.match(
    ineligibility(c, server('s', { taints: [{ key: 'ssd' }] }))!,
    /taint ssd:NoBind not tolerated/,
  );
  assert.equal(ineligibility(c, server('s', { unclaimable: true })), 'unclaimable');
  assert.match(ineligibility(c, server('s', {}, {}, 'Discovery'))!, /not Available/);
  assert.match(
    ineligibility(c, server('s', { serverClaimRef: { name: 'other', namespace: 'ns' } }))!,
    /claimed by ns\/other/,
  );
  // Its own server stays eligible even though it is Reserved now.
  assert.equal(
    ineligibility(c, server('s', { serverClaimRef: { name: 'c', namespace: 'ns' } }, {}, 'Reserved')),
    undefined,
  );
});

test('candidates: by ref, by selector, spread over the pool', () => {
  const pool = ['a', 'b', 'c', 'd'].map((n) => server(n, {}, { pool: 'x' }));
  assert.deepEqual(
    candidates(claim('r', { serverRef: { name: 'c' } }), pool).map((s) => s.metadata.name),
    ['c'],
  );
  assert.deepEqual(candidates(claim('r', { serverSelector: { matchLabels: { pool: 'y' } } }), pool), []);
  const firsts = new Set(
    Array.from(
      { length: 20 },
      (_, i) =>
        candidates(claim(`c${i}`, { serverSelector: { matchLabels: { pool: 'x' } } }), pool)[0]!.metadata
          .name,
    ),
  );
  assert.ok(firsts.size > 1, 'racing claims start at different servers');
  assert.equal(candidates(claim('z', { serverSelector: {} }), pool).length, 4);
});

test('registration data → Server status, both agent dialects', () => {
  const id = simIdentity(0, 'unit');
  const sim = hardwareFromRegistration(registrationData(id));
  assert.equal(sim.totalSystemMemory, binarySIQuantity(id.memoryMiB * 1024 * 1024));
  assert.equal(sim.networkInterfaces?.[0]?.macAddress, id.macAddress);
  assert.equal(sim.networkInterfaces?.[0]?.ips?.length, 1);
  assert.match(sim.networkInterfaces?.[0]?.ip ?? '', /^10\.\d+\.\d+\.\d+$/);
  assert.equal(sim.processors?.[0]?.totalCores, id.cpus);
  assert.equal(sim.storages?.[0]?.drives?.[0]?.capacity, 64 * 1024 ** 3);
  assert.equal(sim.storages?.[0]?.drives?.[0]?.mediaType, 'SSD');
  assert.equal(sim.biosVersion, '1.16.3');
  // The busybox agent (hack/vm/init): lower-case storage keys, several DIMMs, an IPv6 address.
  const vm = hardwareFromRegistration({
    cpu: [{ id: 0, totalCores: 2, totalHardwareThreads: 4, vendor: 'AuthenticAMD', model: 'EPYC' }],
    memory: [{ size: 1073741824 }, { size: 1073741824 }],
    networkInterfaces: [
      {
        name: 'eth0',
        ipAddresses: ['10.0.2.15', 'fd00::1', 'not-an-ip'],
        macAddress: '52:54:00:AB:CD:EF',
        carrierStatus: 'up',
      },
    ],
    storage: [
      {
        path: '/dev/vda',
        name: 'vda',
        rotational: true,
        removable: false,
        sizeBytes: 1024,
        vendor: '0x1af4',
        model: '',
      },
    ],
  });
  assert.equal(vm.totalSystemMemory, '2Gi');
  assert.deepEqual(vm.networkInterfaces?.[0], {
    name: 'eth0',
    macAddress: '52:54:00:ab:cd:ef',
    ips: ['10.0.2.15', 'fd00::1'],
    ip: '10.0.2.15',
    carrierStatus: 'up',
  });
  assert.deepEqual(vm.processors?.[0], {
    id: '0',
    type: 'CPU',
    manufacturer: 'AuthenticAMD',
    model: 'EPYC',
    totalCores: 2,
    totalThreads: 4,
  });
  assert.deepEqual(vm.storages?.[0]?.drives?.[0], {
    name: 'vda',
    capacity: 1024,
    mediaType: 'HDD',
    type: 'Fixed',
    vendor: '0x1af4',
  });
  // Garbage never throws.
  assert.deepEqual(hardwareFromRegistration(null), {});
  assert.deepEqual(
    hardwareFromRegistration({
      cpu: 'x',
      memory: [{ size: -1 }],
      storage: [{}],
      networkInterfaces: [{ name: 1 }],
    }),
    {},
  );
});
