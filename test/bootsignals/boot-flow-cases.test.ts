/**
 * Boot-flow cases C01, C03, C04, C10, C11 (../shared/cases/boot-flow-cases.md) against the real
 * API server, with the registry and the boot server running in-process.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { after, describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import { registrationDigest, registrationRecord } from '../../src/inventory/registration-record.js';
import { Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  API,
  bearer,
  nextAttempt,
  postJson,
  SEEDED_BY_LABEL,
  type Seeded,
  type SignalStackFixture,
  sbcCondition,
  seedBootTarget,
  storedRegistration,
  useSignalStack,
  waitCached,
} from './fixture.js';

// A file run on its own started a private control plane: stop it, or the process never exits.
after(releaseSharedCluster);

let fx: SignalStackFixture;

/** One request with `path` sent byte for byte (node:http does not resolve `..` segments). */
function rawRequest(base: string, method: string, path: string): Promise<{ status: number; text: string }> {
  const u = new URL(base);
  return new Promise((ok, fail) => {
    const req = httpRequest({ host: u.hostname, port: u.port, method, path }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
      });
      res.on('end', () => ok({ status: res.statusCode ?? 0, text }));
      res.on('error', fail);
    });
    req.on('error', fail);
    req.end();
  });
}

async function getText(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { headers });
  return { status: res.status, text: await res.text() };
}

/** resourceVersion of the SBC and the Server: unchanged means nothing was written. */
async function versions(s: Seeded): Promise<string> {
  const sbc = await fx.client.get<ServerBootConfiguration>(
    Resources.ServerBootConfiguration,
    s.sbc.metadata.name!,
    s.sbc.metadata.namespace,
  );
  const srv = await fx.client.get<Server>(Resources.Server, s.server.metadata.name!);
  return `${sbc?.metadata.resourceVersion}/${srv?.metadata.resourceVersion}`;
}

describe('boot-flow cases (registry + boot server)', () => {
  fx = useSignalStack('cases');

  it('C01: every endpoint finds the server whatever the UUID case; a non-UUID gets 400', async () => {
    // One Server written upper case (as a BMC or an upstream manifest writes it), one lower case (as
    // Linux reports it); each is asked for in both cases on every endpoint.
    const upperSeed = '0A1B2C3D-4E5F-6A7B-8C9D-0E1F2A3B4C5D';
    const lowerSeed = `1b2c3d4e-5f6a-4b7c-8d9e-${randomBytes(6).toString('hex')}`;
    let s!: Seeded;
    for (const seeded of [upperSeed, lowerSeed]) {
      s = await seedBootTarget(fx.client, fx.namespace.name, { uuid: seeded, withIgnition: true });
      await waitCached(fx.stack, s);
      const lower = seeded.toLowerCase();
      for (const [i, asked] of [seeded.toLowerCase(), seeded.toUpperCase()].entries()) {
        const what = `Server ${seeded}, asked as ${asked}`;
        const script = await getText(`${fx.stack.bootUrl}/ipxe/${asked}`);
        assert.equal(script.status, 200, `${what}: ${script.text}`);
        assert.match(script.text, new RegExp(`metal.uuid=${lower}`), what);
        assert.match(script.text, new RegExp(`metal.token=${s.token}`), what);
        const ign = await getText(
          `${fx.stack.bootUrl}/ignition/${asked}?token=${encodeURIComponent(s.token)}`,
        );
        assert.equal(ign.status, 200, `${what}: ${ign.text}`);
        // A payload per request case, so each is a change (201) stored on the same Server.
        const data = { memory: { totalBytes: i + 1 } };
        const reg = await postJson(
          `${fx.stack.registryUrl}/register`,
          { systemUUID: asked, data },
          bearer(s.token),
        );
        assert.equal(reg.status, 201, `${what}: ${reg.text}`);
        await waitFor(
          'registration in cache',
          5_000,
          // The Server's record carries the digest; the payload is in its ConfigMap.
          () =>
            registrationRecord(fx.stack.sources.servers.get(s.server.metadata.name!)!)?.digest ===
            registrationDigest(data),
        );
        for (const read of [seeded.toLowerCase(), seeded.toUpperCase()]) {
          const sys = await getText(`${fx.stack.registryUrl}/systems/${read}`, bearer(s.token));
          assert.equal(sys.status, 200, `${what}, read as ${read}: ${sys.text}`);
          assert.deepEqual(JSON.parse(sys.text), data);
        }
        const boot = await postJson(
          `${fx.stack.registryUrl}/bootstate`,
          { systemUUID: asked, booted: i === 0 },
          bearer(s.token),
        );
        assert.equal(boot.status, 200, `${what}: ${boot.text}`);
        const { cond } = await sbcCondition(fx.client, s, 'BootStateReceived');
        assert.equal(
          cond?.status,
          i === 0 ? 'True' : 'False',
          `${what}: the callback landed on this Server's SBC`,
        );
      }
    }

    for (const bad of ['not-a-uuid', '0A1B2C3D4E5F6A7B8C9D0E1F2A3B4C5D00', 'x'.repeat(10_000)]) {
      assert.equal((await getText(`${fx.stack.bootUrl}/ipxe/${bad}`)).status, 400, bad.slice(0, 20));
      assert.equal((await getText(`${fx.stack.bootUrl}/ignition/${bad}?token=${s.token}`)).status, 400);
      assert.equal((await getText(`${fx.stack.registryUrl}/systems/${bad}`)).status, 400);
      assert.equal(
        (
          await postJson(
            `${fx.stack.registryUrl}/bootstate`,
            { systemUUID: bad, booted: true },
            bearer(s.token),
          )
        ).status,
        400,
      );
      assert.equal(
        (await postJson(`${fx.stack.registryUrl}/register`, { systemUUID: bad, data: {} }, bearer(s.token)))
          .status,
        400,
      );
    }
  });

  it('C03: a late callback of an earlier attempt gets 409, writes nothing, records an Event', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name);
    await waitCached(fx.stack, s);
    const tokenA = s.token;
    const { token: tokenB, attempt } = await nextAttempt(fx.client, s);
    assert.equal(attempt, 2);
    const before = await versions(s);
    const late = await postJson(
      `${fx.stack.registryUrl}/bootstate`,
      { systemUUID: s.uuid, booted: true },
      bearer(tokenA),
    );
    assert.equal(late.status, 409, late.text);
    assert.equal(JSON.parse(late.text).reason, 'StaleToken');
    assert.equal(await versions(s), before, 'nothing written');
    const { cond } = await sbcCondition(fx.client, s, 'BootStateReceived');
    assert.equal(cond, undefined, 'attempt 2 stays incomplete');
    await waitFor('StaleCallback Event', 10_000, async () => {
      const events = await fx.client.list<
        {
          reason?: string;
          involvedObject?: { name?: string };
        } & import('../../src/runtime/resource.js').KObject
      >(Resources.Event, { namespace: fx.namespace.name });
      return events.items.some(
        (e) => e.reason === 'StaleCallback' && e.involvedObject?.name === s.sbc.metadata.name,
      );
    });
    const own = await postJson(
      `${fx.stack.registryUrl}/bootstate`,
      { systemUUID: s.uuid, booted: true },
      bearer(tokenB),
    );
    assert.equal(own.status, 200, own.text);
    const after = await sbcCondition(fx.client, s, 'BootStateReceived');
    assert.equal(after.cond?.status, 'True');
    assert.ok(
      (after.cond?.observedGeneration ?? 0) >=
        (after.sbc.status?.attemptGeneration ?? Number.POSITIVE_INFINITY),
    );
  });

  it('C04: every attempt renders a new token into script and ignition; old → 409, made-up → 401', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { withIgnition: true });
    await waitCached(fx.stack, s);
    const scriptA = await getText(`${fx.stack.bootUrl}/ipxe/${s.uuid}`);
    assert.match(scriptA.text, new RegExp(`metal.token=${s.token}`));
    const { token: tokenB } = await nextAttempt(fx.client, s);
    assert.notEqual(tokenB, s.token);
    await waitFor(
      'rotation cached',
      10_000,
      () => fx.stack.sources.sbcs.get(s.sbc.metadata.name!, fx.namespace.name)?.spec.bootAttempt === 2,
    );
    const scriptB = await getText(`${fx.stack.bootUrl}/ipxe/${s.uuid}`);
    assert.equal(scriptB.status, 200, scriptB.text);
    assert.match(scriptB.text, new RegExp(`metal.token=${tokenB}`));
    assert.doesNotMatch(scriptB.text, new RegExp(s.token));
    assert.match(scriptB.text, /metal.attempt=2/);
    const ignB = await getText(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=${encodeURIComponent(tokenB)}`);
    assert.equal(ignB.status, 200);
    assert.ok(ignB.text.includes(encodeURIComponent(`METAL_TOKEN=${tokenB}`)), 'ignition carries token B');
    assert.equal((await getText(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=${s.token}`)).status, 409);
    assert.equal((await getText(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=made-up`)).status, 401);
    assert.equal((await getText(`${fx.stack.bootUrl}/ignition/${s.uuid}`)).status, 401);
    const url = `${fx.stack.registryUrl}/bootstate`;
    assert.equal((await postJson(url, { systemUUID: s.uuid, booted: true }, bearer(s.token))).status, 409);
    assert.equal((await postJson(url, { systemUUID: s.uuid, booted: true }, bearer('made-up'))).status, 401);
    assert.equal((await postJson(url, { systemUUID: s.uuid, booted: true })).status, 401);
    assert.equal((await postJson(url, { systemUUID: s.uuid, booted: true }, bearer(tokenB))).status, 200);
  });

  it('C10: same registration twice is a no-op; a different one replaces and records an Event; a shared UUID gets 409', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name);
    await waitCached(fx.stack, s);
    const payload = { systemUUID: s.uuid, data: { cpu: [{ id: '0' }], memory: { totalBytes: 536870912 } } };
    const first = await postJson(`${fx.stack.registryUrl}/register`, payload, bearer(s.token));
    assert.equal(first.status, 201, first.text);
    await waitFor(
      'registration cached',
      5_000,
      () => !!fx.stack.sources.servers.get(s.server.metadata.name!)?.status?.registration,
    );
    const before = await versions(s);
    const second = await postJson(`${fx.stack.registryUrl}/register`, payload, bearer(s.token));
    assert.equal(second.status, 200, second.text);
    assert.equal(JSON.parse(second.text).changed, false);
    assert.equal(await versions(s), before, 'identical registration wrote nothing');
    // The record keeps the digest of the whole payload: key order is no change.
    const reordered = await postJson(
      `${fx.stack.registryUrl}/register`,
      { systemUUID: s.uuid, data: { memory: { totalBytes: 536870912 }, cpu: [{ id: '0' }] } },
      bearer(s.token),
    );
    assert.equal(reordered.status, 200, reordered.text);
    assert.equal(await versions(s), before, 'reordered registration wrote nothing');
    // A difference the hardware mapping does not keep (`memory` is no list here) is still a change.
    const changed = await postJson(
      `${fx.stack.registryUrl}/register`,
      { ...payload, data: { ...payload.data, memory: { totalBytes: 1073741824 } } },
      bearer(s.token),
    );
    assert.equal(changed.status, 201);
    const stored = await storedRegistration(fx.client, s.server.metadata.name!);
    assert.deepEqual(stored.payload, { cpu: [{ id: '0' }], memory: { totalBytes: 1073741824 } });
    assert.equal(stored.record?.digest, registrationDigest(stored.payload));
    assert.equal(stored.record?.data, undefined, 'the payload is not in the Server');
    assert.deepEqual(stored.record?.hardware, { processors: [{ id: '0', type: 'CPU' }] });
    assert.equal(stored.record?.attempt, 1);
    assert.equal(stored.record?.bootConfigurationUID, s.sbc.metadata.uid);
    const owners = (stored.configMap?.metadata as { ownerReferences?: { kind: string; name: string }[] })
      ?.ownerReferences;
    assert.deepEqual(
      owners?.map((o) => `${o.kind}/${o.name}`),
      [`Server/${s.server.metadata.name}`],
    );
    await waitFor('RegistrationChanged Event', 10_000, async () => {
      const events = await fx.client.list<
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
    await fx.client.create<Server>(Resources.Server, {
      apiVersion: API,
      kind: 'Server',
      metadata: { name: `${s.server.metadata.name}-dup`, labels: { [SEEDED_BY_LABEL]: fx.namespace.name } },
      spec: { systemUUID: s.uuid.toUpperCase() },
    });
    await waitFor(
      'duplicate cached',
      5_000,
      () => !!fx.stack.sources.servers.get(`${s.server.metadata.name}-dup`),
    );
    const statuses = [
      (await postJson(`${fx.stack.registryUrl}/register`, payload, bearer(s.token))).status,
      (
        await postJson(
          `${fx.stack.registryUrl}/bootstate`,
          { systemUUID: s.uuid, booted: true },
          bearer(s.token),
        )
      ).status,
      (await getText(`${fx.stack.registryUrl}/systems/${s.uuid}`)).status,
      (await getText(`${fx.stack.bootUrl}/ipxe/${s.uuid}`)).status,
      (await getText(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=${s.token}`)).status,
    ];
    assert.deepEqual(statuses, [409, 409, 409, 409, 409]);
  });

  it('C10b: a registration stored by an earlier release (payload in status.registration.data) is still read, and the next one moves it to a ConfigMap', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name);
    await waitCached(fx.stack, s);
    const legacy = { cpu: [{ id: 0, totalCores: 4 }], nics: [{ name: 'eth0', speed: '1000Mb/s' }] };
    // What the registry of an earlier release wrote.
    await fx.client.jsonPatch(
      Resources.Server,
      s.server.metadata.name!,
      undefined,
      [
        {
          op: 'add',
          path: '/status',
          value: { registration: { receivedAt: '2026-01-01T00:00:00Z', data: legacy } },
        },
      ],
      { subresource: 'status' },
    );
    await waitFor('legacy record cached', 5_000, () => {
      const r = registrationRecord(fx.stack.sources.servers.get(s.server.metadata.name!)!);
      return !!r?.hardware;
    });
    const cached = registrationRecord(fx.stack.sources.servers.get(s.server.metadata.name!)!);
    assert.equal(cached?.data, undefined, 'the cache holds the hardware mapping, not the payload');
    const read = await getText(`${fx.stack.registryUrl}/systems/${s.uuid}`, bearer(s.token));
    assert.equal(read.status, 200, read.text);
    assert.deepEqual(JSON.parse(read.text), legacy, 'read from the Server itself');
    const again = await postJson(
      `${fx.stack.registryUrl}/register`,
      { systemUUID: s.uuid, data: legacy },
      bearer(s.token),
    );
    assert.equal(again.status, 201, again.text);
    const stored = await storedRegistration(fx.client, s.server.metadata.name!);
    assert.deepEqual(stored.payload, legacy, 'now in its ConfigMap');
    assert.equal(stored.record?.data, undefined, 'and no longer in the Server');
    assert.equal(stored.record?.attempt, 1);
  });

  it('C11: hostile and malformed bodies get the right 4xx on /bootstate and /register, write nothing, echo no secret', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { withIgnition: true });
    await waitCached(fx.stack, s);
    const before = await versions(s);
    const noSecret = (what: string, text: string) => {
      assert.ok(!text.includes(s.token), `${what}: the answer echoes the token`);
    };
    for (const route of ['/bootstate', '/register']) {
      const url = `${fx.stack.registryUrl}${route}`;
      const send = async (
        body: string | Buffer,
        headers: Record<string, string> = { 'content-type': 'application/json' },
      ) => {
        const res = await fetch(url, { method: 'POST', headers: { ...bearer(s.token), ...headers }, body });
        noSecret(route, await res.text());
        return res.status;
      };
      const full =
        route === '/bootstate' ? { systemUUID: s.uuid, booted: true } : { systemUUID: s.uuid, data: {} };
      assert.equal(await send(''), 400, `${route}: empty body`);
      assert.equal(await send('{"systemUUID":'), 400, `${route}: invalid JSON`);
      assert.equal(
        await send(JSON.stringify({ systemUUID: s.uuid, booted: 'yes', data: 'yes' })),
        400,
        `${route}: wrong shape`,
      );
      assert.equal(await send(JSON.stringify({ systemUUID: s.uuid })), 400, `${route}: missing field`);
      assert.equal(await send('[]'), 400, `${route}: array`);
      assert.equal(
        await send(JSON.stringify({ ...full, systemUUID: 'a'.repeat(10_000) })),
        400,
        `${route}: a 10,000-character UUID`,
      );
      assert.equal(await send(Buffer.alloc(20 * 1024 * 1024, 0x20)), 413, `${route}: 20 MiB body`);
      assert.equal(
        await send(JSON.stringify(full), { 'content-type': 'text/plain' }),
        415,
        `${route}: text/plain`,
      );
      assert.equal(
        await send('systemUUID=x', { 'content-type': 'application/x-www-form-urlencoded' }),
        415,
        `${route}: form`,
      );
    }
    // Paths with `../`, sent as written (fetch and URL would resolve the dots before sending).
    const traversal = [
      [fx.stack.bootUrl, '/ipxe/../../etc/passwd'],
      [fx.stack.bootUrl, `/ipxe/${s.uuid}/../../../etc/passwd`],
      [fx.stack.bootUrl, '/ipxe/..%2F..%2Fetc%2Fpasswd'],
      [fx.stack.bootUrl, `/ignition/../../etc/passwd?token=${s.token}`],
      [fx.stack.bootUrl, '/images/../../../../../../etc/passwd'],
      [fx.stack.bootUrl, `/images/${encodeURIComponent('test/os:1.0')}/../../../../../etc/passwd`],
      [fx.stack.bootUrl, '/images/..%2F..%2F..%2F..%2F..%2F..%2Fetc%2Fpasswd/kernel'],
      [fx.stack.registryUrl, '/systems/../../etc/passwd'],
      [fx.stack.registryUrl, `/systems/${s.uuid}/../../../etc/passwd`],
    ] as const;
    for (const [base, path] of traversal) {
      const r = await rawRequest(base, 'GET', path);
      assert.ok([400, 404].includes(r.status), `${path}: ${r.status} ${r.text.slice(0, 200)}`);
      assert.doesNotMatch(r.text, /root:/, `${path} served a file`);
      noSecret(path, r.text);
    }
    for (const [base, path] of [
      [fx.stack.bootUrl, `/ipxe/${'a'.repeat(10_000)}`],
      [fx.stack.bootUrl, `/ignition/${'a'.repeat(10_000)}?token=${s.token}`],
      [fx.stack.registryUrl, `/systems/${'a'.repeat(10_000)}`],
      [fx.stack.registryUrl, `/delete/${'a'.repeat(10_000)}`],
    ] as const) {
      const r = await rawRequest(base, path.startsWith('/delete') ? 'DELETE' : 'GET', path);
      assert.equal(r.status, 400, `${path.slice(0, 30)}…: ${r.text.slice(0, 200)}`);
      noSecret(path.slice(0, 30), r.text);
    }
    // Refused callbacks on every route name no secret either.
    for (const [url, init] of [
      [`${fx.stack.registryUrl}/bootstate`, { body: { systemUUID: s.uuid, booted: true }, token: 'made-up' }],
      [`${fx.stack.registryUrl}/register`, { body: { systemUUID: s.uuid, data: {} }, token: 'made-up' }],
    ] as const) {
      const r = await postJson(url, init.body, bearer(init.token));
      assert.equal(r.status, 401, r.text);
      noSecret(url, r.text);
    }
    const refused = await getText(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=made-up`);
    assert.equal(refused.status, 401);
    noSecret('/ignition with a made-up token', refused.text);
    assert.equal(await versions(s), before, 'nothing written');
    // Still serving.
    const ok = await postJson(
      `${fx.stack.registryUrl}/bootstate`,
      { systemUUID: s.uuid, booted: true },
      bearer(s.token),
    );
    assert.equal(ok.status, 200, ok.text);
  });
});

describe('--callback-auth=optional (upstream agents without a token)', () => {
  const opt = useSignalStack('cases-optional', { callbackAuth: 'optional' });

  it('accepts a callback without token as Unauthenticated; a wrong token is still 401, an old one 409', async () => {
    const s = await seedBootTarget(opt.client, opt.namespace.name);
    await waitCached(opt.stack, s);
    const url = `${opt.stack.registryUrl}/bootstate`;
    const body = { systemUUID: s.uuid, booted: true };
    assert.equal(
      (await postJson(url, body, bearer('made-up'))).status,
      401,
      'a token, if sent, must be right',
    );
    const anon = await postJson(url, body);
    assert.equal(anon.status, 200, anon.text);
    const first = await sbcCondition(opt.client, s, 'BootStateReceived');
    assert.equal(first.cond?.status, 'True');
    assert.equal(first.cond?.reason, 'Unauthenticated');
    const reg = await postJson(`${opt.stack.registryUrl}/register`, { systemUUID: s.uuid, data: { a: 1 } });
    assert.equal(reg.status, 201, reg.text);
    const anonReg = await storedRegistration(opt.client, s.server.metadata.name!);
    assert.equal(anonReg.record?.authenticated, false, 'the record says it came without a token');
    assert.equal(anonReg.record?.attempt, 1);
    assert.deepEqual(anonReg.payload, { a: 1 });
    const { token: tokenB } = await nextAttempt(opt.client, s);
    await waitFor(
      'rotation cached',
      10_000,
      () => opt.stack.sources.sbcs.get(s.sbc.metadata.name!, opt.namespace.name)?.spec.bootAttempt === 2,
    );
    assert.equal((await postJson(url, body, bearer(s.token))).status, 409, 'token of attempt 1');
    const own = await postJson(url, body, bearer(tokenB));
    assert.equal(own.status, 200, own.text);
    const last = await sbcCondition(opt.client, s, 'BootStateReceived');
    assert.equal(last.cond?.reason, 'Booted', 'an authenticated callback says so');
  });
});
