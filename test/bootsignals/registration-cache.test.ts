/**
 * The Server cache's registration projection (pure): the Server status mapping reads the same from
 * the projection as from the whole payload, for every agent dialect and for malformed parts; the
 * projection is smaller; the digest does not depend on key order, tells payloads apart that differ
 * outside the projection, and survives the projection.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { hardwareFromRegistration } from '../../src/controllers/server/registration.js';
import {
  isProjection,
  registrationDigest,
  slimRegistration,
} from '../../src/inventory/registration-cache.js';
import { cachedServer } from '../../src/inventory/server-index.js';
import { registrationData } from '../../src/virtualbmc/sim.js';
import { simIdentity } from '../../src/virtualbmc/sim-fleet.js';

function server(data: Record<string, unknown>): Server {
  return {
    apiVersion: 'metal.ironcore.dev/v1alpha1',
    kind: 'Server',
    metadata: { name: 's', resourceVersion: '1', managedFields: [{ manager: 'x' }] } as Server['metadata'],
    spec: { systemUUID: '00000000-0000-4000-8000-000000000001' },
    status: {
      state: 'Available',
      registration: { receivedAt: '2026-12-01T00:00:00Z', clientAddress: '10.0.0.5', data },
    },
  } as Server;
}

/** Upstream metalprobe's payload (keys the mapping does not read: nics, pciDevices, lldp, cpu flags). */
function upstreamPayload(): Record<string, unknown> {
  return {
    systemInfo: {
      biosInformation: { vendor: 'AMI', version: '3.1', date: '01/01/2024' },
      systemInformation: {
        manufacturer: 'Contoso',
        productName: 'X1',
        serialNumber: 'S1',
        skuNumber: 'SKU-7',
      },
      boardInformation: { manufacturer: 'Contoso', product: 'B1' },
    },
    cpu: Array.from({ length: 4 }, (_, i) => ({
      id: i,
      totalCores: 16,
      totalHardwareThreads: 32,
      vendor: 'GenuineIntel',
      model: 'Xeon',
      capabilities: Array.from({ length: 120 }, (_, f) => `flag${f}`),
      cache: [{ level: 3, sizeBytes: 33554432 }],
    })),
    networkInterfaces: [
      {
        name: 'eth0',
        ipAddresses: ['10.0.0.5', 'fd00::5'],
        macAddress: '52:54:00:12:34:56',
        carrierStatus: 'up',
        speed: 25000,
      },
      { name: 'eth1', macAddress: '52:54:00:12:34:57' },
      'garbage',
      { macAddress: 'no-name' },
    ],
    // Go field names (simulated host dialect) next to lower-case ones (busybox agent).
    storage: [
      {
        Name: 'sda',
        Size: 480103981056,
        Rotational: false,
        Removable: false,
        Vendor: 'ATA',
        Model: 'SSD1',
        WWID: 'x',
      },
      {
        name: 'nvme0n1',
        sizeBytes: 1024,
        rotational: true,
        removable: true,
        vendor: 'v',
        model: 'm',
        path: '/dev/nvme0n1',
      },
      { path: '/dev/nameless' },
    ],
    memory: [{ size: 34359738368, deviceLocator: 'DIMM0' }, 7, { size: 34359738368 }],
    nics: [{ name: 'eth0', pciAddress: '0000:3b:00.0' }],
    pciDevices: Array.from({ length: 30 }, (_, i) => ({ address: `0000:00:${i}.0`, vendor: 'Intel' })),
    lldp: null,
  };
}

const dialects: Record<string, () => Record<string, unknown>> = {
  'simulated host': () => registrationData(simIdentity(3, 'unit')),
  'upstream metalprobe with extras': upstreamPayload,
  'busybox agent': () => ({
    cpu: [{ id: 0, totalCores: 2, totalHardwareThreads: 4, vendor: 'AuthenticAMD', model: 'EPYC' }],
    memory: [{ size: 1073741824 }, { size: 1073741824 }],
    networkInterfaces: [
      { name: 'eth0', ipAddresses: ['10.0.2.15', 'not-an-ip'], macAddress: '52:54:00:AB:CD:EF' },
    ],
    storage: [
      {
        path: '/dev/vda',
        name: 'vda',
        rotational: true,
        removable: false,
        sizeBytes: 1024,
        vendor: '0x1af4',
      },
    ],
  }),
  'malformed parts': () => ({
    cpu: 'eight',
    memory: { totalBytes: 536870912 },
    networkInterfaces: { eth0: {} },
    storage: [null, 3, []],
    systemInfo: [],
  }),
};

for (const [name, make] of Object.entries(dialects)) {
  test(`registration projection (${name}): same Server status, digest of the whole payload`, () => {
    const whole = make();
    const slim = cachedServer(server(structuredClone(whole)));
    const data = slim.status?.registration?.data;
    assert.ok(isProjection(data), 'marked as a projection');
    assert.deepEqual(hardwareFromRegistration(data), hardwareFromRegistration(whole));
    assert.equal(registrationDigest(data), registrationDigest(whole));
    assert.ok(JSON.stringify(data).length <= JSON.stringify(whole).length);
    assert.equal(slim.status?.registration?.receivedAt, '2026-12-01T00:00:00Z');
    assert.equal(slim.status?.registration?.clientAddress, '10.0.0.5');
    assert.equal((slim.metadata as { managedFields?: unknown }).managedFields, undefined);
    // A second pass (an informer re-offering a cached object) keeps it as it is.
    assert.equal(slimRegistration(slim).status?.registration?.data, data);
  });
}

test('registration projection: what is not mapped is not cached', () => {
  const whole = upstreamPayload();
  const data = cachedServer(server(structuredClone(whole))).status?.registration?.data as Record<
    string,
    unknown
  >;
  assert.deepEqual(Object.keys(data).sort(), ['cpu', 'memory', 'networkInterfaces', 'storage', 'systemInfo']);
  assert.deepEqual((data.cpu as Record<string, unknown>[])[0], {
    id: 0,
    vendor: 'GenuineIntel',
    model: 'Xeon',
    totalCores: 16,
    totalHardwareThreads: 32,
  });
  assert.ok(
    JSON.stringify(data).length * 4 < JSON.stringify(whole).length,
    'a quarter of the payload or less',
  );
});

test('registration digest: key order does not matter, any difference does', () => {
  const a = upstreamPayload();
  const reversed = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(reversed)
      : v && typeof v === 'object'
        ? Object.fromEntries(
            Object.entries(v)
              .reverse()
              .map(([k, x]) => [k, reversed(x)]),
          )
        : v;
  assert.equal(registrationDigest(reversed(a)), registrationDigest(a));
  const b = upstreamPayload();
  (b.pciDevices as Record<string, unknown>[])[29]!.vendor = 'AMD'; // outside the projection
  assert.notEqual(registrationDigest(b), registrationDigest(a));
  const c = upstreamPayload();
  (c.cpu as unknown[]).reverse(); // array order is data
  assert.notEqual(registrationDigest(c), registrationDigest(a));
  assert.notEqual(registrationDigest({ x: '1' }), registrationDigest({ x: 1 }));
  const slimA = cachedServer(server(structuredClone(a))).status?.registration?.data;
  const slimB = cachedServer(server(structuredClone(b))).status?.registration?.data;
  assert.deepEqual(slimA, slimB, 'equal projections ...');
  assert.notEqual(registrationDigest(slimA), registrationDigest(slimB), '... of different payloads');
});

test('a Server without registration passes unchanged', () => {
  const s = server({});
  delete s.status!.registration;
  const copy = structuredClone(s);
  delete (copy.metadata as { managedFields?: unknown }).managedFields;
  assert.deepEqual(cachedServer(s), copy);
});
