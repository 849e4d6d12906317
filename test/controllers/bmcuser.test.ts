/**
 * The BMCUser controller (src/controllers/bmcuser/bmcuser.ts) against the real API server and the virtual
 * BMC's AccountService with lockout on (AccountLockoutThreshold 3): the account is created and its
 * generated password lands in the owned BMCSecret; rotate-credentials rotates once (new password
 * works, old refused, annotation gone); an expired password (PasswordChangeRequired) is rotated; a
 * pending password the BMC never got costs exactly one refused try; and a manager SIGKILLed between
 * the BMC write and the Secret write recovers on its next start without approaching the lockout.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import type { BMCSecret } from '../../src/api/v1alpha1/bmcsecret.js';
import type { BMCUser } from '../../src/api/v1alpha1/bmcuser.js';
import {
  CRASH_AFTER_BMC_WRITE_ENV,
  PENDING_PASSWORD_KEY,
  PENDING_TRIED_KEY,
} from '../../src/controllers/bmcuser/bmcuser.js';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import { API, b64, cond, eventually, type Stack, withStack } from './fixture.js';

after(releaseSharedCluster);

const MANAGER = fileURLToPath(new URL('../../src/cmd/manager.js', import.meta.url));
const THRESHOLD = 3;
const unb64 = (s: string | undefined) =>
  s === undefined ? undefined : Buffer.from(s, 'base64').toString('utf8');

async function createUser(s: Stack, name: string, userName: string): Promise<void> {
  await s.client.create<BMCUser>(Resources.BMCUser, {
    apiVersion: API,
    kind: 'BMCUser',
    metadata: { name, labels: s.labels },
    spec: { userName, roleID: 'Operator', bmcRef: { name: s.bmcName } },
  });
}

const getUser = (s: Stack, name: string) => s.client.get<BMCUser>(Resources.BMCUser, name);
const getSecret = (s: Stack, name: string) => s.client.get<BMCSecret>(Resources.BMCSecret, `bmcuser-${name}`);
const secretPassword = async (s: Stack, name: string) =>
  unb64((await getSecret(s, name))?.data?.['password']);

/** One GET of the account's own resource with `password` (basic auth): the HTTP status. */
async function tryPassword(s: Stack, userName: string, password: string): Promise<number> {
  const id = s.vbmc.accounts.account(userName)?.id;
  const res = await request(`${s.vbmc.url}/redfish/v1/AccountService/Accounts/${id}`, {
    headers: { authorization: `Basic ${Buffer.from(`${userName}:${password}`).toString('base64')}` },
  });
  await res.body.dump();
  return res.statusCode;
}

async function cleanupUser(s: Stack, name: string): Promise<void> {
  await s.client
    .mergePatch(Resources.BMCUser, name, undefined, { metadata: { finalizers: null } })
    .catch(() => undefined);
  await s.client.delete(Resources.BMCUser, name).catch(() => undefined);
  await s.client.delete(Resources.BMCSecret, `bmcuser-${name}`).catch(() => undefined);
}

test('BMCUser: account created with a generated password; rotate-credentials, expiry and a lost BMC write', {
  timeout: 180_000,
}, async () => {
  await withStack(
    'bmcuser',
    {
      hosts: 0,
      accounts: {
        minPasswordLength: 20,
        maxPasswordLength: 24,
        lockoutThreshold: THRESHOLD,
        lockoutDurationSeconds: 300,
      },
    },
    async (s) => {
      const name = `u-${s.ns}`.slice(0, 60);
      try {
        await createUser(s, name, 'metal');
        const first = await eventually('account created and the Secret promoted', 30_000, async () => {
          const u = await getUser(s, name);
          const pw = await secretPassword(s, name);
          return cond(u, 'Ready')?.status === 'True' && s.vbmc.accounts.account('metal') && pw
            ? { u, pw }
            : undefined;
        });
        assert.equal(
          first.pw.length,
          20,
          'the generated password is within the BMC policy (PREFERRED 16 clamped to min 20)',
        );
        assert.equal(s.vbmc.accounts.account('metal')?.roleId, 'Operator');
        assert.equal(first.u?.spec.bmcSecretRef?.name, `bmcuser-${name}`);
        assert.equal(first.u?.status?.effectiveBMCSecretRef?.name, `bmcuser-${name}`);
        assert.equal(first.u?.status?.id, s.vbmc.accounts.account('metal')?.id);
        assert.ok(first.u?.status?.lastRotation);
        assert.equal(await tryPassword(s, 'metal', first.pw), 200);
        assert.equal(s.vbmc.accounts.account('metal')?.totalFailures, 0);

        // rotate-credentials: rotated once, annotation consumed.
        await s.client.mergePatch(Resources.BMCUser, name, undefined, {
          metadata: { annotations: { 'metal.ironcore.dev/operation': 'rotate-credentials' } },
        });
        const second = await eventually('rotation done and the annotation removed', 30_000, async () => {
          const u = await getUser(s, name);
          const pw = await secretPassword(s, name);
          return pw && pw !== first.pw && !u?.metadata.annotations?.['metal.ironcore.dev/operation']
            ? pw
            : undefined;
        });
        assert.equal(await tryPassword(s, 'metal', second), 200, 'the new password works');
        assert.equal(await tryPassword(s, 'metal', first.pw), 401, 'the old one is refused');
        assert.equal(
          s.vbmc.accounts.account('metal')?.totalFailures,
          1,
          'only the test tried a wrong password',
        );
        assert.equal(await secretPassword(s, name), second, 'consumed once: no second rotation');

        // The BMC reports the password expired: rotated on the next reconcile.
        s.vbmc.accounts.expirePassword('metal');
        await s.client.mergePatch(Resources.BMCUser, name, undefined, {
          metadata: { labels: { poke: '1' } },
        });
        const third = await eventually('expired password rotated', 30_000, async () => {
          const pw = await secretPassword(s, name);
          return pw && pw !== second ? pw : undefined;
        });
        assert.equal(s.vbmc.accounts.account('metal')?.passwordChangeRequired, false);
        assert.equal(await tryPassword(s, 'metal', third), 200);

        // A pending password the BMC never received (the manager stopped before the BMC write): tried
        // once as the user (refused: one failure), then set by the administrator and promoted.
        const failuresBefore = s.vbmc.accounts.account('metal')!.totalFailures;
        await s.client.mergePatch(Resources.BMCSecret, `bmcuser-${name}`, undefined, {
          data: { [PENDING_PASSWORD_KEY]: b64('never-sent-to-the-bmc-1') },
        });
        await s.client.mergePatch(Resources.BMCUser, name, undefined, {
          metadata: { labels: { poke: '2' } },
        });
        await eventually(
          'pending password promoted',
          30_000,
          async () =>
            (await secretPassword(s, name)) === 'never-sent-to-the-bmc-1' &&
            (await getSecret(s, name))?.data?.[PENDING_PASSWORD_KEY] === undefined,
        );
        assert.equal(await tryPassword(s, 'metal', 'never-sent-to-the-bmc-1'), 200);
        assert.equal(
          s.vbmc.accounts.account('metal')!.totalFailures - failuresBefore,
          1,
          'exactly one wrong try',
        );
        assert.equal(s.vbmc.accounts.account('metal')?.locked, false);

        // A pending password already tried once (the manager stopped after writing pending-tried): not
        // tried again as the user, set by the administrator straight away.
        const failuresBeforeTried = s.vbmc.accounts.account('metal')!.totalFailures;
        await s.client.mergePatch(Resources.BMCSecret, `bmcuser-${name}`, undefined, {
          data: { [PENDING_PASSWORD_KEY]: b64('tried-once-already-22'), [PENDING_TRIED_KEY]: b64('1') },
        });
        await s.client.mergePatch(Resources.BMCUser, name, undefined, {
          metadata: { labels: { poke: '3' } },
        });
        await eventually(
          'tried pending password promoted',
          30_000,
          async () =>
            (await secretPassword(s, name)) === 'tried-once-already-22' &&
            (await getSecret(s, name))?.data?.[PENDING_TRIED_KEY] === undefined,
        );
        assert.equal(await tryPassword(s, 'metal', 'tried-once-already-22'), 200);
        assert.equal(
          s.vbmc.accounts.account('metal')!.totalFailures,
          failuresBeforeTried,
          'never tried twice',
        );

        // A password the BMC's policy refuses is visible on the BMCUser, and nothing is left pending.
        await s.client.mergePatch(Resources.BMCUser, name, undefined, { spec: { roleID: 'NoSuchRole' } });
        const refused = await eventually('refusal on the BMCUser', 30_000, async () => {
          const c = cond(await getUser(s, name), 'Ready');
          return c?.status === 'False' ? c : undefined;
        });
        assert.equal(refused.reason, 'BMCRejected');
        assert.match(refused.message, /PropertyValueNotInList/);

        // Deleting the BMCUser deletes the account.
        await s.client.delete(Resources.BMCUser, name);
        await eventually('BMCUser gone', 30_000, async () => (await getUser(s, name)) === undefined);
        assert.equal(s.vbmc.accounts.account('metal'), undefined);
      } finally {
        await cleanupUser(s, name);
      }
    },
  );
});

async function spawnManager(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ child: ChildProcess; output: () => string }> {
  const child = spawn(process.execPath, [MANAGER, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOG_LEVEL: 'info', ...env },
  });
  let out = '';
  const keep = (c: Buffer) => {
    out = (out + c.toString()).slice(-200_000);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  await eventually('manager child running', 30_000, () => {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`manager exited (${child.exitCode ?? child.signalCode}): ${out.slice(-2000)}`);
    return out.includes('"manager running"');
  });
  return { child, output: () => out };
}

async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((ok) => child.once('exit', ok));
  child.kill('SIGKILL');
  await exited;
}

test('BMCUser: manager SIGKILLed between the BMC write and the Secret write recovers on restart, far from lockout', {
  timeout: 240_000,
}, async () => {
  await withStack(
    'bmcuser-crash',
    {
      hosts: 0,
      noManager: true,
      bootServerUrl: 'http://127.0.0.1:9',
      accounts: { lockoutThreshold: THRESHOLD, lockoutDurationSeconds: 300 },
    },
    async (s) => {
      const name = `c-${s.ns}`.slice(0, 60);
      const children: ChildProcess[] = [];
      try {
        const a = await spawnManager(s.managerArgs);
        children.push(a.child);
        await createUser(s, name, 'crashy');
        const first = await eventually('account ready', 60_000, async () => {
          const pw = await secretPassword(s, name);
          return cond(await getUser(s, name), 'Ready')?.status === 'True' && pw ? pw : undefined;
        });
        await kill(a.child);

        // The crash seam: this manager kills itself right after the BMC accepted the new password.
        const b = await spawnManager(s.managerArgs, { [CRASH_AFTER_BMC_WRITE_ENV]: '1' });
        children.push(b.child);
        const died = new Promise<void>((ok) => b.child.once('exit', () => ok()));
        await s.client.mergePatch(Resources.BMCUser, name, undefined, {
          metadata: { annotations: { 'metal.ironcore.dev/operation': 'rotate-credentials' } },
        });
        await died;
        assert.equal(b.child.signalCode, 'SIGKILL');
        const secret = await getSecret(s, name);
        const pending = unb64(secret?.data?.[PENDING_PASSWORD_KEY]);
        assert.ok(pending && pending !== first, 'the new password is pending in the Secret');
        assert.equal(unb64(secret?.data?.['password']), first, 'not yet promoted');
        assert.equal(
          (await getUser(s, name))?.metadata.annotations?.['metal.ironcore.dev/operation'],
          'rotate-credentials',
          'the annotation is still there: the rotation is not done',
        );
        // The BMC already has the new password.
        assert.equal(await tryPassword(s, 'crashy', pending!), 200);
        const failuresBefore = s.vbmc.accounts.account('crashy')!.totalFailures;

        const c = await spawnManager(s.managerArgs);
        children.push(c.child);
        await eventually('pending promoted after the restart', 60_000, async () => {
          const sec = await getSecret(s, name);
          const u = await getUser(s, name);
          return (
            unb64(sec?.data?.['password']) === pending &&
            sec?.data?.[PENDING_PASSWORD_KEY] === undefined &&
            u?.metadata.annotations?.['metal.ironcore.dev/operation'] === undefined
          );
        });
        assert.equal(await tryPassword(s, 'crashy', pending!), 200);
        assert.equal(
          await secretPassword(s, name),
          pending,
          'the annotation was consumed once: no second rotation',
        );
        const acct = s.vbmc.accounts.account('crashy')!;
        assert.equal(acct.totalFailures - failuresBefore, 0, 'the recovery tried no wrong password');
        assert.ok(acct.totalFailures < THRESHOLD - 1);
        assert.equal(acct.locked, false);
        // The log line is written after the promotion the test just saw: wait for it, do not race it.
        await eventually('recovery logged', 10_000, () =>
          /pending BMCUser password recovered/.test(c.output()),
        );
      } finally {
        for (const ch of children) await kill(ch);
        await cleanupUser(s, name);
      }
    },
  );
});
