/**
 * Issue 16 "done when": for each of dell, hpe, supermicro, a sim fleet of 10 servers behind a virtual
 * BMC serving that vendor's captured tree and write behaviour goes through discovery and a claim to
 * `Booted=True` against the real API server and the in-process manager, with a request log showing no
 * rejected PATCH loop and no re-sent unchanged field. With the HPE POST window on while the claims'
 * boot PATCHes go out, each PATCH succeeds within the call's retry budget: no 30 s requeue, no Warning.
 */

import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { Resources } from '../../src/runtime/resource.js';
import { resolveProfile } from '../../src/virtualbmc/profile.js';
import {
  cond,
  createClaim,
  eventually,
  getClaim,
  type Stack,
  servers,
  withStack,
} from '../controllers/fixture.js';
import { releaseSharedCluster } from '../harness/shared.js';

after(releaseSharedCluster);

const FLEET = 10;

/** Servers Available and powered off (status and host), matched to hosts by UUID (ids follow the tree). */
function available(s: Stack): Promise<Server[]> {
  return eventually(`${FLEET} Available servers`, 90_000, async () => {
    const list = (await servers(s)).filter(
      (x) =>
        x.status?.state === 'Available' &&
        x.status.powerState === 'Off' &&
        s.vbmc.systems.find((h) => h.uuid === x.spec.systemUUID)?.host.powerState() === 'Off',
    );
    return list.length >= FLEET ? list : undefined;
  });
}

async function warnings(s: Stack, names: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const namespace of ['default', s.ns]) {
    const { items } = await s.client.list<{
      metadata: Record<string, string>;
      type: string;
      reason: string;
      message: string;
      involvedObject?: { kind?: string; name?: string };
    }>(Resources.Event, { namespace });
    for (const e of items) {
      if (e.type === 'Warning' && e.involvedObject?.name && names.includes(e.involvedObject.name))
        out.push(`${e.involvedObject.kind}/${e.involvedObject.name} ${e.reason}: ${e.message}`);
    }
  }
  return out;
}

for (const vendor of ['dell', 'hpe', 'supermicro'] as const) {
  test(`${vendor}: ${FLEET} sim servers behind the ${vendor} profile are discovered and booted by claims`, {
    timeout: 180_000,
  }, async () => {
    // The manager's default call budget (8 s), not the fixture's short one: the POST window must fit.
    await withStack(
      `vf-${vendor}`,
      {
        hosts: FLEET,
        profile: resolveProfile(vendor),
        args: ['--bmc-call-budget', '8s', '--bmc-request-timeout', '5s'],
      },
      async (s) => {
        const avail = await available(s);
        const names = avail.slice(0, FLEET).map((x) => x.metadata.name!);
        // Each host's claim PATCH finds it just reset, in POST for 3 s (HPE answers 400 meanwhile).
        if (vendor === 'hpe') s.vbmc.setFaults({ postAtNextPatchMs: 3_000 });
        const t0 = Date.now();
        await Promise.all(names.map((n, i) => createClaim(s, `c${i}`, { serverRef: n, timeout: '60s' })));
        await eventually(`${FLEET} claims Booted=True`, 60_000, async () => {
          const claims = await Promise.all(names.map((_, i) => getClaim(s, `c${i}`)));
          return claims.every((c) => cond(c, 'Booted')?.status === 'True');
        });
        const bootMs = Date.now() - t0;

        const patches = s.vbmc.requests().filter((r) => r.method === 'PATCH');
        const rejected = patches.filter((r) => r.status >= 400);
        const unchanged = patches.flatMap((r) => (r.unchangedFields ?? []).map((f) => `${r.path} ${f}`));
        console.log(
          `${vendor}: ${FLEET} claims Booted in ${bootMs} ms; ${patches.length} PATCHes, ${rejected.length} refused (${[
            ...new Set(rejected.map((r) => r.status)),
          ].join(',')}), ${unchanged.length} unchanged fields, BIOS jobs ${s.vbmc.biosJobs()}`,
        );
        assert.deepEqual(unchanged, [], 'no re-sent unchanged field');
        assert.equal(s.vbmc.biosJobs(), 0, 'no BIOS job queued (Dell)');
        if (vendor === 'hpe') {
          assert.ok(rejected.length > 0, 'the POST window was hit');
          assert.ok(
            rejected.every((r) => r.status === 400),
            'only the POST-window refusals',
          );
          // Within one call: the client's backoff (0.2 s, 0.4 s, ...) spaces the attempts, not a requeue
          // of the reconcile (>= 2 s); and the last refusal is followed by the success within the budget.
          for (const path of new Set(rejected.map((r) => r.path))) {
            const series = patches.filter((r) => r.path === path && r.at >= t0);
            const firstGap = series[1]!.at - series[0]!.at;
            assert.ok(firstGap < 1_500, `${path}: retried inside the call (${firstGap} ms)`);
            assert.equal(series.at(-1)!.status, 204, `${path}: the claim's PATCH went through`);
            assert.ok(series.at(-1)!.at - series[0]!.at < 8_000, `${path}: within the 8 s call budget`);
          }
        } else {
          assert.deepEqual(rejected, [], 'no rejected PATCH');
        }
        // Per system: at most the two PATCHes of discovery and claim went through (no loop).
        const accepted = new Map<string, number>();
        for (const r of patches.filter((p) => p.status < 300))
          accepted.set(r.path, (accepted.get(r.path) ?? 0) + 1);
        for (const [path, n] of accepted) assert.ok(n <= 2, `${path}: ${n} accepted PATCHes`);
        assert.ok(bootMs < 30_000, `no 30 s requeue (${bootMs} ms)`);
        assert.deepEqual(await warnings(s, names), [], 'no Warning Event on the Servers');
      },
    );
  });
}
