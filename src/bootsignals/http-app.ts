/**
 * The HTTP shell shared by the registry and the boot server: Fastify with a 1 MiB body limit,
 * JSON-only request bodies, answers for bad input that are always 4xx (400 malformed JSON or shape,
 * 413 too large, 415 wrong content type, 404 unknown route), 503 + `Retry-After` for an unavailable
 * API server, request metrics, and logs that never contain a token (query strings are dropped from
 * logged URLs, `Authorization` is never logged).
 *
 * Bounded sockets (security review S7): a request must arrive whole within `requestMs` (headers within
 * `headersMs`), an idle keep-alive connection is closed after `keepAliveMs`, and any socket without
 * traffic for `idleMs`; slow or stalled clients cannot hold file descriptors. The limits bound what
 * a client SENDS; streaming a large image to a slow client is bounded by `idleMs` only.
 * Too many 401s from one address (an IPv6 address: its /64, N16) make its requests to authenticated routes answer 429 (see
 * auth-failure-limit.ts). With `tls`, the server
 * speaks HTTPS with the given certificate (PEM; security review S17).
 */
import Fastify, {
  type FastifyError,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
  LogController,
} from 'fastify';
import type { Logger } from 'pino';
import { Counter, Histogram, type Registry } from 'prom-client';
import type { EventRecorder } from '../runtime/events.js';
import { AuthFailureLimit, type AuthFailureLimitOptions } from './auth-failure-limit.js';
import type { BootTargetSources } from './boot-target.js';
import { addressBucket } from './client-address.js';
import { HttpError } from './http-error.js';

/** Socket limits in milliseconds (see the file comment). */
export interface HttpTimeouts {
  /** Whole request received. Default 30 000. */
  requestMs?: number;
  /** Request headers received. Default 10 000. */
  headersMs?: number;
  /** Idle keep-alive connection between requests. Default 5 000. */
  keepAliveMs?: number;
  /** Socket without traffic in either direction. Default 60 000. */
  idleMs?: number;
}

/** PEM certificate chain and key for HTTPS. */
export interface TlsFiles {
  cert: string | Buffer;
  key: string | Buffer;
}

/**
 * Route `config` of routes that authenticate: their 401s spend the client address's budget, and
 * they answer 429 while it is spent.
 */
export interface RouteSecurity {
  authenticated?: boolean;
  /**
   * An unauthenticated boot-file route (security review N4): its 404 answers (unknown server, no
   * boot configuration; on `/ipxe` the local-boot answer to an unknown UUID, N16) spend the client address's second budget ({@link UNSERVED_LIMIT}), and it
   * answers 429 while that is spent. Its 503 answers do not: what they cost is paced per SBC and per
   * owner instead (boot-target.ts, power-intent.ts), and hosts behind one address (NAT, simulated
   * hosts) polling `AwaitingPowerOn` as told must not lock each other out.
   */
  unservedBudget?: boolean;
}
/** Route options marking a route as authenticated (see {@link RouteSecurity}). */
export const AUTHENTICATED = { config: { authenticated: true } satisfies RouteSecurity };
/** Route options of the boot-file routes (see {@link RouteSecurity.unservedBudget}). */
export const UNSERVED_BUDGETED = { config: { unservedBudget: true } satisfies RouteSecurity };
/** 404 answers per address on budgeted routes: a burst of 60, then 2 per second. */
export const UNSERVED_LIMIT = { burst: 60, perSecond: 2 } as const;

/** Options of {@link createHttpApp} beyond its name, logger and metrics. */
export interface HttpAppOptions {
  timeouts?: HttpTimeouts;
  authFailureLimit?: AuthFailureLimitOptions;
  tls?: TlsFiles;
}

/** What the registry and the boot server both take: the caches they read, where to listen, where to log. */
export interface SignalServerOptions extends BootTargetSources {
  events: EventRecorder;
  log: Logger;
  /** Listen address; default 127.0.0.1. */
  host?: string;
  /** TCP port; 0 picks a free one. */
  port: number;
  /** Prometheus registry for request metrics (a private one when unset). */
  metrics?: Registry;
  /** Socket limits (defaults: see {@link HttpTimeouts}). */
  timeouts?: HttpTimeouts;
  /** 401 budget per client address (defaults: see auth-failure-limit.ts). */
  authFailureLimit?: AuthFailureLimitOptions;
  /** Serve HTTPS with this certificate instead of plain HTTP. */
  tls?: TlsFiles;
}

/** Largest accepted request body in bytes (1 MiB): a probe's registration is tens of KiB; larger bodies get 413 unread. */
export const BODY_LIMIT_BYTES = 1024 * 1024;

interface HttpMetrics {
  requests: Counter<'server' | 'route' | 'method' | 'status'>;
  duration: Histogram<'server' | 'route' | 'method'>;
  rejected: Counter<'server' | 'reason'>;
}
const metricsByRegistry = new WeakMap<Registry, HttpMetrics>();

function httpMetrics(registry: Registry): HttpMetrics {
  let m = metricsByRegistry.get(registry);
  if (!m) {
    m = {
      requests: new Counter({
        name: 'metal_http_requests_total',
        help: 'HTTP requests by server, route, method and status.',
        labelNames: ['server', 'route', 'method', 'status'],
        registers: [registry],
      }),
      duration: new Histogram({
        name: 'metal_http_request_duration_seconds',
        help: 'HTTP request latency in seconds.',
        labelNames: ['server', 'route', 'method'],
        buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
        registers: [registry],
      }),
      rejected: new Counter({
        name: 'metal_callbacks_rejected_total',
        help: 'Requests answered with 4xx or 503, by reason.',
        labelNames: ['server', 'reason'],
        registers: [registry],
      }),
    };
    metricsByRegistry.set(registry, m);
  }
  return m;
}

/** URL without its query string (which may hold a callback token). */
export function redactedUrl(url: string): string {
  const q = url.indexOf('?');
  return q < 0 ? url : `${url.slice(0, q)}?…`;
}

/** The Fastify options of the socket limits (see {@link HttpTimeouts}) and the transport (HTTP or HTTPS). */
function socketOptions(opts: HttpAppOptions) {
  const t = opts.timeouts ?? {};
  const requestMs = t.requestMs ?? 30_000;
  const headersMs = Math.min(t.headersMs ?? 10_000, requestMs);
  // Node checks the request and header deadlines on this period; keep it finer than the deadlines.
  const checkMs = Math.max(50, Math.min(1000, Math.floor(headersMs / 2)));
  const serverOptions = {
    headersTimeout: headersMs,
    requestTimeout: requestMs,
    connectionsCheckingInterval: checkMs,
  };
  const transport: Partial<FastifyServerOptions> & { https?: object; http?: object } = opts.tls
    ? { https: { ...serverOptions, cert: opts.tls.cert, key: opts.tls.key } }
    : { http: serverOptions };
  return {
    ...(transport as object),
    requestTimeout: requestMs,
    keepAliveTimeout: t.keepAliveMs ?? 5_000,
    connectionTimeout: t.idleMs ?? 60_000,
  };
}

/** A Fastify instance configured as described above. `server` names it in metrics and logs. */
export function createHttpApp(server: string, log: Logger, registry: Registry, opts: HttpAppOptions = {}) {
  const metrics = httpMetrics(registry);
  const budgets: Budgets = {
    authFailures: new AuthFailureLimit(opts.authFailureLimit),
    unserved: new AuthFailureLimit(UNSERVED_LIMIT),
  };
  const app = Fastify({
    ...socketOptions(opts),
    // `component`, not `server`: the routes bind `server` to the Server object's name (issue 36: the
    // key appeared twice in one JSON line, and parsers keep only one of the two).
    loggerInstance: log.child({ component: server }),
    // Our onResponse hook logs every request once, with the query string (tokens) removed.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: BODY_LIMIT_BYTES,
    // Long garbage in a path parameter must reach our validator (400), not the router's 404.
    routerOptions: { maxParamLength: 16 * 1024 },
    trustProxy: false,
    // Agents keep connections alive; closing must not wait out their keep-alive timeout.
    forceCloseConnections: true,
  });
  // Only JSON bodies: Fastify answers 415 for any other content type once the text parser is gone.
  app.removeContentTypeParser('text/plain');
  app.addHook('onRequest', async (req, reply) => {
    const spent = spentBudget(req, budgets);
    if (!spent) return;
    metrics.rejected.inc({ server, reason: spent.reason });
    (req as { rejectReason?: string }).rejectReason = spent.reason;
    return reply
      .code(429)
      .header('retry-after', String(spent.wait))
      .type('application/json')
      .send({ reason: spent.reason, message: spent.message });
  });
  app.addHook('onResponse', async (req, reply) => {
    spendBudgets(req, reply.statusCode, budgets);
    logAndCount(server, metrics, req, reply);
  });
  app.setErrorHandler((err: FastifyError | HttpError, req, reply) => {
    const answer = errorAnswer(err);
    if (answer.retryAfterSeconds !== undefined)
      void reply.header('retry-after', String(answer.retryAfterSeconds));
    if (answer.status === 500 && !(err instanceof HttpError))
      req.log.error({ err, url: redactedUrl(req.url) }, 'internal error');
    const { status, reason, message } = answer;
    metrics.rejected.inc({ server, reason });
    (req as { rejectReason?: string }).rejectReason = reason;
    void reply.code(status).type('application/json').send({ reason, message });
  });
  app.setNotFoundHandler((req, reply) => {
    metrics.rejected.inc({ server, reason: 'NotFound' });
    void reply
      .code(404)
      .type('application/json')
      .send({ reason: 'NotFound', message: `no route ${req.method} ${redactedUrl(req.url)}` });
  });
  return app;
}

/** The per-address budgets of an app: 401s on authenticated routes, 404s on budgeted ones. */
interface Budgets {
  authFailures: AuthFailureLimit;
  unserved: AuthFailureLimit;
}

/**
 * The budget a request to its route finds spent, if any (the 429 it gets: reason, message and the
 * `Retry-After` seconds). The unserved budget is checked before the 401 budget.
 */
function spentBudget(
  req: FastifyRequest,
  budgets: Budgets,
): { reason: string; message: string; wait: number } | undefined {
  const sec = req.routeOptions.config as RouteSecurity | undefined;
  if (sec?.unservedBudget) {
    const wait = budgets.unserved.retryAfterSeconds(budgetKey(req.socket.remoteAddress));
    if (wait > 0)
      return {
        reason: 'TooManyUnservedRequests',
        message: 'too many requests from this address asked for unknown servers (404)',
        wait,
      };
  }
  if (!sec?.authenticated) return undefined;
  const wait = budgets.authFailures.retryAfterSeconds(budgetKey(req.socket.remoteAddress));
  if (wait > 0)
    return {
      reason: 'TooManyAuthFailures',
      message: 'too many failed authentications from this address',
      wait,
    };
  return undefined;
}

/** Spends the budgets an answered request costs: any 401; a 404 (or an unserved answer) on a budgeted route. */
function spendBudgets(req: FastifyRequest, status: number, budgets: Budgets): void {
  if (status === 401) budgets.authFailures.fail(budgetKey(req.socket.remoteAddress));
  if (
    (status === 404 || (req as { unserved?: boolean }).unserved) &&
    (req.routeOptions.config as RouteSecurity | undefined)?.unservedBudget
  )
    budgets.unserved.fail(budgetKey(req.socket.remoteAddress));
}

/** Request metrics and the one log line of an answered request (its URL without the query string). */
function logAndCount(server: string, metrics: HttpMetrics, req: FastifyRequest, reply: FastifyReply): void {
  const route = req.routeOptions.url ?? 'unmatched';
  const status = reply.statusCode;
  metrics.requests.inc({ server, route, method: req.method, status: String(status) });
  metrics.duration.observe({ server, route, method: req.method }, reply.elapsedTime / 1000);
  const entry = {
    method: req.method,
    url: redactedUrl(req.url),
    client: req.socket.remoteAddress,
    status,
    ms: Math.round(reply.elapsedTime * 10) / 10,
    reason: (req as { rejectReason?: string }).rejectReason,
  };
  // A rejection is something an operator acts on (warn); a 503 is a pause the agent rides out.
  if (status === 503) req.log.info(entry, 'request deferred');
  else if (status >= 400) req.log.warn(entry, 'request rejected');
  else req.log.debug(entry, 'request served');
}

/**
 * The JSON answer to an error (pure): an {@link HttpError} as it says (with its `Retry-After`), a
 * validation error 400 `InvalidBody`, another 4xx of Fastify with its status, anything else 500
 * `InternalError` (whose details are logged, never answered).
 */
export function errorAnswer(err: FastifyError | HttpError): {
  status: number;
  reason: string;
  message: string;
  retryAfterSeconds?: number;
} {
  if (err instanceof HttpError) {
    const { status, reason, message } = err;
    return err.retryAfterSeconds !== undefined
      ? { status, reason, message, retryAfterSeconds: err.retryAfterSeconds }
      : { status, reason, message };
  }
  if (err.validation) return { status: 400, reason: 'InvalidBody', message: err.message };
  if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500)
    return { status: err.statusCode, reason: statusReason(err.statusCode, err.code), message: err.message };
  return { status: 500, reason: 'InternalError', message: 'internal error' };
}

function statusReason(status: number, code: string | undefined): string {
  if (status === 413) return 'BodyTooLarge';
  if (status === 415) return 'UnsupportedMediaType';
  if (code === 'FST_ERR_CTP_EMPTY_JSON_BODY') return 'EmptyBody';
  if (status === 400) return 'MalformedBody';
  return `Http${status}`;
}

export type HttpApp = ReturnType<typeof createHttpApp>;

/** A listening signal server (registry or boot server): its base URL, port and how to stop it. */
export interface RunningServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

/** Binds `app` and resolves its base URL (`http://host:port`). */
export async function listen(
  app: HttpApp,
  host: string,
  port: number,
  tls = false,
): Promise<{ url: string; port: number }> {
  await app.listen({ host, port });
  const addr = app.server.address();
  const bound = typeof addr === 'object' && addr ? addr.port : port;
  const scheme = tls ? 'https' : 'http';
  return { url: `${scheme}://${host.includes(':') ? `[${host}]` : host}:${bound}`, port: bound };
}

/** The budget key of a socket address: the address, for IPv6 its /64 (N16, client-address.ts). */
function budgetKey(remote: string | undefined): string {
  return addressBucket(remote);
}
