/**
 * The network boot override a boot sets (controllers/bmc-actions/power.ts `setNetbootOverride`), as a
 * table over a fake BMC (src/testing/fake-bmc.ts), no control plane: NetBootOnce asks `Once`;
 * NetBootAlways asks `Continuous`, and only a 400 (Redfish PropertyValueNotInList: the service does
 * not support the value) falls back to `Once`; any other refusal propagates with nothing retried;
 * UEFI HTTP boot carries its URI.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NetbootVia } from '../../src/controllers/bmc-actions/power.js';
import { setNetbootOverride } from '../../src/controllers/bmc-actions/power.js';
import { FakeBmc } from '../../src/testing/fake-bmc.js';

const URI = '/redfish/v1/Systems/1';

interface Row {
  name: string;
  via: NetbootVia;
  persistent: boolean;
  /** The next `times` PATCHes are refused with `status`. */
  refuse?: { status: number; times: number; messageIds?: string[] };
  /** The `enabled` values PATCHed, in order. */
  patched: string[];
  /** The value the function returns, or the HTTP status it throws. */
  result: 'Once' | 'Continuous' | { throws: number };
  httpBootUri?: string;
}

const ROWS: Row[] = [
  {
    name: 'NetBootOnce: Once',
    via: { target: 'Pxe' },
    persistent: false,
    patched: ['Once'],
    result: 'Once',
  },
  {
    name: 'NetBootAlways: Continuous',
    via: { target: 'Pxe' },
    persistent: true,
    patched: ['Continuous'],
    result: 'Continuous',
  },
  {
    name: 'NetBootAlways on a BMC without Continuous (400): Once',
    via: { target: 'Pxe' },
    persistent: true,
    refuse: { status: 400, times: 1, messageIds: ['Base.1.8.PropertyValueNotInList'] },
    patched: ['Continuous', 'Once'],
    result: 'Once',
  },
  {
    name: 'NetBootAlways refused otherwise (503): thrown, not retried as Once',
    via: { target: 'Pxe' },
    persistent: true,
    refuse: { status: 503, times: 1 },
    patched: ['Continuous'],
    result: { throws: 503 },
  },
  {
    name: 'NetBootOnce refused (400): thrown, no fallback',
    via: { target: 'Pxe' },
    persistent: false,
    refuse: { status: 400, times: 1 },
    patched: ['Once'],
    result: { throws: 400 },
  },
  {
    name: 'the fallback refused too: thrown',
    via: { target: 'Pxe' },
    persistent: true,
    refuse: { status: 400, times: 2 },
    patched: ['Continuous', 'Once'],
    result: { throws: 400 },
  },
  {
    name: 'UEFI HTTP boot carries its URI',
    via: { target: 'UefiHttp', httpBootUri: 'http://boot.example/httpboot/x.efi' },
    persistent: false,
    patched: ['Once'],
    result: 'Once',
    httpBootUri: 'http://boot.example/httpboot/x.efi',
  },
];

describe('network boot override (fake BMC table)', () => {
  for (const row of ROWS) {
    it(row.name, async () => {
      const bmc = new FakeBmc();
      if (row.refuse)
        bmc.refuse('setBootOverride', row.refuse.status, {
          times: row.refuse.times,
          ...(row.refuse.messageIds ? { messageIds: row.refuse.messageIds } : {}),
        });
      const run = setNetbootOverride({ bmc, systemUri: URI }, row.via, row.persistent);
      if (typeof row.result === 'object') {
        await assert.rejects(
          run,
          (err: { status?: number }) => err.status === (row.result as { throws: number }).throws,
        );
      } else {
        assert.equal(await run, row.result);
      }
      const sent = bmc
        .callsOf('setBootOverride')
        .map((a) => a[1] as { enabled: string; target: string; httpBootUri?: string });
      assert.deepEqual(
        sent.map((o) => o.enabled),
        row.patched,
      );
      for (const o of sent) {
        assert.equal(o.target, row.via.target);
        assert.equal(o.httpBootUri, row.httpBootUri);
      }
    });
  }
});
