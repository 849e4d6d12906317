/**
 * Security review item S1 (issue 15): a BMC must not be able to make the operator send its credentials
 * to another origin through links in its bodies or headers. Two real HTTP servers on loopback: a
 * "BMC" whose answers carry the hostile links, and an "other" server that must never see a request.
 */

import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import { ForeignLinkError, isServicePath, RedfishParseError } from '../../src/bmc/parse.js';
import { RedfishBMC } from '../../src/bmc/redfish-bmc.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

async function listen(handler: Handler): Promise<{ server: Server; url: string; port: number }> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}`, port };
}

function json(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

describe('S1 links from Redfish bodies never take credentials to another origin', () => {
  let other: Awaited<ReturnType<typeof listen>>;
  let bmc: Awaited<ReturnType<typeof listen>>;
  const seenByOther: Array<{ method: string; url: string; authorization?: string; token?: string }> = [];
  /** What the hostile BMC puts into its answers; set per test. */
  let hostile: {
    resetTarget?: string;
    actionInfo?: string;
    member?: string;
    sessionLocation?: string;
    sessionId?: string;
  } = {};

  before(async () => {
    other = await listen((req, res) => {
      seenByOther.push({
        method: req.method ?? '',
        url: req.url ?? '',
        ...(req.headers.authorization ? { authorization: req.headers.authorization } : {}),
        ...(typeof req.headers['x-auth-token'] === 'string' ? { token: req.headers['x-auth-token'] } : {}),
      });
      json(res, 200, {});
    });
    bmc = await listen((req, res) => {
      req.resume();
      const path = (req.url ?? '').replace(/\/+$/, '');
      if (req.method === 'POST' && path === '/redfish/v1/SessionService/Sessions') {
        json(
          res,
          201,
          { Id: 's1', '@odata.id': hostile.sessionId ?? '/redfish/v1/SessionService/Sessions/s1' },
          {
            'x-auth-token': 'tok-s1',
            ...(hostile.sessionLocation ? { location: hostile.sessionLocation } : {}),
          },
        );
        return;
      }
      if (req.method === 'GET' && path === '/redfish/v1/Systems') {
        json(res, 200, { Members: [{ '@odata.id': hostile.member ?? '/redfish/v1/Systems/1' }] });
        return;
      }
      if (req.method === 'GET' && path === '/redfish/v1/Systems/1') {
        const reset: Record<string, unknown> = {
          target: hostile.resetTarget ?? '/redfish/v1/Systems/1/Actions/ComputerSystem.Reset',
        };
        if (hostile.actionInfo) reset['@Redfish.ActionInfo'] = hostile.actionInfo;
        json(res, 200, {
          '@odata.id': '/redfish/v1/Systems/1',
          Id: '1',
          UUID: '38947555-7742-3448-3784-823347823834',
          PowerState: 'Off',
          Actions: { '#ComputerSystem.Reset': reset },
        });
        return;
      }
      if (req.method === 'POST' && path.endsWith('/Actions/ComputerSystem.Reset')) {
        res.writeHead(204).end();
        return;
      }
      if (req.method === 'DELETE') {
        res.writeHead(204).end();
        return;
      }
      json(res, 404, {});
    });
  });
  after(async () => {
    await new Promise((r) => other.server.close(r));
    await new Promise((r) => bmc.server.close(r));
  });
  beforeEach(() => {
    seenByOther.length = 0;
    hostile = {};
  });

  const client = (auth: 'basic' | 'session') =>
    new RedfishBMC({
      endpoint: bmc.url,
      username: 'admin',
      password: 'secret',
      auth,
      budgetMs: 2_000,
      requestTimeoutMs: 1_000,
    });

  const hostileTargets = () => [
    `//127.0.0.1:${other.port}/x`,
    `/\\127.0.0.1:${other.port}/x`,
    `/\t/127.0.0.1:${other.port}/x`,
    `http://127.0.0.1:${other.port}/x`,
  ];

  it('S1 refuses a Reset target on another origin (//host, /\\host, /<TAB>/host, absolute URL)', async () => {
    for (const target of hostileTargets()) {
      hostile = { resetTarget: target };
      const c = client('basic');
      try {
        await assert.rejects(c.powerOn('/redfish/v1/Systems/1'), RedfishParseError, JSON.stringify(target));
      } finally {
        await c.close();
      }
    }
    assert.deepEqual(seenByOther, []);
  });

  it('S1 refuses a foreign @Redfish.ActionInfo and a foreign collection member', async () => {
    hostile = { actionInfo: `//127.0.0.1:${other.port}/info` };
    const c = client('basic');
    try {
      await assert.rejects(c.powerOn('/redfish/v1/Systems/1'), RedfishParseError);
      hostile = { member: `//127.0.0.1:${other.port}/redfish/v1/Systems/1` };
      await assert.rejects(c.listSystems(), RedfishParseError);
    } finally {
      await c.close();
    }
    assert.deepEqual(seenByOther, []);
  });

  it('S1 never sends the session token to a foreign session Location or @odata.id', async () => {
    for (const h of [
      { sessionLocation: `http://127.0.0.1:${other.port}/redfish/v1/SessionService/Sessions/s1` },
      { sessionId: `//127.0.0.1:${other.port}/redfish/v1/SessionService/Sessions/s1` },
    ]) {
      hostile = h;
      const c = client('session');
      await c.listSystems();
      await c.close(); // logout is a DELETE of the session URI
    }
    assert.deepEqual(seenByOther, []);
  });

  it('S1 the client itself refuses to send to a path that leaves the endpoint', async () => {
    const c = client('basic');
    try {
      for (const target of hostileTargets()) {
        await assert.rejects(c.client.get(target), ForeignLinkError);
        await assert.rejects(c.client.post(target, { ResetType: 'On' }), ForeignLinkError);
      }
      // A good path still works.
      assert.equal((await c.client.get('/redfish/v1/Systems')).status, 200);
    } finally {
      await c.close();
    }
    assert.deepEqual(seenByOther, []);
  });

  it('S1 isServicePath accepts service paths only', () => {
    for (const good of ['/redfish/v1/Systems/1', '/redfish/v1/Systems/1/Actions/ComputerSystem.Reset?x=1']) {
      assert.ok(isServicePath(good), good);
    }
    for (const bad of [
      '//evil/x',
      '/\\evil/x',
      '\\\\evil/x',
      '/\n/evil/x',
      'http://evil/x',
      'redfish/v1',
      '',
      42,
      undefined,
    ]) {
      assert.ok(!isServicePath(bad), JSON.stringify(bad));
    }
  });
});
