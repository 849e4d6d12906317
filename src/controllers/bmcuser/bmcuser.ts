/**
 * BMCUser controller (upstream metal-operator `bmcuser_controller.go`): keeps a local account on the
 * BMC of `spec.bmcRef` through its Redfish AccountService, with the password in a BMCSecret.
 *
 * Contract:
 * - The account (`spec.userName`) is created, or updated to `spec.roleID` and enabled. Its password
 *   comes from `spec.bmcSecretRef` when that Secret is the user's own (not controlled by this
 *   BMCUser); otherwise it is generated (bmcuser-policy.ts, within the BMC's Min/MaxPasswordLength)
 *   into the BMCSecret `bmcuser-<name>` this BMCUser controls, and `spec.bmcSecretRef` is pointed at
 *   it (as upstream does).
 * - Rotation (decideRotation): on `spec.rotationPeriod`, on the annotation
 *   `metal.ironcore.dev/operation: rotate-credentials` (removed when the rotation is done, so it is
 *   consumed once), and when the BMC reports the password expired (`PasswordChangeRequired`, or a
 *   past `PasswordExpiration`; an account in sync is read again every {@link EXPIRY_CHECK_MS}).
 * - Crash-safe between the BMC write and the Secret write: the new password is written as the key
 *   `pending-password` of the owned Secret *before* the BMC is changed, and promoted to `password`
 *   in one patch after. A pending password found at the start of a reconcile (the manager stopped in
 *   between, or the BMC's answer was lost) is tried once as the user (the key `pending-tried` is
 *   written before that try, so a second crash never tries it again); accepted → promoted; refused
 *   or already tried → set again through the administrator account (which needs no old password)
 *   and promoted. So at most one wrong password per rotation ever reaches the BMC, far below any
 *   `AccountLockoutThreshold` ≥ 2; the old password is never tried.
 * - Refusals (the BMC rejects the password policy or role, no AccountService, the BMC object or its
 *   credentials missing) are the condition `Ready` False with the reason and a Warning Event; the
 *   reconcile backs off. Deleting the BMCUser deletes the account (finalizer
 *   `metal.ironcore.dev/bmcuser`); a BMC already gone does not block the deletion.
 * - Differences from upstream: one Secret per BMCUser, patched on rotation (upstream creates a new
 *   immutable Secret each time), and the pending-password protocol (upstream writes the Secret, then
 *   the BMC, with nothing to resume from).
 */
import type pino from 'pino';
import type { BMC as BMCObject } from '../../api/v1alpha1/bmc.js';
import type { BMCSecret } from '../../api/v1alpha1/bmcsecret.js';
import type { BMCUser } from '../../api/v1alpha1/bmcuser.js';
import {
  OPERATION_ANNOTATION,
  OPERATION_IGNORE,
  OPERATION_ROTATE_CREDENTIALS,
} from '../../api/v1alpha1/operations.js';
import type { BMC, ManagerAccountInfo } from '../../bmc/bmc.js';
import type { KubeClient } from '../../runtime/client.js';
import type { Condition } from '../../runtime/conditions.js';
import { Controller, type Request, type Result } from '../../runtime/controller.js';
import type { EventRecorder } from '../../runtime/events.js';
import { addFinalizer, hasFinalizer, removeFinalizer } from '../../runtime/finalizers.js';
import type { Informer } from '../../runtime/informer.js';
import type { RuntimeMetrics } from '../../runtime/metrics.js';
import { controllerOwnerReference, isControlledBy } from '../../runtime/ownerrefs.js';
import { Resources } from '../../runtime/resource.js';
import { StatusPatch } from '../../runtime/status-patch.js';
import { rfc3339 } from '../../runtime/time.js';
import {
  type BmcConnections,
  bmcSecretCredentials,
  classifyBmcFailure,
} from '../bmc-actions/bmc-connections.js';
import { decideRotation, generatePassword } from './bmcuser-policy.js';

export const BMCUSER_FINALIZER = 'metal.ironcore.dev/bmcuser';
/** Key of the owned BMCSecret holding a password written to the BMC but not yet promoted. */
export const PENDING_PASSWORD_KEY = 'pending-password';
/** Set (value `1`) before the pending password is tried as the user: it is never tried twice. */
export const PENDING_TRIED_KEY = 'pending-tried';
/** Why the pending rotation started (`Initial`, `Requested`, ...): `Requested` consumes the annotation. */
export const PENDING_REASON_KEY = 'pending-reason';
/**
 * Test seam, off by default: with this environment variable set to `1` the manager kills itself
 * (SIGKILL) right after the BMC accepted a new password and before the Secret is promoted.
 */
export const CRASH_AFTER_BMC_WRITE_ENV = 'METAL_TEST_BMCUSER_CRASH_AFTER_BMC_WRITE';
export const READY_CONDITION = 'Ready';
/** How often an account in sync is read again for `PasswordChangeRequired` / `PasswordExpiration`, ms. */
export const EXPIRY_CHECK_MS = 10 * 60_000;

export interface BmcUserControllerOptions {
  client: KubeClient;
  users: Informer<BMCUser>;
  bmcs: Informer<BMCObject>;
  connections: BmcConnections;
  events: EventRecorder;
  log: pino.Logger;
  metrics?: RuntimeMetrics;
  now?: () => number;
}

/** Name of the BMCSecret a BMCUser controls (cluster-scoped, like the BMCUser). */
export function ownedSecretName(user: BMCUser): string {
  return `bmcuser-${user.metadata.name ?? ''}`.slice(0, 253);
}

const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64');
const unb64 = (s: string | undefined) =>
  s === undefined ? undefined : Buffer.from(s, 'base64').toString('utf8');

class Refusal extends Error {
  constructor(
    readonly reason: string,
    message: string,
    readonly retryAfterMs = 30_000,
  ) {
    super(message);
  }
}

export function newBmcUserController(o: BmcUserControllerOptions): Controller {
  const log = o.log.child({ controller: 'bmcuser' });
  const c = new Controller('bmcuser', {
    reconcile: (req) => reconcile(o, req, log),
    log: o.log,
    metrics: o.metrics,
  });
  c.watches(o.users);
  // A BMC that appears (or changes address/credentials) lets waiting users proceed.
  c.watches(o.bmcs, (bmc) =>
    o.users
      .list()
      .filter((u) => u.spec.bmcRef?.name === bmc.metadata.name)
      .map((u) => ({ name: u.metadata.name ?? '' })),
  );
  return c;
}

async function reconcile(o: BmcUserControllerOptions, req: Request, baseLog: pino.Logger): Promise<Result> {
  const user = await o.client.get<BMCUser>(Resources.BMCUser, req.name);
  if (!user) return {};
  const log = baseLog.child({ name: req.name, bmc: user.spec.bmcRef?.name, userName: user.spec.userName });
  if (user.metadata.annotations?.[OPERATION_ANNOTATION] === OPERATION_IGNORE) return {};
  try {
    if (user.metadata.deletionTimestamp) return await finalize(o, user, log);
    return await sync(o, user, log);
  } catch (err) {
    let reason: string;
    let message: string;
    let retryAfterMs: number;
    if (err instanceof Refusal) ({ reason, message, retryAfterMs } = err);
    else {
      let f: ReturnType<typeof classifyBmcFailure>;
      try {
        f = classifyBmcFailure(err);
      } catch {
        throw err;
      }
      ({ reason, message, retryAfterMs } = f);
    }
    log.warn({ reason, err: message }, 'BMCUser not in sync');
    o.events.record(Resources.BMCUser, user, 'Warning', reason, message);
    await patchStatus(o, user, {}, { status: 'False', reason, message }).catch(() => undefined);
    return { requeueAfterMs: retryAfterMs, backoff: true };
  }
}

async function finalize(o: BmcUserControllerOptions, user: BMCUser, log: pino.Logger): Promise<Result> {
  if (!hasFinalizer(user, BMCUSER_FINALIZER)) return {};
  const bmcObj = user.spec.bmcRef?.name ? o.bmcs.get(user.spec.bmcRef.name) : undefined;
  if (bmcObj) {
    const admin = accountsClient(o.connections.forBmc(bmcObj));
    const acct = (await admin.listAccounts!()).find((a) => a.userName === user.spec.userName);
    if (acct) {
      await admin.deleteAccount!(acct.uri);
      log.info({ accountId: acct.id }, 'BMC account deleted');
    }
  }
  await removeFinalizer(o.client, Resources.BMCUser, user, BMCUSER_FINALIZER);
  return {};
}

/** The account methods of a BMC client (all optional on {@link BMC}). */
type AccountsBmc = Required<
  Pick<BMC, 'getAccountService' | 'listAccounts' | 'createAccount' | 'updateAccount' | 'deleteAccount'>
>;

function accountsClient(
  bmc: BMC,
): Required<
  Pick<BMC, 'getAccountService' | 'listAccounts' | 'createAccount' | 'updateAccount' | 'deleteAccount'>
> {
  if (
    !bmc.getAccountService ||
    !bmc.listAccounts ||
    !bmc.createAccount ||
    !bmc.updateAccount ||
    !bmc.deleteAccount
  )
    throw new Refusal('AccountsNotSupported', 'this BMC client cannot manage accounts', 5 * 60_000);
  return bmc as never;
}

/** What one sync pass has read: the user, its BMC, the accounts client and the owned Secret. */
interface SyncPass {
  o: BmcUserControllerOptions;
  user: BMCUser;
  bmcObj: BMCObject;
  admin: AccountsBmc;
  now: number;
  secretName: string;
  owned: BMCSecret | undefined;
  acct: ManagerAccountInfo | undefined;
  log: pino.Logger;
}

/**
 * One pass, in the order that keeps a password from being lost: 1. a pending password (a rotation
 * stopped between the BMC write and the promotion) first; 2. a password the user supplies; 3. role
 * and enabled; 4. rotation when due. Refusals are thrown as {@link Refusal}; BMC and API errors propagate.
 */
async function sync(o: BmcUserControllerOptions, user0: BMCUser, log: pino.Logger): Promise<Result> {
  const ref = user0.spec.bmcRef?.name;
  if (!ref) throw new Refusal('NoBMCRef', 'spec.bmcRef is not set', 5 * 60_000);
  const bmcObj = o.bmcs.get(ref);
  if (!bmcObj) throw new Refusal('BMCNotFound', `BMC ${ref} does not exist`);
  const user = await addFinalizer(o.client, Resources.BMCUser, user0, BMCUSER_FINALIZER);
  const admin = accountsClient(o.connections.forBmc(bmcObj));
  const secretName = ownedSecretName(user);
  const owned = await o.client.get<BMCSecret>(Resources.BMCSecret, secretName);
  if (owned && !isControlledBy(owned, user))
    throw new Refusal(
      'BMCSecretConflict',
      `BMCSecret ${secretName} exists and is not controlled by this BMCUser`,
      5 * 60_000,
    );
  const acct = (await admin.listAccounts()).find((a) => a.userName === user.spec.userName);
  const x: SyncPass = { o, user, bmcObj, admin, now: (o.now ?? Date.now)(), secretName, owned, acct, log };
  const pending = unb64(owned?.data?.[PENDING_PASSWORD_KEY]);
  if (owned && pending !== undefined) return recoverPending(x, owned, pending);
  const supplied = await suppliedSecret(x);
  if (supplied) return applySupplied(x, supplied);
  if (acct && (acct.roleId !== user.spec.roleID || acct.enabled === false)) {
    await admin.updateAccount(acct.uri, { roleId: user.spec.roleID, enabled: true });
    log.info({ accountId: acct.id, roleId: user.spec.roleID }, 'BMC account role/enabled updated');
  }
  const decision = rotationDecision(x);
  if (decision.rotate) return rotate(x, decision.reason);
  await patchStatus(
    o,
    user,
    acct ? { id: acct.id } : {},
    ready('AccountSynced', `account ${acct?.id} is in sync`),
  );
  // The BMC may expire the password on its own clock: look again at least every EXPIRY_CHECK_MS.
  return {
    requeueAfterMs: Math.max(1_000, Math.min(decision.requeueAfterMs ?? EXPIRY_CHECK_MS, EXPIRY_CHECK_MS)),
  };
}

/** The account with `password` (created when missing), role and enabled as the spec says. */
async function setPassword(x: SyncPass, password: string): Promise<ManagerAccountInfo> {
  const { admin, user } = x;
  if (x.acct === undefined)
    return admin.createAccount({
      userName: user.spec.userName,
      password,
      roleId: user.spec.roleID,
      enabled: true,
    });
  await admin.updateAccount(x.acct.uri, { password, roleId: user.spec.roleID, enabled: true });
  return x.acct;
}

/** 1. The pending password of an interrupted rotation, made the account's and promoted. */
async function recoverPending(x: SyncPass, owned: BMCSecret, pending: string): Promise<Result> {
  const { o, user, admin, secretName } = x;
  let acct = x.acct;
  let how: string;
  if (acct === undefined) {
    acct = await admin.createAccount({
      userName: user.spec.userName,
      password: pending,
      roleId: user.spec.roleID,
      enabled: true,
    });
    how = 'account created with it';
  } else if (owned.data?.[PENDING_TRIED_KEY] === undefined) {
    await o.client.mergePatch(Resources.BMCSecret, secretName, undefined, {
      data: { [PENDING_TRIED_KEY]: b64('1') },
    });
    const verdict = await o.connections.probeCredentials(x.bmcObj, user.spec.userName, pending, acct.uri);
    if (verdict === 'refused') await admin.updateAccount(acct.uri, { password: pending });
    how = verdict === 'accepted' ? 'the BMC had it' : 'refused once, set again by the administrator';
  } else {
    await admin.updateAccount(acct.uri, { password: pending });
    how = 'already tried once, set again by the administrator';
  }
  const reason = unb64(owned.data?.[PENDING_REASON_KEY]) ?? 'Initial';
  await promote(o, user, owned, pending, reason, acct, x.now);
  x.log.info({ how, reason }, 'pending BMCUser password recovered');
  o.events.record(
    Resources.BMCUser,
    user,
    'Normal',
    'PendingPasswordRecovered',
    `a rotation interrupted before its Secret write was completed (${how})`,
  );
  return { requeueAfterMs: 1 };
}

/** 2. The user's own BMCSecret (`spec.bmcSecretRef`) when it is not applied yet; throws when it is missing. */
async function suppliedSecret(x: SyncPass): Promise<BMCSecret | undefined> {
  const specRef = x.user.spec.bmcSecretRef?.name;
  if (!specRef || specRef === x.secretName) return undefined;
  const supplied = await x.o.client.get<BMCSecret>(Resources.BMCSecret, specRef);
  if (!supplied) throw new Refusal('BMCSecretNotFound', `BMCSecret ${specRef} does not exist`);
  return x.user.status?.effectiveBMCSecretRef?.name !== specRef ? supplied : undefined;
}

async function applySupplied(x: SyncPass, supplied: BMCSecret): Promise<Result> {
  const { o, user } = x;
  const specRef = supplied.metadata.name ?? '';
  const acct = await setPassword(x, bmcSecretCredentials(supplied).password);
  await patchStatus(
    o,
    user,
    { id: acct.id, lastRotation: rfc3339(new Date(x.now)), effectiveBMCSecretRef: { name: specRef } },
    ready('AccountSynced', `account ${acct.id} uses the password of BMCSecret ${specRef}`),
  );
  o.events.record(
    Resources.BMCUser,
    user,
    'Normal',
    'AccountSynced',
    `account ${acct.id} set from BMCSecret ${specRef}`,
  );
  return { requeueAfterMs: 1 };
}

/** 4. Whether the password is due (period, annotation, the BMC's expiry or change-required). */
function rotationDecision(x: SyncPass): ReturnType<typeof decideRotation> {
  const { user, acct } = x;
  const annotated = user.metadata.annotations?.[OPERATION_ANNOTATION] === OPERATION_ROTATE_CREDENTIALS;
  const lastRotation = user.status?.lastRotation ? Date.parse(user.status.lastRotation) : undefined;
  const expiration = acct?.passwordExpiration ? Date.parse(acct.passwordExpiration) : undefined;
  try {
    return decideRotation({
      now: x.now,
      ...(user.spec.rotationPeriod ? { rotationPeriod: user.spec.rotationPeriod } : {}),
      ...(acct === undefined ? {} : lastRotation === undefined ? {} : { lastRotation }),
      annotated,
      ...(expiration !== undefined ? { bmcExpiration: expiration } : {}),
      changeRequired: acct?.passwordChangeRequired === true,
    });
  } catch (err) {
    throw new Refusal('InvalidRotationPeriod', (err as Error).message, 5 * 60_000);
  }
}

/**
 * A new password: generated by the BMC's policy, stored as pending in the owned Secret BEFORE the BMC
 * learns it (a crash in between is recovered by step 1), set on the BMC, then promoted.
 */
async function rotate(x: SyncPass, reason: string): Promise<Result> {
  const { o, user, log } = x;
  const policy = await x.admin.getAccountService();
  let password: string;
  try {
    password = generatePassword(policy);
  } catch (err) {
    throw new Refusal(
      'InvalidPasswordPolicy',
      `the BMC's AccountService policy: ${(err as Error).message}`,
      5 * 60_000,
    );
  }
  const owned = await writePending(x, password, reason);
  let acct: ManagerAccountInfo;
  try {
    acct = await setPassword(x, password);
  } catch (err) {
    await dropPendingUnlessMaybeApplied(x, err);
    throw err;
  }
  if (process.env[CRASH_AFTER_BMC_WRITE_ENV] === '1') {
    log.warn('test seam: killing the manager after the BMC write, before the Secret write');
    process.kill(process.pid, 'SIGKILL');
  }
  await promote(o, user, owned, password, reason, acct, x.now);
  log.info({ accountId: acct.id, reason }, 'BMCUser password rotated');
  o.events.record(
    Resources.BMCUser,
    user,
    'Normal',
    'PasswordRotated',
    `password of account ${acct.id} set (${reason})`,
  );
  return { requeueAfterMs: 1 };
}

/** The pending password in the owned Secret (created, controlled by the BMCUser, when missing). */
function writePending(x: SyncPass, password: string, reason: string): Promise<BMCSecret> {
  const { o, user, secretName } = x;
  if (x.owned)
    return o.client.mergePatch<BMCSecret>(Resources.BMCSecret, secretName, undefined, {
      data: {
        [PENDING_PASSWORD_KEY]: b64(password),
        [PENDING_REASON_KEY]: b64(reason),
        [PENDING_TRIED_KEY]: null,
      },
    });
  return o.client.create<BMCSecret>(Resources.BMCSecret, {
    apiVersion: 'metal.ironcore.dev/v1alpha1',
    kind: 'BMCSecret',
    metadata: {
      name: secretName,
      ...(user.metadata.labels ? { labels: user.metadata.labels } : {}),
      ownerReferences: [controllerOwnerReference(user, Resources.BMCUser)],
    },
    data: {
      username: b64(user.spec.userName),
      [PENDING_PASSWORD_KEY]: b64(password),
      [PENDING_REASON_KEY]: b64(reason),
    },
  });
}

/**
 * After a failed BMC write: certainly not applied (a refusal), the pending password is dropped;
 * maybe applied, it is kept and the next pass recovers it as after a crash.
 */
async function dropPendingUnlessMaybeApplied(x: SyncPass, err: unknown): Promise<void> {
  let f: ReturnType<typeof classifyBmcFailure> | undefined;
  try {
    f = classifyBmcFailure(err);
  } catch {
    f = undefined;
  }
  if (f && !f.maybeApplied)
    await x.o.client.mergePatch(Resources.BMCSecret, x.secretName, undefined, {
      data: { [PENDING_PASSWORD_KEY]: null, [PENDING_REASON_KEY]: null, [PENDING_TRIED_KEY]: null },
    });
}

/** Pending → password in one patch; then the BMCUser: spec ref, annotation consumed, status. */
async function promote(
  o: BmcUserControllerOptions,
  user: BMCUser,
  owned: BMCSecret,
  password: string,
  reason: string,
  acct: ManagerAccountInfo,
  now: number,
): Promise<void> {
  const secretName = owned.metadata.name ?? '';
  await o.client.mergePatch(Resources.BMCSecret, secretName, undefined, {
    data: {
      password: b64(password),
      [PENDING_PASSWORD_KEY]: null,
      [PENDING_REASON_KEY]: null,
      [PENDING_TRIED_KEY]: null,
    },
  });
  const consume =
    reason === 'Requested' &&
    user.metadata.annotations?.[OPERATION_ANNOTATION] === OPERATION_ROTATE_CREDENTIALS;
  if (consume || user.spec.bmcSecretRef?.name !== secretName) {
    await o.client.mergePatch(Resources.BMCUser, user.metadata.name ?? '', undefined, {
      ...(consume ? { metadata: { annotations: { [OPERATION_ANNOTATION]: null } } } : {}),
      ...(user.spec.bmcSecretRef?.name !== secretName
        ? { spec: { bmcSecretRef: { name: secretName } } }
        : {}),
    });
  }
  await patchStatus(
    o,
    user,
    { id: acct.id, lastRotation: rfc3339(new Date(now)), effectiveBMCSecretRef: { name: secretName } },
    ready('PasswordRotated', `account ${acct.id}: password in BMCSecret ${secretName} (${reason})`),
  );
}

function ready(reason: string, message: string): Omit<Condition, 'type' | 'lastTransitionTime'> {
  return { status: 'True', reason, message };
}

/**
 * Writes `fields` and `Ready` in one merge patch, or nothing when both are stored already. No
 * precondition (runtime/status-patch.ts guard `none`): this controller alone writes a BMCUser's
 * status, and a pass may write it twice (rotate, then promote) from the same read.
 */
async function patchStatus(
  o: BmcUserControllerOptions,
  user: BMCUser,
  fields: Partial<NonNullable<BMCUser['status']>>,
  cond: Omit<Condition, 'type' | 'lastTransitionTime'>,
): Promise<void> {
  await new StatusPatch(o.client, Resources.BMCUser, user, 'none')
    .set(fields)
    .setCondition({ type: READY_CONDITION, ...cond })
    .commit();
}
