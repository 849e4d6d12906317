/**
 * The virtual BMC's local accounts: Redfish `AccountService` (DMTF AccountService.v1_15_0),
 * `Accounts` (ManagerAccountCollection, ManagerAccount.v1_12_0) and the three predefined `Roles`
 * (Role.v1_3_1; Redfish spec "Privilege model": Administrator, Operator, ReadOnly).
 *
 * Contract:
 * - Every request to the service authenticates through {@link AccountService.authenticate}; a wrong
 *   password of an existing account counts towards `AccountLockoutThreshold`. At the threshold the
 *   account is `Locked` for `AccountLockoutDuration` seconds (0: until an administrator PATCHes
 *   `Locked: false`), during which even the right password is refused. The counter starts again after
 *   `AccountLockoutCounterResetAfter` seconds without a failure, and at every success. A threshold of
 *   0 never locks (DMTF AccountService.v1_15_0 `AccountLockoutThreshold`).
 * - Passwords are checked against `MinPasswordLength`/`MaxPasswordLength` on create and PATCH (400
 *   `PropertyValueFormatError`, nothing changed); they are stored salted and hashed, never returned
 *   (`Password` reads `null`, as the schema requires).
 * - An account with `PasswordChangeRequired` (an expired password) may only read and PATCH its own
 *   resource (Redfish spec "Password change required handling"; others: 403 `PasswordChangeRequired`);
 *   setting a password clears it.
 * - Writes to the service need the Administrator role, except an account PATCHing its own `Password`.
 *
 * Defaults follow the DMTF public-rackmount1 mockup (8..30 characters, lockout duration and counter
 * reset 30 s) except the threshold: 0 here, so that tests which send wrong credentials on purpose do
 * not lock their stack's admin account; the tests of lockout set it.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { collection } from './resources.js';

type Json = Record<string, unknown>;

export const ACCOUNT_SERVICE_URI = '/redfish/v1/AccountService';
export const ACCOUNTS_URI = `${ACCOUNT_SERVICE_URI}/Accounts`;
export const ROLES_URI = `${ACCOUNT_SERVICE_URI}/Roles`;

/** The predefined roles (Redfish spec "Privilege model"). */
export const ROLE_IDS = ['Administrator', 'Operator', 'ReadOnly'] as const;
const ROLE_PRIVILEGES: Record<string, string[]> = {
  Administrator: ['Login', 'ConfigureManager', 'ConfigureUsers', 'ConfigureSelf', 'ConfigureComponents'],
  Operator: ['Login', 'ConfigureSelf', 'ConfigureComponents'],
  ReadOnly: ['Login', 'ConfigureSelf'],
};

/** Most local accounts (iDRAC and iLO have 16 user slots). */
export const MAX_ACCOUNTS = 16;
const USER_NAME = /^[A-Za-z0-9._-]{1,16}$/;

/** The AccountService's policy; times in seconds. */
export interface AccountPolicy {
  minPasswordLength: number;
  maxPasswordLength: number;
  /** Failed logins that lock an account; 0 never locks. */
  lockoutThreshold: number;
  /** How long a locked account stays locked, s; 0: until an administrator unlocks it. */
  lockoutDurationSeconds: number;
  /** Seconds without a failure after which the failure counter starts again. */
  lockoutCounterResetAfterSeconds: number;
}

export const DEFAULT_ACCOUNT_POLICY: Readonly<AccountPolicy> = {
  minPasswordLength: 8,
  maxPasswordLength: 30,
  lockoutThreshold: 0,
  lockoutDurationSeconds: 30,
  lockoutCounterResetAfterSeconds: 30,
};

/** An account as tests may inspect it (no password). */
export interface AccountView {
  id: string;
  userName: string;
  roleId: string;
  enabled: boolean;
  locked: boolean;
  /** Failed logins counted since the last success or counter reset. */
  failures: number;
  /** Failed logins ever, including those refused while locked. */
  totalFailures: number;
  passwordChangeRequired: boolean;
}

interface Account extends AccountView {
  salt: Buffer;
  digest: Buffer;
  description: string;
  lockedUntil: number | undefined;
  lastFailureAt: number;
  version: number;
}

/** A refusal of a request: the server turns it into a Redfish error body. */
export class AccountRefusal extends Error {
  constructor(
    readonly status: number,
    readonly messageId: string,
    message: string,
  ) {
    super(message);
  }
}

const refuse = (status: number, messageId: string, message: string): never => {
  throw new AccountRefusal(status, messageId, message);
};

export type AuthOutcome =
  | { ok: true; account: Readonly<AccountView> }
  | { ok: false; why: 'unknown' | 'wrong' | 'locked' | 'disabled' };

export interface AccountReply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

const CREATE_PROPERTIES = ['UserName', 'Password', 'RoleId', 'Enabled', 'Description'];
const PATCH_PROPERTIES = ['UserName', 'Password', 'RoleId', 'Enabled', 'Locked', 'Description'];
const POLICY_PROPERTIES: Record<string, keyof AccountPolicy> = {
  MinPasswordLength: 'minPasswordLength',
  MaxPasswordLength: 'maxPasswordLength',
  AccountLockoutThreshold: 'lockoutThreshold',
  AccountLockoutDuration: 'lockoutDurationSeconds',
  AccountLockoutCounterResetAfter: 'lockoutCounterResetAfterSeconds',
};

export class AccountService {
  private readonly accounts = new Map<string, Account>(); // id → account
  private nextId = 1;
  readonly policy: AccountPolicy;

  constructor(
    admin: { userName: string; password: string },
    policy: Partial<AccountPolicy> = {},
    private readonly now: () => number = Date.now,
    /** Called when an account's password changes or it is deleted/disabled: its sessions end. */
    private readonly onCredentialsChanged: (userName: string) => void = () => undefined,
  ) {
    this.policy = { ...DEFAULT_ACCOUNT_POLICY, ...policy };
    // The service's own admin account is not bound by the length policy (it is given, not chosen).
    this.add(admin.userName, admin.password, 'Administrator', true, 'Administrator account');
  }

  /** Checks a user name and password; counts a wrong password of an existing account. */
  authenticate(userName: string, password: string): AuthOutcome {
    const a = this.byName(userName);
    if (a === undefined) return { ok: false, why: 'unknown' };
    const now = this.now();
    if (a.locked && a.lockedUntil !== undefined && now >= a.lockedUntil) this.unlock(a);
    if (
      !a.locked &&
      a.failures > 0 &&
      now - a.lastFailureAt >= this.policy.lockoutCounterResetAfterSeconds * 1000
    )
      a.failures = 0;
    const right = timingSafeEqual(hash(a.salt, password), a.digest);
    if (a.locked) {
      if (!right) a.totalFailures++;
      return { ok: false, why: 'locked' };
    }
    if (!right) {
      a.failures++;
      a.totalFailures++;
      a.lastFailureAt = now;
      if (this.policy.lockoutThreshold > 0 && a.failures >= this.policy.lockoutThreshold) {
        a.locked = true;
        a.lockedUntil =
          this.policy.lockoutDurationSeconds > 0
            ? now + this.policy.lockoutDurationSeconds * 1000
            : undefined;
        a.version++;
      }
      return { ok: false, why: 'wrong' };
    }
    if (!a.enabled) return { ok: false, why: 'disabled' };
    a.failures = 0;
    return { ok: true, account: a };
  }

  /** The account named `userName` as it stands (tests). */
  account(userName: string): AccountView | undefined {
    const a = this.byName(userName);
    if (a === undefined) return undefined;
    const { id, roleId, enabled, locked, failures, totalFailures, passwordChangeRequired } = a;
    return {
      id,
      userName: a.userName,
      roleId,
      enabled,
      locked,
      failures,
      totalFailures,
      passwordChangeRequired,
    };
  }

  /** Marks the account's password expired (`PasswordChangeRequired`), as a BMC's password ageing does. */
  expirePassword(userName: string): void {
    const a = this.byName(userName) ?? refuse(404, 'ResourceMissingAtURI', `no account ${userName}`);
    a.passwordChangeRequired = true;
    a.version++;
  }

  /** Whether `caller` may do anything but read or PATCH its own account (an expired password may not). */
  restrictedTo(caller: AccountView): string | undefined {
    return caller.passwordChangeRequired ? `${ACCOUNTS_URI}/${caller.id}` : undefined;
  }

  /**
   * Handles `method` on `/redfish/v1/AccountService/{rest}` for an authenticated `caller`. Returns
   * 200/201/204 replies; throws {@link AccountRefusal} (400 bad body, 403 privilege, 404, 405, 409
   * duplicate UserName, 412 stale If-Match).
   */
  route(method: string, rest: string[], body: unknown, caller: AccountView, ifMatch?: string): AccountReply {
    const [coll, id, extra] = rest;
    if (coll === undefined) {
      allow(method, ['GET', 'PATCH']);
      if (method === 'PATCH') {
        this.requireAdmin(caller);
        this.patchPolicy(asObject(body));
        return { status: 204 };
      }
      return { status: 200, body: this.serviceDoc() };
    }
    if (coll === 'Roles' && extra === undefined) {
      allow(method, ['GET']);
      if (id === undefined)
        return {
          status: 200,
          body: collection(
            'RoleCollection',
            'Roles',
            ROLES_URI,
            ROLE_IDS.map((r) => `${ROLES_URI}/${r}`),
          ),
        };
      if (!(ROLE_IDS as readonly string[]).includes(id)) refuse(404, 'ResourceMissingAtURI', `no role ${id}`);
      return { status: 200, body: roleDoc(id) };
    }
    if (coll !== 'Accounts' || extra !== undefined)
      return refuse(404, 'ResourceMissingAtURI', `${ACCOUNT_SERVICE_URI}/${rest.join('/')} does not exist`);
    if (id === undefined) {
      allow(method, ['GET', 'POST']);
      if (method === 'GET')
        return {
          status: 200,
          body: collection(
            'ManagerAccountCollection',
            'Accounts',
            ACCOUNTS_URI,
            [...this.accounts.keys()].map((k) => `${ACCOUNTS_URI}/${k}`),
          ),
        };
      this.requireAdmin(caller);
      const a = this.create(asObject(body));
      return {
        status: 201,
        body: accountDoc(a),
        headers: { location: `${ACCOUNTS_URI}/${a.id}`, etag: etag(a) },
      };
    }
    const a = this.accounts.get(id) ?? refuse(404, 'ResourceMissingAtURI', `no account ${id}`);
    allow(method, ['GET', 'PATCH', 'DELETE']);
    const self = a.id === caller.id;
    if (method === 'GET') return { status: 200, body: accountDoc(a), headers: { etag: etag(a) } };
    if (ifMatch !== undefined && ifMatch !== '*' && !ifMatch.split(',').some((t) => t.trim() === etag(a)))
      refuse(412, 'PreconditionFailed', 'the account has changed since the ETag was read');
    if (method === 'DELETE') {
      this.requireAdmin(caller);
      if (self) refuse(400, 'ActionNotSupported', 'an account cannot delete itself');
      this.accounts.delete(a.id);
      this.onCredentialsChanged(a.userName);
      return { status: 204 };
    }
    const b = asObject(body);
    const onlyOwnPassword = self && Object.keys(b).every((k) => k === 'Password' || k.startsWith('@'));
    if (!onlyOwnPassword) this.requireAdmin(caller);
    this.patch(a, b);
    return { status: 200, body: accountDoc(a), headers: { etag: etag(a) } };
  }

  private requireAdmin(caller: AccountView): void {
    if (caller.roleId !== 'Administrator')
      refuse(403, 'InsufficientPrivilege', `role ${caller.roleId} may not configure users`);
  }

  private byName(userName: string): Account | undefined {
    for (const a of this.accounts.values()) if (a.userName === userName) return a;
    return undefined;
  }

  private add(
    userName: string,
    password: string,
    roleId: string,
    enabled: boolean,
    description: string,
  ): Account {
    const salt = randomBytes(16);
    const a: Account = {
      id: String(this.nextId++),
      userName,
      roleId,
      enabled,
      locked: false,
      failures: 0,
      totalFailures: 0,
      passwordChangeRequired: false,
      salt,
      digest: hash(salt, password),
      description,
      lockedUntil: undefined,
      lastFailureAt: 0,
      version: 1,
    };
    this.accounts.set(a.id, a);
    return a;
  }

  private unlock(a: Account): void {
    a.locked = false;
    a.lockedUntil = undefined;
    a.failures = 0;
    a.version++;
  }

  private create(b: Json): Account {
    for (const k of Object.keys(b))
      if (!CREATE_PROPERTIES.includes(k) && !k.startsWith('@'))
        refuse(400, 'PropertyUnknown', `property ${k} cannot be set on create`);
    for (const k of ['UserName', 'Password', 'RoleId'])
      if (b[k] === undefined) refuse(400, 'CreateFailedMissingReqProperties', `${k} is required`);
    const userName = this.checkUserName(b['UserName']);
    const password = this.checkPassword(b['Password']);
    const roleId = checkRole(b['RoleId']);
    if (b['Enabled'] !== undefined && typeof b['Enabled'] !== 'boolean')
      refuse(400, 'PropertyValueTypeError', 'Enabled must be a boolean');
    if (b['Description'] !== undefined && typeof b['Description'] !== 'string')
      refuse(400, 'PropertyValueTypeError', 'Description must be a string');
    if (this.byName(userName) !== undefined)
      refuse(409, 'ResourceAlreadyExists', `an account named ${userName} exists`);
    if (this.accounts.size >= MAX_ACCOUNTS)
      refuse(400, 'CreateLimitReachedForResource', `at most ${MAX_ACCOUNTS} accounts`);
    return this.add(
      userName,
      password,
      roleId,
      b['Enabled'] !== false,
      typeof b['Description'] === 'string' ? b['Description'] : 'User Account',
    );
  }

  /** Validates everything first, then applies: a refused PATCH changes nothing. */
  private patch(a: Account, b: Json): void {
    for (const k of Object.keys(b))
      if (!PATCH_PROPERTIES.includes(k) && !k.startsWith('@'))
        refuse(
          400,
          ['Id', 'PasswordChangeRequired', 'PasswordExpiration'].includes(k)
            ? 'PropertyNotWritable'
            : 'PropertyUnknown',
          `property ${k} cannot be written`,
        );
    const userName = b['UserName'] === undefined ? undefined : this.checkUserName(b['UserName']);
    if (userName !== undefined && userName !== a.userName && this.byName(userName) !== undefined)
      refuse(409, 'ResourceAlreadyExists', `an account named ${userName} exists`);
    const password = b['Password'] === undefined ? undefined : this.checkPassword(b['Password']);
    const roleId = b['RoleId'] === undefined ? undefined : checkRole(b['RoleId']);
    if (b['Enabled'] !== undefined && typeof b['Enabled'] !== 'boolean')
      refuse(400, 'PropertyValueTypeError', 'Enabled must be a boolean');
    if (b['Locked'] !== undefined && b['Locked'] !== false)
      refuse(400, 'PropertyValueNotInList', 'Locked can only be set to false');
    if (b['Description'] !== undefined && typeof b['Description'] !== 'string')
      refuse(400, 'PropertyValueTypeError', 'Description must be a string');
    const oldName = a.userName;
    if (userName !== undefined) a.userName = userName;
    if (roleId !== undefined) a.roleId = roleId;
    if (typeof b['Description'] === 'string') a.description = b['Description'];
    if (b['Locked'] === false) this.unlock(a);
    if (typeof b['Enabled'] === 'boolean') a.enabled = b['Enabled'];
    if (password !== undefined) {
      a.salt = randomBytes(16);
      a.digest = hash(a.salt, password);
      a.passwordChangeRequired = false;
    }
    a.version++;
    if (password !== undefined || userName !== undefined || b['Enabled'] === false)
      this.onCredentialsChanged(oldName);
  }

  private patchPolicy(b: Json): void {
    const next = { ...this.policy };
    for (const [k, v] of Object.entries(b)) {
      if (k.startsWith('@')) continue;
      const field = POLICY_PROPERTIES[k];
      if (field === undefined) refuse(400, 'PropertyNotWritable', `property ${k} cannot be written`);
      if (typeof v !== 'number' || !Number.isInteger(v) || v < 0)
        refuse(400, 'PropertyValueTypeError', `${k} must be a non-negative integer`);
      next[field!] = v as number;
    }
    if (next.minPasswordLength < 1 || next.minPasswordLength > next.maxPasswordLength)
      refuse(400, 'PropertyValueConflict', 'MinPasswordLength must be between 1 and MaxPasswordLength');
    Object.assign(this.policy, next);
  }

  private checkUserName(v: unknown): string {
    if (typeof v !== 'string' || !USER_NAME.test(v))
      refuse(400, 'PropertyValueFormatError', 'UserName must be 1-16 characters of A-Z a-z 0-9 . _ -');
    return v as string;
  }

  private checkPassword(v: unknown): string {
    if (typeof v !== 'string') return refuse(400, 'PropertyValueTypeError', 'Password must be a string');
    const { minPasswordLength: min, maxPasswordLength: max } = this.policy;
    if (v.length < min || v.length > max)
      refuse(400, 'PropertyValueFormatError', `Password must be ${min} to ${max} characters long`);
    return v;
  }

  private serviceDoc(): Json {
    const p = this.policy;
    return {
      '@odata.type': '#AccountService.v1_15_0.AccountService',
      '@odata.id': ACCOUNT_SERVICE_URI,
      Id: 'AccountService',
      Name: 'Account Service',
      Status: { State: 'Enabled', Health: 'OK' },
      ServiceEnabled: true,
      MinPasswordLength: p.minPasswordLength,
      MaxPasswordLength: p.maxPasswordLength,
      AccountLockoutThreshold: p.lockoutThreshold,
      AccountLockoutDuration: p.lockoutDurationSeconds,
      AccountLockoutCounterResetAfter: p.lockoutCounterResetAfterSeconds,
      AccountLockoutCounterResetEnabled: true,
      LocalAccountAuth: 'Enabled',
      Accounts: { '@odata.id': ACCOUNTS_URI },
      Roles: { '@odata.id': ROLES_URI },
    };
  }
}

function accountDoc(a: Account): Json {
  return {
    '@odata.type': '#ManagerAccount.v1_12_0.ManagerAccount',
    '@odata.id': `${ACCOUNTS_URI}/${a.id}`,
    '@odata.etag': etag(a),
    Id: a.id,
    Name: 'User Account',
    Description: a.description,
    UserName: a.userName,
    RoleId: a.roleId,
    Enabled: a.enabled,
    Locked: a.locked,
    'Locked@Redfish.AllowableValues': ['false'],
    Password: null,
    PasswordChangeRequired: a.passwordChangeRequired,
    AccountTypes: ['Redfish'],
    Links: { Role: { '@odata.id': `${ROLES_URI}/${a.roleId}` } },
  };
}

function roleDoc(id: string): Json {
  return {
    '@odata.type': '#Role.v1_3_1.Role',
    '@odata.id': `${ROLES_URI}/${id}`,
    Id: id,
    Name: `${id} Role`,
    RoleId: id,
    IsPredefined: true,
    AssignedPrivileges: ROLE_PRIVILEGES[id],
  };
}

function etag(a: Account): string {
  return `W/"${a.id}-${a.version}"`;
}

function checkRole(v: unknown): string {
  if (typeof v !== 'string' || !(ROLE_IDS as readonly string[]).includes(v))
    refuse(400, 'PropertyValueNotInList', `RoleId ${String(v)} is not one of ${ROLE_IDS.join(', ')}`);
  return v as string;
}

function allow(method: string, allowed: string[]): void {
  if (!allowed.includes(method)) refuse(405, 'OperationNotAllowed', `${method} is not allowed here`);
}

function asObject(body: unknown): Json {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return refuse(400, 'MalformedJSON', 'the request body must be a JSON object');
  return body as Json;
}

function hash(salt: Buffer, password: string): Buffer {
  return createHash('sha256').update(salt).update(password, 'utf8').digest();
}
