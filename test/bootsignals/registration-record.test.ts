/**
 * The registration's layout (pure): the payload ConfigMap's name, label and owner; the digest (key
 * order does not matter, any difference does); which record answers which discovery attempt; the
 * hardware mapping (one processor per socket, lists capped); and the Server cache's handling of a
 * record of an earlier release that still carries the payload (cached as its hardware mapping, the
 * same for every agent dialect).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { HARDWARE_LIMITS, hardwareFromRegistration } from '../../src/inventory/registration-hardware.js';
import {
  REGISTRATION_PAYLOAD_KEY,
  type RegistrationRecord,
  registrationAnswers,
  registrationConfigMap,
  registrationConfigMapName,
  registrationDigest,
  registrationRecord,
  SERVER_LABEL,
} from '../../src/inventory/registration-record.js';
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
  test(`legacy record in the cache (${name}): its hardware mapping instead of the payload`, () => {
    const whole = make();
    const cached = cachedServer(server(structuredClone(whole)));
    const record = registrationRecord(cached)!;
    assert.equal(record.data, undefined, 'the payload is not cached');
    assert.deepEqual(record.hardware, hardwareFromRegistration(whole));
    assert.equal(record.receivedAt, '2026-12-01T00:00:00Z');
    assert.equal(record.clientAddress, '10.0.0.5');
    assert.equal((cached.metadata as { managedFields?: unknown }).managedFields, undefined);
    // A second pass (an informer re-offering a cached object) keeps it as it is.
    assert.deepEqual(registrationRecord(cachedServer(cached)), record);
  });
}

test('hardware mapping: one processor per socket, lists capped', () => {
  const p = upstreamPayload();
  // Every logical CPU listed, as some agents do: 2 sockets of 32 threads.
  p.cpu = Array.from({ length: 64 }, (_, i) => ({
    id: i % 2,
    totalCores: 16,
    totalHardwareThreads: 32,
    vendor: 'GenuineIntel',
    model: 'Xeon',
  }));
  p.networkInterfaces = Array.from({ length: 100 }, (_, i) => ({
    name: `eth${i}`,
    macAddress: `52:54:00:00:00:${(i % 256).toString(16).padStart(2, '0')}`,
  }));
  p.storage = Array.from({ length: 100 }, (_, i) => ({ name: `sd${i}`, sizeBytes: 1024 }));
  const hw = hardwareFromRegistration(p);
  assert.deepEqual(
    hw.processors?.map((c) => [c.id, c.totalCores, c.totalThreads]),
    [
      ['0', 16, 32],
      ['1', 16, 32],
    ],
  );
  assert.equal(hw.networkInterfaces?.length, HARDWARE_LIMITS.networkInterfaces);
  assert.equal(hw.storages?.length, HARDWARE_LIMITS.storages);
  assert.equal(hw.sku, 'SKU-7');
});

test('payload ConfigMap: name (hashed when too long), label, owner, digest, payload', () => {
  const s = server({});
  s.metadata.uid = 'u-1';
  const data = upstreamPayload();
  const cm = registrationConfigMap(s, 'metal-system', data, registrationDigest(data)) as unknown as {
    metadata: Required<Server['metadata']>;
    data: Record<string, string>;
  };
  assert.equal(cm.metadata.name, 'registration-s');
  assert.equal(cm.metadata.namespace, 'metal-system');
  assert.deepEqual(cm.metadata.labels, { [SERVER_LABEL]: 's' });
  assert.deepEqual(cm.metadata.ownerReferences, [
    { apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'Server', name: 's', uid: 'u-1' },
  ]);
  assert.deepEqual(JSON.parse(cm.data[REGISTRATION_PAYLOAD_KEY]!), data);
  const long = `${'a'.repeat(60)}.${'b'.repeat(60)}.${'c'.repeat(60)}.${'d'.repeat(60)}`;
  const hashed = registrationConfigMapName(long);
  assert.match(hashed, /^registration-[0-9a-f]{40}$/);
  assert.notEqual(hashed, registrationConfigMapName(`${long}x`));
  assert.equal(registrationConfigMapName('x'.repeat(240)), `registration-${'x'.repeat(240)}`);
  const ls = structuredClone(s);
  ls.metadata.name = long;
  const label = registrationConfigMap(ls, 'n', {}, 'd').metadata.labels?.[SERVER_LABEL] ?? '';
  assert.ok(label.length <= 63 && label !== long, 'a long name is labelled by its hash');
});

test('which record answers which discovery attempt', () => {
  const r = (x: Partial<RegistrationRecord>): RegistrationRecord => ({ receivedAt: 't', ...x });
  const rows: [RegistrationRecord | undefined, number, string | undefined, boolean, boolean][] = [
    [undefined, 1, 'u', true, false],
    [r({ attempt: 1, bootConfigurationUID: 'u' }), 1, 'u', false, true],
    [r({ attempt: 1, bootConfigurationUID: 'u' }), 2, 'u', true, false], // an earlier attempt
    [r({ attempt: 1, bootConfigurationUID: 'old' }), 1, 'u', true, false], // an earlier discovery
    [r({ attempt: 2 }), 2, 'u', false, true], // unauthenticated: no SBC uid known
    [r({ data: {} }), 1, 'u', true, true], // earlier release: the SBC's signal decides
    [r({ data: {} }), 1, 'u', false, false],
  ];
  for (const [rec, attempt, uid, legacy, want] of rows)
    assert.equal(
      registrationAnswers(rec, attempt, uid, legacy),
      want,
      JSON.stringify([rec, attempt, uid, legacy]),
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
  (b.pciDevices as Record<string, unknown>[])[29]!.vendor = 'AMD'; // outside the hardware mapping
  assert.notEqual(registrationDigest(b), registrationDigest(a));
  const c = upstreamPayload();
  (c.cpu as unknown[]).reverse(); // array order is data
  assert.notEqual(registrationDigest(c), registrationDigest(a));
  assert.notEqual(registrationDigest({ x: '1' }), registrationDigest({ x: 1 }));
});

test('a Server without registration passes unchanged', () => {
  const s = server({});
  delete s.status!.registration;
  const copy = structuredClone(s);
  delete (copy.metadata as { managedFields?: unknown }).managedFields;
  assert.deepEqual(cachedServer(s), copy);
});
