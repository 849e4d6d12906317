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
 *
 * This file holds the request loop (faults, delays, the request log) and the lifecycle; the handlers
 * of the resources are in `routes/` (`router.ts` dispatches; `state.ts` is what they share).
 */

import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { type Logger, pino } from 'pino';
import type { AccountPolicy, AccountService } from './accounts.js';
import { type ConsoleServer, startConsoleServer } from './console.js';
import { type FaultKnobs, FaultState, type RequestFate } from './faults.js';
import type { Host } from './host.js';
import { DEFAULT_PROFILE, type ServiceProfile } from './profile.js';
import { redfishError } from './resources.js';
import { HttpFailure, type Reply } from './routes/reply.js';
import { type RequestRecord, readBody, redact } from './routes/request.js';
import { route } from './routes/router.js';
import { BmcState } from './routes/state.js';

export type { FaultKnobs } from './faults.js';
export type { ServiceProfile } from './profile.js';
export type { RequestRecord } from './routes/request.js';

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

const MAX_RECORDS = 10_000;

/** Starts the service; resolves once it listens. */
export async function startVirtualBmc(opts: VirtualBmcOptions): Promise<VirtualBmc> {
  const log = (opts.logger ?? pino({ level: 'silent' })).child({ component: 'virtual-bmc' });
  const profile: ServiceProfile = { ...DEFAULT_PROFILE, ...opts.profile };
  const state = new BmcState({
    log,
    profile,
    faults: new FaultState(opts.faults),
    hosts: opts.hosts,
    username: opts.username,
    password: opts.password,
    ...(opts.accounts ? { accounts: opts.accounts } : {}),
  });
  const { systems } = state;
  const records: RequestRecord[] = [];
  const delays = new Delays();
  const service = { state, records, delays, onRequest: opts.onRequest };
  const listener = (req: IncomingMessage, res: ServerResponse): void => {
    handle(service, req, res).catch((err: unknown) => {
      log.error({ err }, 'unhandled request error');
      if (!res.headersSent) res.writeHead(500).end();
    });
  };
  const server: Server = opts.tls
    ? createHttpsServer({ key: opts.tls.key, cert: opts.tls.cert }, listener)
    : createHttpServer(listener);
  await listen(server, opts.port ?? 0, opts.address ?? '127.0.0.1');
  const { port } = server.address() as AddressInfo;
  const url = `${opts.tls ? 'https' : 'http'}://${opts.address ?? '127.0.0.1'}:${port}`;
  log.info({ url, systems: systems.length }, 'virtual BMC listening');
  if (opts.console !== false) {
    try {
      state.consoleServer = await startConsole(state, opts.address ?? '127.0.0.1', opts.console);
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
      state.faults.set(f);
      if (f.hostsInPostMs) for (const s of systems) s.enterPost(f.hostsInPostMs);
      if (f.postAtNextPatchMs) for (const s of systems) s.armPostAtNextPatch(f.postAtNextPatchMs);
    },
    biosJobs: () => systems.reduce((n, s) => n + s.biosJobs, 0),
    accounts: state.accounts,
    console: state.consoleServer,
    requests: () => records.slice(),
    clearRequests: () => {
      records.length = 0;
    },
    close: () => {
      closing ??= shutDown(server, delays, state, opts.hosts);
      return closing;
    },
  };
}

/** What the request loop works with: the BMC's state, the request log, the pending delays. */
interface Service {
  state: BmcState;
  records: RequestRecord[];
  delays: Delays;
  onRequest: VirtualBmcOptions['onRequest'];
}

/**
 * One request: recorded, passed through the faults (dropped, refused, unavailable), else read and
 * routed; the reply held back by a delay fault, then written with `OData-Version: 4.0`.
 */
async function handle(service: Service, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { state, records, onRequest } = service;
  const { faults, log } = state;
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
  records.push(rec);
  if (records.length > MAX_RECORDS) records.splice(0, records.length - MAX_RECORDS);
  const fate = faults.admit(rec.method, path);
  if (fate.kind === 'drop') {
    log.debug({ method: rec.method, path }, 'fault: dropping connection');
    onRequest?.(rec);
    req.socket.destroy();
    return;
  }
  const reply = fate.kind === 'serve' ? await answer(state, req, path, rec) : refusal(fate);
  rec.status = reply.status;
  onRequest?.(rec);
  const delay = faults.responseDelay(rec.method, path);
  if (delay > 0) await service.delays.pause(delay);
  if (res.destroyed || res.writableEnded) return;
  const payload = reply.body === undefined ? undefined : JSON.stringify(reply.body);
  res.writeHead(reply.status, {
    'odata-version': '4.0',
    ...(payload === undefined ? {} : { 'content-type': 'application/json; charset=utf-8' }),
    ...reply.headers,
  });
  res.end(payload);
  rec.answeredAt = Date.now();
}

/** The routed reply to an admitted request; 500 for an unexpected error (logged). */
async function answer(
  state: BmcState,
  req: IncomingMessage,
  path: string,
  rec: RequestRecord,
): Promise<Reply> {
  try {
    const body = await readBody(req);
    rec.body = redact(body);
    return await route(state, req, path, body, rec);
  } catch (err) {
    if (err instanceof HttpFailure) return err.reply;
    state.log.error({ err, method: rec.method, path }, 'request failed');
    return { status: 500, body: redfishError('InternalError', 'internal error') };
  }
}

/** The reply of a `refuse` or `unavailable` fault. */
function refusal(fate: Extract<RequestFate, { kind: 'unavailable' | 'refuse' }>): Reply {
  if (fate.kind === 'unavailable' || fate.status === 503) {
    return {
      status: 503,
      body: redfishError('ServiceTemporarilyUnavailable', 'the service is temporarily unavailable'),
      headers: { 'retry-after': String(fate.retryAfterSeconds) },
    };
  }
  return { status: fate.status, body: redfishError('PropertyNotWritable', 'this system refuses changes') };
}

/** The response delays in progress, so that close() can release them at once. */
class Delays {
  private readonly pending = new Set<{ timer: NodeJS.Timeout; resolve: () => void }>();

  /** Resolves after `ms`, or at {@link releaseAll}. */
  pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const entry = {
        timer: setTimeout(() => {
          this.pending.delete(entry);
          resolve();
        }, ms),
        resolve,
      };
      this.pending.add(entry);
    });
  }

  releaseAll(): void {
    for (const d of this.pending) {
      clearTimeout(d.timer);
      d.resolve();
    }
    this.pending.clear();
  }
}

function listen(server: Server, port: number, address: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, address, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/** The SSH serial console on `address`, its logins checked by the AccountService. */
function startConsole(
  state: BmcState,
  address: string,
  options: VirtualBmcOptions['console'],
): Promise<ConsoleServer> {
  const c = options === false ? undefined : options;
  return startConsoleServer({
    address,
    port: c?.port ?? 0,
    ...(c?.hostKey ? { hostKey: c.hostKey } : {}),
    systems: state.systems.map((s) => ({ id: s.id, host: s.host })),
    // SSH logins are the AccountService's too: a wrong password counts towards the lockout.
    checkCredentials: (user: string, password: string) => {
      const outcome = state.accounts.authenticate(user, password);
      return outcome.ok && !outcome.account.passwordChangeRequired;
    },
    log: state.log,
  });
}

/** Stops serving, releases held-back replies, closes the console, the systems and every host. */
async function shutDown(server: Server, delays: Delays, state: BmcState, hosts: Host[]): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeAllConnections();
  delays.releaseAll();
  await state.consoleServer?.close();
  await closed;
  await Promise.all(state.systems.map((s) => s.close()));
  await Promise.all(hosts.map((h) => h.close()));
}
