/**
 * The signal servers' Server cache lags the `spec.bootConfigurationRef` patch that starts a boot (seen
 * in bench:fleet at N=1000: a probe got its script, then 401 `InvalidToken` for its ignition 9 ms
 * later, and its discovery waited out the deadline). Here the stack's Server informer is stopped
 * while its copy has no reference, then the reference is set: the script comes from the live read,
 * and the token it carries is accepted on /ignition and /bootstate (the live check re-reads the
 * Server too); a wrong token is still 401.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster } from '../harness/shared.js';
import { seedBootTarget, useSignalStack } from './fixture.js';

after(releaseSharedCluster);

describe('signal servers while their Server cache lags the boot configuration reference', () => {
  const fx = useSignalStack('srvlag');

  it('the token of the live script is accepted, a wrong one is not', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name);
    const name = s.server.metadata.name!;
    const ref = s.server.spec.bootConfigurationRef;
    await waitFor(
      'seeded objects cached',
      10_000,
      () =>
        !!fx.stack.sources.servers.get(name)?.status?.discovery?.poweredOnAt &&
        !!fx.stack.sources.sbcs.get(s.sbc.metadata.name!, fx.namespace.name),
    );
    await fx.client.mergePatch<Server>(Resources.Server, name, undefined, {
      spec: { bootConfigurationRef: null },
    });
    await waitFor(
      'reference cleared in the cache',
      10_000,
      () => !fx.stack.sources.servers.get(name)?.spec.bootConfigurationRef,
    );
    fx.stack.sources.servers.stop();
    await fx.stack.sources.servers.stopped();
    await fx.client.mergePatch<Server>(Resources.Server, name, undefined, {
      spec: { bootConfigurationRef: ref },
    });
    assert.equal(fx.stack.sources.servers.get(name)?.spec.bootConfigurationRef, undefined, 'cache lags');

    const script = await fetch(`${fx.stack.bootUrl}/ipxe/${s.uuid}`);
    const text = await script.text();
    assert.equal(script.status, 200, text);
    const token = /metal\.token=(\S+)/.exec(text)?.[1];
    assert.equal(token, s.token, 'the script carries the attempt token');
    const ign = await fetch(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=${encodeURIComponent(token!)}`);
    assert.equal(ign.status, 200, await ign.text());
    const wrong = await fetch(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=not-the-token`);
    assert.equal(wrong.status, 401);
    const booted = await fetch(`${fx.stack.registryUrl}/bootstate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ systemUUID: s.uuid, booted: true }),
    });
    assert.ok(
      booted.status >= 200 && booted.status < 300,
      `bootstate ${booted.status} ${await booted.text()}`,
    );
  });
});
