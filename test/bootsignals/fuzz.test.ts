/**
 * Generated malformed requests (at least 10,000, seeded PRNG) against the registry and the boot
 * server: no 5xx other than 503, the process keeps serving, and nothing is written.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request } from 'node:http';
import { after, before, describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import type { KubeClient } from '../../src/runtime/client.js';
import { Resources } from '../../src/runtime/resource.js';
import { waitFor } from '../harness/control-plane.js';
import { sharedCluster, testNamespace } from '../harness/shared.js';
import { newTestClient, type Seeded, seedBootTarget, startTestStack } from './fixture.js';

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

function generator(seed: number, known: Seeded) {
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
  return (target: 'registry' | 'boot'): FuzzRequest => {
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

let client: KubeClient;
let stack: Awaited<ReturnType<typeof startTestStack>>;
let ns: { name: string; cleanup(): Promise<void> };

describe('fuzzing the registry and the boot server', () => {
  before(async () => {
    const kc = (await sharedCluster()).kubeConfig();
    client = newTestClient(kc);
    ns = await testNamespace(kc, 'fuzz');
    stack = await startTestStack(kc);
  });
  after(async () => {
    await stack?.close();
    await ns?.cleanup();
    await client?.close();
  });

  it('10,000+ malformed requests: no 5xx but 503, still serving, nothing written', async () => {
    const s = await seedBootTarget(client, ns.name, { withIgnition: true });
    await waitFor('cached', 10_000, () => !!stack.sources.secrets.get(s.secretName, ns.name));
    const snapshot = async () => {
      const sbc = await client.get<ServerBootConfiguration>(
        Resources.ServerBootConfiguration,
        s.sbc.metadata.name!,
        ns.name,
      );
      const server = await client.get<Server>(Resources.Server, s.server.metadata.name!);
      // Other test files run concurrently, so only the objects this test seeded are compared.
      return `${sbc?.metadata.resourceVersion} ${server?.metadata.resourceVersion}`;
    };
    const before = await snapshot();
    const next = generator(20261130, s);
    const N = 10_000;
    const statuses = new Map<number, number>();
    let sent = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (sent < N) {
          sent++;
          const target = sent % 2 ? 'registry' : 'boot';
          const status = await send(target === 'registry' ? stack.registryUrl : stack.bootUrl, next(target));
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
        }
      }),
    );
    const summary = Object.fromEntries([...statuses.entries()].sort((a, b) => a[0] - b[0]));
    console.log(JSON.stringify({ test: 'fuzz', requests: sent, statuses: summary }));
    assert.ok(sent >= N);
    for (const [status, count] of statuses) {
      assert.ok(status < 500 || status === 503, `${count} answers with status ${status}`);
    }
    assert.ok((statuses.get(0) ?? 0) < N * 0.05, 'most requests got an HTTP answer');
    assert.equal(await snapshot(), before, 'nothing written');
    const alive = await fetch(`${stack.bootUrl}/ipxe`);
    assert.equal(alive.status, 200);
  });
});
