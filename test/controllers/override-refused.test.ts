/**
 * Issue 30 item 2 against the manager, a virtual BMC and a simulated host: a BMC that refuses the
 * system's PATCHes for good (400 `PropertyNotWritable`, the boot override cannot be set) ends each
 * claim's series `Booted=False` / `BootRefused` with no power action and no attempt burnt — the
 * first claim and the next one on the same Server alike (the 10-minute soak saw most claims of
 * that behaviour boot, bench/README.md).
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  cond,
  createClaim,
  eventually,
  getClaim,
  overridesSent,
  resetsSent,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

test('a BMC refusing the override for good: every claim ends BootRefused, no power action', {
  timeout: 90_000,
}, async () => {
  await withStack('override-refused', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const uuid = srv!.spec.systemUUID;
    const sys = s.vbmc.systems.find((x) => x.id === uuid)!;
    for (const name of ['first', 'second']) {
      s.vbmc.setFaults({ patchRefusals: { [sys.id.toLowerCase()]: 400 } });
      const mark = { resets: resetsSent(s, uuid).length, overrides: overridesSent(s, uuid).length };
      await createClaim(s, name, { serverRef: srv!.metadata.name!, bootPolicy: 'NetBootOnce' });
      const ended = await eventually(`${name}: Booted=False`, 30_000, async () => {
        const c = await getClaim(s, name);
        return cond(c, 'Booted')?.status === 'False' && c?.status?.boot?.phase === 'Refused' ? c : undefined;
      }).catch(async (err) => {
        const c = await getClaim(s, name);
        throw new Error(
          `${String(err)}: phase ${c?.status?.boot?.phase}, Booted ${JSON.stringify(cond(c, 'Booted'))}, resets ${JSON.stringify(resetsSent(s, uuid).slice(mark.resets))}, overrides ${JSON.stringify(overridesSent(s, uuid).slice(mark.overrides))}`,
        );
      });
      assert.equal(
        cond(ended, 'Booted')?.reason,
        'BootRefused',
        `${name}: ${cond(ended, 'Booted')?.message}`,
      );
      assert.deepEqual(resetsSent(s, uuid).slice(mark.resets), [], `${name}: no power action`);
      assert.ok(overridesSent(s, uuid).length > mark.overrides, `${name}: the override was asked for`);
      // Released with the refusal lifted, as the soak does.
      s.vbmc.setFaults({ patchRefusals: {} });
      await s.client.delete(Resources.ServerClaim, name, s.ns);
      await eventually(`${name} released`, 30_000, async () => !(await getClaim(s, name)));
    }
  });
});
