import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  cond,
  createClaim,
  eventsFor,
  eventually,
  getClaim,
  SCOPE_LABEL,
  servers,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

test('a claim by selector and a claim by ref bind distinct servers', { timeout: 60_000 }, async () => {
  await withStack('bind', { hosts: 3 }, async (s) => {
    const [a, b] = await availableServers(s, 3);
    await s.client.mergePatch(Resources.Server, a!.metadata.name!, undefined, {
      metadata: { labels: { pool: 'gold' } },
    });
    await createClaim(s, 'by-ref', { serverRef: b!.metadata.name!, power: 'Off' });
    await createClaim(s, 'by-selector', { selector: { pool: 'gold' }, power: 'Off' });
    const bound = await eventually('both claims Bound', 20_000, async () => {
      const [r, sel] = [await getClaim(s, 'by-ref'), await getClaim(s, 'by-selector')];
      return r?.status?.phase === 'Bound' && sel?.status?.phase === 'Bound' ? { r, sel } : undefined;
    });
    assert.equal(bound.r.spec.serverRef?.name, b!.metadata.name);
    assert.equal(
      bound.sel.spec.serverRef?.name,
      a!.metadata.name,
      'the selector claim records the server it bound',
    );
    assert.equal(cond(bound.sel, 'Bound')?.status, 'True');
    const after = await servers(s);
    const ref = (n: string) => after.find((x) => x.metadata.name === n)?.spec.serverClaimRef;
    assert.deepEqual(ref(a!.metadata.name!), { name: 'by-selector', namespace: s.ns });
    assert.deepEqual(ref(b!.metadata.name!), { name: 'by-ref', namespace: s.ns });
    await eventually('bound servers Reserved', 10_000, async () => {
      const list = await servers(s);
      return list.filter((x) => x.status?.state === 'Reserved').length === 2;
    });
    // The reservation is told once, by the claim's binding Event naming the Server (a claim with
    // power Off: Bound); upstream records no Server Event for it either.
    const boundEvent = await eventually('the claim Bound Event', 10_000, async () =>
      (await eventsFor(s, 'ServerClaim', 'by-ref')).find((e) => e.reason === 'Bound'),
    );
    assert.match(boundEvent.message, new RegExp(`Server ${b!.metadata.name}`));

    // A third claim for the taken server by ref stays unbound, and says why.
    await createClaim(s, 'late', { serverRef: b!.metadata.name!, power: 'Off' });
    const late = await eventually('late claim reports its server is taken', 10_000, async () => {
      const c = await getClaim(s, 'late');
      return cond(c, 'Bound')?.reason === 'ServerNotAvailable' ? c : undefined;
    });
    assert.match(cond(late, 'Bound')!.message, /claimed by/);

    // Deleting a claim releases its server (powered off, references cleared, Available), and the
    // waiting claim binds it.
    const byRefSbcUid = (await s.client.get(Resources.ServerBootConfiguration, 'by-ref', s.ns))?.metadata.uid;
    assert.ok(byRefSbcUid, 'the claim has its SBC');
    await s.client.delete(Resources.ServerClaim, 'by-ref', s.ns);
    const rebound = await eventually('late claim binds the released server', 15_000, async () => {
      const srv = await s.client.get<Server>(Resources.Server, b!.metadata.name!);
      return !(await getClaim(s, 'by-ref')) && srv?.spec.serverClaimRef?.name === 'late' ? srv : undefined;
    });
    assert.equal((await getClaim(s, 'late'))?.spec.serverRef?.name, b!.metadata.name);
    assert.notEqual(rebound.spec.bootConfigurationRef?.name, 'by-ref');
    assert.equal(
      await s.client.get(Resources.ServerBootConfiguration, 'by-ref', s.ns),
      undefined,
      'SBC of the deleted claim gone',
    );
    // Nothing of the attempt is left behind in the tenant's namespace: tokens are derived, not
    // stored (security review N9), so there is no callback Secret to clean up.
    assert.equal(await s.client.get(Resources.Secret, 'by-ref-callback', s.ns), undefined);
    // Checked last: by now a Reserved Event of either binding would have been recorded long ago.
    const serverEvents = await eventsFor(s, 'Server', b!.metadata.name!, 'default');
    assert.ok(
      !serverEvents.some((e) => e.reason === 'Reserved'),
      JSON.stringify(serverEvents.map((e) => e.reason)),
    );
  });
});

test('10 claims racing for 5 servers bind exactly 5', { timeout: 60_000 }, async () => {
  await withStack('race', { hosts: 5 }, async (s) => {
    await availableServers(s, 5);
    const names = Array.from({ length: 10 }, (_, i) => `racer-${i}`);
    await Promise.all(
      names.map((n) => createClaim(s, n, { selector: { [SCOPE_LABEL]: s.scope }, power: 'Off' })),
    );
    let live = names;
    const settle = async () => {
      const claims = await Promise.all(live.map((n) => getClaim(s, n)));
      const bound = claims.filter((c) => c?.status?.phase === 'Bound');
      const unbound = claims.filter(
        (c) => c?.status?.phase === 'Unbound' && cond(c, 'Bound')?.status === 'False',
      );
      return bound.length + unbound.length === live.length ? { bound, unbound } : undefined;
    };
    const first = await eventually('every claim decided', 20_000, settle);
    assert.equal(first.bound.length, 5);
    // Positive control for the window below: free one server and time how long a waiting claim
    // takes to get it. The "no late double binding" window is then several of those reaction times.
    const gone = first.bound[0]!.metadata.name!;
    live = names.filter((n) => n !== gone);
    const freedAt = Date.now();
    await s.client.delete(Resources.ServerClaim, gone, s.ns);
    await eventually('a waiting claim binds the freed server', 20_000, async () => {
      const x = await settle();
      return x?.bound.length === 5 && !(await getClaim(s, gone)) ? x : undefined;
    });
    const reactionMs = Date.now() - freedAt;
    // Stays that way (no late double binding), for at least 1.5 s and 3 reaction times.
    await new Promise((ok) => setTimeout(ok, Math.max(1_500, 3 * reactionMs)));
    const { bound } = (await settle())!;
    assert.equal(
      bound.length,
      5,
      `bound after ${Math.max(1_500, 3 * reactionMs)} ms (reaction ${reactionMs} ms)`,
    );
    const boundServers = bound.map((c) => c!.spec.serverRef?.name);
    assert.equal(new Set(boundServers).size, 5, 'five distinct servers');
    const list = await servers(s);
    const refs = list.map((x) => `${x.spec.serverClaimRef?.namespace}/${x.spec.serverClaimRef?.name}`).sort();
    assert.deepEqual(
      refs,
      bound.map((c) => `${s.ns}/${c!.metadata.name}`).sort(),
      'each server names exactly one bound claim',
    );
  });
});
