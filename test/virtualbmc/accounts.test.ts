/**
 * The virtual BMC's AccountService (src/virtualbmc/accounts.ts) over HTTP: accounts created,
 * changed and deleted as a Redfish client does it, the password length policy and role privileges
 * refused with 4xx and nothing changed, lockout after AccountLockoutThreshold wrong passwords, and an
 * expired password (PasswordChangeRequired) that allows nothing but changing it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { request } from 'undici';
import type { AccountPolicy } from '../../src/virtualbmc/accounts.js';
import { startVirtualBmc, type VirtualBmc } from '../../src/virtualbmc/server.js';
import { SimHost } from '../../src/virtualbmc/sim.js';
import { simIdentity } from '../../src/virtualbmc/sim-fleet.js';

const ACCOUNTS = '/redfish/v1/AccountService/Accounts';
type Reply = { status: number; headers: Record<string, unknown>; body: Record<string, unknown> };
type Call = (
  method: string,
  path: string,
  o?: { body?: unknown; user?: string; password?: string; token?: string },
) => Promise<Reply>;

async function withBmc(
  policy: Partial<AccountPolicy>,
  fn: (c: { vbmc: VirtualBmc; call: Call; uri: string }) => Promise<void>,
): Promise<void> {
  const host = new SimHost({
    identity: simIdentity(0, 'accounts-test'),
    bootServerUrl: 'http://127.0.0.1:9',
    timing: { shutdownMs: 10 },
  });
  const vbmc = await startVirtualBmc({
    hosts: [host],
    username: 'root',
    password: 'calvin',
    accounts: policy,
  });
  const call: Call = async (method, path, o = {}) => {
    const headers: Record<string, string> = {};
    if (o.token !== undefined) headers['x-auth-token'] = o.token;
    else
      headers['authorization'] =
        `Basic ${Buffer.from(`${o.user ?? 'root'}:${o.password ?? 'calvin'}`).toString('base64')}`;
    let body: string | undefined;
    if (o.body !== undefined) {
      body = JSON.stringify(o.body);
      headers['content-type'] = 'application/json';
    }
    const res = await request(`${vbmc.url}${path}`, { method: method as 'GET', headers, body });
    const text = await res.body.text();
    return { status: res.statusCode, headers: res.headers, body: text ? JSON.parse(text) : {} };
  };
  try {
    await fn({ vbmc, call, uri: vbmc.systems[0]!.uri });
  } finally {
    await vbmc.close();
  }
}

const messageId = (r: Reply): string =>
  ((r.body['error'] as Record<string, unknown>)['@Message.ExtendedInfo'] as Array<{ MessageId: string }>)[0]!
    .MessageId;

async function until(check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('virtual BMC AccountService', () => {
  it('serves the policy, creates an account that can log in, and refuses bad creates without creating', () =>
    withBmc({ minPasswordLength: 10, maxPasswordLength: 20 }, async ({ call, vbmc }) => {
      const root = await call('GET', '/redfish/v1/');
      assert.deepEqual(root.body['AccountService'], { '@odata.id': '/redfish/v1/AccountService' });
      const svc = await call('GET', '/redfish/v1/AccountService');
      assert.equal(svc.body['MinPasswordLength'], 10);
      assert.equal(svc.body['MaxPasswordLength'], 20);
      assert.equal(svc.body['AccountLockoutThreshold'], 0);

      const short = await call('POST', ACCOUNTS, {
        body: { UserName: 'ops', Password: 'abc', RoleId: 'Operator' },
      });
      assert.equal(short.status, 400);
      assert.equal(messageId(short), 'Base.1.18.PropertyValueFormatError');
      const long = await call('POST', ACCOUNTS, {
        body: { UserName: 'ops', Password: 'x'.repeat(21), RoleId: 'Operator' },
      });
      assert.equal(long.status, 400);
      const role = await call('POST', ACCOUNTS, {
        body: { UserName: 'ops', Password: 'x'.repeat(12), RoleId: 'Root' },
      });
      assert.equal(role.status, 400);
      assert.equal(messageId(role), 'Base.1.18.PropertyValueNotInList');
      const missing = await call('POST', ACCOUNTS, { body: { UserName: 'ops', Password: 'x'.repeat(12) } });
      assert.equal(missing.status, 400);
      assert.equal(vbmc.accounts.account('ops'), undefined, 'refused creates leave nothing behind');

      const created = await call('POST', ACCOUNTS, {
        body: { UserName: 'ops', Password: 'opspassword1', RoleId: 'Operator' },
      });
      assert.equal(created.status, 201);
      const uri = String(created.headers['location']);
      assert.equal(uri, `${ACCOUNTS}/${created.body['Id']}`);
      assert.equal(created.body['Password'], null);
      assert.equal(created.body['Enabled'], true);
      assert.equal(created.body['RoleId'], 'Operator');
      const list = await call('GET', ACCOUNTS);
      assert.deepEqual(
        (list.body['Members'] as Array<{ '@odata.id': string }>).map((m) => m['@odata.id']),
        [`${ACCOUNTS}/1`, uri],
      );
      assert.equal(
        (await call('GET', '/redfish/v1/Systems', { user: 'ops', password: 'opspassword1' })).status,
        200,
      );
      assert.equal(
        (await call('GET', '/redfish/v1/Systems', { user: 'ops', password: 'wrongwrong1' })).status,
        401,
      );
      const dup = await call('POST', ACCOUNTS, {
        body: { UserName: 'ops', Password: 'opspassword2', RoleId: 'ReadOnly' },
      });
      assert.equal(dup.status, 409);
      // An Operator may not manage users.
      const byOps = await call('POST', ACCOUNTS, {
        user: 'ops',
        password: 'opspassword1',
        body: { UserName: 'other', Password: 'otherpassword', RoleId: 'Administrator' },
      });
      assert.equal(byOps.status, 403);
    }));

  it('changes password, role and enabled by PATCH; a changed password ends sessions; DELETE removes the login', () =>
    withBmc({}, async ({ call, uri }) => {
      const created = await call('POST', ACCOUNTS, {
        body: { UserName: 'svc', Password: 'first-pass', RoleId: 'ReadOnly' },
      });
      const acct = String(created.headers['location']);
      assert.equal((await call('GET', uri, { user: 'svc', password: 'first-pass' })).status, 200);
      const reset = await call('POST', `${uri}/Actions/ComputerSystem.Reset`, {
        user: 'svc',
        password: 'first-pass',
        body: { ResetType: 'On' },
      });
      assert.equal(reset.status, 403, 'ReadOnly may not reset');
      const login = await call('POST', '/redfish/v1/SessionService/Sessions', {
        body: { UserName: 'svc', Password: 'first-pass' },
      });
      assert.equal(login.status, 201);
      const token = String(login.headers['x-auth-token']);
      assert.equal((await call('GET', uri, { token })).status, 200);

      const tooShort = await call('PATCH', acct, { body: { Password: 'short', RoleId: 'Operator' } });
      assert.equal(tooShort.status, 400);
      assert.equal((await call('GET', acct)).body['RoleId'], 'ReadOnly', 'a refused PATCH changes nothing');

      const patched = await call('PATCH', acct, { body: { Password: 'second-pass', RoleId: 'Operator' } });
      assert.equal(patched.status, 200);
      assert.equal(patched.body['RoleId'], 'Operator');
      assert.equal((await call('GET', uri, { user: 'svc', password: 'first-pass' })).status, 401);
      assert.equal((await call('GET', uri, { user: 'svc', password: 'second-pass' })).status, 200);
      assert.equal((await call('GET', uri, { token })).status, 401, 'the password change ended the session');
      // An account may change its own password, but nothing else about itself.
      const own = await call('PATCH', acct, {
        user: 'svc',
        password: 'second-pass',
        body: { Password: 'third-pass' },
      });
      assert.equal(own.status, 200);
      const ownRole = await call('PATCH', acct, {
        user: 'svc',
        password: 'third-pass',
        body: { RoleId: 'Administrator' },
      });
      assert.equal(ownRole.status, 403);

      assert.equal((await call('PATCH', acct, { body: { Enabled: false } })).status, 200);
      assert.equal((await call('GET', uri, { user: 'svc', password: 'third-pass' })).status, 401);
      assert.equal((await call('PATCH', acct, { body: { Enabled: true } })).status, 200);
      assert.equal((await call('GET', uri, { user: 'svc', password: 'third-pass' })).status, 200);
      assert.equal((await call('PATCH', acct, { body: { Id: '9' } })).status, 400);

      assert.equal((await call('DELETE', acct)).status, 204);
      assert.equal((await call('GET', acct)).status, 404);
      assert.equal((await call('GET', uri, { user: 'svc', password: 'third-pass' })).status, 401);
      assert.equal((await call('DELETE', `${ACCOUNTS}/1`)).status, 400, 'the admin cannot delete itself');
    }));

  it('locks an account at AccountLockoutThreshold wrong passwords, refuses even the right one, unlocks after the duration', () =>
    withBmc(
      { lockoutThreshold: 3, lockoutDurationSeconds: 1, lockoutCounterResetAfterSeconds: 60 },
      async ({ call, vbmc, uri }) => {
        await call('POST', ACCOUNTS, {
          body: { UserName: 'u1', Password: 'right-pass', RoleId: 'Operator' },
        });
        const as = (password: string) => call('GET', uri, { user: 'u1', password });
        assert.equal((await as('wrong-pass')).status, 401);
        assert.equal((await as('wrong-pass')).status, 401);
        assert.equal(vbmc.accounts.account('u1')?.failures, 2);
        assert.equal((await as('right-pass')).status, 200);
        assert.equal(vbmc.accounts.account('u1')?.failures, 0, 'a success starts the count again');
        // A wrong login through the SessionService counts too.
        const badLogin = await call('POST', '/redfish/v1/SessionService/Sessions', {
          body: { UserName: 'u1', Password: 'wrong-pass' },
        });
        assert.equal(badLogin.status, 401);
        assert.equal((await as('wrong-pass')).status, 401);
        assert.equal(vbmc.accounts.account('u1')?.locked, false);
        assert.equal((await as('wrong-pass')).status, 401);
        assert.equal(vbmc.accounts.account('u1')?.locked, true);
        assert.equal((await as('right-pass')).status, 401, 'locked: the right password is refused too');
        const doc = await call('GET', `${ACCOUNTS}/2`);
        assert.equal(doc.body['Locked'], true);
        await until(async () => (await as('right-pass')).status === 200);
        assert.equal(vbmc.accounts.account('u1')?.locked, false);

        // An administrator unlocks at once.
        for (let i = 0; i < 3; i++) await as('wrong-pass');
        assert.equal(vbmc.accounts.account('u1')?.locked, true);
        assert.equal((await call('PATCH', `${ACCOUNTS}/2`, { body: { Locked: false } })).status, 200);
        assert.equal((await as('right-pass')).status, 200);
        assert.equal((await call('PATCH', `${ACCOUNTS}/2`, { body: { Locked: true } })).status, 400);
        // The policy is writable by an administrator and validated.
        assert.equal(
          (await call('PATCH', '/redfish/v1/AccountService', { body: { MinPasswordLength: 40 } })).status,
          400,
        );
        assert.equal(
          (await call('PATCH', '/redfish/v1/AccountService', { body: { AccountLockoutThreshold: 0 } }))
            .status,
          204,
        );
        for (let i = 0; i < 4; i++) await as('wrong-pass');
        assert.equal(vbmc.accounts.account('u1')?.locked, false, 'threshold 0 never locks');
      },
    ));

  it('an expired password (PasswordChangeRequired) allows only reading and changing the own account', () =>
    withBmc({}, async ({ call, vbmc, uri }) => {
      await call('POST', ACCOUNTS, {
        body: { UserName: 'u2', Password: 'old-password', RoleId: 'Operator' },
      });
      vbmc.accounts.expirePassword('u2');
      assert.equal((await call('GET', `${ACCOUNTS}/2`)).body['PasswordChangeRequired'], true);
      const denied = await call('GET', uri, { user: 'u2', password: 'old-password' });
      assert.equal(denied.status, 403);
      assert.equal(messageId(denied), 'Base.1.18.PasswordChangeRequired');
      assert.equal(
        (await call('GET', `${ACCOUNTS}/2`, { user: 'u2', password: 'old-password' })).status,
        200,
      );
      // An administrator's PATCH of the password clears it, as the user's own would.
      assert.equal(
        (await call('PATCH', `${ACCOUNTS}/2`, { body: { Password: 'new-password' } })).status,
        200,
      );
      assert.equal((await call('GET', `${ACCOUNTS}/2`)).body['PasswordChangeRequired'], false);
      assert.equal((await call('GET', uri, { user: 'u2', password: 'new-password' })).status, 200);
    }));
});
