/**
 * Generated malformed requests (10,000, seeded PRNG) against the registry and the boot server: no
 * 5xx other than 503, the processes keep serving, and nothing is written. A share of the requests
 * carries the seeded Server's UUID (lower and upper case) with the current attempt token and a
 * malformed body, or a well-formed body with the token of an earlier attempt or a made-up one, so
 * they get past routing and validation up to authentication: 401 and 409 must both occur.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request } from 'node:http';
import { after, describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import { Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  bearer,
  nextAttempt,
  postJson,
  type Seeded,
  seedBootTarget,
  testToken,
  useSignalStack,
} from './fixture.js';

// A file run on its own started a private control plane: stop it, or the process never exits.
after(releaseSharedCluster);

/** Mulberry32: small, seeded, reproducible. */
function prng(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface FuzzRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
}

/** The seeded target as the fuzzer knows it: attempt 2 is current, attempt 1's token is stale. */
interface Known extends Seeded {
  currentToken: string;
  staleToken: string;
}

function generator(seed: number, known: Known) {
  const rnd = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const junk = (n: number) => Buffer.from(Array.from({ length: n }, () => Math.floor(rnd() * 256)));
  const uuidish = () =>
    pick([
      randomUUID(),
      randomUUID().toUpperCase(),
      `{${randomUUID()}}`,
      known.uuid.slice(0, 35),
      `${known.uuid}0`,
      '../../etc/passwd',
      '..%2F..%2Fetc',
      '%00',
      '%ZZ',
      'x'.repeat(Math.floor(rnd() * 12_000)),
      '💥',
      '',
      junk(8).toString('hex'),
    ]);
  const jsonish = (): string =>
    pick([
      '',
      '{',
      'null',
      '[]',
      '"x"',
      '{"systemUUID":}',
      JSON.stringify({ systemUUID: known.uuid, booted: pick(['yes', 1, null, {}, []]) }),
      JSON.stringify({ systemUUID: pick([1, null, [], {}]), booted: true }),
      JSON.stringify({ systemUUID: uuidish(), booted: true }),
      JSON.stringify({ systemUUID: known.uuid, data: pick([null, 'x', 1, []]) }),
      JSON.stringify({ systemUUID: known.uuid }),
      '['.repeat(5000),
      `{"a":${'{"a":'.repeat(3000)}1${'}'.repeat(3000)}}`,
      junk(64).toString('latin1'),
    ]);
  const registryPaths = () =>
    pick(['/register', '/bootstate', `/systems/${uuidish()}`, `/delete/${uuidish()}`, `/${uuidish()}`]);
  const bootPaths = () =>
    pick([
      `/ipxe/${uuidish()}`,
      `/ignition/${uuidish()}?token=${pick(['', 'x', '%', junk(4).toString('hex')])}`,
      `/images/${uuidish()}/kernel`,
      `/ipxe/${uuidish()}/x`,
    ]);
  const realUuid = () => pick([known.uuid.toLowerCase(), known.uuid.toUpperCase()]);
  const madeUp = () => pick(['x', junk(16).toString('base64url'), known.currentToken.slice(0, -1)]);
  /**
   * Requests that pass routing and content negotiation for the seeded Server: with the current
   * token only malformed bodies (a well-formed one would be a legitimate write); with a stale,
   * made-up or missing token also well-formed bodies, which authentication must refuse (409 / 401).
   */
  const authentic = (target: 'registry' | 'boot'): FuzzRequest => {
    const uuid = realUuid();
    if (target === 'boot') {
      // The current token would fetch the ignition (and record IgnitionDataFetched): not here.
      const token = pick([known.staleToken, madeUp(), '']);
      return { method: 'GET', path: `/ignition/${uuid}?token=${encodeURIComponent(token)}`, headers: {} };
    }
    const path = pick(['/register', '/bootstate']);
    const wellFormed =
      path === '/register'
        ? { systemUUID: uuid, data: { cpu: [{ id: 0 }], fuzz: Math.floor(rnd() * 1e6) } }
        : { systemUUID: uuid, booted: pick([true, false]) };
    // Each of these is invalid for both endpoints (400 before authentication).
    const malformed = pick<unknown>([
      { systemUUID: uuid, booted: pick(['yes', 1, null, {}, []]) },
      { systemUUID: uuid, data: pick([null, 'x', 1, []]) },
      { systemUUID: uuid },
      { systemUUID: [uuid], booted: true, data: {} },
      { systemUUID: `${uuid}0`, booted: true, data: {} },
      { systemUUID: uuid.slice(1), booted: true, data: {} },
      '{"systemUUID":',
      '',
      'null',
    ]);
    const token = pick(['current', 'stale', 'made-up', 'none'] as const);
    const body = token === 'current' ? malformed : rnd() < 0.8 ? wellFormed : malformed;
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (token === 'current') headers.authorization = `Bearer ${known.currentToken}`;
    if (token === 'stale') headers.authorization = `Bearer ${known.staleToken}`;
    if (token === 'made-up') headers.authorization = `Bearer ${madeUp()}`;
    return {
      method: 'POST',
      path,
      headers,
      body: Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)),
    };
  };
  return (target: 'registry' | 'boot'): FuzzRequest => {
    if (rnd() < 0.25) return authentic(target);
    const method = pick(['GET', 'POST', 'POST', 'POST', 'DELETE', 'PUT', 'PATCH', 'HEAD', 'OPTIONS']);
    const headers: Record<string, string> = {};
    const ct = pick([
      'application/json',
      'application/json; charset=utf-8',
      'text/plain',
      'application/x-www-form-urlencoded',
      '',
      'application/jsonx',
      'multipart/form-data; boundary=x',
    ]);
    if (ct) headers['content-type'] = ct;
    const auth = pick([
      '',
      'Bearer ',
      'Bearer x',
      `Bearer ${'a'.repeat(5000)}`,
      'Basic Zm9vOmJhcg==',
      'bearer',
      junk(6).toString('hex'),
    ]);
    if (auth) headers.authorization = auth;
    const withBody = method !== 'GET' && method !== 'HEAD' && rnd() < 0.9;
    return {
      method,
      path: target === 'registry' ? registryPaths() : bootPaths(),
      headers,
      body: withBody
        ? rnd() < 0.02
          ? Buffer.alloc(1024 * 1024 + 10, 0x41)
          : Buffer.from(jsonish(), 'latin1')
        : undefined,
    };
  };
}

/** Sends one raw request; never throws (a reset counts as status 0). */
function send(base: string, r: FuzzRequest): Promise<number> {
  return new Promise((ok) => {
    const u = new URL(base);
    let path = r.path;
    // Keep raw bytes that URL parsing would reject: node's http.request sends the path as given,
    // except characters it refuses outright.
    if (/[^\x21-\x7e]/.test(path)) path = encodeURI(path);
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        method: r.method,
        path,
        headers: r.body ? { ...r.headers, 'content-length': String(r.body.length) } : r.headers,
      },
      (res) => {
        res.resume();
        res.on('end', () => ok(res.statusCode ?? 0));
        res.on('error', () => ok(0));
      },
    );
    req.setTimeout(10_000, () => req.destroy());
    req.on('error', () => ok(0));
    req.end(r.body);
  });
}

describe('fuzzing the registry and the boot server', () => {
  // Every request comes from one address: without a large 401 budget most would be answered 429
  // before authentication (security review S6, tested in security.test.ts), and the fuzz is to
  // reach authentication.
  const fx = useSignalStack('fuzz', { authFailureLimit: { burst: 1_000_000 } });

  it('10,000+ malformed requests: no 5xx but 503, still serving, nothing written', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { withIgnition: true });
    // Attempt 2 is current, so attempt 1's token is a stale one (409) the fuzzer can send.
    const { token: currentToken } = await nextAttempt(fx.client, s);
    await waitFor('cached', 10_000, () => {
      const sbc = fx.stack.sources.sbcs.get(s.sbc.metadata.name!, fx.namespace.name);
      return (
        !!sbc &&
        testToken(sbc) === currentToken &&
        sbc.spec.bootAttempt === 2 &&
        sbc.status?.attemptGeneration === sbc.metadata.generation &&
        !!fx.stack.sources.servers.get(s.server.metadata.name!)
      );
    });
    const snapshot = async () => {
      const sbc = await fx.client.get<ServerBootConfiguration>(
        Resources.ServerBootConfiguration,
        s.sbc.metadata.name!,
        fx.namespace.name,
      );
      const server = await fx.client.get<Server>(Resources.Server, s.server.metadata.name!);
      // Other test files run concurrently, so only the objects this test seeded are compared.
      return `${sbc?.metadata.resourceVersion} ${server?.metadata.resourceVersion}`;
    };
    const before = await snapshot();
    const next = generator(20261130, { ...s, currentToken, staleToken: s.token });
    const N = 10_000;
    const statuses = new Map<number, number>();
    let sent = 0;
    const accepted: string[] = [];
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (sent < N) {
          sent++;
          const target = sent % 2 ? 'registry' : 'boot';
          const r = next(target);
          const status = await send(target === 'registry' ? fx.stack.registryUrl : fx.stack.bootUrl, r);
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
          if (status >= 200 && status < 300 && accepted.length < 20) {
            accepted.push(
              `${status} ${r.method} ${r.path.slice(0, 80)} ${r.body?.subarray(0, 120).toString('latin1') ?? ''}`,
            );
          }
        }
      }),
    );
    const summary = Object.fromEntries([...statuses.entries()].sort((a, b) => a[0] - b[0]));
    console.log(JSON.stringify({ test: 'fuzz', requests: sent, statuses: summary }));
    for (const [status, count] of statuses) {
      assert.ok(status < 500 || status === 503, `${count} answers with status ${status}`);
    }
    assert.ok((statuses.get(0) ?? 0) < N * 0.05, 'most requests got an HTTP answer');
    // Requests reached authentication: both refusals happened, and plenty of them.
    assert.ok((statuses.get(401) ?? 0) > N * 0.02, `401 answers: ${statuses.get(401) ?? 0}`);
    assert.ok((statuses.get(409) ?? 0) > N * 0.02, `409 answers: ${statuses.get(409) ?? 0}`);
    assert.equal(await snapshot(), before, `nothing written; 2xx answers:\n${accepted.join('\n')}`);
    // Both processes still serve, and a legitimate callback still goes through.
    const alive = await fetch(`${fx.stack.bootUrl}/ipxe`);
    assert.equal(alive.status, 200);
    const sys = await fetch(`${fx.stack.registryUrl}/systems/${s.uuid}`, { headers: bearer(currentToken) });
    assert.equal(sys.status, 404);
    assert.equal(((await sys.json()) as { reason?: string }).reason, 'NoRegistration');
    const ok = await postJson(
      `${fx.stack.registryUrl}/bootstate`,
      { systemUUID: s.uuid, booted: true },
      bearer(currentToken),
    );
    assert.equal(ok.status, 200, ok.text);
  });
});
