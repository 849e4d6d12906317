/**
 * Boot-flow cases C01, C03, C04, C10, C11 (../shared/cases/boot-flow-cases.md) against the real
 * API server, with the registry and the boot server running in-process.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import type { KubeClient } from '../../src/runtime/client.js';
import { Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';
import {
  API,
  bearer,
  deleteSeededServers,
  newTestClient,
  nextAttempt,
  postJson,
  SEEDED_BY_LABEL,
  type Seeded,
  sbcCondition,
  seedBootTarget,
  startTestStack,
  waitCached,
} from './fixture.js';

// A file run on its own started a private control plane: stop it, or the process never exits.
after(releaseSharedCluster);

let client: KubeClient;
let stack: Awaited<ReturnType<typeof startTestStack>>;
let ns: { name: string; cleanup(): Promise<void> };

async function getText(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { headers });
  return { status: res.status, text: await res.text() };
}

/** resourceVersion of the SBC and the Server: unchanged means nothing was written. */
async function versions(s: Seeded): Promise<string> {
  const sbc = await client.get<ServerBootConfiguration>(
    Resources.ServerBootConfiguration,
    s.sbc.metadata.name!,
    s.sbc.metadata.namespace,
  );
  const srv = await client.get<Server>(Resources.Server, s.server.metadata.name!);
  return `${sbc?.metadata.resourceVersion}/${srv?.metadata.resourceVersion}`;
}

describe('boot-flow cases (registry + boot server)', () => {
  before(async () => {
    const kc = (await sharedCluster()).kubeConfig();
    client = newTestClient(kc);
    ns = await testNamespace(kc, 'cases');
    stack = await startTestStack(kc);
  });
  after(async () => {
    await stack?.close();
    if (ns && client) await deleteSeededServers(client, ns.name);
    await ns?.cleanup();
    await client?.close();
  });

  it('C01: every endpoint finds the server whatever the UUID case; a non-UUID gets 400', async () => {
    const upper = '0A1B2C3D-4E5F-6A7B-8C9D-0E1F2A3B4C5D';
    const lower = upper.toLowerCase();
    // The Server as a BMC (or an upstream manifest) wrote it: upper case.
    const s = await seedBootTarget(client, ns.name, { uuid: upper, withIgnition: true });
    await waitCached(stack, s);
    const script = await getText(`${stack.bootUrl}/ipxe/${lower}`);
    assert.equal(script.status, 200, script.text);
    assert.match(script.text, new RegExp(`metal.uuid=${lower}`));
    const again = await getText(`${stack.bootUrl}/ipxe/${upper}`);
    assert.equal(again.status, 200, again.text);
    const ign = await getText(`${stack.bootUrl}/ignition/${upper}?token=${s.token}`);
    assert.equal(ign.status, 200, ign.text);
    const reg = await postJson(
      `${stack.registryUrl}/register`,
      { systemUUID: lower, data: { memory: { totalBytes: 1 } } },
      bearer(s.token),
    );
    assert.equal(reg.status, 201, reg.text);
    await waitFor(
      'registration in cache',
      5_000,
      () => !!stack.sources.servers.get(s.server.metadata.name!)?.status?.registration,
    );
    const sys = await getText(`${stack.registryUrl}/systems/${upper}`, bearer(s.token));
    assert.equal(sys.status, 200, sys.text);
    assert.deepEqual(JSON.parse(sys.text), { memory: { totalBytes: 1 } });
    const boot = await postJson(
      `${stack.registryUrl}/bootstate`,
      { systemUUID: upper, booted: true },
      bearer(s.token),
    );
    assert.equal(boot.status, 200, boot.text);
    const { cond } = await sbcCondition(client, s, 'BootStateReceived');
    assert.equal(cond?.status, 'True');

    for (const bad of ['not-a-uuid', '0A1B2C3D4E5F6A7B8C9D0E1F2A3B4C5D00', 'x'.repeat(10_000)]) {
      assert.equal((await getText(`${stack.bootUrl}/ipxe/${bad}`)).status, 400, bad.slice(0, 20));
      assert.equal((await getText(`${stack.bootUrl}/ignition/${bad}?token=${s.token}`)).status, 400);
      assert.equal((await getText(`${stack.registryUrl}/systems/${bad}`)).status, 400);
      assert.equal(
        (await postJson(`${stack.registryUrl}/bootstate`, { systemUUID: bad, booted: true }, bearer(s.token)))
          .status,
        400,
      );
      assert.equal(
        (await postJson(`${stack.registryUrl}/register`, { systemUUID: bad, data: {} }, bearer(s.token)))
          .status,
        400,
      );
    }
  });

  it('C03: a late callback of an earlier attempt gets 409, writes nothing, records an Event', async () => {
    const s = await seedBootTarget(client, ns.name);
    await waitCached(stack, s);
    const tokenA = s.token;
    const { token: tokenB, attempt } = await nextAttempt(client, s);
    assert.equal(attempt, 2);
    const before = await versions(s);
    const late = await postJson(
      `${stack.registryUrl}/bootstate`,
      { systemUUID: s.uuid, booted: true },
      bearer(tokenA),
    );
    assert.equal(late.status, 409, late.text);
    assert.equal(JSON.parse(late.text).reason, 'StaleToken');
    assert.equal(await versions(s), before, 'nothing written');
    const { cond } = await sbcCondition(client, s, 'BootStateReceived');
    assert.equal(cond, undefined, 'attempt 2 stays incomplete');
    await waitFor('StaleCallback Event', 10_000, async () => {
      const events = await client.list<
        {
          reason?: string;
          involvedObject?: { name?: string };
        } & import('../../src/runtime/resource.js').KObject
      >(Resources.Event, { namespace: ns.name });
      return events.items.some(
        (e) => e.reason === 'StaleCallback' && e.involvedObject?.name === s.sbc.metadata.name,
      );
    });
    const own = await postJson(
      `${stack.registryUrl}/bootstate`,
      { systemUUID: s.uuid, booted: true },
      bearer(tokenB),
    );
    assert.equal(own.status, 200, own.text);
    const after = await sbcCondition(client, s, 'BootStateReceived');
    assert.equal(after.cond?.status, 'True');
    assert.ok(
      (after.cond?.observedGeneration ?? 0) >=
        (after.sbc.status?.attemptGeneration ?? Number.POSITIVE_INFINITY),
    );
  });

  it('C04: every attempt renders a new token into script and ignition; old → 409, made-up → 401', async () => {
    const s = await seedBootTarget(client, ns.name, { withIgnition: true });
    await waitCached(stack, s);
    const scriptA = await getText(`${stack.bootUrl}/ipxe/${s.uuid}`);
    assert.match(scriptA.text, new RegExp(`metal.token=${s.token}`));
    const { token: tokenB } = await nextAttempt(client, s);
    assert.notEqual(tokenB, s.token);
    await waitFor(
      'rotation cached',
      10_000,
      () => stack.sources.sbcs.get(s.sbc.metadata.name!, ns.name)?.spec.bootAttempt === 2,
    );
    const scriptB = await getText(`${stack.bootUrl}/ipxe/${s.uuid}`);
    assert.equal(scriptB.status, 200, scriptB.text);
    assert.match(scriptB.text, new RegExp(`metal.token=${tokenB}`));
    assert.doesNotMatch(scriptB.text, new RegExp(s.token));
    assert.match(scriptB.text, /metal.attempt=2/);
    const ignB = await getText(`${stack.bootUrl}/ignition/${s.uuid}?token=${encodeURIComponent(tokenB)}`);
    assert.equal(ignB.status, 200);
    assert.ok(ignB.text.includes(encodeURIComponent(`METAL_TOKEN=${tokenB}`)), 'ignition carries token B');
    assert.equal((await getText(`${stack.bootUrl}/ignition/${s.uuid}?token=${s.token}`)).status, 409);
    assert.equal((await getText(`${stack.bootUrl}/ignition/${s.uuid}?token=made-up`)).status, 401);
    assert.equal((await getText(`${stack.bootUrl}/ignition/${s.uuid}`)).status, 401);
    const url = `${stack.registryUrl}/bootstate`;
    assert.equal((await postJson(url, { systemUUID: s.uuid, booted: true }, bearer(s.token))).status, 409);
    assert.equal((await postJson(url, { systemUUID: s.uuid, booted: true }, bearer('made-up'))).status, 401);
    assert.equal((await postJson(url, { systemUUID: s.uuid, booted: true })).status, 401);
    assert.equal((await postJson(url, { systemUUID: s.uuid, booted: true }, bearer(tokenB))).status, 200);
  });

  it('C10: same registration twice is a no-op; a different one replaces and records an Event; a shared UUID gets 409', async () => {
    const s = await seedBootTarget(client, ns.name);
    await waitCached(stack, s);
    const payload = { systemUUID: s.uuid, data: { cpu: [{ id: '0' }], memory: { totalBytes: 536870912 } } };
    const first = await postJson(`${stack.registryUrl}/register`, payload, bearer(s.token));
    assert.equal(first.status, 201, first.text);
    await waitFor(
      'registration cached',
      5_000,
      () => !!stack.sources.servers.get(s.server.metadata.name!)?.status?.registration,
    );
    const before = await versions(s);
    const second = await postJson(`${stack.registryUrl}/register`, payload, bearer(s.token));
    assert.equal(second.status, 200, second.text);
    assert.equal(JSON.parse(second.text).changed, false);
    assert.equal(await versions(s), before, 'identical registration wrote nothing');
    const changed = await postJson(
      `${stack.registryUrl}/register`,
      { ...payload, data: { ...payload.data, memory: { totalBytes: 1073741824 } } },
      bearer(s.token),
    );
    assert.equal(changed.status, 201);
    const srv = await client.get<Server>(Resources.Server, s.server.metadata.name!);
    assert.deepEqual(srv?.status?.registration?.data, {
      cpu: [{ id: '0' }],
      memory: { totalBytes: 1073741824 },
    });
    await waitFor('RegistrationChanged Event', 10_000, async () => {
      const events = await client.list<
        import('../../src/runtime/resource.js').KObject & {
          reason?: string;
          involvedObject?: { name?: string };
        }
      >(Resources.Event, { namespace: 'default' });
      return events.items.some(
        (e) => e.reason === 'RegistrationChanged' && e.involvedObject?.name === s.server.metadata.name,
      );
    });

    // A second Server claiming the same UUID: every endpoint refuses to guess.
    await client.create<Server>(Resources.Server, {
      apiVersion: API,
      kind: 'Server',
      metadata: { name: `${s.server.metadata.name}-dup`, labels: { [SEEDED_BY_LABEL]: ns.name } },
      spec: { systemUUID: s.uuid.toUpperCase() },
    });
    await waitFor(
      'duplicate cached',
      5_000,
      () => !!stack.sources.servers.get(`${s.server.metadata.name}-dup`),
    );
    const statuses = [
      (await postJson(`${stack.registryUrl}/register`, payload, bearer(s.token))).status,
      (
        await postJson(
          `${stack.registryUrl}/bootstate`,
          { systemUUID: s.uuid, booted: true },
          bearer(s.token),
        )
      ).status,
      (await getText(`${stack.registryUrl}/systems/${s.uuid}`)).status,
      (await getText(`${stack.bootUrl}/ipxe/${s.uuid}`)).status,
      (await getText(`${stack.bootUrl}/ignition/${s.uuid}?token=${s.token}`)).status,
    ];
    assert.deepEqual(statuses, [409, 409, 409, 409, 409]);
  });

  it('C11: hostile and malformed bodies get the right 4xx, write nothing, echo no secret', async () => {
    const s = await seedBootTarget(client, ns.name);
    await waitCached(stack, s);
    const before = await versions(s);
    const url = `${stack.registryUrl}/bootstate`;
    const send = async (
      body: string | Buffer,
      headers: Record<string, string> = { 'content-type': 'application/json' },
    ) => {
      const res = await fetch(url, { method: 'POST', headers: { ...bearer(s.token), ...headers }, body });
      const text = await res.text();
      assert.ok(!text.includes(s.token), 'response echoes the token');
      return res.status;
    };
    assert.equal(await send(''), 400, 'empty body');
    assert.equal(await send('{"systemUUID":'), 400, 'invalid JSON');
    assert.equal(await send(JSON.stringify({ systemUUID: s.uuid, booted: 'yes' })), 400, 'wrong shape');
    assert.equal(await send(JSON.stringify({ systemUUID: s.uuid })), 400, 'missing field');
    assert.equal(await send('[]'), 400, 'array');
    assert.equal(await send(Buffer.alloc(20 * 1024 * 1024, 0x20)), 413, '20 MiB body');
    assert.equal(
      await send(JSON.stringify({ systemUUID: s.uuid, booted: true }), { 'content-type': 'text/plain' }),
      415,
    );
    assert.equal(await send('systemUUID=x', { 'content-type': 'application/x-www-form-urlencoded' }), 415);
    assert.equal((await getText(`${stack.bootUrl}/ipxe/../../etc/passwd`)).status >= 400, true);
    assert.equal((await getText(`${stack.bootUrl}/ipxe/..%2F..%2Fetc%2Fpasswd`)).status, 400);
    assert.equal((await getText(`${stack.registryUrl}/systems/${'a'.repeat(10_000)}`)).status, 400);
    assert.equal(await versions(s), before, 'nothing written');
    // Still serving.
    assert.equal((await postJson(url, { systemUUID: s.uuid, booted: true }, bearer(s.token))).status, 200);
  });
});
