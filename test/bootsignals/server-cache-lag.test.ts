/**
 * The signal servers' Server cache lags the `spec.bootConfigurationRef` patch that starts a boot (seen
 * in bench:fleet at N=1000: a probe got its script, then 401 `InvalidToken` for its ignition 9 ms
 * later, and its discovery waited out the deadline). Here the stack's Server informer is stopped
 * while its copy has no reference, then the reference is set: the script comes from the live read,
 * and the token it carries is accepted on /ignition and /bootstate (the live check re-reads the
 * Server too); a wrong token is still 401.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { KubeClient } from '../../src/runtime/client.js';
import { Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';
import { deleteSeededServers, newTestClient, seedBootTarget, startTestStack } from './fixture.js';

after(releaseSharedCluster);

let client: KubeClient;
let stack: Awaited<ReturnType<typeof startTestStack>>;
let ns: { name: string; cleanup(): Promise<void> };

describe('signal servers while their Server cache lags the boot configuration reference', () => {
  before(async () => {
    const kc = (await sharedCluster()).kubeConfig();
    client = newTestClient(kc);
    ns = await testNamespace(kc, 'srvlag');
    stack = await startTestStack(kc);
  });
  after(async () => {
    await stack?.close();
    if (ns && client) await deleteSeededServers(client, ns.name);
    await ns?.cleanup();
    await client?.close();
  });

  it('the token of the live script is accepted, a wrong one is not', async () => {
    const s = await seedBootTarget(client, ns.name);
    const name = s.server.metadata.name!;
    const ref = s.server.spec.bootConfigurationRef;
    await waitFor(
      'seeded objects cached',
      10_000,
      () =>
        !!stack.sources.servers.get(name)?.status?.discovery?.poweredOnAt &&
        !!stack.sources.secrets.get(s.secretName, ns.name) &&
        !!stack.sources.sbcs.get(s.sbc.metadata.name!, ns.name),
    );
    await client.mergePatch<Server>(Resources.Server, name, undefined, {
      spec: { bootConfigurationRef: null },
    });
    await waitFor(
      'reference cleared in the cache',
      10_000,
      () => !stack.sources.servers.get(name)?.spec.bootConfigurationRef,
    );
    stack.sources.servers.stop();
    await stack.sources.servers.stopped();
    await client.mergePatch<Server>(Resources.Server, name, undefined, {
      spec: { bootConfigurationRef: ref },
    });
    assert.equal(stack.sources.servers.get(name)?.spec.bootConfigurationRef, undefined, 'cache lags');

    const script = await fetch(`${stack.bootUrl}/ipxe/${s.uuid}`);
    const text = await script.text();
    assert.equal(script.status, 200, text);
    const token = /metal\.token=(\S+)/.exec(text)?.[1];
    assert.equal(token, s.token, 'the script carries the attempt token');
    const ign = await fetch(`${stack.bootUrl}/ignition/${s.uuid}?token=${encodeURIComponent(token!)}`);
    assert.equal(ign.status, 200, await ign.text());
    const wrong = await fetch(`${stack.bootUrl}/ignition/${s.uuid}?token=not-the-token`);
    assert.equal(wrong.status, 401);
    const booted = await fetch(`${stack.registryUrl}/bootstate`, {
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
