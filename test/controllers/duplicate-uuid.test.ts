/**
 * Issue 20 defect 1 and issue 15 item S14: a second BMC object for an already registered BMC (or a
 * BMC that reports another BMC's system UUIDs) must never get Servers for those UUIDs nor power
 * anything; a BMC that lists more systems than the per-BMC limit gets Servers for the first ones
 * only; a hand-made duplicate Server is not driven nor bound by a claim naming it, and callbacks it
 * makes ambiguous are Warning Events on every Server involved. Against the real API server with the sim virtual BMC.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { BMC } from '../../src/api/v1alpha1/bmc.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  API,
  availableServers,
  cond,
  createClaim,
  eventMatching,
  eventsFor,
  eventually,
  getClaim,
  resetsSent,
  servers,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

test('S14 / defect 1: a second BMC object for the same BMC gets DuplicateSystemUUID, no Servers, no power action', {
  timeout: 90_000,
}, async () => {
  await withStack('dupbmc', { hosts: 2 }, async (s) => {
    const second = `${s.bmcName}-again`;
    try {
      const avail = await availableServers(s, 2);
      const tenant = avail[0]!;
      await createClaim(s, 'tenant', { serverRef: tenant.metadata.name!, timeout: '20s' });
      await eventually('tenant claim Booted', 30_000, async () => {
        const c = await getClaim(s, 'tenant');
        return cond(c, 'Booted')?.status === 'True';
      });
      const resetsBefore = avail.map((x) => resetsSent(s, x.spec.systemUUID).length);
      const first = (await s.client.get<BMC>(Resources.BMC, s.bmcName))!;
      // The same address, port and credentials: what `kubectl apply` of a copy with another name does.
      await s.client.create<BMC>(Resources.BMC, {
        apiVersion: API,
        kind: 'BMC',
        metadata: { name: second, labels: s.labels },
        spec: first.spec,
      });
      const dup = await eventually('DuplicateSystemUUID on the second BMC', 15_000, async () => {
        const b = await s.client.get<BMC>(Resources.BMC, second);
        return cond(b, 'DuplicateSystemUUID')?.status === 'True' ? b : undefined;
      });
      const c = cond(dup, 'DuplicateSystemUUID')!;
      for (const x of avail) {
        assert.match(c.message, new RegExp(x.spec.systemUUID), 'the message names each UUID');
        assert.match(c.message, new RegExp(x.metadata.name!), 'and the Server that owns it');
      }
      // Give a wrongly created Server time to show up and be driven.
      await new Promise((ok) => setTimeout(ok, 2_000));
      const all = await servers(s);
      assert.deepEqual(
        all.filter((x) => x.spec.bmcRef?.name === second).map((x) => x.metadata.name),
        [],
        'no Server for a UUID another Server owns',
      );
      assert.equal(all.length, 2);
      assert.deepEqual(
        avail.map((x) => resetsSent(s, x.spec.systemUUID).length),
        resetsBefore,
        'no power action on any system',
      );
      const claim = await getClaim(s, 'tenant');
      assert.equal(cond(claim, 'Booted')?.status, 'True', 'the tenant is undisturbed');
      const warning = await eventMatching(
        s,
        'BMC',
        second,
        'default',
        (e) => e.type === 'Warning' && e.reason === 'DuplicateSystemUUID',
      );
      assert.match(warning.message, new RegExp(tenant.metadata.name!));
      // The first BMC is unaffected.
      const firstNow = await s.client.get<BMC>(Resources.BMC, s.bmcName);
      assert.notEqual(cond(firstNow, 'DuplicateSystemUUID')?.status, 'True');
    } finally {
      await s.client.delete(Resources.BMC, second).catch(() => undefined);
    }
  });
});

test('S14: a BMC listing more systems than --bmc-max-systems gets Servers for the first ones only', {
  timeout: 60_000,
}, async () => {
  await withStack('maxsys', { hosts: 3, args: ['--bmc-max-systems', '2'] }, async (s) => {
    const bmc = await eventually('SystemsDiscovered=False SystemLimitExceeded', 15_000, async () => {
      const b = await s.client.get<BMC>(Resources.BMC, s.bmcName);
      return cond(b, 'SystemsDiscovered')?.reason === 'SystemLimitExceeded' ? b : undefined;
    });
    assert.equal(cond(bmc, 'SystemsDiscovered')?.status, 'False');
    assert.match(cond(bmc, 'SystemsDiscovered')!.message, /3 system\(s\).*limit 2/);
    // No wait: one reconcile creates the Servers of its scan (awaited) before it writes this condition
    // (src/controllers/bmc/bmc.ts scanSystems, then reportSystems), so a Server beyond the limit would
    // already be there; the two within it are the positive control.
    assert.equal((await servers(s)).length, 2);
    await eventMatching(
      s,
      'BMC',
      s.bmcName,
      'default',
      (e) => e.type === 'Warning' && e.reason === 'SystemLimitExceeded',
    );
  });
});

test('S14: a hand-made Server with a UUID another Server owns is not driven; ambiguous callbacks are Warning Events on both', {
  timeout: 60_000,
}, async () => {
  await withStack('dupsrv', { hosts: 1 }, async (s) => {
    try {
      const [owner] = await availableServers(s, 1);
      const uuid = owner!.spec.systemUUID;
      const before = resetsSent(s, uuid).length;
      await s.client.create<Server>(Resources.Server, {
        apiVersion: API,
        kind: 'Server',
        metadata: { name: `${s.ns}-copy`, labels: s.labels },
        // Upper case: the same UUID for every comparison that matters.
        spec: {
          systemUUID: uuid.toUpperCase(),
          systemURI: owner!.spec.systemURI,
          bmcRef: owner!.spec.bmcRef,
        },
      });
      const copy = await eventually('DuplicateSystemUUID on the copy', 15_000, async () => {
        const x = await s.client.get<Server>(Resources.Server, `${s.ns}-copy`);
        return cond(x, 'DuplicateSystemUUID')?.status === 'True' ? x : undefined;
      });
      assert.match(cond(copy, 'DuplicateSystemUUID')!.message, new RegExp(owner!.metadata.name!));
      await new Promise((ok) => setTimeout(ok, 1_500));
      assert.equal(resetsSent(s, uuid).length, before, 'the copy was never powered');
      const ownerNow = await s.client.get<Server>(Resources.Server, owner!.metadata.name!);
      assert.notEqual(
        cond(ownerNow, 'DuplicateSystemUUID')?.status,
        'True',
        'the owner is not the duplicate',
      );

      const res = await fetch(`${s.op!.bootServerUrl}/ipxe/${uuid}`);
      assert.equal(res.status, 409);
      assert.equal(((await res.json()) as { reason: string }).reason, 'AmbiguousServer');
      for (const name of [owner!.metadata.name!, `${s.ns}-copy`]) {
        await eventually(`Warning AmbiguousServer Event on ${name}`, 10_000, async () =>
          (await eventsFor(s, 'Server', name, 'default')).some(
            (e) => e.type === 'Warning' && e.reason === 'AmbiguousServer',
          ),
        );
      }
      // A claim naming the copy is refused for the owner's sake (selection finds the owner through
      // the UUID index, not a scan of every Server).
      await createClaim(s, 'wants-copy', { serverRef: `${s.ns}-copy`, timeout: '20s' });
      const refused = await eventually('the claim naming the copy is not bound', 15_000, async () => {
        const b = cond(await getClaim(s, 'wants-copy'), 'Bound');
        return b?.status === 'False' ? b : undefined;
      });
      assert.equal(refused.reason, 'ServerNotAvailable');
      assert.match(refused.message, new RegExp(`system UUID held by Server ${owner!.metadata.name}`));
      assert.equal(
        (await s.client.get<Server>(Resources.Server, `${s.ns}-copy`))?.spec.serverClaimRef,
        undefined,
      );
      await s.client.delete(Resources.ServerClaim, 'wants-copy', s.ns);

      // The owner's UUID is edited away: the copy owns the UUID now and says so at once, not at its
      // next resync (minutes), because the edit re-decides the Servers that shared the old UUID.
      await s.client.mergePatch(Resources.Server, owner!.metadata.name!, undefined, {
        spec: { systemUUID: '00000000-0000-4000-8000-0000000000ff' },
      });
      const freed = await eventually(
        'DuplicateSystemUUID=False on the copy after the edit',
        10_000,
        async () => {
          const x = await s.client.get<Server>(Resources.Server, `${s.ns}-copy`);
          return cond(x, 'DuplicateSystemUUID')?.status === 'False' ? x : undefined;
        },
      );
      assert.equal(cond(freed, 'DuplicateSystemUUID')!.reason, 'SystemUUIDsUnique');
    } finally {
      await s.client.delete(Resources.Server, `${s.ns}-copy`).catch(() => undefined);
    }
  });
});
