/**
 * HTTP(S) transport to one Redfish service: authentication (session, falling back to basic),
 * TLS settings, per-request timeouts, and retries with backoff inside a per-call time budget.
 * It knows Redfish's wire conventions (X-Auth-Token, ETag, `Retry-After`, error bodies) but nothing of
 * ComputerSystems; see `redfish-bmc.ts` for that.
 */

import type { IncomingHttpHeaders } from 'node:http';
import { type Logger, pino } from 'pino';
import { Agent, request } from 'undici';
import { Backoff } from '../runtime/backoff.js';
import type { CallOptions, TransportSecurity } from './bmc.js';
import {
  BmcError,
  RedfishAuthError,
  RedfishBudgetExceededError,
  RedfishHttpError,
  RedfishTransportError,
} from './errors.js';
import {
  ForeignLinkError,
  isServicePath,
  parseRedfishError,
  parseSession,
  RedfishParseError,
} from './parse.js';
import { Budget, isRetryableStatus, parseRetryAfter } from './retry.js';

export interface RedfishClientOptions {
  /** Scheme, host and optional port of the service, e.g. `https://10.0.0.5` or `http://127.0.0.1:8000`. */
  endpoint: string;
  username: string;
  password: string;
  /**
   * `session` (default): log in with POST to the SessionService (Redfish spec "Session login") and send
   * `X-Auth-Token`; when the service offers no usable session login (HTTP 400/403/404/405/501, or no
   * token in the answer), fall back to basic authentication. `basic`: HTTP Basic on every request.
   */
  auth?: 'session' | 'basic';
  /** URI of the session collection. Default `/redfish/v1/SessionService/Sessions` (ServiceRoot `Links.Sessions`). */
  sessionsUri?: string;
  /** Accept any TLS certificate (self-signed BMC certificates). Default false. */
  insecureTLS?: boolean;
  /** PEM CA certificate(s) to trust for the BMC instead of the system store. */
  ca?: string | string[];
  /** Timeout of one HTTP attempt in ms (connect + headers + body). Default 10000. */
  requestTimeoutMs?: number;
  /** Default total budget of one call in ms, across all attempts and backoff pauses. Default 30000. */
  budgetMs?: number;
  /** First backoff pause in ms (±25 % jitter); doubles per retry. Default 200. */
  backoffInitialMs?: number;
  /** Upper bound of any backoff pause in ms. Default 5000. */
  backoffMaxMs?: number;
  /** Concurrent connections to the service; BMCs handle few. Default 4. */
  maxConnections?: number;
  /** Largest response body accepted, bytes. Default 8 MiB. */
  maxBodyBytes?: number;
  logger?: Logger;
}

/** A successful (2xx) response. */
export interface RedfishResponse {
  status: number;
  /** Parsed JSON body; `undefined` when the body was empty. */
  body: unknown;
  /** `ETag` header, or `@odata.etag` from the body when the header is absent. */
  etag: string | undefined;
  /** `Location` header as a path (origin stripped when it is the service's own). */
  location: string | undefined;
  headers: IncomingHttpHeaders;
}

export interface RequestOptions {
  /** JSON-serialised into the request body. */
  body?: unknown;
  headers?: Record<string, string>;
  /**
   * Whether repeating the request is harmless. Default: true for GET/PATCH/DELETE, false for POST.
   * Non-idempotent requests are retried only when the service certainly did not act (503, 429, refused).
   */
  idempotent?: boolean;
  /** Budget shared with other requests of the same call; a fresh default budget when omitted. */
  budget?: Budget;
  /** Send credentials. Default true; false for the login request itself. */
  authenticate?: boolean;
}

const DEFAULT_SESSIONS_URI = '/redfish/v1/SessionService/Sessions';
/**
 * An attempt with less time left than this is not started: it could only time out, and would replace
 * the last real failure (what the caller should see) with a meaningless timeout.
 */
const MIN_ATTEMPT_MS = 50;
/** Statuses of the login POST meaning "no usable session service here", not "bad credentials". */
const NO_SESSION_SERVICE = new Set([400, 403, 404, 405, 501]);

/** OpenSSL verification failures as surfaced by Node's `tls` (error `code`). */
const TLS_CODES = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_SIGNATURE_FAILURE',
]);

const CONNECTION_REFUSED = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ENOTFOUND']);

interface Session {
  token: string;
  uri: string | undefined;
}

type Credentials = { kind: 'basic'; header: string } | { kind: 'session'; session: Session };

export class RedfishClient {
  readonly endpoint: URL;
  private readonly opts: Required<
    Pick<
      RedfishClientOptions,
      'requestTimeoutMs' | 'budgetMs' | 'backoffInitialMs' | 'backoffMaxMs' | 'maxBodyBytes' | 'sessionsUri'
    >
  >;
  private readonly dispatcher: Agent;
  private readonly log: Logger;
  private readonly basicHeader: string;
  private readonly username: string;
  private readonly password: string;
  private mode: 'session' | 'basic';
  private session: Session | undefined;
  private login: Promise<void> | undefined;
  private closed = false;
  private readonly insecureTLS: boolean;
  private readonly hasCa: boolean;

  constructor(options: RedfishClientOptions) {
    this.endpoint = new URL(options.endpoint);
    if (this.endpoint.protocol !== 'https:' && this.endpoint.protocol !== 'http:') {
      throw new BmcError(`unsupported Redfish endpoint scheme ${this.endpoint.protocol}`);
    }
    this.opts = {
      requestTimeoutMs: options.requestTimeoutMs ?? 10_000,
      budgetMs: options.budgetMs ?? 30_000,
      backoffInitialMs: options.backoffInitialMs ?? 200,
      backoffMaxMs: options.backoffMaxMs ?? 5_000,
      maxBodyBytes: options.maxBodyBytes ?? 8 * 1024 * 1024,
      sessionsUri: options.sessionsUri ?? DEFAULT_SESSIONS_URI,
    };
    this.username = options.username;
    this.password = options.password;
    this.basicHeader = `Basic ${Buffer.from(`${options.username}:${options.password}`).toString('base64')}`;
    this.mode = options.auth ?? 'session';
    this.insecureTLS = options.insecureTLS ?? false;
    this.hasCa = options.ca !== undefined && options.ca.length > 0;
    this.log = (options.logger ?? pino({ level: 'silent' })).child({ bmc: this.endpoint.host });
    this.dispatcher = new Agent({
      connections: options.maxConnections ?? 4,
      connect: {
        rejectUnauthorized: !this.insecureTLS,
        ...(this.hasCa ? { ca: options.ca } : {}),
      },
    });
  }

  /** How requests are protected: HTTP, or TLS with or without certificate verification. */
  get transportSecurity(): TransportSecurity {
    if (this.endpoint.protocol === 'http:') return 'http';
    if (this.insecureTLS) return 'tls-unverified';
    return this.hasCa ? 'tls-verified-ca-bundle' : 'tls-verified-system-ca';
  }

  /** Authentication in use: `session` until a login fell back to basic. */
  get authMode(): 'session' | 'basic' {
    return this.mode;
  }

  /** A budget for one call: `opts.budgetMs` or the client default, plus the caller's abort signal. */
  budget(opts?: CallOptions): Budget {
    return new Budget(opts?.budgetMs ?? this.opts.budgetMs, opts?.signal);
  }

  get(path: string, opts: RequestOptions = {}): Promise<RedfishResponse> {
    return this.request('GET', path, opts);
  }

  post(path: string, body: unknown, opts: RequestOptions = {}): Promise<RedfishResponse> {
    return this.request('POST', path, { ...opts, body });
  }

  patch(path: string, body: unknown, opts: RequestOptions = {}): Promise<RedfishResponse> {
    return this.request('PATCH', path, { ...opts, body });
  }

  delete(path: string, opts: RequestOptions = {}): Promise<RedfishResponse> {
    return this.request('DELETE', path, opts);
  }

  /**
   * Sends one request, retrying per the retry policy until it succeeds or the budget runs out: 429/5xx
   * (see `retry.ts`), connection failures, and refusals with a transient MessageId (`vendor.ts`).
   * Returns 2xx responses. Throws `RedfishHttpError` (≥ 400 not retried; `RedfishAuthError` for 401),
   * `RedfishTransportError` (non-idempotent request that may have been applied),
   * `RedfishBudgetExceededError` (retries ran out of time), or the caller's abort reason.
   */
  async request(method: string, path: string, opts: RequestOptions = {}): Promise<RedfishResponse> {
    if (this.closed) throw new BmcError(`${method} ${path}: client is closed`);
    // Paths come from the BMC's own bodies and headers; credentials go to the endpoint's origin only.
    this.assertServicePath(method, path);
    const budget = opts.budget ?? this.budget();
    const idempotent = opts.idempotent ?? method !== 'POST';
    const backoff = new Backoff({ initialMs: this.opts.backoffInitialMs, maxMs: this.opts.backoffMaxMs });
    let attempts = 0;
    let lastError: unknown;
    let relogged = false;
    for (;;) {
      budget.throwIfAborted();
      if (budget.remainingMs() < MIN_ATTEMPT_MS) {
        throw new RedfishBudgetExceededError(method, path, attempts, budget.elapsedMs(), undefined, {
          cause: lastError,
        });
      }
      const credentials = opts.authenticate === false ? undefined : await this.credentials(budget);
      attempts++;
      let res: RawResponse;
      try {
        res = await this.send(method, path, opts, credentials, budget);
      } catch (err) {
        if (budget.signal?.aborted) throw budget.signal.reason;
        if (err instanceof BmcError) throw err;
        const failure = toTransportError(method, path, err);
        if (failure.kind === 'tls' || (!idempotent && failure.maybeApplied)) throw failure;
        lastError = failure;
        await this.pauseBeforeRetry(method, path, undefined, backoff, failure, attempts, budget);
        continue;
      }
      if (res.status < 400) return this.success(method, path, res);

      const info = parseRedfishError(tryJson(res.text));
      const retryAfterMs = parseRetryAfter(res.headers['retry-after']);
      if (res.status === 401 && credentials?.kind === 'session' && !relogged) {
        // Sessions expire (SessionService.SessionTimeout); log in again once.
        relogged = true;
        this.dropSession(credentials.session);
        continue;
      }
      const error =
        res.status === 401
          ? new RedfishAuthError(method, path, res.status, info, retryAfterMs)
          : new RedfishHttpError(method, path, res.status, info, retryAfterMs);
      // A transient refusal (vendor.ts TRANSIENT_MESSAGES) says the service did not act: retrying is safe
      // for any method.
      if (!isRetryableStatus(res.status, idempotent) && !error.transient) throw error;
      lastError = error;
      await this.pauseBeforeRetry(method, path, retryAfterMs, backoff, error, attempts, budget);
    }
  }

  /** Deletes the session (best effort, 2 s) and closes all connections. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    await this.login?.catch(() => undefined);
    const session = this.session;
    if (session?.uri !== undefined) {
      try {
        await this.send(
          'DELETE',
          session.uri,
          {},
          { kind: 'session', session },
          new Budget(Math.min(2_000, this.opts.requestTimeoutMs)),
        );
      } catch (err) {
        this.log.debug({ err: describe(err) }, 'session logout failed');
      }
    }
    this.session = undefined;
    this.closed = true;
    await this.dispatcher.close();
  }

  private async pauseBeforeRetry(
    method: string,
    path: string,
    retryAfterMs: number | undefined,
    backoff: Backoff,
    cause: unknown,
    attempts: number,
    budget: Budget,
  ): Promise<void> {
    const remaining = budget.remainingMs();
    // Our own backoff shrinks to leave the last attempt at least half of what is left. A server-given
    // Retry-After (RFC 9110 §10.2.3) is a floor on it, honoured or the call ends; it never shortens
    // the backoff, so a BMC answering `Retry-After: 0` to every request is not hammered in a loop.
    const delay = Math.max(retryAfterMs ?? 0, Math.min(backoff.next(), remaining / 2));
    if (delay + MIN_ATTEMPT_MS > remaining) {
      throw new RedfishBudgetExceededError(method, path, attempts, budget.elapsedMs(), retryAfterMs, {
        cause,
      });
    }
    // A busy service (transient MessageId) is expected to refuse a few times: not worth a warning each.
    const level = cause instanceof RedfishHttpError && cause.transient ? 'info' : 'warn';
    this.log[level](
      { method, path, attempt: attempts, delayMs: Math.round(delay), err: describe(cause) },
      'Redfish request failed, retrying',
    );
    await budget.pause(delay);
  }

  private async credentials(budget: Budget): Promise<Credentials> {
    if (this.mode === 'session' && this.session === undefined) {
      // Shared by concurrent callers: bounded by this caller's time, but not cancelled by its signal.
      this.login ??= this.createSession(new Budget(budget.remainingMs())).finally(() => {
        this.login = undefined;
      });
      await this.login;
    }
    if (this.mode === 'session' && this.session !== undefined)
      return { kind: 'session', session: this.session };
    return { kind: 'basic', header: this.basicHeader };
  }

  private async createSession(budget: Budget): Promise<void> {
    let res: RedfishResponse;
    try {
      res = await this.request('POST', this.opts.sessionsUri, {
        body: { UserName: this.username, Password: this.password },
        authenticate: false,
        // A repeated login at worst leaves an unused session behind, which the BMC expires.
        idempotent: true,
        budget,
      });
    } catch (err) {
      if (err instanceof RedfishHttpError && NO_SESSION_SERVICE.has(err.status)) {
        this.fallBackToBasic(`session login answered HTTP ${err.status}`);
        return;
      }
      throw err;
    }
    const token = headerValue(res.headers['x-auth-token']);
    if (token === undefined || token === '') {
      this.fallBackToBasic('session login returned no X-Auth-Token');
      return;
    }
    let uri = res.location;
    if (uri === undefined && res.body !== undefined) {
      try {
        uri = parseSession(res.body, this.opts.sessionsUri).uri;
      } catch {
        uri = undefined;
      }
    }
    this.session = { token, uri };
    this.log.debug({ session: uri }, 'Redfish session created');
  }

  private fallBackToBasic(reason: string): void {
    this.log.info({ reason }, 'Redfish session login unavailable, using basic authentication');
    this.mode = 'basic';
  }

  private dropSession(stale: Session): void {
    // Concurrent calls may all see the 401; only the first one discards the (same) session.
    if (this.session === stale) this.session = undefined;
  }

  private async send(
    method: string,
    path: string,
    opts: RequestOptions,
    credentials: Credentials | undefined,
    budget: Budget,
  ): Promise<RawResponse> {
    const timeoutMs = Math.max(1, Math.floor(Math.min(this.opts.requestTimeoutMs, budget.remainingMs())));
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = budget.signal ? AbortSignal.any([timeout, budget.signal]) : timeout;
    const headers: Record<string, string> = {
      accept: 'application/json',
      'odata-version': '4.0',
      ...opts.headers,
    };
    if (credentials?.kind === 'basic') headers['authorization'] = credentials.header;
    if (credentials?.kind === 'session') headers['x-auth-token'] = credentials.session.token;
    let body: string | undefined;
    if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] = 'application/json';
    }
    try {
      const res = await request(new URL(path, this.endpoint), {
        method: method as 'GET',
        headers,
        body,
        signal,
        dispatcher: this.dispatcher,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      const text = await readLimited(res.body, this.opts.maxBodyBytes, `${method} ${path}`);
      return { status: res.statusCode, headers: res.headers, text };
    } catch (err) {
      if (timeout.aborted && !budget.signal?.aborted) throw new TimedOut(timeoutMs, err);
      throw err;
    }
  }

  private success(method: string, path: string, res: RawResponse): RedfishResponse {
    let body: unknown;
    if (res.text.trim() !== '') {
      try {
        body = JSON.parse(res.text);
      } catch {
        throw new RedfishParseError(
          path,
          '(body)',
          'invalid',
          `${method} answered non-JSON: ${res.text.slice(0, 40)}`,
        );
      }
    }
    const odataEtag =
      typeof body === 'object' && body !== null
        ? (body as Record<string, unknown>)['@odata.etag']
        : undefined;
    const location = headerValue(res.headers['location']);
    return {
      status: res.status,
      body,
      etag: headerValue(res.headers['etag']) ?? (typeof odataEtag === 'string' ? odataEtag : undefined),
      location: location === undefined ? undefined : this.toPath(location),
      headers: res.headers,
    };
  }

  /** Throws {@link ForeignLinkError} unless `path` is a path on this service (see `isServicePath`). */
  private assertServicePath(method: string, path: string): void {
    let same = false;
    try {
      same = isServicePath(path) && new URL(path, this.endpoint).origin === this.endpoint.origin;
    } catch {
      same = false;
    }
    if (!same) throw new ForeignLinkError(method, path);
  }

  /**
   * `Location` as a path on this service; `undefined` (and a log line) when it names another origin
   * or is no usable reference, so that nothing is ever sent there.
   */
  private toPath(location: string): string | undefined {
    try {
      const url = new URL(location, this.endpoint);
      const path = url.pathname + url.search;
      if (url.origin === this.endpoint.origin && isServicePath(path)) return path;
    } catch {
      // falls through to the refusal below
    }
    this.log.warn({ location: location.slice(0, 200) }, 'ignoring a Location header outside the BMC');
    return undefined;
  }
}

interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

/** Marks an attempt that hit the per-request timeout (as opposed to the caller aborting). */
class TimedOut extends Error {
  constructor(
    readonly timeoutMs: number,
    cause: unknown,
  ) {
    super(`no complete response within ${timeoutMs} ms`, { cause });
  }
}

function toTransportError(method: string, path: string, err: unknown): RedfishTransportError {
  if (err instanceof TimedOut)
    return new RedfishTransportError(method, path, 'timeout', true, { cause: err });
  const code = errorCode(err);
  if (
    code !== undefined &&
    (TLS_CODES.has(code) || code.startsWith('ERR_TLS_') || code.startsWith('ERR_SSL_'))
  ) {
    return new RedfishTransportError(method, path, 'tls', false, { cause: err });
  }
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new RedfishTransportError(method, path, 'timeout', true, { cause: err });
  }
  if (code === 'UND_ERR_CONNECT_TIMEOUT') {
    return new RedfishTransportError(method, path, 'timeout', false, { cause: err });
  }
  return new RedfishTransportError(method, path, 'connection', !CONNECTION_REFUSED.has(code ?? ''), {
    cause: err,
  });
}

function errorCode(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') return code;
  }
  return undefined;
}

async function readLimited(body: AsyncIterable<Buffer>, limit: number, what: string): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > limit) throw new BmcError(`${what}: response body exceeds ${limit} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function tryJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

function describe(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}
