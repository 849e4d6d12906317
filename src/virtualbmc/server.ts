/**
 * Virtual BMC: one Redfish service on loopback managing N ComputerSystems, each backed by a
 * {@link Host} (a simulated host, or a QEMU VM). It implements the parts of Redfish the operator uses,
 * with the semantics real BMCs have (see `system.ts`), plus fault knobs (see `faults.ts`) and service
 * variations (see `profile.ts`).
 *
 * Endpoints (all under `/redfish/v1`; authentication by HTTP Basic or `X-Auth-Token` except where noted):
 * - `GET /redfish`, `GET /redfish/v1/` (no auth): version document, ServiceRoot
 * - `GET /Systems`, `GET|PATCH /Systems/{id}` (PATCH: `Boot` only; `If-Match` checked → 412/428),
 *   `POST /Systems/{id}/Actions/ComputerSystem.Reset` (204), `GET /Systems/{id}/EthernetInterfaces[/{nic}]`,
 *   `GET|PATCH /Systems/{id}/Settings` and `GET /Systems/{id}/ResetActionInfo` when the profile enables them
 * - `GET /Systems/{id}/VirtualMedia[/CD1]`, `POST …/CD1/Actions/VirtualMedia.InsertMedia|EjectMedia` (204;
 *   insert checks the image is readable, else 400; 409 while media is inserted), `PATCH …/CD1` (eject
 *   form), for hosts with virtual media; with a captured tree at its CD/DVD devices instead
 * - `GET /Managers`, `GET /Managers/BMC`, `POST /Managers/BMC/Actions/Manager.Reset` (204; hosts unaffected)
 * - beside Redfish, an SSH serial console on its own port (console.ts; option `console`): the Manager's
 *   `SerialConsole` and each system's `SerialConsole.SSH` (`Port`, `ConsoleEntryCommand`) describe it
 * - `GET /SessionService`, `GET|POST /SessionService/Sessions` (POST: no auth, 201 + `X-Auth-Token` +
 *   `Location`), `GET|DELETE /SessionService/Sessions/{id}`
 * - `GET|PATCH /AccountService`, `GET|POST /AccountService/Accounts`, `GET|PATCH|DELETE
 *   /AccountService/Accounts/{id}`, `GET /AccountService/Roles[/{id}]` (see `accounts.ts`: password
 *   length policy, lockout, `PasswordChangeRequired`; 403 for a role without the privilege)
 * Errors use the Redfish error body with Base registry message ids: 400 (malformed JSON, unknown or
 * read-only property, bad value), 401, 404, 405, 409, 412, 413 (body over 64 KiB), 415, 428, 503.
 */

import { randomBytes, randomUUID } from 'node:crypto';
import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { type Logger, pino } from 'pino';
import {
  BOOT_SOURCE_OVERRIDE_ENABLED,
  BOOT_SOURCE_OVERRIDE_MODES,
  RESET_TYPES,
  type ResetType,
} from '../bmc/bmc.js';
import { type AccountPolicy, AccountRefusal, AccountService, type AccountView } from './accounts.js';
import { type ConsoleServer, startConsoleServer } from './console.js';
import { type FaultKnobs, FaultState } from './faults.js';
import type { Host } from './host.js';
import { MediaFetchError } from './media.js';
import { DEFAULT_PROFILE, type ServiceProfile } from './profile.js';
import {
  collection,
  computerSystem,
  ethernetInterface,
  MANAGER_ID,
  MANAGERS_URI,
  manager,
  nicId,
  redfishError,
  resetActionInfo,
  SESSIONS_URI,
  SYSTEMS_URI,
  serviceRoot,
  session,
  sessionService,
  systemSettings,
  treeResource,
  VIRTUAL_CD_ID,
  virtualMedia,
} from './resources.js';
import { type BootOverrideState, VirtualSystem } from './system.js';

export type { FaultKnobs } from './faults.js';
export type { ServiceProfile } from './profile.js';

export interface VirtualBmcOptions {
  hosts: Host[];
  username: string;
  password: string;
  /** TCP port on {@link address}; 0 (default) picks a free one. */
  port?: number;
  /** Address to listen on (default 127.0.0.1); a manager in a pod reaches the node's address instead. */
  address?: string;
  faults?: Partial<FaultKnobs>;
  /** Variations of the Redfish service (see {@link ServiceProfile}); defaults in `DEFAULT_PROFILE`. */
  profile?: Partial<ServiceProfile>;
  /**
   * The AccountService's password and lockout policy (`accounts.ts`; defaults there). The account
   * `username`/`password` is its first account (Administrator).
   */
  accounts?: Partial<AccountPolicy>;
  /**
   * The SSH serial console (console.ts): on by default on {@link address} with a free port and a new
   * host key; `false` serves none (and Redfish then reports no `SerialConsole`).
   */
  console?: false | { port?: number; hostKey?: string };
  /** PEM key and certificate: serve HTTPS instead of HTTP. */
  tls?: { key: string; cert: string };
  logger?: Logger;
  /**
   * Called with every request once its fate is known (status set; 0 for a dropped connection), before
   * the response is sent. For long runs: the log of {@link VirtualBmc.requests} keeps only the last 10,000.
   */
  onRequest?: (r: RequestRecord) => void;
}

/** One request as the service saw it, for tests. Passwords in bodies are replaced by `***`. */
export interface RequestRecord {
  /** When the request arrived, ms since the epoch. */
  at: number;
  method: string;
  path: string;
  /** HTTP status sent; 0 when the connection was dropped by the `dropConnections` fault. */
  status: number;
  /**
   * When the response was written, ms since the epoch; absent while it is held back by a delay
   * fault (`responseDelayMs`, `slowRequests`) and when the connection was dropped. The status is
   * set before the delay, so this is what tells a request still in flight.
   */
  answeredAt?: number;
  auth: 'none' | 'basic' | 'session';
  /** The account that authenticated, when one did. */
  user?: string;
  ifMatch: string | undefined;
  body: unknown;
  /**
   * Boot properties of an accepted PATCH whose value equalled the one already in effect (current or
   * pending): a re-sent unchanged field. Absent on other requests.
   */
  unchangedFields?: string[];
}

export interface VirtualBmc {
  /** Base URL, e.g. `http://127.0.0.1:40123`. */
  url: string;
  setFaults(f: Partial<FaultKnobs>): void;
  /** Stops serving, cancels pending transitions, and closes every host. */
  close(): Promise<void>;
  /**
   * The systems served, in the order of `hosts`. `id` is the Redfish `Id` (the lower-case UUID with the
   * built-in documents; the captured tree's style, e.g. `System.Embedded.1`, with a profile tree).
   */
  readonly systems: ReadonlyArray<{ id: string; uri: string; host: Host; uuid: string }>;
  /** The most recent requests (at most 10,000), oldest first. */
  requests(): RequestRecord[];
  clearRequests(): void;
  /** BIOS configuration jobs queued so far (profiles with `biosJobOnModePatch`, i.e. Dell). */
  biosJobs(): number;
  /** The local accounts (tests read failure counters and lockout, and expire passwords). */
  readonly accounts: Pick<AccountService, 'account' | 'expirePassword' | 'policy'>;
  /** The SSH serial console, unless the option `console` was `false`. */
  readonly console: ConsoleServer | undefined;
}

interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

interface SessionEntry {
  id: string;
  user: string;
  lastUsed: number;
}

const MAX_BODY_BYTES = 64 * 1024;
const MAX_SESSIONS = 1024;
const MAX_RECORDS = 10_000;
const BOOT_PROPERTIES = [
  'BootSourceOverrideTarget',
  'BootSourceOverrideEnabled',
  'BootSourceOverrideMode',
  'HttpBootUri',
] as const;

class HttpFailure extends Error {
  constructor(readonly reply: Reply) {
    super(`HTTP ${reply.status}`);
  }
}

const fail = (
  status: number,
  messageId: string,
  message: string,
  headers?: Record<string, string>,
): never => {
  throw new HttpFailure({ status, body: redfishError(messageId, message), ...(headers ? { headers } : {}) });
};

/** Starts the service; resolves once it listens. */
export async function startVirtualBmc(opts: VirtualBmcOptions): Promise<VirtualBmc> {
  const log = (opts.logger ?? pino({ level: 'silent' })).child({ component: 'virtual-bmc' });
  const profile: ServiceProfile = { ...DEFAULT_PROFILE, ...opts.profile };
  const faults = new FaultState(opts.faults);
  const serviceUuid = randomUUID();
  const systems = opts.hosts.map(
    (h, i) =>
      new VirtualSystem(h, log, {
        ...(profile.tree ? { id: treeSystemId(profile.tree.get(profile.tree.systemUri)?.['Id'], i) } : {}),
        initialBoot: profile.initialBoot,
        etagFormat: profile.etagFormat,
        postWindowMs: profile.postWindowMs,
      }),
  );
  const byId = new Map<string, VirtualSystem>();
  for (const s of systems) {
    if (byId.has(s.id.toLowerCase())) throw new Error(`two hosts share the UUID ${s.id}`);
    byId.set(s.id.toLowerCase(), s);
  }
  const sessions = new Map<string, SessionEntry>(); // token → session
  const records: RequestRecord[] = [];
  const delays = new Set<{ timer: NodeJS.Timeout; resolve: () => void }>();
  const accounts = new AccountService(
    { userName: opts.username, password: opts.password },
    opts.accounts,
    Date.now,
    // A changed password, a disabled or deleted account ends that account's sessions.
    (user) => {
      for (const [token, s] of sessions) if (s.user === user) sessions.delete(token);
    },
  );
  // Set once the Redfish service listens; the documents read it when they are served.
  let consoleServer: ConsoleServer | undefined;
  const consoleOf = (sys: VirtualSystem): { port: number; command: string } | undefined =>
    consoleServer && { port: consoleServer.port, command: consoleServer.entryCommand(systems.indexOf(sys)) };

  const record = (r: RequestRecord): void => {
    records.push(r);
    if (records.length > MAX_RECORDS) records.splice(0, records.length - MAX_RECORDS);
  };

  const authenticate = (
    req: IncomingMessage,
  ): { kind: 'basic' | 'session'; account: AccountView } | undefined => {
    const token = req.headers['x-auth-token'];
    if (typeof token === 'string') {
      const s = sessions.get(token);
      if (s === undefined) return undefined;
      if (Date.now() - s.lastUsed > profile.sessionTimeoutSeconds * 1000) {
        sessions.delete(token);
        return undefined;
      }
      const account = accounts.account(s.user);
      if (account === undefined || !account.enabled || account.locked) return undefined;
      s.lastUsed = Date.now();
      return { kind: 'session', account };
    }
    const auth = req.headers.authorization;
    if (auth?.startsWith('Basic ')) {
      const decoded = Buffer.from(auth.slice(6), 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      if (colon < 0) return undefined;
      const outcome = accounts.authenticate(decoded.slice(0, colon), decoded.slice(colon + 1));
      if (outcome.ok) return { kind: 'basic', account: outcome.account };
    }
    return undefined;
  };

  const systemOr404 = (id: string): VirtualSystem =>
    byId.get(id.toLowerCase()) ?? fail(404, 'ResourceMissingAtURI', `no system ${id}`);

  const methods = (method: string, allowed: string[]): void => {
    if (!allowed.includes(method)) {
      fail(405, 'OperationNotAllowed', `${method} is not allowed here`, { allow: allowed.join(', ') });
    }
  };

  const route = (
    req: IncomingMessage,
    path: string,
    body: unknown,
    rec: RequestRecord,
  ): Promise<Reply> | Reply => {
    const method = req.method ?? 'GET';
    if (path === '/redfish') {
      methods(method, ['GET']);
      return { status: 200, body: { v1: '/redfish/v1/' } };
    }
    if (!path.startsWith('/redfish/v1')) fail(404, 'ResourceMissingAtURI', `${path} does not exist`);
    const seg = path
      .slice('/redfish/v1'.length)
      .split('/')
      .filter((s) => s !== '')
      .map((s) => {
        try {
          return decodeURIComponent(s);
        } catch {
          return fail(400, 'ResourceMissingAtURI', `malformed path ${path}`);
        }
      });
    if (seg.length === 0) {
      methods(method, ['GET']);
      return { status: 200, body: profile.tree?.get('/redfish/v1/') ?? serviceRoot(serviceUuid, profile) };
    }
    const isLogin =
      seg.length === 2 && seg[0] === 'SessionService' && seg[1] === 'Sessions' && method === 'POST';
    if (isLogin) return login(body);

    const authed = authenticate(req);
    if (authed === undefined) {
      return fail(401, 'InsufficientPrivilege', 'authentication required', {
        'www-authenticate': 'Basic realm="virtual-bmc"',
      });
    }
    rec.auth = authed.kind;
    rec.user = authed.account.userName;
    const caller = authed.account;
    const own = accounts.restrictedTo(caller);
    if (own !== undefined && path !== own)
      fail(403, 'PasswordChangeRequired', 'the password has expired: change it first');

    const [top, id, sub, leaf, extra] = seg;
    if (top === 'AccountService') {
      try {
        return accounts.route(method, seg.slice(1), body, caller, rec.ifMatch);
      } catch (err) {
        if (err instanceof AccountRefusal) fail(err.status, err.messageId, err.message);
        throw err;
      }
    }
    if (caller.roleId === 'ReadOnly' && method !== 'GET' && top !== 'SessionService')
      fail(403, 'InsufficientPrivilege', 'the ReadOnly role may not change anything');
    const media = mediaAt(seg);
    if (media !== undefined) return mediaRoute(method, media, seg, body);
    if (
      top === 'Systems' &&
      profile.virtualMedia &&
      profile.tree === undefined &&
      sub === 'VirtualMedia' &&
      leaf === undefined
    ) {
      const sys = systemOr404(id ?? '');
      if (sys.host.insertMedia !== undefined) {
        methods(method, ['GET']);
        return ok(
          collection('VirtualMediaCollection', 'Virtual Media Collection', `${sys.uri}/VirtualMedia`, [
            `${sys.uri}/VirtualMedia/${VIRTUAL_CD_ID}`,
          ]),
        );
      }
    }
    if (top === 'Systems') {
      if (id === undefined) {
        methods(method, ['GET']);
        return ok(
          collection(
            'ComputerSystemCollection',
            'Computer System Collection',
            SYSTEMS_URI,
            systems.map((s) => s.uri),
          ),
        );
      }
      const sys = systemOr404(id);
      if (sub === undefined) {
        methods(method, ['GET', 'PATCH']);
        if (method === 'GET') return systemReply(sys);
        if (profile.settingsObject)
          fail(405, 'OperationNotAllowed', `PATCH the settings object ${sys.uri}/Settings`);
        return patchBoot(sys, body, rec.ifMatch, rec, false);
      }
      if (sub === 'Settings' && profile.settingsObject && leaf === undefined) {
        methods(method, ['GET', 'PATCH']);
        if (method === 'GET')
          return { status: 200, body: systemSettings(sys, profile), headers: etagHeader(sys) };
        return patchBoot(sys, body, rec.ifMatch, rec, true);
      }
      if (sub === 'ResetActionInfo' && profile.resetTypesAdvertised === 'action-info' && leaf === undefined) {
        methods(method, ['GET']);
        return ok(resetActionInfo(sys, profile));
      }
      if (sub === 'Actions' && leaf === 'ComputerSystem.Reset' && extra === undefined) {
        methods(method, ['POST']);
        return resetAction(sys, body);
      }
      if (sub === 'ResetActionInfo' && profile.tree !== undefined && leaf === undefined) {
        methods(method, ['GET']);
        return ok(
          treeResource(profile.tree, `${profile.tree.systemUri}/ResetActionInfo`, sys.uri) ??
            resetActionInfo(sys, profile),
        );
      }
      if (sub === 'EthernetInterfaces' && extra === undefined && !profile.omitEthernetInterfaces) {
        methods(method, ['GET']);
        if (leaf === undefined) {
          return ok(
            collection(
              'EthernetInterfaceCollection',
              'Ethernet Interface Collection',
              `${sys.uri}/EthernetInterfaces`,
              [`${sys.uri}/EthernetInterfaces/${nicId(sys)}`],
            ),
          );
        }
        if (leaf.toUpperCase() === nicId(sys)) return ok(ethernetInterface(sys));
      }
      if (profile.tree !== undefined) {
        // Other parts of the system (Bios, BootOptions, Processors, ...) as captured.
        methods(method, ['GET']);
        const rest = seg.slice(2).join('/');
        const captured = treeResource(profile.tree, `${profile.tree.systemUri}/${rest}`, sys.uri);
        if (captured !== undefined) return ok(captured);
      }
    } else if (top === 'Managers' && profile.tree !== undefined) {
      methods(method, ['GET']);
      const captured = profile.tree.get(path);
      if (captured !== undefined) return ok(captured);
    } else if (top === 'Managers') {
      if (id === undefined) {
        methods(method, ['GET']);
        return ok(
          collection('ManagerCollection', 'Manager Collection', MANAGERS_URI, [
            `${MANAGERS_URI}/${MANAGER_ID}`,
          ]),
        );
      }
      if (id === MANAGER_ID && sub === undefined) {
        methods(method, ['GET']);
        return ok(manager(serviceUuid, systems, consoleServer !== undefined));
      }
      if (id === MANAGER_ID && sub === 'Actions' && leaf === 'Manager.Reset' && extra === undefined) {
        // A restart of the BMC itself: the hosts keep their power; only the request log records it.
        methods(method, ['POST']);
        const type = asObject(body)['ResetType'] ?? 'GracefulRestart';
        if (type !== 'GracefulRestart' && type !== 'ForceRestart')
          fail(
            400,
            'ActionParameterNotSupported',
            `ResetType ${String(type)} is not GracefulRestart or ForceRestart`,
          );
        return { status: 204 };
      }
    } else if (top === 'SessionService' && profile.sessions) {
      if (id === undefined) {
        methods(method, ['GET']);
        return ok(sessionService(profile));
      }
      if (id === 'Sessions' && sub === undefined) {
        methods(method, ['GET', 'POST']);
        return ok(
          collection(
            'SessionCollection',
            'Session Collection',
            SESSIONS_URI,
            [...sessions.values()].map((s) => `${SESSIONS_URI}/${s.id}`),
          ),
        );
      }
      if (id === 'Sessions' && leaf === undefined && sub !== undefined) {
        methods(method, ['GET', 'DELETE']);
        const entry = [...sessions.entries()].find(([, s]) => s.id === sub);
        if (entry === undefined) fail(404, 'ResourceMissingAtURI', `no session ${sub}`);
        const [token, s] = entry!;
        if (method === 'DELETE') {
          sessions.delete(token);
          return { status: 204 };
        }
        return ok(session(s.id, s.user));
      }
    }
    if (profile.tree !== undefined && top !== 'Systems' && top !== 'SessionService') {
      // Everything else the vendor serves (Chassis, AccountService, ...) as captured, read-only.
      const captured = profile.tree.get(path);
      if (captured !== undefined) {
        methods(method, ['GET']);
        return ok(captured);
      }
    }
    return fail(404, 'ResourceMissingAtURI', `${path} does not exist`);
  };

  /**
   * The live virtual CD that `seg` (path segments below /redfish/v1) names, with the segments after
   * the device (`Actions/VirtualMedia.InsertMedia`, ...): the built-in `Systems/{id}/VirtualMedia/CD1`,
   * or a captured CD/DVD device under the captured system or a captured Manager (bound to the first
   * system). Only for hosts that implement virtual media.
   */
  const mediaAt = (
    seg: string[],
  ):
    | { sys: VirtualSystem; uri: string; captured: Record<string, unknown> | undefined; rest: string[] }
    | undefined => {
    if (!profile.virtualMedia || seg.length < 4 || seg[2] !== 'VirtualMedia') return undefined;
    const [top, id, , dev] = seg as [string, string, string, string];
    const rest = seg.slice(4);
    const isCd = (b: Record<string, unknown> | undefined) =>
      Array.isArray(b?.['MediaTypes']) &&
      (b['MediaTypes'] as unknown[]).some((t) => t === 'CD' || t === 'DVD');
    let sys: VirtualSystem | undefined;
    let captured: Record<string, unknown> | undefined;
    if (top === 'Systems') {
      sys = byId.get(id.toLowerCase());
      if (sys === undefined) return undefined;
      if (profile.tree === undefined) {
        if (dev !== VIRTUAL_CD_ID) return undefined;
      } else {
        captured = treeResource(profile.tree, `${profile.tree.systemUri}/VirtualMedia/${dev}`, sys.uri);
        if (!isCd(captured)) return undefined;
      }
    } else if (top === 'Managers' && profile.tree !== undefined) {
      captured = profile.tree.get(`/redfish/v1/Managers/${id}/VirtualMedia/${dev}`);
      if (!isCd(captured)) return undefined;
      sys = systems[0];
    }
    if (sys?.host.insertMedia === undefined) return undefined;
    return { sys, uri: `/redfish/v1/${top}/${id}/VirtualMedia/${dev}`, captured, rest };
  };

  const mediaRoute = async (
    method: string,
    m: NonNullable<ReturnType<typeof mediaAt>>,
    _seg: string[],
    body: unknown,
  ): Promise<Reply> => {
    const { sys, uri, captured, rest } = m;
    if (rest.length === 0) {
      methods(method, ['GET', 'PATCH']);
      if (method === 'GET') return ok(virtualMedia(sys, uri, captured));
      // The PATCH form of eject (VirtualMedia.v1_3_0+: `Image` null, `Inserted` false).
      const b = asObject(body);
      if (b['Image'] !== null || (b['Inserted'] !== undefined && b['Inserted'] !== false))
        fail(400, 'PropertyValueNotInList', 'only {"Image": null, "Inserted": false} (eject) may be PATCHed');
      await ejectMedia(sys);
      return { status: 204 };
    }
    if (rest.length === 2 && rest[0] === 'Actions' && rest[1] === 'VirtualMedia.InsertMedia') {
      methods(method, ['POST']);
      return insertMedia(sys, body);
    }
    const ejectable =
      captured === undefined ||
      (captured['Actions'] as Record<string, unknown> | undefined)?.['#VirtualMedia.EjectMedia'] !==
        undefined;
    if (rest.length === 2 && rest[0] === 'Actions' && rest[1] === 'VirtualMedia.EjectMedia' && ejectable) {
      methods(method, ['POST']);
      await ejectMedia(sys);
      return { status: 204 };
    }
    return fail(404, 'ResourceMissingAtURI', `${uri}/${rest.join('/')} does not exist`);
  };

  const INSERT_PARAMETERS = [
    'Image',
    'Inserted',
    'WriteProtected',
    'TransferProtocolType',
    'TransferMethod',
    'UserName',
    'Password',
  ];

  /** `VirtualMedia.InsertMedia` (VirtualMedia.v1_6_0): the image is checked readable first, as BMCs do. */
  const insertMedia = async (sys: VirtualSystem, body: unknown): Promise<Reply> => {
    const b = asObject(body);
    for (const k of Object.keys(b))
      if (!INSERT_PARAMETERS.includes(k))
        fail(400, 'ActionParameterUnknown', `InsertMedia has no parameter ${k}`);
    const image = b['Image'];
    if (image === undefined) fail(400, 'ActionParameterMissing', 'Image is required');
    if (typeof image !== 'string' || !/^https?:\/\/\S+$/.test(image))
      fail(400, 'ActionParameterValueFormatError', 'Image must be an http(s) URI');
    if (profile.insertMediaRejectsFlags && ('Inserted' in b || 'WriteProtected' in b))
      fail(400, 'ActionParameterNotSupported', 'Inserted and WriteProtected are not supported');
    if (b['Inserted'] === false) fail(400, 'ActionParameterValueError', 'Inserted false: nothing to insert');
    if (sys.media.inserted) fail(409, 'ResourceAlreadyExists', 'media is already inserted: eject it first');
    try {
      await sys.host.insertMedia?.(image as string);
    } catch (err) {
      if (!(err instanceof MediaFetchError)) throw err;
      log.info({ system: sys.id, error: err.message }, 'virtual media refused: image not readable');
      fail(400, 'ActionParameterValueError', `the image cannot be read: ${err.message}`);
    }
    sys.media = { image: image as string, inserted: true, writeProtected: b['WriteProtected'] !== false };
    sys.mediaLog.push({ at: Date.now(), action: 'insert', image: image as string });
    sys.touch();
    return { status: 204 };
  };

  const ejectMedia = async (sys: VirtualSystem): Promise<void> => {
    await sys.host.ejectMedia?.();
    if (sys.media.inserted) sys.mediaLog.push({ at: Date.now(), action: 'eject', image: sys.media.image });
    sys.media = { image: undefined, inserted: false, writeProtected: true };
    sys.touch();
  };

  const login = (body: unknown): Reply => {
    if (!profile.sessions) fail(404, 'ResourceMissingAtURI', 'this service has no SessionService');
    const b = asObject(body);
    const user = b['UserName'];
    const password = b['Password'];
    if (typeof user !== 'string' || typeof password !== 'string') {
      fail(400, 'PropertyMissing', 'UserName and Password are required strings');
    }
    const outcome = accounts.authenticate(user as string, password as string);
    if (!outcome.ok) fail(401, 'NoValidSession', 'invalid credentials');
    if (sessions.size >= MAX_SESSIONS)
      fail(503, 'SessionLimitExceeded', 'too many sessions', { 'retry-after': '5' });
    const token = randomBytes(24).toString('hex');
    const id = randomBytes(8).toString('hex');
    sessions.set(token, { id, user: user as string, lastUsed: Date.now() });
    return {
      status: 201,
      body: session(id, user as string),
      headers: { 'x-auth-token': token, location: `${SESSIONS_URI}/${id}` },
    };
  };

  const systemReply = (sys: VirtualSystem): Reply => ({
    status: 200,
    body: computerSystem(
      sys,
      profile,
      sys.powerState(faults.current.reportTransitionalState),
      consoleOf(sys),
    ),
    headers: etagHeader(sys),
  });

  const etagHeader = (sys: VirtualSystem): Record<string, string> =>
    profile.etags ? { etag: sys.etag } : {};

  const patchBoot = (
    sys: VirtualSystem,
    body: unknown,
    ifMatch: string | undefined,
    rec: RequestRecord,
    viaSettings: boolean,
  ): Reply => {
    if (faults.takeConcurrentWrite()) sys.touch();
    if (ifMatch === undefined && profile.requireIfMatch)
      fail(428, 'PreconditionRequired', 'If-Match is required');
    if (ifMatch !== undefined && !etagMatches(ifMatch, sys.etag)) {
      fail(412, 'PreconditionFailed', 'the resource has changed since the ETag was read');
    }
    const changes = parseBootPatch(asObject(body), profile);
    sys.startArmedPost();
    if (sys.inPost()) {
      // HPE iLO: Boot cannot change while the BIOS is in POST (HPE iLO message registry).
      throw new HttpFailure({ status: 400, body: hpePostError(Object.keys(changes)) });
    }
    if (profile.bootTargetWithEnabled && (changes.target === undefined) !== (changes.enabled === undefined)) {
      fail(
        400,
        'PropertyMissing',
        'BootSourceOverrideTarget and BootSourceOverrideEnabled must be set together',
      );
    }
    const before = sys.effectiveBoot();
    const same = (k: keyof BootOverrideState) => changes[k] !== undefined && changes[k] === before[k];
    rec.unchangedFields = (Object.keys(changes) as Array<keyof BootOverrideState>)
      .filter((k) => same(k))
      // Where the firmware needs Target and Enabled together, the unchanged partner is required.
      .filter((k) => !profile.bootTargetWithEnabled || k === 'mode' || (same('target') && same('enabled')))
      .map((k) => BOOT_PROPERTY_OF[k]);
    if (profile.biosJobOnModePatch && changes.mode !== undefined) {
      // Dell iDRAC: a BootSourceOverrideMode PATCH, changed or not, queues a BIOS configuration job.
      sys.biosJobs++;
      log.info({ system: sys.id, mode: changes.mode }, 'BIOS configuration job queued');
    }
    if (viaSettings && profile.settingsApplyTime === 'OnReset') sys.setPendingBoot(changes);
    else sys.setBoot(changes);
    return { status: 204, headers: etagHeader(sys) };
  };

  const resetAction = async (sys: VirtualSystem, body: unknown): Promise<Reply> => {
    const type = asObject(body)['ResetType'];
    if (type === undefined) fail(400, 'ActionParameterMissing', 'ResetType is required');
    if (
      typeof type !== 'string' ||
      !(RESET_TYPES as readonly string[]).includes(type) ||
      !profile.resetTypes.includes(type as ResetType)
    ) {
      fail(
        400,
        'ActionParameterValueNotInList',
        `ResetType ${String(type)} is not one of ${profile.resetTypes.join(', ')}`,
      );
    }
    try {
      // A Reset is accepted at once and takes effect later: the profile's delay, or a longer fault one.
      await sys.reset(type as ResetType, Math.max(faults.current.powerTransitionMs, profile.resetDelayMs));
    } catch (err) {
      log.error({ err, system: sys.id, type }, 'host failed to execute reset');
      fail(500, 'InternalError', 'the host failed to execute the reset');
    }
    return { status: 204 };
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://virtual-bmc');
    const path = url.pathname.length > 1 ? url.pathname.replace(/\/+$/, '') : url.pathname;
    const ifMatch = req.headers['if-match'];
    const rec: RequestRecord = {
      at: Date.now(),
      method: req.method ?? 'GET',
      path,
      status: 0,
      auth: 'none',
      ifMatch: typeof ifMatch === 'string' ? ifMatch : undefined,
      body: undefined,
    };
    record(rec);
    const fate = faults.admit(rec.method, path);
    if (fate.kind === 'drop') {
      log.debug({ method: rec.method, path }, 'fault: dropping connection');
      opts.onRequest?.(rec);
      req.socket.destroy();
      return;
    }
    let reply: Reply;
    if (fate.kind === 'refuse') {
      reply =
        fate.status === 503
          ? {
              status: 503,
              body: redfishError('ServiceTemporarilyUnavailable', 'the service is temporarily unavailable'),
              headers: { 'retry-after': String(fate.retryAfterSeconds) },
            }
          : { status: fate.status, body: redfishError('PropertyNotWritable', 'this system refuses changes') };
    } else if (fate.kind === 'unavailable') {
      reply = {
        status: 503,
        body: redfishError('ServiceTemporarilyUnavailable', 'the service is temporarily unavailable'),
        headers: { 'retry-after': String(fate.retryAfterSeconds) },
      };
    } else {
      try {
        const body = await readBody(req);
        rec.body = redact(body);
        reply = await route(req, path, body, rec);
      } catch (err) {
        if (err instanceof HttpFailure) reply = err.reply;
        else {
          log.error({ err, method: rec.method, path }, 'request failed');
          reply = { status: 500, body: redfishError('InternalError', 'internal error') };
        }
      }
    }
    rec.status = reply.status;
    opts.onRequest?.(rec);
    const delay = faults.responseDelay(rec.method, path);
    if (delay > 0) await pause(delay);
    if (res.destroyed || res.writableEnded) return;
    const payload = reply.body === undefined ? undefined : JSON.stringify(reply.body);
    res.writeHead(reply.status, {
      'odata-version': '4.0',
      ...(payload === undefined ? {} : { 'content-type': 'application/json; charset=utf-8' }),
      ...reply.headers,
    });
    res.end(payload);
    rec.answeredAt = Date.now();
  };

  const pause = (ms: number): Promise<void> =>
    new Promise((resolve) => {
      const entry = {
        timer: setTimeout(() => {
          delays.delete(entry);
          resolve();
        }, ms),
        resolve,
      };
      delays.add(entry);
    });

  const listener = (req: IncomingMessage, res: ServerResponse): void => {
    handle(req, res).catch((err: unknown) => {
      log.error({ err }, 'unhandled request error');
      if (!res.headersSent) res.writeHead(500).end();
    });
  };
  const server: Server = opts.tls
    ? createHttpsServer({ key: opts.tls.key, cert: opts.tls.cert }, listener)
    : createHttpServer(listener);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.address ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const url = `${opts.tls ? 'https' : 'http'}://${opts.address ?? '127.0.0.1'}:${port}`;
  log.info({ url, systems: systems.length }, 'virtual BMC listening');
  if (opts.console !== false) {
    try {
      consoleServer = await startConsoleServer({
        address: opts.address ?? '127.0.0.1',
        port: opts.console?.port ?? 0,
        ...(opts.console?.hostKey ? { hostKey: opts.console.hostKey } : {}),
        systems: systems.map((s) => ({ id: s.id, host: s.host })),
        // SSH logins are the AccountService's too: a wrong password counts towards the lockout.
        checkCredentials: (user: string, password: string) => {
          const outcome = accounts.authenticate(user, password);
          return outcome.ok && !outcome.account.passwordChangeRequired;
        },
        log,
      });
    } catch (err) {
      server.close();
      server.closeAllConnections();
      throw err;
    }
  }

  let closing: Promise<void> | undefined;
  return {
    url,
    systems: systems.map((s) => ({
      id: s.id,
      uri: s.uri,
      host: s.host,
      uuid: s.host.identity.uuid.toLowerCase(),
    })),
    setFaults: (f) => {
      faults.set(f);
      if (f.hostsInPostMs) for (const s of systems) s.enterPost(f.hostsInPostMs);
      if (f.postAtNextPatchMs) for (const s of systems) s.armPostAtNextPatch(f.postAtNextPatchMs);
    },
    biosJobs: () => systems.reduce((n, s) => n + s.biosJobs, 0),
    accounts,
    console: consoleServer,
    requests: () => records.slice(),
    clearRequests: () => {
      records.length = 0;
    },
    close: () => {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeAllConnections();
        for (const d of delays) {
          clearTimeout(d.timer);
          d.resolve();
        }
        delays.clear();
        await consoleServer?.close();
        await closed;
        await Promise.all(systems.map((s) => s.close()));
        await Promise.all(opts.hosts.map((h) => h.close()));
      })();
      return closing;
    },
  };
}

function ok(body: unknown): Reply {
  return { status: 200, body };
}

/** Validates a PATCH body for the Boot object (ComputerSystem.v1_22_0 `Boot`). */
function parseBootPatch(body: Record<string, unknown>, profile: ServiceProfile): Partial<BootOverrideState> {
  for (const key of Object.keys(body)) {
    if (key !== 'Boot' && !key.startsWith('@'))
      fail(400, 'PropertyNotWritable', `property ${key} is read-only`);
  }
  const boot = body['Boot'];
  if (typeof boot !== 'object' || boot === null || Array.isArray(boot)) {
    return fail(400, 'PropertyValueTypeError', 'Boot must be an object');
  }
  const changes: Partial<BootOverrideState> = {};
  for (const [key, value] of Object.entries(boot)) {
    if (
      !(BOOT_PROPERTIES as readonly string[]).includes(key) ||
      (key === 'BootSourceOverrideMode' && !profile.reportBootMode)
    ) {
      fail(400, 'PropertyUnknown', `property Boot/${key} is not supported`);
    }
    if (key === 'BootSourceOverrideTarget') {
      if (typeof value !== 'string' || !profile.bootTargets.includes(value))
        fail(400, 'PropertyValueNotInList', `Boot/${key} ${String(value)}`);
      changes.target = value as string;
    } else if (key === 'HttpBootUri') {
      if (!profile.bootTargets.includes('UefiHttp') || profile.reportHttpBootUri === false)
        fail(400, 'PropertyUnknown', `property Boot/${key} is not supported`);
      if (value !== null && (typeof value !== 'string' || !/^https?:\/\/\S+$/.test(value)))
        fail(400, 'PropertyValueFormatError', `Boot/${key} must be an http(s) URI or null`);
      changes.httpBootUri = value as string | null;
    } else if (key === 'BootSourceOverrideEnabled') {
      if (!(BOOT_SOURCE_OVERRIDE_ENABLED as readonly unknown[]).includes(value))
        fail(400, 'PropertyValueNotInList', `Boot/${key} ${String(value)}`);
      changes.enabled = value as string;
    } else {
      if (!(BOOT_SOURCE_OVERRIDE_MODES as readonly unknown[]).includes(value))
        fail(400, 'PropertyValueNotInList', `Boot/${key} ${String(value)}`);
      changes.mode = value as string;
    }
  }
  return changes;
}

const BOOT_PROPERTY_OF: Record<keyof BootOverrideState, (typeof BOOT_PROPERTIES)[number]> = {
  target: 'BootSourceOverrideTarget',
  enabled: 'BootSourceOverrideEnabled',
  mode: 'BootSourceOverrideMode',
  httpBootUri: 'HttpBootUri',
};

/** The error body HPE iLO 5 sends for a Boot change during POST (captured shape: `error.@Message.ExtendedInfo`). */
function hpePostError(keys: string[]): Record<string, unknown> {
  return {
    error: {
      code: 'iLO.0.10.ExtendedInfo',
      message: 'See @Message.ExtendedInfo for more information.',
      '@Message.ExtendedInfo': [
        {
          MessageArgs: keys.map((k) => BOOT_PROPERTY_OF[k as keyof BootOverrideState] ?? k),
          MessageId: 'iLO.2.26.UnableToModifyDuringSystemPOST',
        },
      ],
    },
  };
}

/**
 * Redfish `Id` of system `index` in a captured tree: the captured Id for the first, then the same Id
 * with its trailing number counted up (`System.Embedded.1`, `System.Embedded.2`, ...; `1`, `2`, ...).
 */
function treeSystemId(capturedId: unknown, index: number): string {
  const id = typeof capturedId === 'string' && capturedId !== '' ? capturedId : 'System';
  if (index === 0) return id;
  const m = /^(.*?)(\d+)$/.exec(id);
  return m ? `${m[1]}${Number(m[2]) + index}` : `${id}-${index + 1}`;
}

/** `If-Match` evaluation (RFC 9110 §13.1.1): `*` or a list of entity tags, strong comparison. */
function etagMatches(header: string, current: string): boolean {
  return header.split(',').some((t) => {
    const tag = t.trim();
    return tag === '*' || tag === current;
  });
}

function asObject(body: unknown): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return fail(400, 'MalformedJSON', 'the request body must be a JSON object');
  }
  return body as Record<string, unknown>;
}

async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) fail(413, 'PayloadTooLarge', `request body over ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  if (size === 0) return undefined;
  const type = req.headers['content-type'];
  if (type !== undefined && !/^application\/json\b/i.test(type)) {
    fail(415, 'UnsupportedMediaType', `content type ${type} is not application/json`);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    return fail(400, 'MalformedJSON', 'the request body is not valid JSON');
  }
}

function redact(body: unknown): unknown {
  if (typeof body === 'object' && body !== null && 'Password' in body) return { ...body, Password: '***' };
  return body;
}
