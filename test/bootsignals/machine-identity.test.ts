/**
 * The registration rule of issue 28 (src/inventory/machine-identity.ts, pure): every NIC of a
 * `/register` payload that carries an address must have a MAC the BMC reports; unchecked (and said)
 * where the BMC's NICs were never read or it reports none.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import {
  checkRegistrationMacs,
  nicInventoryCondition,
  registrationRefusedCondition,
} from '../../src/inventory/machine-identity.js';

const server = (macs: string[] | undefined): Server => ({
  metadata: { name: 's' },
  spec: { systemUUID: 'x' },
  status: macs ? { bmcNetworkInterfaces: macs.map((m, i) => ({ name: `${i}`, macAddress: m })) } : {},
});
const nic = (macAddress: unknown, ipAddresses: unknown = ['10.0.0.5']) => ({
  name: 'eth0',
  macAddress,
  ipAddresses,
});

describe('checkRegistrationMacs', () => {
  it('matches MACs in any notation; NICs without an address are not checked', () => {
    const r = checkRegistrationMacs(server(['52:54:00:aa:bb:01']), {
      networkInterfaces: [nic('52-54-00-AA-BB-01'), nic('02:00:00:00:00:99', []), { name: 'x' }],
    });
    assert.deepEqual(r, { verdict: 'match', macs: ['52:54:00:aa:bb:01'] });
  });
  it('a NIC with an address and another MAC, or no valid MAC, is a mismatch naming it', () => {
    const r = checkRegistrationMacs(server(['52:54:00:aa:bb:01']), {
      networkInterfaces: [nic('52:54:00:aa:bb:01'), nic('02:aa:bb:cc:dd:ee'), nic('bogus')],
    });
    assert.equal(r.verdict, 'mismatch');
    assert.deepEqual(r.verdict === 'mismatch' && r.unknown, ['02:aa:bb:cc:dd:ee', 'bogus']);
    const c = registrationRefusedCondition(r as Extract<typeof r, { verdict: 'mismatch' }>, '10.0.0.9', 'T');
    assert.equal(c.reason, 'RegistrationMACMismatch');
    assert.match(
      c.message,
      /from 10\.0\.0\.9 reported NIC\(s\) 02:aa:bb:cc:dd:ee, bogus .*52:54:00:aa:bb:01/,
    );
  });
  it('unchecked where the BMC NICs were never read or are none; malformed payloads never throw', () => {
    assert.equal(checkRegistrationMacs(server(undefined), {}).verdict, 'unchecked');
    assert.deepEqual(checkRegistrationMacs(server([]), {}), {
      verdict: 'unchecked',
      why: 'the BMC reports no NIC',
    });
    for (const data of [null, 'x', { networkInterfaces: 'x' }, { networkInterfaces: [null, 1, []] }])
      assert.equal(checkRegistrationMacs(server(['52:54:00:aa:bb:01']), data).verdict, 'match');
  });
  it('the MachineIdentity condition says what the BMC reported, and what none means', () => {
    assert.equal(nicInventoryCondition([]).reason, 'NoBMCNICs');
    assert.equal(nicInventoryCondition([]).status, 'False');
    const c = nicInventoryCondition([
      { name: '1', macAddress: '52:54:00:aa:bb:01', carrierStatus: 'LinkUp' },
    ]);
    assert.equal(c.status, 'True');
    assert.match(c.message, /52:54:00:aa:bb:01 \(LinkUp\)/);
  });
});
