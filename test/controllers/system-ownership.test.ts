/** Unit tests of the UUID ownership rule and the BMC's systems verdict (pure functions). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { duplicatesText, systemsVerdict } from '../../src/controllers/bmc/bmc.js';
import { bmcDownReport } from '../../src/controllers/bmc-actions/bmc-availability.js';
import { candidates } from '../../src/controllers/common/server-selection.js';
import { duplicatesIn, ownedElsewhere, uuidOwner } from '../../src/controllers/common/system-ownership.js';

const U = '11111111-2222-3333-4444-555555555555';
const srv = (name: string, created: string, uuid = U, bmc = 'bmc-a'): Server => ({
  metadata: { name, creationTimestamp: created },
  spec: { systemUUID: uuid, bmcRef: { name: bmc } },
  status: { state: 'Available' },
});

test('S14: the oldest Server owns a UUID, whatever the letter case; a deleted one never does', () => {
  const old = srv('old', '2026-01-01T00:00:00Z');
  const copy = srv('copy', '2026-02-01T00:00:00Z', U.toUpperCase(), 'bmc-b');
  assert.equal(uuidOwner([copy, old])?.metadata.name, 'old');
  assert.equal(ownedElsewhere(copy, [old, copy])?.metadata.name, 'old');
  assert.equal(ownedElsewhere(old, [old, copy]), undefined);
  const leaving = { ...old, metadata: { ...old.metadata, deletionTimestamp: '2026-03-01T00:00:00Z' } };
  assert.equal(ownedElsewhere(copy, [leaving, copy]), undefined);
  // Same creation second: the name decides, so every process agrees.
  const twin = srv('a-twin', '2026-01-01T00:00:00Z');
  assert.equal(uuidOwner([old, twin])?.metadata.name, 'a-twin');
  assert.deepEqual(
    [...duplicatesIn([old, copy, srv('other', '2026-01-01T00:00:00Z', U.replace('1', '9'))]).keys()],
    ['copy'],
  );
});

test('S14: claim selection never offers a Server whose UUID another Server owns', () => {
  const claim: ServerClaim = {
    metadata: { name: 'c', namespace: 'ns', uid: 'u' },
    spec: { power: 'On', image: 'i' },
  };
  const old = {
    ...srv('old', '2026-01-01T00:00:00Z'),
    spec: { ...srv('old', '').spec, serverClaimRef: { name: 'x', namespace: 'ns' } },
  };
  const copy = srv('copy', '2026-02-01T00:00:00Z');
  assert.deepEqual(
    candidates(claim, [old, copy]).map((s) => s.metadata.name),
    [],
  );
  assert.deepEqual(
    candidates(claim, [copy]).map((s) => s.metadata.name),
    ['copy'],
    'alone it is the owner',
  );
});

test('S14: the systems verdict names the limit first, and the duplicates message each UUID and owner', () => {
  const owner = srv('bmc-a-1', '2026-01-01T00:00:00Z');
  const scan = {
    listed: 5,
    withoutUUID: ['/redfish/v1/Systems/x'],
    duplicates: [{ uri: '/redfish/v1/Systems/1', uuid: U, owner }],
    created: [],
  };
  const v = systemsVerdict(scan, 4);
  assert.equal(v.status, 'False');
  assert.equal(v.reason, 'SystemLimitExceeded');
  assert.match(v.message, /5 system\(s\) listed, limit 4/);
  assert.match(v.message, /without a valid UUID: \/redfish\/v1\/Systems\/x/);
  assert.equal(systemsVerdict({ ...scan, listed: 1 }, 4).reason, 'SystemUUIDMissing');
  assert.equal(systemsVerdict({ ...scan, listed: 1, withoutUUID: [] }, 4).reason, 'DuplicateSystemUUID');
  assert.deepEqual(systemsVerdict({ listed: 2, withoutUUID: [], duplicates: [], created: ['a', 'b'] }, 4), {
    status: 'True',
    reason: 'AllSystemsHaveUUID',
    message: '2 system(s), each with a Server',
  });
  assert.match(duplicatesText(scan.duplicates), new RegExp(`${U}, held by Server bmc-a-1 \\(BMC bmc-a\\)`));
  const many = Array.from({ length: 25 }, (_, i) => ({ ...scan.duplicates[0]!, uri: `/s/${i}` }));
  assert.match(duplicatesText(many), /and 15 more$/, 'a long list is cut, not the condition');
  assert.equal(duplicatesText([]), '');
});

test('defect 5: a Server condition naming a BMC failure is a report about its BMC', () => {
  const s = srv('s', '2026-01-01T00:00:00Z');
  const at = '2026-01-01T00:00:05Z';
  const withCond = (type: string, status: 'True' | 'False', reason: string): Server => ({
    ...s,
    status: { conditions: [{ type, status, reason, message: 'm', lastTransitionTime: at }] },
  });
  assert.deepEqual(bmcDownReport(withCond('PowerActionPending', 'True', 'BMCUnavailable')), {
    bmc: 'bmc-a',
    server: 's',
    reason: 'BMCUnavailable',
    message: 'm',
    at,
  });
  assert.equal(bmcDownReport(withCond('Discovered', 'False', 'BMCTimeout'))?.reason, 'BMCTimeout');
  assert.equal(bmcDownReport(withCond('PowerActionPending', 'True', 'WaitingForPowerOn')), undefined);
  assert.equal(bmcDownReport(withCond('PowerActionPending', 'False', 'BMCUnavailable')), undefined);
});
