/**
 * The boot server's SBC cache lags the controllers (seen under load in bench:fleet: hosts powered on
 * for a Ready SBC were sent to local boot and waited out the 10 min discovery timeout). Here the
 * stack's SBC informer is stopped before the objects are made, so its cache never shows them: a host
 * of an attempt in progress gets its script (the SBC read live) or 503 + Retry-After, never the
 * local-boot script; a host without an attempt still gets local boot.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster } from '../harness/shared.js';
import { type Seeded, type SignalStackFixture, seedBootTarget, useSignalStack } from './fixture.js';

// A file run on its own started a private control plane: stop it, or the process never exits.
after(releaseSharedCluster);

let fx: SignalStackFixture;

/** Waits until the stack's (running) Server informer shows the seeded Server and its power-on. */
async function serverCached(s: Seeded): Promise<void> {
  await waitFor(
    'Server (with its power-on) cached',
    10_000,
    () => !!fx.stack.sources.servers.get(s.server.metadata.name!)?.status?.discovery?.poweredOnAt,
  );
}

describe('boot server while its SBC cache lags', () => {
  fx = useSignalStack('bootlag');
  before(async () => {
    fx.stack.sources.sbcs.stop();
    await fx.stack.sources.sbcs.stopped();
  });

  it('an attempt in progress whose SBC the cache lacks gets its script (the SBC read live)', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name);
    await serverCached(s);
    assert.equal(fx.stack.sources.sbcs.get(s.sbc.metadata.name!, fx.namespace.name), undefined, 'cache lags');
    const res = await fetch(`${fx.stack.bootUrl}/ipxe/${s.uuid}`);
    const text = await res.text();
    assert.equal(res.status, 200, text);
    assert.match(text, /^kernel /m);
    assert.doesNotMatch(text, /^exit$/m);
  });

  it('an attempt in progress whose SBC is not readable yet: 503 BootConfigurationPending + Retry-After', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name);
    await fx.client.delete(Resources.ServerBootConfiguration, s.sbc.metadata.name!, fx.namespace.name);
    await serverCached(s);
    const res = await fetch(`${fx.stack.bootUrl}/ipxe/${s.uuid}`);
    const body = (await res.json()) as { reason: string };
    assert.equal(res.status, 503);
    assert.equal(body.reason, 'BootConfigurationPending');
    assert.equal(res.headers.get('retry-after'), '2');
  });

  it('a claimed server whose claim recorded the power-on: 503, not local boot', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim' });
    await fx.client.mergePatch(Resources.Server, s.server.metadata.name!, undefined, {
      spec: {
        serverClaimRef: { name: s.claim!.metadata.name, namespace: fx.namespace.name },
        bootConfigurationRef: null,
      },
    });
    await waitFor(
      'Server cached without its ref',
      10_000,
      () => !fx.stack.sources.servers.get(s.server.metadata.name!)?.spec.bootConfigurationRef,
    );
    const res = await fetch(`${fx.stack.bootUrl}/ipxe/${s.uuid}`);
    assert.equal(res.status, 503, await res.text());
  });

  it('no attempt in progress and no SBC: still the local-boot script', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { powerOnRecorded: false });
    await fx.client.delete(Resources.ServerBootConfiguration, s.sbc.metadata.name!, fx.namespace.name);
    await waitFor('Server cached', 10_000, () => !!fx.stack.sources.servers.get(s.server.metadata.name!));
    const res = await fetch(`${fx.stack.bootUrl}/ipxe/${s.uuid}`);
    const text = await res.text();
    assert.equal(res.status, 200, text);
    assert.match(text, /^exit$/m);
  });
});
