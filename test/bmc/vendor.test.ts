import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { quirksForManufacturer, quirksForVendor } from '../../src/bmc/vendor.js';

describe('vendor detection', () => {
  it('maps the Manufacturer strings BMCs report to vendor profiles', () => {
    const cases: Array<[string | undefined, string]> = [
      ['Dell Inc.', 'Dell'],
      ['HPE', 'HPE'],
      ['HP', 'HPE'],
      ['Hewlett Packard Enterprise', 'HPE'],
      ['Lenovo', 'Lenovo'],
      ['Supermicro', 'Supermicro'],
      ['Super Micro Computer, Inc.', 'Supermicro'],
      ['Contoso', 'Generic'],
      ['Delltron', 'Generic'],
      [undefined, 'Generic'],
    ];
    for (const [manufacturer, vendor] of cases) {
      assert.equal(quirksForManufacturer(manufacturer).vendor, vendor, String(manufacturer));
    }
  });

  it('returns the named profile when forced', () => {
    assert.deepEqual(quirksForVendor('HPE').gracefulShutdownAlternatives, ['PushPowerButton']);
    assert.equal(quirksForVendor('Lenovo').ifMatchWithoutETag, '*');
    assert.equal(quirksForVendor('Generic').ifMatchWithoutETag, undefined);
  });
});
