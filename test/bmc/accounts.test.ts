/**
 * The BMC layer's account methods (src/bmc/accounts.ts through RedfishBMC) against the virtual BMC's
 * AccountService: the policy read, create / list / PATCH / DELETE, the BMC's refusals surfacing as
 * RedfishHttpError with nothing created, and a wrong password costing exactly one counted failure
 * (401 is never retried, with session or basic authentication), which is what keeps a caller
 * below AccountLockoutThreshold. Plus the parsers over the captured DMTF and HPE documents.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { parseAccountService, parseManagerAccount } from '../../src/bmc/accounts.js';
import { RedfishAuthError, RedfishHttpError } from '../../src/bmc/errors.js';
import { RedfishBMC } from '../../src/bmc/redfish-bmc.js';
import { mockupsDir } from '../../src/testing/mockups.js';
import { startVirtualBmc, type VirtualBmc } from '../../src/virtualbmc/server.js';
import { SimHost } from '../../src/virtualbmc/sim.js';
import { simIdentity } from '../../src/virtualbmc/sim-fleet.js';

let vbmc: VirtualBmc;
let admin: RedfishBMC;
const clients: RedfishBMC[] = [];
const as = (username: string, password: string, auth: 'session' | 'basic' = 'session') => {
  const c = new RedfishBMC({
    endpoint: vbmc.url,
    username,
    password,
    auth,
    requestTimeoutMs: 2_000,
    budgetMs: 4_000,
  });
  clients.push(c);
  return c;
};

before(async () => {
  vbmc = await startVirtualBmc({
    hosts: [
      new SimHost({
        identity: simIdentity(0, 'bmc-accounts'),
        bootServerUrl: 'http://127.0.0.1:9',
        timing: { shutdownMs: 10 },
      }),
    ],
    username: 'admin',
    password: 'admin-password',
    accounts: {
      minPasswordLength: 12,
      maxPasswordLength: 24,
      lockoutThreshold: 3,
      lockoutDurationSeconds: 60,
    },
  });
  admin = as('admin', 'admin-password');
});
after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await vbmc.close();
});

describe('BMC account methods', () => {
  it('reads the AccountService policy', async () => {
    const svc = await admin.getAccountService();
    assert.deepEqual(svc, {
      accountsUri: '/redfish/v1/AccountService/Accounts',
      minPasswordLength: 12,
      maxPasswordLength: 24,
      lockoutThreshold: 3,
      lockoutDurationSeconds: 60,
      lockoutCounterResetAfterSeconds: 30,
    });
  });

  it('creates, lists, changes and deletes an account; refusals change nothing', async () => {
    await assert.rejects(
      admin.createAccount({ userName: 'metal', password: 'short', roleId: 'Operator', enabled: true }),
      (err) => err instanceof RedfishHttpError && err.status === 400,
    );
    assert.equal(
      (await admin.listAccounts()).some((a) => a.userName === 'metal'),
      false,
    );
    const created = await admin.createAccount({
      userName: 'metal',
      password: 'first-password',
      roleId: 'Operator',
      enabled: true,
    });
    assert.equal(created.userName, 'metal');
    assert.equal(created.roleId, 'Operator');
    assert.equal(created.enabled, true);
    assert.equal(created.passwordChangeRequired, false);
    assert.match(created.uri, /^\/redfish\/v1\/AccountService\/Accounts\/\d+$/);
    const listed = await admin.listAccounts();
    assert.deepEqual(
      listed.map((a) => a.userName),
      ['admin', 'metal'],
    );
    await assert.rejects(
      admin.createAccount({
        userName: 'metal',
        password: 'first-password',
        roleId: 'Operator',
        enabled: true,
      }),
      (err) => err instanceof RedfishHttpError && err.status === 409,
    );
    // The account itself can read its own resource with its password.
    assert.equal((await as('metal', 'first-password').getAccount(created.uri)).userName, 'metal');

    await admin.updateAccount(created.uri, {
      password: 'second-password',
      roleId: 'ReadOnly',
      enabled: true,
    });
    assert.equal((await admin.getAccount(created.uri)).roleId, 'ReadOnly');
    await assert.rejects(as('metal', 'first-password').getAccount(created.uri), RedfishAuthError);
    assert.equal((await as('metal', 'second-password', 'basic').getAccount(created.uri)).roleId, 'ReadOnly');
    await assert.rejects(
      admin.updateAccount(created.uri, { password: 'x'.repeat(25) }),
      (err) => err instanceof RedfishHttpError && err.status === 400,
    );
    assert.equal((await as('metal', 'second-password', 'basic').getAccount(created.uri)).userName, 'metal');

    await admin.deleteAccount(created.uri);
    await admin.deleteAccount(created.uri); // gone already: still done
    assert.equal((await admin.listAccounts()).length, 1);
  });

  it('a wrong password costs one counted failure per call, with session or basic authentication', async () => {
    const acct = await admin.createAccount({
      userName: 'probe',
      password: 'probe-password',
      roleId: 'ReadOnly',
      enabled: true,
    });
    await assert.rejects(as('probe', 'wrong-password', 'session').getAccount(acct.uri), RedfishAuthError);
    assert.equal(vbmc.accounts.account('probe')?.failures, 1);
    await assert.rejects(as('probe', 'wrong-password', 'basic').getAccount(acct.uri), RedfishAuthError);
    assert.equal(vbmc.accounts.account('probe')?.failures, 2);
    assert.equal(vbmc.accounts.account('probe')?.locked, false);
    await as('probe', 'probe-password', 'basic').getAccount(acct.uri);
    assert.equal(vbmc.accounts.account('probe')?.failures, 0);
    // Expired password: the BMC reports it to the administrator.
    vbmc.accounts.expirePassword('probe');
    assert.equal((await admin.getAccount(acct.uri)).passwordChangeRequired, true);
    await admin.deleteAccount(acct.uri);
  });

  it('parses the captured DMTF AccountService and an HPE ManagerAccount', () => {
    const dir = mockupsDir();
    const svc = parseAccountService(
      JSON.parse(readFileSync(`${dir}/dmtf-public-rackmount1/AccountService/index.json`, 'utf8')),
      '/redfish/v1/AccountService',
    );
    assert.equal(svc.minPasswordLength, 8);
    assert.equal(svc.maxPasswordLength, 30);
    assert.equal(svc.lockoutThreshold, 5);
    const hpe = parseManagerAccount(
      JSON.parse(
        readFileSync(`${dir}/libredfish-hpe/redfish/v1/AccountService/Accounts/2/index.json`, 'utf8'),
      ),
      '/redfish/v1/AccountService/Accounts/2',
    );
    assert.deepEqual(
      {
        id: hpe.id,
        userName: hpe.userName,
        roleId: hpe.roleId,
        pcr: hpe.passwordChangeRequired,
        etag: hpe.etag,
      },
      { id: '2', userName: 'tests_admin', roleId: 'Administrator', pcr: false, etag: 'W/"D308CD8F"' },
    );
  });
});
