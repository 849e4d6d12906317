import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  BmcError,
  RedfishAuthError,
  RedfishBudgetExceededError,
  RedfishHttpError,
  RedfishTransportError,
} from '../../src/bmc/errors.js';
import { RedfishClient } from '../../src/bmc/redfish-client.js';
import { writeSelfSignedCertificate } from '../../src/localstack/control-plane.js';
import { startVirtualBmc } from '../../src/virtualbmc/server.js';
import { SimHost } from '../../src/virtualbmc/sim.js';
import { simIdentity } from '../../src/virtualbmc/sim-fleet.js';
import { type Fixture, type FixtureOptions, PASSWORD, startFixture, USER } from './fixture.js';

async function withFixture(opts: FixtureOptions, fn: (f: Fixture) => Promise<void>): Promise<void> {
  const f = await startFixture(opts);
  try {
    await fn(f);
  } finally {
    await f.close();
  }
}

async function timed<T>(p: Promise<T>): Promise<{ value: T; ms: number }> {
  const started = performance.now();
  const value = await p;
  return { value, ms: performance.now() - started };
}

async function timedRejection(p: Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const started = performance.now();
  try {
    await p;
  } catch (error) {
    return { error, ms: performance.now() - started };
  }
  throw new Error('expected a rejection');
}

const sessionLogins = (f: Fixture) =>
  f.vbmc.requests().filter((r) => r.method === 'POST' && r.path === '/redfish/v1/SessionService/Sessions');

describe('Redfish client authentication', () => {
  it('logs in once with a session, sends X-Auth-Token, and deletes the session on close', () =>
    withFixture({}, async (f) => {
      await Promise.all([f.bmc.listSystems(), f.bmc.listManagers(), f.bmc.powerState(f.uri())]);
      assert.equal(f.bmc.client.authMode, 'session');
      assert.equal(sessionLogins(f).length, 1);
      assert.deepEqual(sessionLogins(f)[0]?.body, { UserName: USER, Password: '***' });
      const authed = f.vbmc.requests().filter((r) => r.method === 'GET');
      assert.ok(authed.every((r) => r.auth === 'session'));
      await f.bmc.close();
      const del = f.vbmc.requests().filter((r) => r.method === 'DELETE');
      assert.equal(del.length, 1);
      assert.match(del[0]!.path, /^\/redfish\/v1\/SessionService\/Sessions\/[0-9a-f]+$/);
      assert.equal(del[0]!.status, 204);
      await assert.rejects(
        f.bmc.listSystems(),
        (err: unknown) => err instanceof BmcError && /closed/.test(err.message),
      );
    }));

  it('falls back to basic authentication when the service has no session login', () =>
    withFixture({ profile: { sessions: false } }, async (f) => {
      await f.bmc.listSystems();
      await f.bmc.listSystems();
      assert.equal(f.bmc.client.authMode, 'basic');
      assert.equal(sessionLogins(f).length, 1);
      assert.equal(sessionLogins(f)[0]!.status, 404);
      const gets = f.vbmc.requests().filter((r) => r.method === 'GET');
      assert.deepEqual(
        gets.map((r) => [r.auth, r.status]),
        [
          ['basic', 200],
          ['basic', 200],
        ],
      );
    }));

  it('uses basic authentication only, when configured so', () =>
    withFixture({ client: { auth: 'basic' } }, async (f) => {
      await f.bmc.listSystems();
      assert.equal(sessionLogins(f).length, 0);
      assert.equal(f.vbmc.requests()[0]?.auth, 'basic');
    }));

  it('rejects wrong credentials with an auth error and no retries', () =>
    withFixture({ client: { password: 'wrong' } }, async (f) => {
      await assert.rejects(
        f.bmc.listSystems(),
        (err: unknown) => err instanceof RedfishAuthError && err.status === 401,
      );
      assert.equal(f.vbmc.requests().length, 1);
    }));

  it('rejects wrong basic credentials with an auth error', () =>
    withFixture({ client: { password: 'wrong', auth: 'basic' } }, async (f) => {
      await assert.rejects(f.bmc.listSystems(), RedfishAuthError);
    }));

  it('logs in again once when the session expired', () =>
    withFixture({ profile: { sessionTimeoutSeconds: 1 } }, async (f) => {
      // 1 s, not less: on a loaded machine login and first GET can be far apart.
      await f.bmc.listSystems();
      await new Promise((r) => setTimeout(r, 1_100));
      await f.bmc.listSystems();
      assert.equal(sessionLogins(f).length, 2);
      assert.deepEqual(
        f.vbmc
          .requests()
          .filter((r) => r.method === 'GET')
          .map((r) => r.status),
        [200, 401, 200],
      );
    }));
});

describe('Redfish client TLS', () => {
  let dir: string;
  let key: string;
  let cert: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'bmc-tls-'));
    writeSelfSignedCertificate(join(dir, 'key.pem'), join(dir, 'cert.pem'));
    key = readFileSync(join(dir, 'key.pem'), 'utf8');
    cert = readFileSync(join(dir, 'cert.pem'), 'utf8');
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('refuses a self-signed certificate at once, and accepts it with insecureTLS or as CA', async () => {
    const host = new SimHost({ identity: simIdentity(0, 'tls'), bootServerUrl: 'http://127.0.0.1:9' });
    const vbmc = await startVirtualBmc({
      hosts: [host],
      username: USER,
      password: PASSWORD,
      tls: { key, cert },
    });
    const client = (extra: object) =>
      new RedfishClient({
        endpoint: vbmc.url,
        username: USER,
        password: PASSWORD,
        budgetMs: 3_000,
        ...extra,
      });
    try {
      assert.match(vbmc.url, /^https:/);
      const strict = client({});
      const { error, ms } = await timedRejection(strict.get('/redfish/v1/Systems'));
      assert.ok(error instanceof RedfishTransportError && error.kind === 'tls', String(error));
      assert.ok(ms < 1_000, `certificate errors are not retried (took ${ms} ms)`);
      await strict.close();

      const insecure = client({ insecureTLS: true });
      assert.equal((await insecure.get('/redfish/v1/Systems')).status, 200);
      await insecure.close();

      const pinned = client({ ca: cert });
      assert.equal((await pinned.get('/redfish/v1/Systems')).status, 200);
      await pinned.close();
    } finally {
      await vbmc.close();
    }
  });
});

describe('Redfish client retries and timeouts', () => {
  it('retries a burst of 503s, honouring Retry-After', () =>
    withFixture({ client: { auth: 'basic' } }, async (f) => {
      f.vbmc.setFaults({ unavailableRequests: 3, retryAfterSeconds: 0 });
      const systems = await f.bmc.listSystems();
      assert.equal(systems.length, 1);
      assert.deepEqual(
        f.vbmc.requests().map((r) => r.status),
        [503, 503, 503, 200],
      );
      f.vbmc.setFaults({ unavailableRequests: 1, retryAfterSeconds: 1 });
      const { ms } = await timed(f.bmc.listSystems());
      assert.ok(ms >= 950 && ms < 2_000, `waited ${ms} ms for Retry-After: 1`);
    }));

  it('gives up at once when Retry-After exceeds the budget, handing the delay to the caller', () =>
    withFixture({ client: { auth: 'basic', budgetMs: 2_000 } }, async (f) => {
      f.vbmc.setFaults({ unavailableRequests: 1, retryAfterSeconds: 30 });
      const { error, ms } = await timedRejection(f.bmc.listSystems());
      assert.ok(error instanceof RedfishBudgetExceededError, String(error));
      assert.equal(error.retryAfterMs, 30_000);
      assert.ok(error.cause instanceof RedfishHttpError && error.cause.status === 503);
      assert.ok(ms < 500, `returned after ${ms} ms`);
    }));

  it('retries dropped connections', () =>
    withFixture({ client: { auth: 'basic' } }, async (f) => {
      f.vbmc.setFaults({ dropConnections: 2 });
      assert.equal(await f.bmc.powerState(f.uri()), 'Off');
      assert.deepEqual(
        f.vbmc.requests().map((r) => r.status),
        [0, 0, 200],
      );
    }));

  it('times out a slow response per request and retries it', () =>
    withFixture({ client: { auth: 'basic', requestTimeoutMs: 200 } }, async (f) => {
      f.vbmc.setFaults({ slowRequests: 1, slowResponseMs: 1_500 });
      const { value, ms } = await timed(f.bmc.powerState(f.uri()));
      assert.equal(value, 'Off');
      assert.ok(ms >= 190 && ms < 1_000, `took ${ms} ms`);
      assert.equal(f.vbmc.requests().length, 2);
    }));

  it('delays every response by responseDelayMs', () =>
    withFixture({ client: { auth: 'basic' }, faults: { responseDelayMs: 150 } }, async (f) => {
      const { ms } = await timed(f.bmc.listSystems());
      assert.ok(ms >= 140, `took ${ms} ms`);
    }));

  it('does not repeat a timed-out non-idempotent reset, which may have been applied', () =>
    withFixture({ client: { auth: 'basic', requestTimeoutMs: 200 } }, async (f) => {
      await f.bmc.powerOn(f.uri());
      // The reset POST is processed at once but answered late.
      f.vbmc.setFaults({ onlyMethods: ['POST'], slowRequests: 1, slowResponseMs: 1_000 });
      const { error } = await timedRejection(f.bmc.restart(f.uri()));
      assert.ok(
        error instanceof RedfishTransportError && error.kind === 'timeout' && error.maybeApplied,
        String(error),
      );
      const resets = f.vbmc.requests().filter((r) => r.path.endsWith('ComputerSystem.Reset'));
      assert.deepEqual(
        resets.map((r) => (r.body as { ResetType: string }).ResetType),
        ['On', 'ForceRestart'],
      );
      assert.equal(f.hosts[0]!.bootCount, 2, 'the BMC did act on the request');
    }));

  it('repeats a timed-out idempotent power-on, which the BMC treats as a no-op', () =>
    withFixture({ client: { auth: 'basic', requestTimeoutMs: 200 } }, async (f) => {
      f.vbmc.setFaults({ onlyMethods: ['POST'], slowRequests: 1, slowResponseMs: 1_000 });
      assert.equal((await f.bmc.powerOn(f.uri())).sent, 'On');
      const resets = f.vbmc.requests().filter((r) => r.path.endsWith('ComputerSystem.Reset'));
      assert.equal(resets.length, 2);
      assert.equal(f.hosts[0]!.bootCount, 1);
    }));

  it('retries a non-idempotent reset answered 503, since the service did not act', () =>
    withFixture({ client: { auth: 'basic' } }, async (f) => {
      await f.bmc.powerOn(f.uri());
      f.vbmc.setFaults({ onlyMethods: ['POST'], unavailableRequests: 1, retryAfterSeconds: 0 });
      assert.equal((await f.bmc.restart(f.uri())).sent, 'ForceRestart');
      const resets = f.vbmc.requests().filter((r) => r.path.endsWith('ComputerSystem.Reset'));
      assert.deepEqual(
        resets.map((r) => r.status),
        [204, 503, 204],
      );
      assert.equal(f.hosts[0]!.bootCount, 2);
    }));

  it('stops retrying when the budget runs out, reporting the last failure', () =>
    withFixture({ client: { auth: 'basic', budgetMs: 400 } }, async (f) => {
      f.vbmc.setFaults({ unavailableRequests: 1_000, retryAfterSeconds: 0 });
      const { error, ms } = await timedRejection(f.bmc.listSystems());
      assert.ok(error instanceof RedfishBudgetExceededError, String(error));
      assert.ok(error.attempts > 1);
      assert.ok(error.cause instanceof RedfishHttpError && error.cause.status === 503);
      assert.ok(ms < 700, `took ${ms} ms with a 400 ms budget`);
      // `Retry-After: 0` is a floor, not the delay: backoff from 20 ms still spaces the attempts (a
      // hot loop sent hundreds in the budget and, on a fast machine, outlasted the 1,000 refusals).
      const sent = f.vbmc.requests().length;
      assert.ok(sent <= 12, `${sent} requests in a 400 ms budget`);
    }));

  it('stops at once when the caller aborts', () =>
    withFixture({ client: { auth: 'basic' }, faults: { responseDelayMs: 2_000 } }, async (f) => {
      const ac = new AbortController();
      setTimeout(() => ac.abort(new Error('reconcile cancelled')), 100);
      const { error, ms } = await timedRejection(f.bmc.listSystems({ signal: ac.signal }));
      assert.match(String(error), /reconcile cancelled/);
      assert.ok(ms < 500, `took ${ms} ms`);
    }));

  it('retries a refused connection until the budget is spent', async () => {
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const client = new RedfishClient({
      endpoint: `http://127.0.0.1:${port}`,
      username: USER,
      password: PASSWORD,
      auth: 'basic',
      budgetMs: 300,
      backoffInitialMs: 20,
    });
    const { error, ms } = await timedRejection(client.get('/redfish/v1/Systems'));
    assert.ok(error instanceof RedfishBudgetExceededError && error.attempts > 1, String(error));
    assert.ok(error.cause instanceof RedfishTransportError && !error.cause.maybeApplied);
    assert.ok(ms < 600);
    await client.close();
  });
});
