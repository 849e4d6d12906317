/**
 * Local BMC accounts over Redfish: the `AccountService` policy and its `Accounts` collection
 * (DMTF AccountService.v1_15_0, ManagerAccount.v1_12_0, ManagerAccountCollection). Used by the
 * BMCUser controller through the optional account methods of {@link BMC} (`bmc.ts`).
 *
 * Contract: every function is one short exchange within the caller's budget. Reads tolerate what
 * vendors leave out (a policy property missing is `undefined`, never an error); a member of the
 * collection that cannot be read as an account is skipped. Creating an account is a POST and is not
 * repeated when its outcome is unknown (`RedfishTransportError` with `maybeApplied`): the caller
 * looks the account up by name before creating again. Passwords are sent, never logged or returned.
 */
import type { AccountServiceInfo, AccountWrite, ManagerAccountInfo, NewAccount } from './bmc.js';
import { RedfishHttpError } from './errors.js';
import { asObject, parseCollection, RedfishParseError } from './parse.js';
import type { RedfishClient } from './redfish-client.js';
import type { Budget } from './retry.js';

/** `ServiceRoot.AccountService` is at this fixed URI (Redfish spec "Resource URI patterns"). */
export const ACCOUNT_SERVICE_URI = '/redfish/v1/AccountService';

/** Most account members read in one listing (BMCs have 16-ish slots): a bound on requests. */
export const MAX_ACCOUNTS_READ = 64;

type Json = Record<string, unknown>;

const optInt = (obj: Json, key: string): number | undefined => {
  const v = obj[key];
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined;
};
const optBool = (obj: Json, key: string): boolean | undefined => {
  const v = obj[key];
  return typeof v === 'boolean' ? v : undefined;
};
const optStr = (obj: Json, key: string): string | undefined => {
  const v = obj[key];
  return typeof v === 'string' && v !== '' ? v : undefined;
};

/** Parses the AccountService resource; `Accounts` defaults to `{uri}/Accounts` when not linked. */
export function parseAccountService(body: unknown, uri: string): AccountServiceInfo {
  const obj = asObject(body, uri);
  const link = obj['Accounts'] as Json | undefined;
  const accountsUri = typeof link?.['@odata.id'] === 'string' ? link['@odata.id'] : `${uri}/Accounts`;
  const info: AccountServiceInfo = { accountsUri };
  const set = <K extends keyof AccountServiceInfo>(k: K, v: AccountServiceInfo[K] | undefined) => {
    if (v !== undefined) info[k] = v;
  };

  set('minPasswordLength', optInt(obj, 'MinPasswordLength'));
  set('maxPasswordLength', optInt(obj, 'MaxPasswordLength'));
  set('lockoutThreshold', optInt(obj, 'AccountLockoutThreshold'));
  set('lockoutDurationSeconds', optInt(obj, 'AccountLockoutDuration'));
  set('lockoutCounterResetAfterSeconds', optInt(obj, 'AccountLockoutCounterResetAfter'));
  return info;
}

/** Parses a ManagerAccount. Throws `RedfishParseError` without a `UserName` (an empty slot on iDRAC). */
export function parseManagerAccount(body: unknown, uri: string, etag?: string): ManagerAccountInfo {
  const obj = asObject(body, uri);
  const userName = optStr(obj, 'UserName');
  if (userName === undefined) throw new RedfishParseError(uri, 'UserName', 'missing');
  const self = optStr(obj, '@odata.id') ?? uri;
  const info: ManagerAccountInfo = { id: optStr(obj, 'Id') ?? self.split('/').pop()!, uri: self, userName };
  const roleId = optStr(obj, 'RoleId');
  if (roleId !== undefined) info.roleId = roleId;
  const enabled = optBool(obj, 'Enabled');
  if (enabled !== undefined) info.enabled = enabled;
  const locked = optBool(obj, 'Locked');
  if (locked !== undefined) info.locked = locked;
  const pcr = optBool(obj, 'PasswordChangeRequired');
  if (pcr !== undefined) info.passwordChangeRequired = pcr;
  const exp = optStr(obj, 'PasswordExpiration');
  if (exp !== undefined && !Number.isNaN(Date.parse(exp))) info.passwordExpiration = exp;
  const tag = etag ?? optStr(obj, '@odata.etag');
  if (tag !== undefined) info.etag = tag;
  return info;
}

export async function getAccountService(client: RedfishClient, budget: Budget): Promise<AccountServiceInfo> {
  const res = await client.get(ACCOUNT_SERVICE_URI, { budget });
  return parseAccountService(res.body, ACCOUNT_SERVICE_URI);
}

/** Every account with a user name (empty slots skipped), at most {@link MAX_ACCOUNTS_READ}. */
export async function listAccounts(client: RedfishClient, budget: Budget): Promise<ManagerAccountInfo[]> {
  const svc = await getAccountService(client, budget);
  const members = parseCollection((await client.get(svc.accountsUri, { budget })).body, svc.accountsUri);
  const out: ManagerAccountInfo[] = [];
  for (const m of members.slice(0, MAX_ACCOUNTS_READ)) {
    try {
      out.push(await getAccount(client, m.uri, budget));
    } catch (err) {
      if (err instanceof RedfishParseError) continue;
      throw err;
    }
  }
  return out;
}

export async function getAccount(
  client: RedfishClient,
  uri: string,
  budget: Budget,
): Promise<ManagerAccountInfo> {
  const res = await client.get(uri, { budget });
  return parseManagerAccount(res.body, uri, res.etag);
}

/**
 * POSTs a new account (201; `Location` or the body names it). Not retried when it may have been
 * applied. Errors: `RedfishHttpError` 400 (policy, role), 409 (the name exists).
 */
export async function createAccount(
  client: RedfishClient,
  account: NewAccount,
  budget: Budget,
): Promise<ManagerAccountInfo> {
  const svc = await getAccountService(client, budget);
  const res = await client.post(
    svc.accountsUri,
    {
      UserName: account.userName,
      Password: account.password,
      RoleId: account.roleId,
      Enabled: account.enabled,
    },
    { budget, idempotent: false },
  );
  if (res.body !== undefined) {
    try {
      return parseManagerAccount(res.body, res.location ?? svc.accountsUri, res.etag);
    } catch (err) {
      if (!(err instanceof RedfishParseError)) throw err;
    }
  }
  if (res.location === undefined) throw new RedfishParseError(svc.accountsUri, 'Location', 'missing');
  return getAccount(client, res.location, budget);
}

/** PATCHes the given properties (setting a password again is harmless: PATCH is retried). */
export async function updateAccount(
  client: RedfishClient,
  uri: string,
  write: AccountWrite,
  budget: Budget,
): Promise<void> {
  const body: Json = {};
  if (write.password !== undefined) body['Password'] = write.password;

  if (write.roleId !== undefined) body['RoleId'] = write.roleId;
  if (write.enabled !== undefined) body['Enabled'] = write.enabled;
  if (write.locked === false) body['Locked'] = false;
  if (Object.keys(body).length === 0) return;
  await client.patch(uri, body, { budget });
}

/** DELETEs the account; one already gone (404) counts as deleted. */
export async function deleteAccount(client: RedfishClient, uri: string, budget: Budget): Promise<void> {
  try {
    await client.delete(uri, { budget });
  } catch (err) {
    if (err instanceof RedfishHttpError && err.status === 404) return;
    throw err;
  }
}
