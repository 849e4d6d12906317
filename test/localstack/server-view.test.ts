/** Unit tests of the operator views (pure functions of src/localstack/server-view.ts and fleet-view.ts). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { BMC } from '../../src/api/v1alpha1/bmc.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { claimsTable, serversTable } from '../../src/localstack/fleet-view.js';
import {
  age,
  binaryQuantity,
  claimState,
  describeServer,
  diskRows,
  nicRows,
  serverProblems,
} from '../../src/localstack/server-view.js';

const T = '2026-12-01T10:00:00Z';
const NOW = Date.parse('2026-12-01T10:05:00Z');
const c = (type: string, status: 'True' | 'False', reason: string, message = '') => ({
  type,
  status,
  reason,
  message,
  lastTransitionTime: T,
});

function server(over: Partial<Server['spec']> = {}, status: Server['status'] = {}): Server {
  return {
    metadata: { name: 'bmc-a-1' },
    spec: { systemUUID: '11111111-2222-3333-4444-555555555555', bmcRef: { name: 'bmc-a' }, ...over },
    status: {
      state: 'Available',
      powerState: 'Off',
      manufacturer: 'Contoso',
      model: 'Sim 1000',
      totalSystemMemory: 16 * 1024 ** 3,
      processors: [{ id: '0', model: 'Simulated CPU', totalCores: 4, totalThreads: 8 }],
      networkInterfaces: [
        { name: 'eth0', macAddress: '52:54:00:aa:bb:cc', ips: ['10.0.0.5'], carrierStatus: 'up' },
      ],
      storages: [
        {
          name: 'vda',
          drives: [{ name: 'vda', capacity: 64 * 1024 ** 3, mediaType: 'SSD', model: 'Virtual disk' }],
        },
      ],
      registration: {
        receivedAt: T,
        data: { nics: [{ name: 'eth0', mac: '52:54:00:AA:BB:CC', speed: '1000Mb/s' }] },
      },
      ...status,
    },
  };
}
const bmc = (ready: 'True' | 'False', reason = 'Reachable'): BMC =>
  ({
    metadata: { name: 'bmc-a' },
    spec: {},
    status: { conditions: [c('Ready', ready, reason)] },
  }) as unknown as BMC;

test('memory and disk sizes are binary quantities', () => {
  assert.equal(binaryQuantity(17179869184), '16Gi');
  assert.equal(binaryQuantity(1536 * 1024 * 1024), '1536Mi');
  assert.equal(binaryQuantity(1000), '1000');
  assert.equal(binaryQuantity('32Gi'), '32Gi', 'a stored quantity string stays as it is');
  assert.equal(binaryQuantity(undefined), '-');
});

test('PROBLEM names everything that keeps a Server from simply being usable', () => {
  assert.deepEqual(serverProblems(server(), bmc('True')), []);
  assert.deepEqual(
    serverProblems(
      server(
        {
          unclaimable: true,
          taints: [
            { key: 'metal.ironcore.dev/maintenance', value: 'disk-swap', effect: 'NoBind' },
            { key: 'gpu', effect: 'Evict' },
          ],
        },
        {
          conditions: [
            c('PowerActionPending', 'True', 'WaitingForPowerOn'),
            c('DuplicateSystemUUID', 'True', 'DuplicateSystemUUID'),
          ],
        },
      ),
      bmc('False', 'BMCUnavailable'),
    ),
    [
      'duplicate-uuid',
      'bmc:BMCUnavailable',
      'power:WaitingForPowerOn',
      'cordoned:disk-swap',
      'tainted:gpu:Evict',
      'unclaimable',
    ],
  );
  assert.deepEqual(
    serverProblems(
      server({}, { state: 'Error', conditions: [c('Discovered', 'False', 'DiscoveryAttemptsExhausted')] }),
    ),
    ['error:DiscoveryAttemptsExhausted'],
  );
});

test('get servers: BMC and PROBLEM columns; -o wide adds the hardware', () => {
  const snap = {
    servers: [server({ taints: [{ key: 'metal.ironcore.dev/maintenance', effect: 'NoBind' }] })],
    claims: [],
    sbcs: [],
    bmcs: [bmc('True')],
  };
  const [head, row] = serversTable(snap, NOW).split('\n');
  assert.match(
    head!,
    /^NAME\s+SYSTEMUUID\s+BMC\s+STATE\s+POWER\s+CLAIM\s+ATTEMPT\s+SIGNALS\s+SINCE-POWER-ON\s+PROBLEM$/,
  );
  assert.match(
    row!,
    /^bmc-a-1\s+11111111-2222-3333-4444-555555555555\s+bmc-a\s+Available\s+Off\s+-\s+-\s+-\s+-\s+cordoned$/,
  );
  const wide = serversTable(snap, NOW, { wide: true }).split('\n');
  assert.match(wide[0]!, /MANUFACTURER\s+MODEL\s+CPUS\s+MEMORY\s+IP\s+ATTEMPT/);
  assert.match(wide[1]!, /Contoso\s+Sim 1000\s+4\s+16Gi\s+10\.0\.0\.5/);
});

test('a claim blocked on its configuration or unbound says why in the table', () => {
  const claim = (conds: ReturnType<typeof c>[]): ServerClaim => ({
    metadata: { name: 'x', namespace: 'ns' },
    spec: { power: 'On', image: 'i' },
    status: { phase: 'Bound', conditions: conds },
  });
  assert.equal(
    claimState(
      claim([
        c('Bound', 'True', 'ServerBound'),
        c('BootConfigurationReady', 'False', 'ImageNotFound'),
        c('Booted', 'False', 'Booting'),
      ]),
    ),
    'False/ImageNotFound',
  );
  assert.equal(claimState(claim([c('Bound', 'False', 'NoServerAvailable')])), 'Unbound/NoServerAvailable');
  assert.equal(
    claimState(claim([c('Bound', 'True', 'ServerBound'), c('Booted', 'True', 'BootCompleted')])),
    'True/BootCompleted',
  );
  const table = claimsTable(
    { servers: [], sbcs: [], claims: [claim([c('Bound', 'False', 'NoServerAvailable')])] },
    NOW,
  );
  assert.match(table.split('\n')[1]!, /Unbound\/NoServerAvailable/);
});

test('describe server: CPU, memory as a quantity, NICs with MAC/IP/speed, disks, BMC, taints, conditions, last Events', () => {
  const s = server(
    { taints: [{ key: 'gpu', value: 'a100', effect: 'NoBind' }] },
    { conditions: [c('Discovered', 'True', 'Registered', 'registration received in attempt 1')] },
  );
  assert.deepEqual(nicRows(s), [['eth0', '52:54:00:aa:bb:cc', '10.0.0.5', '1000Mb/s', 'up']]);
  assert.deepEqual(diskRows(s), [['vda', 'SSD', '64Gi', 'Virtual disk']]);
  const events = Array.from({ length: 12 }, (_, i) => ({
    type: 'Normal',
    reason: `R${i}`,
    message: `m${i}`,
    time: `2026-12-01T10:0${Math.floor(i / 6)}:${String((i * 5) % 60).padStart(2, '0')}Z`,
    source: 'metal-operator',
  }));
  const text = describeServer(s, bmc('True'), events, NOW);
  assert.match(text, /^Name:\s+bmc-a-1$/m);
  assert.match(text, /^BMC:\s+bmc-a \(Ready=True Reachable\)$/m);
  assert.match(text, /^CPU:\s+Simulated CPU \(4 cores, 8 threads\)$/m);
  assert.match(text, /^Memory:\s+16Gi$/m);
  assert.match(text, /^Taints:\s+gpu=a100:NoBind$/m);
  assert.match(text, /^Problems:\s+tainted:gpu=a100:NoBind$/m);
  assert.match(text, /^ {2}eth0\s+52:54:00:aa:bb:cc\s+10\.0\.0\.5\s+1000Mb\/s\s+up$/m);
  assert.match(text, /^ {2}vda\s+SSD\s+64Gi\s+Virtual disk$/m);
  assert.match(text, /^ {2}Discovered\s+True\s+Registered\s+5m\s+registration received in attempt 1$/m);
  assert.doesNotMatch(text, /\bR0\b|\bR1\b/, 'only the last 10 Events');
  assert.match(text, /^ {2}Normal\s+R11\s/m);
});

test('describe server: the NICs the BMC reports and the refused fetch of the current attempt (issue 28)', () => {
  const s = server(
    {},
    {
      bmcNetworkInterfaces: [
        { name: 'NIC.Slot.5-1', macAddress: 'b8:3f:d2:90:97:c4', carrierStatus: 'LinkUp' },
      ],
    },
  );
  const refused = {
    type: 'FetchRefused',
    status: 'True' as const,
    reason: 'MACMismatch',
    message: 'attempt 2: script requested from 10.0.0.9 at 2026-12-01T10:04:00Z refused (MACMismatch): ...',
    lastTransitionTime: T,
    observedGeneration: 3,
  };
  const sbc = (observedGeneration: number) =>
    ({
      metadata: { name: 'c', namespace: 'n', generation: 3 },
      spec: { serverRef: { name: 'bmc-a-1' }, image: 'x', bootAttempt: 2 },
      status: { attemptGeneration: 3, conditions: [{ ...refused, observedGeneration }] },
    }) as unknown as ServerBootConfiguration;
  const text = describeServer(s, bmc('True'), [], NOW, sbc(3));
  assert.match(text, /^ {2}NIC\.Slot\.5-1\s+b8:3f:d2:90:97:c4\s+LinkUp$/m);
  assert.match(text, /^Refused fetch:\s+MACMismatch: attempt 2: script requested from 10\.0\.0\.9 /m);
  // A refusal of an earlier attempt is not news.
  assert.match(describeServer(s, bmc('True'), [], NOW, sbc(2)), /^Refused fetch:\s+none$/m);
  assert.match(describeServer(server(), bmc('True'), [], NOW), /NICs reported by the BMC:\n {2}<not read>/);
});

test('ages read like kubectl', () => {
  assert.equal(age('2026-12-01T10:04:48Z', NOW), '12s');
  assert.equal(age('2026-12-01T10:01:56Z', NOW), '3m4s');
  assert.equal(age('2026-12-01T08:00:00Z', NOW), '2h5m');
  assert.equal(age(undefined, NOW), '-');
});

test("get claims: an Unbound claim naming another claim's Server shows none of that claim's signals (issue 36)", () => {
  const held = server({
    serverClaimRef: { name: 'tenant-a', namespace: 'ns' },
    bootConfigurationRef: { name: 'tenant-a', namespace: 'ns' },
  });
  const sbc: ServerBootConfiguration = {
    metadata: { name: 'tenant-a', namespace: 'ns' },
    spec: { serverRef: { name: 'bmc-a-1' }, image: 'i', bootAttempt: 1 },
    status: {
      state: 'Ready',
      conditions: [{ ...c('IPXEScriptFetched', 'True', 'Fetched', 'attempt 1'), observedGeneration: 1 }],
    },
  } as ServerBootConfiguration;
  const claim = (name: string, bound: boolean): ServerClaim => ({
    metadata: { name, namespace: 'ns' },
    spec: { power: 'On', image: 'i', serverRef: { name: 'bmc-a-1' } },
    status: {
      phase: bound ? 'Bound' : 'Unbound',
      conditions: [bound ? c('Bound', 'True', 'ServerBound') : c('Bound', 'False', 'ServerClaimedByOther')],
    },
  });
  const table = claimsTable(
    { servers: [held], sbcs: [sbc], claims: [claim('tenant-a', true), claim('z-late', false)] },
    NOW,
  );
  const [, a, z] = table.split('\n');
  assert.match(a!, /\bscript\b/, `the bound claim shows its signals:\n${table}`);
  assert.doesNotMatch(z!, /\bscript\b/, `the unbound claim shows none:\n${table}`);
});

test('get claims -o wide: image, boot policy, boot method and the Booted message (issue 36)', () => {
  const claim: ServerClaim = {
    metadata: { name: 'x', namespace: 'ns' },
    spec: { power: 'On', image: 'metal/os:1', bootPolicy: 'NetBootAlways', bootMethod: 'HTTPBoot' },
    status: { phase: 'Bound', conditions: [c('Booted', 'False', 'Booting', 'attempt 1:\n  waiting')] },
  };
  const narrow = claimsTable({ servers: [], sbcs: [], claims: [claim] }, NOW);
  const wide = claimsTable({ servers: [], sbcs: [], claims: [claim] }, NOW, { wide: true });
  assert.doesNotMatch(narrow.split('\n')[0]!, /IMAGE/);
  assert.match(wide.split('\n')[0]!, /SINCE-POWER-ON\s+IMAGE\s+BOOT-POLICY\s+BOOT-METHOD\s+MESSAGE$/);
  assert.match(wide.split('\n')[1]!, /metal\/os:1\s+NetBootAlways\s+HTTPBoot\s+attempt 1: waiting$/);
});
