import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { request } from 'undici';
import type { FaultKnobs } from '../../src/virtualbmc/faults.js';
import { FaultState } from '../../src/virtualbmc/faults.js';
import type { ServiceProfile } from '../../src/virtualbmc/profile.js';
import { startVirtualBmc, type VirtualBmc } from '../../src/virtualbmc/server.js';
import { SimHost } from '../../src/virtualbmc/sim.js';
import { simIdentity } from '../../src/virtualbmc/sim-fleet.js';

/** Polls `check` every 20 ms until it holds; throws after `timeoutMs` (a bound for a stalled machine, not a window). */
async function until(check: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const USER = 'root';
const PASSWORD = 'calvin';
const BASIC = `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString('base64')}`;

interface Ctx {
  vbmc: VirtualBmc;
  hosts: SimHost[];
  uri: string;
  call(
    method: string,
    path: string,
    opts?: { body?: unknown; raw?: string; headers?: Record<string, string>; auth?: string | null },
  ): Promise<{ status: number; headers: Record<string, unknown>; body: Record<string, unknown> }>;
}

async function withBmc(
  opts: { systems?: number; profile?: Partial<ServiceProfile>; faults?: Partial<FaultKnobs> },
  fn: (c: Ctx) => Promise<void>,
): Promise<void> {
  // Hosts boot from disk here; no boot server is contacted.
  const hosts = Array.from(
    { length: opts.systems ?? 1 },
    (_, i) =>
      new SimHost({
        identity: simIdentity(i, 'server-test'),
        bootServerUrl: 'http://127.0.0.1:9',
        timing: { shutdownMs: 10 },
      }),
  );
  const vbmc = await startVirtualBmc({
    hosts,
    username: USER,
    password: PASSWORD,
    ...(opts.profile ? { profile: opts.profile } : {}),
    ...(opts.faults ? { faults: opts.faults } : {}),
  });
  const call: Ctx['call'] = async (method, path, o = {}) => {
    const headers: Record<string, string> = { ...o.headers };
    if (o.auth !== null) headers['authorization'] = o.auth ?? BASIC;
    let body: string | undefined = o.raw;
    if (o.body !== undefined) {
      body = JSON.stringify(o.body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await request(`${vbmc.url}${path}`, { method: method as 'GET', headers, body });
    const text = await res.body.text();
    return {
      status: res.statusCode,
      headers: res.headers,
      body: text ? (JSON.parse(text) as Record<string, unknown>) : {},
    };
  };
  try {
    await fn({ vbmc, hosts, uri: vbmc.systems[0]!.uri, call });
  } finally {
    await vbmc.close();
  }
}

const messageId = (body: Record<string, unknown>): string =>
  ((body['error'] as Record<string, unknown>)['@Message.ExtendedInfo'] as Array<{ MessageId: string }>)[0]!
    .MessageId;

describe('virtual BMC Redfish service', () => {
  it('serves the service root without authentication and everything else only with it', () =>
    withBmc({}, async ({ call }) => {
      const root = await call('GET', '/redfish/v1/', { auth: null });
      assert.equal(root.status, 200);
      assert.deepEqual(root.body['Systems'], { '@odata.id': '/redfish/v1/Systems' });
      assert.equal((await call('GET', '/redfish', { auth: null })).status, 200);
      const denied = await call('GET', '/redfish/v1/Systems', { auth: null });
      assert.equal(denied.status, 401);
      assert.match(String(denied.headers['www-authenticate']), /^Basic/);
      const wrong = `Basic ${Buffer.from(`${USER}:nope`).toString('base64')}`;
      assert.equal((await call('GET', '/redfish/v1/Systems', { auth: wrong })).status, 401);
      assert.equal((await call('GET', '/redfish/v1/Systems')).status, 200);
    }));

  it('creates, uses and deletes sessions', () =>
    withBmc({}, async ({ call }) => {
      assert.equal(
        (
          await call('POST', '/redfish/v1/SessionService/Sessions', {
            auth: null,
            body: { UserName: USER, Password: 'x' },
          })
        ).status,
        401,
      );
      assert.equal(
        (await call('POST', '/redfish/v1/SessionService/Sessions', { auth: null, body: { UserName: USER } }))
          .status,
        400,
      );
      const login = await call('POST', '/redfish/v1/SessionService/Sessions', {
        auth: null,
        body: { UserName: USER, Password: PASSWORD },
      });
      assert.equal(login.status, 201);
      const token = String(login.headers['x-auth-token']);
      const location = String(login.headers['location']);
      assert.match(token, /^[0-9a-f]{48}$/);
      assert.equal(location, login.body['@odata.id']);
      const withToken = { auth: null, headers: { 'x-auth-token': token } };
      assert.equal((await call('GET', '/redfish/v1/Systems', withToken)).status, 200);
      const list = await call('GET', '/redfish/v1/SessionService/Sessions', withToken);
      assert.deepEqual(list.body['Members'], [{ '@odata.id': location }]);
      assert.equal((await call('DELETE', location, withToken)).status, 204);
      assert.equal((await call('GET', '/redfish/v1/Systems', withToken)).status, 401);
    }));

  it('has no session service when the profile disables it', () =>
    withBmc({ profile: { sessions: false } }, async ({ call }) => {
      const root = await call('GET', '/redfish/v1/', { auth: null });
      assert.equal(root.body['SessionService'], undefined);
      const login = await call('POST', '/redfish/v1/SessionService/Sessions', {
        auth: null,
        body: { UserName: USER, Password: PASSWORD },
      });
      assert.equal(login.status, 404);
    }));

  it('describes each system, its NIC and its manager', () =>
    withBmc({ systems: 2 }, async ({ call, hosts, vbmc }) => {
      const coll = await call('GET', '/redfish/v1/Systems');
      assert.equal(coll.body['Members@odata.count'], 2);
      const id = hosts[1]!.identity;
      const sys = await call('GET', vbmc.systems[1]!.uri);
      assert.equal(sys.body['UUID'], id.uuid.toUpperCase());
      assert.equal(sys.body['SerialNumber'], id.serialNumber);
      assert.equal(sys.body['PowerState'], 'Off');
      assert.equal(sys.headers['etag'], sys.body['@odata.etag']);
      assert.deepEqual(sys.body['MemorySummary'], { TotalSystemMemoryGiB: 16 });
      const nics = await call('GET', `${vbmc.systems[1]!.uri}/EthernetInterfaces`);
      const nicUri = (nics.body['Members'] as Array<{ '@odata.id': string }>)[0]!['@odata.id'];
      const nic = await call('GET', nicUri);
      assert.equal(String(nic.body['MACAddress']).toLowerCase(), id.macAddress);
      const mgr = await call('GET', '/redfish/v1/Managers/BMC');
      assert.deepEqual(
        (mgr.body['Links'] as Record<string, unknown>)['ManagerForServers'],
        vbmc.systems.map((s) => ({ '@odata.id': s.uri })),
      );
    }));

  it('answers 404 for unknown resources and 405 for wrong methods', () =>
    withBmc({}, async ({ call, uri }) => {
      const missing = await call('GET', '/redfish/v1/Systems/nope');
      assert.equal(missing.status, 404);
      assert.match(messageId(missing.body), /ResourceMissingAtURI$/);
      assert.equal((await call('GET', '/redfish/v1/Chassis')).status, 404);
      assert.equal((await call('GET', '/redfish/v1/Systems/%E0%A4%A')).status, 400);
      const wrong = await call('GET', `${uri}/Actions/ComputerSystem.Reset`);
      assert.equal(wrong.status, 405);
      assert.equal(wrong.headers['allow'], 'POST');
    }));

  it('validates PATCH bodies: unknown, read-only and out-of-list properties, JSON, media type, size', () =>
    withBmc({}, async ({ call, uri }) => {
      const cases: Array<[unknown, number, RegExp]> = [
        [{ PowerState: 'On' }, 400, /PropertyNotWritable$/],
        [{ Boot: { BootNext: '0001' } }, 400, /PropertyUnknown$/],
        [{ Boot: { BootSourceOverrideTarget: 'Floppy' } }, 400, /PropertyValueNotInList$/],
        [{ Boot: { BootSourceOverrideEnabled: 'Always' } }, 400, /PropertyValueNotInList$/],
        [{ Boot: 'Pxe' }, 400, /PropertyValueTypeError$/],
        [[1, 2], 400, /MalformedJSON$/],
      ];
      for (const [body, status, id] of cases) {
        const res = await call('PATCH', uri, { body });
        assert.equal(res.status, status, JSON.stringify(body));
        assert.match(messageId(res.body), id);
      }
      assert.equal(
        (await call('PATCH', uri, { raw: '{"Boot":', headers: { 'content-type': 'application/json' } }))
          .status,
        400,
      );
      assert.equal(
        (await call('PATCH', uri, { raw: 'Boot=Pxe', headers: { 'content-type': 'text/plain' } })).status,
        415,
      );
      assert.equal((await call('PATCH', uri, { body: { Boot: {}, pad: 'x'.repeat(70_000) } })).status, 413);
      // Nothing changed through all of that.
      assert.equal((await call('GET', uri)).headers['etag'], '"1"');
    }));

  it('checks If-Match on PATCH: 412 when stale, * always matches, 428 when required and missing', () =>
    withBmc({ profile: { requireIfMatch: true } }, async ({ call, uri }) => {
      const boot = { Boot: { BootSourceOverrideTarget: 'Pxe' } };
      assert.equal((await call('PATCH', uri, { body: boot })).status, 428);
      assert.equal((await call('PATCH', uri, { body: boot, headers: { 'if-match': '"7"' } })).status, 412);
      assert.equal((await call('PATCH', uri, { body: boot, headers: { 'if-match': '"1"' } })).status, 204);
      assert.equal((await call('PATCH', uri, { body: boot, headers: { 'if-match': '"1"' } })).status, 412);
      assert.equal((await call('PATCH', uri, { body: boot, headers: { 'if-match': '*' } })).status, 204);
      assert.equal((await call('GET', uri)).headers['etag'], '"3"');
    }));

  it('consumes a Once boot override at the next boot, which then reads Disabled', () =>
    withBmc({}, async ({ call, uri, hosts }) => {
      await call('PATCH', uri, {
        body: { Boot: { BootSourceOverrideTarget: 'Hdd', BootSourceOverrideEnabled: 'Once' } },
      });
      assert.equal(
        (await call('POST', `${uri}/Actions/ComputerSystem.Reset`, { body: { ResetType: 'On' } })).status,
        204,
      );
      assert.equal(hosts[0]!.lastBoot?.device, 'Hdd');
      const boot = (await call('GET', uri)).body['Boot'] as Record<string, unknown>;
      assert.equal(boot['BootSourceOverrideEnabled'], 'Disabled');
      assert.equal(boot['BootSourceOverrideTarget'], 'Hdd');
      await call('POST', `${uri}/Actions/ComputerSystem.Reset`, { body: { ResetType: 'ForceRestart' } });
      assert.equal(hosts[0]!.lastBoot?.device, 'None');
    }));

  it('validates the ResetType against its allowable values', () =>
    withBmc({ profile: { resetTypes: ['On', 'ForceOff'] } }, async ({ call, uri, hosts }) => {
      const sys = await call('GET', uri);
      const action = (sys.body['Actions'] as Record<string, Record<string, unknown>>)[
        '#ComputerSystem.Reset'
      ]!;
      assert.deepEqual(action['ResetType@Redfish.AllowableValues'], ['On', 'ForceOff']);
      const target = String(action['target']);
      const missing = await call('POST', target, { body: {} });
      assert.equal(missing.status, 400);
      assert.match(messageId(missing.body), /ActionParameterMissing$/);
      for (const t of ['GracefulShutdown', 'Explode']) {
        const res = await call('POST', target, { body: { ResetType: t } });
        assert.equal(res.status, 400);
        assert.match(messageId(res.body), /ActionParameterValueNotInList$/);
      }
      assert.equal(hosts[0]!.powerState(), 'Off');
    }));

  it('advertises reset types through ActionInfo when the profile says so', () =>
    withBmc(
      { profile: { resetTypesAdvertised: 'action-info', resetTypes: ['On', 'ForceOff'] } },
      async ({ call, uri }) => {
        const action = ((await call('GET', uri)).body['Actions'] as Record<string, Record<string, unknown>>)[
          '#ComputerSystem.Reset'
        ]!;
        assert.equal(action['ResetType@Redfish.AllowableValues'], undefined);
        const info = await call('GET', String(action['@Redfish.ActionInfo']));
        assert.deepEqual((info.body['Parameters'] as Array<Record<string, unknown>>)[0]!['AllowableValues'], [
          'On',
          'ForceOff',
        ]);
      },
    ));

  it('accepts Boot changes only at the settings object when it advertises one', () =>
    withBmc({ profile: { settingsObject: true } }, async ({ call, uri }) => {
      const sys = await call('GET', uri);
      assert.deepEqual(sys.body['@Redfish.Settings'], { SettingsObject: { '@odata.id': `${uri}/Settings` } });
      const boot = { Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Continuous' } };
      assert.equal((await call('PATCH', uri, { body: boot })).status, 405);
      assert.equal((await call('PATCH', `${uri}/Settings`, { body: boot })).status, 204);
      assert.deepEqual(
        ((await call('GET', uri)).body['Boot'] as Record<string, unknown>)['BootSourceOverrideEnabled'],
        'Continuous',
      );
    }));
});

describe('virtual BMC fault knobs', () => {
  it('drops the next N connections without processing them', () =>
    withBmc({ faults: { dropConnections: 1 } }, async ({ call, uri, vbmc }) => {
      await assert.rejects(call('GET', uri), /other side closed|socket|ECONNRESET/i);
      assert.equal((await call('GET', uri)).status, 200);
      assert.deepEqual(
        vbmc.requests().map((r) => r.status),
        [0, 200],
      );
    }));

  it('answers the next N requests 503 with Retry-After, without processing them', () =>
    withBmc({ faults: { unavailableRequests: 2, retryAfterSeconds: 7 } }, async ({ call, uri, hosts }) => {
      const first = await call('POST', `${uri}/Actions/ComputerSystem.Reset`, { body: { ResetType: 'On' } });
      assert.equal(first.status, 503);
      assert.equal(first.headers['retry-after'], '7');
      assert.equal(hosts[0]!.powerState(), 'Off');
      assert.equal((await call('GET', uri)).status, 503);
      assert.equal((await call('GET', uri)).status, 200);
    }));

  it('applies counted faults only to the listed methods', () =>
    withBmc({ faults: { unavailableRequests: 1, onlyMethods: ['post'] } }, async ({ call, uri }) => {
      assert.equal((await call('GET', uri)).status, 200);
      assert.equal(
        (await call('POST', `${uri}/Actions/ComputerSystem.Reset`, { body: { ResetType: 'On' } })).status,
        503,
      );
      assert.equal(
        (await call('POST', `${uri}/Actions/ComputerSystem.Reset`, { body: { ResetType: 'On' } })).status,
        204,
      );
    }));

  it('delays responses: all by responseDelayMs, the next N by slowResponseMs more, after processing', () =>
    withBmc(
      { faults: { responseDelayMs: 50, slowRequests: 1, slowResponseMs: 1_500 } },
      async ({ call, uri, hosts }) => {
        let t = performance.now();
        let answered = false;
        const pending = call('POST', `${uri}/Actions/ComputerSystem.Reset`, { body: { ResetType: 'On' } });
        void pending.then(() => {
          answered = true;
        });
        await until(() => hosts[0]!.powerState() === 'On');
        assert.equal(answered, false, 'processed before the answer was sent');
        assert.equal((await pending).status, 204);
        assert.ok(performance.now() - t >= 1_540);
        t = performance.now();
        await call('GET', uri);
        const ms = performance.now() - t;
        // At least the common delay; far less than the slow one, which was used up.
        assert.ok(ms >= 45 && ms < 1_000, `second request took ${ms} ms`);
      },
    ));

  it('keeps the old PowerState for powerTransitionMs after an accepted reset', () =>
    withBmc({ faults: { powerTransitionMs: 2_000 } }, async ({ call, uri, hosts }) => {
      const t0 = performance.now();
      assert.equal(
        (await call('POST', `${uri}/Actions/ComputerSystem.Reset`, { body: { ResetType: 'On' } })).status,
        204,
      );
      assert.equal((await call('GET', uri)).body['PowerState'], 'Off');
      assert.equal(hosts[0]!.bootCount, 0);
      await until(async () => (await call('GET', uri)).body['PowerState'] === 'On');
      assert.ok(performance.now() - t0 >= 1_990, 'not before powerTransitionMs');
      assert.equal(hosts[0]!.bootCount, 1);
    }));

  it('reports PoweringOn/PoweringOff during the transition when asked to', () =>
    withBmc(
      { faults: { powerTransitionMs: 1_500, reportTransitionalState: true } },
      async ({ call, uri }) => {
        const state = async () => (await call('GET', uri)).body['PowerState'];
        await call('POST', `${uri}/Actions/ComputerSystem.Reset`, { body: { ResetType: 'On' } });
        assert.equal(await state(), 'PoweringOn');
        await until(async () => (await state()) === 'On');
        await call('POST', `${uri}/Actions/ComputerSystem.Reset`, { body: { ResetType: 'ForceOff' } });
        assert.equal(await state(), 'PoweringOff');
        await until(async () => (await state()) === 'Off');
      },
    ));

  it('simulates a concurrent writer on the next N PATCHes', () =>
    withBmc({ faults: { concurrentWrites: 1 } }, async ({ call, uri }) => {
      const boot = { Boot: { BootSourceOverrideTarget: 'Pxe' } };
      assert.equal((await call('PATCH', uri, { body: boot, headers: { 'if-match': '"1"' } })).status, 412);
      assert.equal((await call('PATCH', uri, { body: boot, headers: { 'if-match': '"2"' } })).status, 204);
    }));

  it('rejects invalid knob values', () => {
    const f = new FaultState();
    assert.throws(() => f.set({ dropConnections: -1 }), TypeError);
    assert.throws(() => f.set({ reportTransitionalState: 1 as unknown as boolean }), TypeError);
    f.set({ dropConnections: 2 });
    assert.deepEqual(
      [f.admit('GET').kind, f.admit('GET').kind, f.admit('GET').kind],
      ['drop', 'drop', 'serve'],
    );
    assert.throws(() => f.set({ onlyPaths: 'x' as unknown as string[] }), TypeError);
  });

  it('restricts counted faults to onlyMethods and onlyPaths', () => {
    const f = new FaultState({
      unavailableRequests: 1,
      onlyMethods: ['POST'],
      onlyPaths: ['/Actions/ComputerSystem.Reset'],
    });
    const reset = '/redfish/v1/Systems/x/Actions/ComputerSystem.Reset';
    assert.equal(f.admit('POST', '/redfish/v1/SessionService/Sessions').kind, 'serve');
    assert.equal(f.admit('GET', reset).kind, 'serve');
    assert.equal(f.admit('POST', reset).kind, 'unavailable');
    assert.equal(f.admit('POST', reset).kind, 'serve');
  });
});

describe('virtual BMC lifecycle', () => {
  it('cancels pending transitions and closes its hosts on close', async () => {
    const powerOn = (vbmc: VirtualBmc) =>
      request(`${vbmc.url}${vbmc.systems[0]!.uri}/Actions/ComputerSystem.Reset`, {
        method: 'POST',
        headers: { authorization: BASIC, 'content-type': 'application/json' },
        body: JSON.stringify({ ResetType: 'On' }),
      }).then((r) => r.body.dump());
    const start = (name: string) => {
      const host = new SimHost({ identity: simIdentity(0, name), bootServerUrl: 'http://127.0.0.1:9' });
      return startVirtualBmc({
        hosts: [host],
        username: USER,
        password: PASSWORD,
        faults: { powerTransitionMs: 100 },
      }).then((vbmc) => ({ host, vbmc }));
    };
    // Positive control of the window below: the same pending power-on, not cancelled, reaches its
    // host; the window is twice as long as it took.
    const control = await start('close-control');
    const t0 = Date.now();
    await powerOn(control.vbmc);
    for (const end = t0 + 5_000; control.host.bootCount === 0 && Date.now() < end; )
      await new Promise((r) => setTimeout(r, 10));
    const reactionMs = Date.now() - t0;
    await control.vbmc.close();
    assert.equal(control.host.bootCount, 1, 'the control power-on reached its host');

    const { host, vbmc } = await start('close');
    await powerOn(vbmc);
    await vbmc.close();
    await new Promise((r) => setTimeout(r, 2 * reactionMs));
    assert.equal(host.bootCount, 0, `the pending power-on never reached the host (${2 * reactionMs} ms)`);
    await assert.rejects(request(`${vbmc.url}/redfish/v1/`), /ECONNREFUSED/);
  });

  it('refuses two hosts with the same UUID', async () => {
    const id = simIdentity(0, 'dup');
    const hosts = [0, 1].map(() => new SimHost({ identity: id, bootServerUrl: 'http://127.0.0.1:9' }));
    await assert.rejects(startVirtualBmc({ hosts, username: USER, password: PASSWORD }), /share the UUID/);
  });
});
