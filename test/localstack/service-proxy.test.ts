/**
 * The Service stand-in in front of signal replicas (src/localstack/service-proxy.ts): real TCP on
 * loopback, real HTTP servers as backends. New connections go round robin; a backend that refuses
 * connections (its process is gone) is skipped; with none left the client's connection is reset.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { Agent, request } from 'undici';
import { startServiceProxy } from '../../src/localstack/service-proxy.js';

async function backend(name: string): Promise<{ server: Server; port: number }> {
  const server = createServer((_req, res) => res.end(name));
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', () => ok()));
  return { server, port: (server.address() as AddressInfo).port };
}

/** One request on a fresh connection (the proxy balances connections, not requests). */
async function get(url: string): Promise<string> {
  const agent = new Agent({ pipelining: 0 });
  try {
    const res = await request(url, { dispatcher: agent, reset: true });
    return await res.body.text();
  } finally {
    await agent.close();
  }
}

test('new connections go round robin; a backend that refuses connections is skipped', async () => {
  const a = await backend('a');
  const b = await backend('b');
  const proxy = await startServiceProxy([a.port, b.port]);
  try {
    const seen = [await get(proxy.url), await get(proxy.url), await get(proxy.url), await get(proxy.url)];
    assert.deepEqual(seen.sort(), ['a', 'a', 'b', 'b']);
    await new Promise((ok) => a.server.close(ok));
    const after = [await get(proxy.url), await get(proxy.url), await get(proxy.url)];
    assert.deepEqual(after, ['b', 'b', 'b'], 'the closed backend is skipped, no request fails');
    assert.equal(proxy.refused, 0);
    await new Promise((ok) => b.server.close(ok));
    await assert.rejects(get(proxy.url), 'no backend: the connection is reset');
    assert.equal(proxy.refused, 1);
  } finally {
    await proxy.close();
    a.server.close();
    b.server.close();
  }
});
