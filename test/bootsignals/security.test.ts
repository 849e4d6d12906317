/**
 * Security review items of the registry and the boot server (issue 15: S3–S7, S11–S13), against the
 * real API server with both servers in-process. Tests that need a lagging cache get a stack of their
 * own whose informers are stopped (a stopped informer keeps its last content, as a lagging one does).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { before, describe, it } from 'node:test';
import type { KubeConfig } from '@kubernetes/client-node';
import { API_VERSION } from '../../src/api/v1alpha1/schema.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { Resources } from '../../src/runtime/resource.js';
import { storedRegistration } from '../../src/testing/stored-registration.js';
import { waitFor } from '../harness/control-plane.js';
import { sharedCluster, testNamespace } from '../harness/shared.js';
import {
  bearer,
  deleteSeededServers,
  getFrom,
  newTestClient,
  nextAttempt,
  postJson,
  recordPowerOn,
  SEEDED_BY_LABEL,
  type Seeded,
  type SignalStackFixture,
  sbcCondition,
  seedBootTarget,
  startTestStack,
  useSignalStack,
  waitCached,
} from './fixture.js';

let sec: SignalStackFixture;

const reasonOf = (text: string) => {
  try {
    return (JSON.parse(text) as { reason?: string }).reason;
  } catch {
    return undefined;
  }
};

/** Marks the claim of a NetBootOnce SBC completed, as the claim controller does, and waits for the cache. */
async function completeClaim(s: Seeded, st = sec.stack): Promise<void> {
  await sec.client.apply(
    Resources.ServerBootConfiguration,
    {
      apiVersion: API_VERSION,
      kind: 'ServerBootConfiguration',
      metadata: { name: s.sbc.metadata.name, namespace: s.sbc.metadata.namespace },
      status: {
        conditions: [
          {
            type: 'BootCompleted',
            status: 'True',
            reason: 'ClaimBooted',
            message: 'claim booted in attempt 1',
            observedGeneration: s.sbc.metadata.generation,
            lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
          },
        ],
      },
    },
    { subresource: 'status', fieldManager: 'test-claim', force: true },
  );
  await waitFor(
    'BootCompleted cached',
    5_000,
    () =>
      !!st.sources.sbcs
        .get(s.sbc.metadata.name!, s.sbc.metadata.namespace)
        ?.status?.conditions?.some((c) => c.type === 'BootCompleted'),
  );
}

async function refreshes(st = sec.stack): Promise<number> {
  const metric = st.metrics.getSingleMetric('metal_boot_target_refreshes_total');
  assert.ok(metric, 'the resolver reports its live reads (metal_boot_target_refreshes_total)');
  const m = await st.metrics.getSingleMetricAsString('metal_boot_target_refreshes_total');
  const v = /^metal_boot_target_refreshes_total (\d+)/m.exec(m ?? '')?.[1];
  assert.ok(v !== undefined, 'the resolver reports its live reads');
  return Number(v);
}

describe('security review (registry + boot server)', () => {
  sec = useSignalStack('sec');

  it('S3: the script and its token are served only after the attempt power-on is recorded', async () => {
    for (const flow of ['discovery', 'claim'] as const) {
      const s = await seedBootTarget(sec.client, sec.namespace.name, { flow, powerOnRecorded: false });
      await waitCached(sec.stack, s);
      const early = await fetch(`${sec.stack.bootUrl}/ipxe/${s.uuid}`);
      const text = await early.text();
      assert.equal(early.status, 503, `${flow}: no script before the power-on intent`);
      assert.equal(reasonOf(text), 'AwaitingPowerOn');
      assert.ok(!text.includes(s.token), `${flow}: the token never leaves before the power-on`);
      assert.ok(early.headers.get('retry-after'));
      assert.equal((await sbcCondition(sec.client, s, 'IPXEScriptFetched')).cond, undefined);

      await recordPowerOn(sec.client, s, 1);
      const res = await fetch(`${sec.stack.bootUrl}/ipxe/${s.uuid}`);
      assert.equal(res.status, 200, `${flow}: served once the power-on is recorded`);
      assert.ok((await res.text()).includes(s.token));
    }
  });

  it('S3: the intent of an earlier attempt does not open the script of the next one', async () => {
    const s = await seedBootTarget(sec.client, sec.namespace.name, { flow: 'claim' });
    await waitCached(sec.stack, s);
    assert.equal((await fetch(`${sec.stack.bootUrl}/ipxe/${s.uuid}`)).status, 200);
    const { token } = await nextAttempt(sec.client, s);
    // The claim still records attempt 1's power-on: as after a rotation, before the next power-on.
    await recordPowerOn(sec.client, s, 1);
    await waitFor(
      'attempt 2 cached',
      5_000,
      () => sec.stack.sources.sbcs.get(s.sbc.metadata.name!, sec.namespace.name)?.spec.bootAttempt === 2,
    );
    const res = await fetch(`${sec.stack.bootUrl}/ipxe/${s.uuid}`);
    const text = await res.text();
    assert.equal(res.status, 503);
    assert.ok(!text.includes(token));
  });

  it('S3: of concurrent clients at different addresses exactly one gets the script (pin by compare-and-swap)', async () => {
    for (let round = 0; round < 3; round++) {
      const s = await seedBootTarget(sec.client, sec.namespace.name);
      await waitCached(sec.stack, s);
      const answers = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          getFrom(`${sec.stack.bootUrl}/ipxe/${s.uuid}`, `127.0.${round + 10}.${i + 2}`),
        ),
      );
      const served = answers.filter((a) => a.status === 200);
      assert.equal(served.length, 1, `round ${round}: ${answers.map((a) => a.status).join(',')}`);
      assert.ok(answers.every((a) => a.status === 200 || a.status === 403));
      assert.ok(answers.filter((a) => a.text.includes(s.token)).length === 1);
      const { cond } = await sbcCondition(sec.client, s, 'IPXEScriptFetched');
      const winner = answers.findIndex((a) => a.status === 200);
      assert.match(cond!.message, new RegExp(`served to 127\\.0\\.${round + 10}\\.${winner + 2}$`));
    }
  });

  it('S4: once a NetBootOnce claim completed, ignition is refused and the token is retired', async () => {
    const s = await seedBootTarget(sec.client, sec.namespace.name, {
      flow: 'claim',
      policy: 'NetBootOnce',
      withIgnition: true,
    });
    await waitCached(sec.stack, s);
    assert.equal((await fetch(`${sec.stack.bootUrl}/ignition/${s.uuid}?token=${s.token}`)).status, 200);
    await completeClaim(s);
    const ign = await fetch(`${sec.stack.bootUrl}/ignition/${s.uuid}?token=${s.token}`);
    const text = await ign.text();
    assert.equal(ign.status, 409);
    assert.equal(reasonOf(text), 'TokenRetired');
    assert.doesNotMatch(text, /passwd|core/);
    const bs = await postJson(
      `${sec.stack.registryUrl}/bootstate`,
      { systemUUID: s.uuid, booted: true },
      bearer(s.token),
    );
    assert.equal(bs.status, 409);
    assert.equal(reasonOf(bs.text), 'TokenRetired');
    // A NetBootAlways claim keeps its token: every power-on boots the image again.
    const always = await seedBootTarget(sec.client, sec.namespace.name, {
      flow: 'claim',
      withIgnition: true,
    });
    await waitCached(sec.stack, always);
    await completeClaim(always);
    assert.equal(
      (await fetch(`${sec.stack.bootUrl}/ignition/${always.uuid}?token=${always.token}`)).status,
      200,
    );
  });

  it('S5: GET /systems and DELETE /delete need the attempt token', async () => {
    const s = await seedBootTarget(sec.client, sec.namespace.name);
    await waitCached(sec.stack, s);
    const payload = { systemUUID: s.uuid, data: { cpu: 'x' } };
    assert.equal((await postJson(`${sec.stack.registryUrl}/register`, payload, bearer(s.token))).status, 201);
    await waitFor(
      'registration cached',
      5_000,
      () => !!sec.stack.sources.servers.get(s.server.metadata.name!)?.status?.registration,
    );
    const url = `${sec.stack.registryUrl}/systems/${s.uuid}`;
    assert.equal((await fetch(url)).status, 401);
    assert.equal((await fetch(url, { headers: bearer('made-up') })).status, 401);
    const ok = await fetch(url, { headers: bearer(s.token) });
    assert.equal(ok.status, 200);
    assert.deepEqual(await ok.json(), { cpu: 'x' });
    const del = `${sec.stack.registryUrl}/delete/${s.uuid}`;
    assert.equal((await fetch(del, { method: 'DELETE' })).status, 401);
    assert.ok(
      (await sec.client.get<Server>(Resources.Server, s.server.metadata.name!))?.status?.registration,
    );
    const at = (await storedRegistration(sec.client, s.server.metadata.name!)).record?.payload;
    assert.ok(
      at && (await sec.client.get(Resources.ConfigMap, at.name, at.namespace)),
      'the payload ConfigMap',
    );
    assert.equal((await fetch(del, { method: 'DELETE', headers: bearer(s.token) })).status, 200);
    assert.equal(
      (await sec.client.get<Server>(Resources.Server, s.server.metadata.name!))?.status?.registration,
      undefined,
    );
    assert.equal(
      await sec.client.get(Resources.ConfigMap, at.name, at.namespace),
      undefined,
      'DELETE removes the payload too',
    );
    // Nothing left to read: 404 NoRegistration.
    const gone = await fetch(url, { headers: bearer(s.token) });
    assert.equal(gone.status, 404);
    assert.equal(((await gone.json()) as { reason?: string }).reason, 'NoRegistration');
  });

  it('S11: /register takes only a discovery attempt token, at most 64 KiB, nesting bounded (400)', async () => {
    const claimed = await seedBootTarget(sec.client, sec.namespace.name, { flow: 'claim' });
    await waitCached(sec.stack, claimed);
    const forged = await postJson(
      `${sec.stack.registryUrl}/register`,
      { systemUUID: claimed.uuid, data: { cpu: 'forged' } },
      bearer(claimed.token),
    );
    assert.equal(forged.status, 403);
    assert.equal(reasonOf(forged.text), 'NotDiscovery');
    const cms = await sec.client.list(Resources.ConfigMap, {
      namespace: sec.namespace.name,
      labelSelector: `metal.ironcore.dev/server=${claimed.server.metadata.name}`,
    });
    assert.equal(cms.items.length, 0, 'no payload ConfigMap written for a refused registration');
    assert.equal(
      (await sec.client.get<Server>(Resources.Server, claimed.server.metadata.name!))?.status?.registration,
      undefined,
    );

    const s = await seedBootTarget(sec.client, sec.namespace.name);
    await waitCached(sec.stack, s);
    const big = await postJson(
      `${sec.stack.registryUrl}/register`,
      { systemUUID: s.uuid, data: { blob: 'x'.repeat(100 * 1024) } },
      bearer(s.token),
    );
    assert.equal(big.status, 413);
    const deep = `${'['.repeat(6000)}1${']'.repeat(6000)}`;
    const tooDeep = await postJson(
      `${sec.stack.registryUrl}/register`,
      `{"systemUUID":"${s.uuid}","data":{"deep":${deep}}}`,
      bearer(s.token),
    );
    assert.equal(tooDeep.status, 400);
    assert.equal(reasonOf(tooDeep.text), 'TooDeep');
    assert.equal(
      (await sec.client.get<Server>(Resources.Server, s.server.metadata.name!))?.status?.registration,
      undefined,
    );
    assert.equal(
      (
        await postJson(
          `${sec.stack.registryUrl}/register`,
          { systemUUID: s.uuid, data: { a: [[1]] } },
          bearer(s.token),
        )
      ).status,
      201,
    );
  });

  it('S13: authenticated routes answer 401 for an unknown UUID, before any 404', async () => {
    const unknown = '6b0f6d55-1f3a-4c7e-9f55-0d7b8d3c9a10';
    const bs = await postJson(
      `${sec.stack.registryUrl}/bootstate`,
      { systemUUID: unknown, booted: true },
      bearer('x'.repeat(43)),
    );
    assert.equal(bs.status, 401);
    assert.equal(
      (await postJson(`${sec.stack.registryUrl}/bootstate`, { systemUUID: unknown, booted: true })).status,
      401,
    );
    assert.equal(
      (await postJson(`${sec.stack.registryUrl}/register`, { systemUUID: unknown, data: {} })).status,
      401,
    );
    assert.equal((await fetch(`${sec.stack.registryUrl}/systems/${unknown}`)).status, 401);
    assert.equal((await fetch(`${sec.stack.bootUrl}/ignition/${unknown}?token=abc`)).status, 401);
    // A known server without a boot configuration answers the same.
    const bare = await sec.client.create<Server>(Resources.Server, {
      apiVersion: API_VERSION,
      kind: 'Server',
      metadata: { name: `bare-${sec.namespace.name}`, labels: { [SEEDED_BY_LABEL]: sec.namespace.name } },
      spec: { systemUUID: randomUUID() },
    });
    await waitFor('bare server cached', 5_000, () => !!sec.stack.sources.servers.get(bare.metadata.name!));
    const r = await postJson(
      `${sec.stack.registryUrl}/bootstate`,
      { systemUUID: bare.spec.systemUUID, booted: true },
      bearer('y'.repeat(43)),
    );
    assert.equal(r.status, 401);
  });

  it('S6: 60 concurrent wrong tokens cost one live read of the SBC per second at most (single flight, paced)', async () => {
    const s = await seedBootTarget(sec.client, sec.namespace.name);
    await waitCached(sec.stack, s);
    const before = await refreshes();
    const t0 = Date.now();
    const answers = await Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        getFrom(`${sec.stack.bootUrl}/ignition/${s.uuid}?token=wrong${i}`, `127.0.20.${(i % 30) + 2}`),
      ),
    );
    const elapsedMs = Date.now() - t0;
    const reads = (await refreshes()) - before;
    // One read per started second of the burst: a burst within one second gets exactly one.
    const allowed = 1 + Math.floor(elapsedMs / 1000);
    assert.ok(
      reads >= 1 && reads <= allowed,
      `live reads for 60 wrong tokens in ${elapsedMs} ms: ${reads} (at most ${allowed})`,
    );
    assert.ok(
      answers.every((a) => a.status === 401),
      answers.map((a) => a.status).join(','),
    );
  });

  it('S6: 401s are rate-limited per client address (429 + Retry-After)', async () => {
    const s = await seedBootTarget(sec.client, sec.namespace.name);
    await waitCached(sec.stack, s);
    const statuses: number[] = [];
    let retryAfter: unknown;
    for (let i = 0; i < 25; i++) {
      const a = await getFrom(
        `${sec.stack.bootUrl}/ignition/6b0f6d55-1f3a-4c7e-9f55-0d7b8d3c9a1${i % 10}?token=x`,
        '127.0.21.2',
      );
      statuses.push(a.status);
      if (a.status === 429) retryAfter = a.headers['retry-after'];
    }
    assert.deepEqual(statuses.slice(0, 20), Array(20).fill(401), statuses.join(','));
    assert.ok(
      statuses.slice(20).every((x) => x === 429),
      statuses.join(','),
    );
    assert.ok(Number(retryAfter) >= 1);
    // Another address is not affected, nor is a valid token elsewhere.
    assert.equal(
      (await getFrom(`${sec.stack.bootUrl}/ignition/${s.uuid}?token=x`, '127.0.21.3')).status,
      401,
    );
    assert.equal(
      (await getFrom(`${sec.stack.bootUrl}/ignition/${s.uuid}?token=${s.token}`, '127.0.21.4')).status,
      200,
    );
  });
});

describe('security review: lagging caches and slow clients', () => {
  let kc: KubeConfig;
  before(async () => {
    kc = (await sharedCluster()).kubeConfig();
    // The first suite's client (its \`after\` closed it; it connects again on use), or a new one.
    sec.client ??= newTestClient(kc);
  });

  it('S12: a late callback of attempt 1 cannot overwrite attempt 2 with a lower observedGeneration', async () => {
    const space = await testNamespace(kc, 'sec-lag');
    const st = await startTestStack(kc);
    try {
      const s = await seedBootTarget(sec.client, space.name);
      await waitCached(st, s);
      st.sources.sbcs.stop();
      const { token: token2 } = await nextAttempt(sec.client, s);
      const url = `${st.registryUrl}/bootstate`;
      assert.equal((await postJson(url, { systemUUID: s.uuid, booted: true }, bearer(token2))).status, 200);
      const after2 = await sbcCondition(sec.client, s, 'BootStateReceived');
      assert.equal(after2.cond?.observedGeneration, after2.sbc.metadata.generation);
      const late = await postJson(url, { systemUUID: s.uuid, booted: false }, bearer(s.token));
      assert.equal(late.status, 409, late.text);
      const now = await sbcCondition(sec.client, s, 'BootStateReceived');
      assert.equal(now.cond?.status, 'True');
      assert.equal(now.cond?.observedGeneration, after2.cond?.observedGeneration);
    } finally {
      await st.close();
      await deleteSeededServers(sec.client, space.name);
      await space.cleanup();
    }
  });

  it('S12: a repeated callback does not move lastTransitionTime, even from a lagging cache', async () => {
    const space = await testNamespace(kc, 'sec-lag');
    const st = await startTestStack(kc);
    try {
      const s = await seedBootTarget(sec.client, space.name);
      await waitCached(st, s);
      st.sources.sbcs.stop();
      const url = `${st.registryUrl}/bootstate`;
      assert.equal((await postJson(url, { systemUUID: s.uuid, booted: true }, bearer(s.token))).status, 200);
      const first = (await sbcCondition(sec.client, s, 'BootStateReceived')).cond!;
      await new Promise((r) => setTimeout(r, 1100));
      assert.equal((await postJson(url, { systemUUID: s.uuid, booted: true }, bearer(s.token))).status, 200);
      const second = (await sbcCondition(sec.client, s, 'BootStateReceived')).cond!;
      assert.equal(second.lastTransitionTime, first.lastTransitionTime);
    } finally {
      await st.close();
      await deleteSeededServers(sec.client, space.name);
      await space.cleanup();
    }
  });

  it('S13: an SBC deleted mid-request answers 404, not 500', async () => {
    const space = await testNamespace(kc, 'sec-lag');
    const st = await startTestStack(kc);
    try {
      const s = await seedBootTarget(sec.client, space.name);
      await waitCached(st, s);
      st.sources.sbcs.stop();
      await sec.client.delete(Resources.ServerBootConfiguration, s.sbc.metadata.name!, space.name);
      const r = await postJson(
        `${st.registryUrl}/bootstate`,
        { systemUUID: s.uuid, booted: true },
        bearer(s.token),
      );
      assert.equal(r.status, 404, r.text);
    } finally {
      await st.close();
      await deleteSeededServers(sec.client, space.name);
      await space.cleanup();
    }
  });

  it('S7: the registry and the boot server close sockets of clients that send too slowly', async () => {
    const st = await startTestStack(kc, {
      timeouts: { requestMs: 800, headersMs: 400, keepAliveMs: 300, idleMs: 3000 },
    });
    try {
      for (const base of [st.registryUrl, st.bootUrl]) {
        const { port } = new URL(base);
        // Headers never finished.
        const headers = await closedWithin(Number(port), 'GET /ipxe HTTP/1.1\r\nHost: x\r\n', 3000);
        assert.ok(headers.closed, `${base}: a half-sent header is cut off (after ${headers.ms} ms)`);
        // Body trickling in.
        const body = await closedWithin(
          Number(port),
          'POST /bootstate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{',
          3000,
          true,
        );
        assert.ok(body.closed, `${base}: a trickling body is cut off (after ${body.ms} ms)`);
        // Idle keep-alive connection after a complete request.
        const idle = await closedWithin(Number(port), 'GET /ipxe HTTP/1.1\r\nHost: x\r\n\r\n', 3000);
        assert.ok(idle.closed, `${base}: an idle keep-alive connection is closed (after ${idle.ms} ms)`);
      }
    } finally {
      await st.close();
    }
  });
});

/** Opens a socket, writes `first` (then one byte every 100 ms when `trickle`), reports whether the server closed it within `ms`. */
function closedWithin(
  port: number,
  first: string,
  ms: number,
  trickle = false,
): Promise<{ closed: boolean; ms: number }> {
  return new Promise((ok) => {
    const t0 = Date.now();
    const sock = connect(port, '127.0.0.1', () => sock.write(first));
    sock.on('data', () => undefined);
    sock.on('error', () => undefined);
    const drip = trickle ? setInterval(() => sock.writable && sock.write(' '), 100) : undefined;
    const timer = setTimeout(() => {
      clearInterval(drip);
      sock.destroy();
      ok({ closed: false, ms });
    }, ms);
    sock.on('close', () => {
      clearInterval(drip);
      clearTimeout(timer);
      ok({ closed: true, ms: Date.now() - t0 });
    });
  });
}
