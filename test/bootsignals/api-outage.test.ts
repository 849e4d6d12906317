/**
 * The API server stops for 20 s while callbacks arrive: the registry answers 503 with Retry-After
 * meanwhile, and every callback is recorded once the API server is back (docs/ARCHITECTURE.md, 'Failure handling in one place each').
 * Uses a private control plane, because it stops kube-apiserver.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import type { KubeClient } from '../../src/runtime/client.js';
import { Resources } from '../../src/runtime/resource.js';
import { ControlPlane } from '../harness/control-plane.js';
import { testNamespace } from '../harness/shared.js';
import { bearer, newTestClient, type Seeded, seedBootTarget, startTestStack, waitCached } from './fixture.js';

let cp: ControlPlane;
let client: KubeClient;
let stack: Awaited<ReturnType<typeof startTestStack>>;

describe('API server outage', () => {
  before(async () => {
    cp = await ControlPlane.start();
    client = newTestClient(cp.kubeConfig());
    stack = await startTestStack(cp.kubeConfig());
  });
  after(async () => {
    await stack?.close();
    await client?.close();
    await cp?.stop();
  });

  it('answers 503 + Retry-After while kube-apiserver is down for 20 s, then records every callback', async () => {
    const ns = await testNamespace(cp.kubeConfig(), 'outage');
    const seeded: Seeded[] = await Promise.all(
      Array.from({ length: 20 }, () => seedBootTarget(client, ns.name)),
    );
    // Everything a callback is answered from (Server, SBC; the token is derived) in the caches before the
    // API server goes: the 503s below must be the outage's, not a cache still filling.
    await Promise.all(seeded.map((s) => waitCached(stack, s)));
    await cp.stopApiServer();
    const downAt = Date.now();
    const seen503: string[] = [];
    const restart = (async () => {
      await new Promise((ok) => setTimeout(ok, 20_000 - (Date.now() - downAt)));
      await cp.startApiServer();
    })();
    const results = await Promise.all(
      seeded.map(async (s) => {
        for (let tries = 1; tries < 200; tries++) {
          const res = await fetch(`${stack.registryUrl}/bootstate`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...bearer(s.token) },
            body: JSON.stringify({ systemUUID: s.uuid, booted: true }),
          });
          await res.arrayBuffer();
          if (res.status === 503) {
            seen503.push(res.headers.get('retry-after') ?? '');
            await new Promise((ok) => setTimeout(ok, Number(res.headers.get('retry-after') ?? 1) * 1000));
            continue;
          }
          return { status: res.status, at: Date.now() - downAt };
        }
        return { status: 0, at: Date.now() - downAt };
      }),
    );
    await restart;
    assert.ok(seen503.length >= seeded.length, `expected 503s during the outage, saw ${seen503.length}`);
    assert.ok(
      seen503.every((h) => Number(h) >= 1),
      'every 503 carries Retry-After',
    );
    assert.ok(
      results.every((r) => r.status === 200),
      JSON.stringify(results),
    );
    assert.ok(
      results.every((r) => r.at >= 19_000),
      'nothing was accepted while the API server was down',
    );
    const list = await client.list<ServerBootConfiguration>(Resources.ServerBootConfiguration, {
      namespace: ns.name,
    });
    const recorded = list.items.filter((x) =>
      x.status?.conditions?.some((c) => c.type === 'BootStateReceived' && c.status === 'True'),
    );
    assert.equal(recorded.length, seeded.length);
    console.log(
      JSON.stringify({ test: 'api-outage', callbacks: seeded.length, responses503: seen503.length }),
    );
  });
});
