/**
 * Issue 36 item 8 / issue 31 item 1, the claim side: `ignore` on a claim and on its Server, unknown
 * values on a claim, and `metalctl retry` saying what a retry does (refusing where it would do
 * nothing or re-provision a Booted claim unasked). Real API server, sim virtual BMC.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { OPERATION_ANNOTATION } from '../../src/api/v1alpha1/operations.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { OpError, requestRetry } from '../../src/localstack/server-ops.js';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  cond,
  createClaim,
  eventsFor,
  eventually,
  getClaim,
  hostOf,
  pokeClaim,
  reconciles,
  resetsSent,
  type Stack,
  settled,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));
const annotateClaim = (s: Stack, name: string, v: string | null) =>
  s.client.mergePatch(Resources.ServerClaim, name, s.ns, {
    metadata: { annotations: { [OPERATION_ANNOTATION]: v } },
  });
const annotateServer = (s: Stack, name: string, v: string | null) =>
  s.client.mergePatch(Resources.Server, name, undefined, {
    metadata: { annotations: { [OPERATION_ANNOTATION]: v } },
  });

test('ignore on a claim: nothing is bound or powered until it is removed; unknown values are removed with a Warning', {
  timeout: 120_000,
}, async () => {
  await withStack('claim-ignore', { hosts: 2 }, async (s) => {
    const [srv, other] = await availableServers(s, 2);
    const host = hostOf(s, srv!);
    const claimOf = (name: string, server: Server, annotations?: Record<string, string>) =>
      s.client.create(Resources.ServerClaim, {
        apiVersion: 'metal.ironcore.dev/v1alpha1',
        kind: 'ServerClaim',
        metadata: { name, namespace: s.ns, labels: s.labels, ...(annotations ? { annotations } : {}) },
        spec: { power: 'On', image: 'test/os:1.0', serverRef: { name: server.metadata.name } },
      });
    // Positive control of the window: the same claim without ignore, created right after, binds and
    // powers its Server on; the window is as long again, so 'quiet' (queued first) would have done
    // the same by then if ignore were not honoured.
    const t0 = Date.now();
    await claimOf('quiet', srv!, { [OPERATION_ANNOTATION]: 'ignore' });
    await claimOf('control', other!);
    await eventually('the control claim binds and powers its Server on', 20_000, async () => {
      const c = await getClaim(s, 'control');
      return c?.status?.phase === 'Bound' && hostOf(s, other!).powerState() === 'On';
    });
    const reactionMs = Date.now() - t0;
    await sleep(reactionMs);
    const quiet = await getClaim(s, 'quiet');
    assert.equal(quiet?.status, undefined, 'an ignored claim is not reconciled');
    assert.equal(host.powerState(), 'Off', 'an ignored claim powers nothing');
    assert.equal(
      (await s.client.get<Server>(Resources.Server, srv!.metadata.name!))?.spec.serverClaimRef,
      undefined,
    );
    await annotateClaim(s, 'quiet', 'park');
    await eventually('unsupported value removed', 15_000, async () => {
      const c = await getClaim(s, 'quiet');
      return !(OPERATION_ANNOTATION in (c?.metadata.annotations ?? {}));
    });
    const ev = await eventually('UnsupportedOperation on the claim', 10_000, async () =>
      (await eventsFor(s, 'ServerClaim', 'quiet')).find((e) => e.reason === 'UnsupportedOperation'),
    );
    assert.equal(ev.type, 'Warning');
    await eventually(
      'Booted once no longer ignored',
      30_000,
      async () => cond(await getClaim(s, 'quiet'), 'Booted')?.status === 'True',
    );
  });
});

test('ignore on a claimed Server: the claim stands down and its deletion powers nothing off until ignore is removed', {
  timeout: 120_000,
}, async () => {
  await withStack('server-ignore', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const name = srv!.metadata.name!;
    const host = hostOf(s, srv!);
    await createClaim(s, 'tenant', { serverRef: name, timeout: '20s' });
    await eventually(
      'claim Booted',
      30_000,
      async () => cond(await getClaim(s, 'tenant'), 'Booted')?.status === 'True',
    );
    // The precondition, not a fixed wait: the manager has seen the annotation (a Server reconcile
    // after it; the claim controller reads the same informer).
    const seenServer = await reconciles(s, 'server');
    await annotateServer(s, name, 'ignore');
    await settled(s, 'server', seenServer, { more: 1 });
    const before = resetsSent(s, srv!.spec.systemUUID).length;
    await s.client.delete(Resources.ServerClaim, 'tenant', s.ns);
    const held = await eventually('Released=False ServerIgnored', 15_000, async () => {
      const c = await getClaim(s, 'tenant');
      return cond(c, 'Released')?.reason === 'ServerIgnored' ? c : undefined;
    });
    assert.match(cond(held, 'Released')!.message, /ignore/);
    // Positive control of "no ForceOff": two more reconciles of the held deletion (annotation edits
    // of the terminating claim), then idle.
    await pokeClaim(s, 'tenant');
    assert.equal(host.powerState(), 'On', 'no ForceOff on an ignored Server');
    assert.equal(resetsSent(s, srv!.spec.systemUUID).length, before);
    await annotateServer(s, name, null);
    await eventually(
      'claim released once ignore is removed',
      30_000,
      async () => !(await getClaim(s, 'tenant')),
    );
    assert.equal(host.powerState(), 'Off');
  });
});

test('metalctl retry refuses a Booted claim without --reprovision and a Server with nothing to retry', {
  timeout: 90_000,
}, async () => {
  await withStack('retry-words', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const name = srv!.metadata.name!;
    await assert.rejects(requestRetry(s.client, 'server', name), (e: unknown) => {
      assert.ok(e instanceof OpError);
      assert.match(
        e.message,
        /state Available: retry restarts discovery or cleanup of a Server in Error; nothing annotated/,
      );
      return true;
    });
    await createClaim(s, 'tenant', { serverRef: name, timeout: '20s' });
    await eventually(
      'claim Booted',
      30_000,
      async () => cond(await getClaim(s, 'tenant'), 'Booted')?.status === 'True',
    );
    await assert.rejects(requestRetry(s.client, 'claim', 'tenant', s.ns), (e: unknown) => {
      assert.ok(e instanceof OpError);
      assert.match(e.message, /is Booted on Server .*: a retry re-provisions it .* --reprovision/);
      return true;
    });
    assert.equal(
      (await getClaim(s, 'tenant'))?.metadata.annotations?.[OPERATION_ANNOTATION],
      undefined,
      'nothing written',
    );
    await assert.rejects(
      requestRetry(s.client, 'server', name),
      /state Reserved.*metalctl retry claim tenant/,
    );
    const said = await requestRetry(s.client, 'claim', 'tenant', s.ns, { reprovision: true });
    assert.match(said, /re-provisioning/);
    await eventually(
      'a new series',
      20_000,
      async () => ((await getClaim(s, 'tenant'))?.status?.boot?.series ?? 0) >= 2,
    );
  });
});
