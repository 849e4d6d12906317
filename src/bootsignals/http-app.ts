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
import Fastify, { type FastifyError, type FastifyServerOptions, LogController } from 'fastify';
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

/** A Fastify instance configured as described above. `server` names it in metrics and logs. */
export function createHttpApp(server: string, log: Logger, registry: Registry, opts: HttpAppOptions = {}) {
  const metrics = httpMetrics(registry);
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
  const authFailures = new AuthFailureLimit(opts.authFailureLimit);
  const unserved = new AuthFailureLimit(UNSERVED_LIMIT);
  const app = Fastify({
    ...(transport as object),
    requestTimeout: requestMs,
    keepAliveTimeout: t.keepAliveMs ?? 5_000,
    connectionTimeout: t.idleMs ?? 60_000,
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
    const sec = req.routeOptions.config as RouteSecurity | undefined;
    if (sec?.unservedBudget) {
      const wait = unserved.retryAfterSeconds(budgetKey(req.socket.remoteAddress));
      if (wait > 0) {
        metrics.rejected.inc({ server, reason: 'TooManyUnservedRequests' });
        (req as { rejectReason?: string }).rejectReason = 'TooManyUnservedRequests';
        return reply.code(429).header('retry-after', String(wait)).type('application/json').send({
          reason: 'TooManyUnservedRequests',
          message: 'too many requests from this address asked for unknown servers (404)',
        });
      }
    }
    if (!sec?.authenticated) return;
    const wait = authFailures.retryAfterSeconds(budgetKey(req.socket.remoteAddress));
    if (wait > 0) {
      metrics.rejected.inc({ server, reason: 'TooManyAuthFailures' });
      (req as { rejectReason?: string }).rejectReason = 'TooManyAuthFailures';
      return reply.code(429).header('retry-after', String(wait)).type('application/json').send({
        reason: 'TooManyAuthFailures',
        message: 'too many failed authentications from this address',
      });
    }
  });

  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url ?? 'unmatched';
    const status = reply.statusCode;
    if (status === 401) authFailures.fail(budgetKey(req.socket.remoteAddress));
    if (
      (status === 404 || (req as { unserved?: boolean }).unserved) &&
      (req.routeOptions.config as RouteSecurity | undefined)?.unservedBudget
    )
      unserved.fail(budgetKey(req.socket.remoteAddress));
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
  });

  app.setErrorHandler((err: FastifyError | HttpError, req, reply) => {
    let status: number;
    let reason: string;
    let message: string;
    if (err instanceof HttpError) {
      ({ status, reason, message } = err);
      if (err.retryAfterSeconds !== undefined)
        void reply.header('retry-after', String(err.retryAfterSeconds));
    } else if (err.validation) {
      status = 400;
      reason = 'InvalidBody';
      message = err.message;
    } else if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
      status = err.statusCode;
      reason = statusReason(status, err.code);
      message = err.message;
    } else {
      req.log.error({ err, url: redactedUrl(req.url) }, 'internal error');
      status = 500;
      reason = 'InternalError';
      message = 'internal error';
    }
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
