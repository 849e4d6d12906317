/**
 * The HTTP shell shared by the registry and the boot server: Fastify with a 1 MiB body limit,
 * JSON-only request bodies, answers for bad input that are always 4xx (400 malformed JSON or shape,
 * 413 too large, 415 wrong content type, 404 unknown route), 503 + `Retry-After` for an unavailable
 * API server, request metrics, and logs that never contain a token (query strings are dropped from
 * logged URLs, `Authorization` is never logged).
 */
import Fastify, { type FastifyError, LogController } from 'fastify';
import type { Logger } from 'pino';
import { Counter, Histogram, type Registry } from 'prom-client';
import type { EventRecorder } from '../runtime/events.js';
import type { BootTargetSources } from './boot-target.js';
import { HttpError } from './http-error.js';

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
}

/** Largest accepted request body in bytes (DESIGN.md section 4). */
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
export function createHttpApp(server: string, log: Logger, registry: Registry) {
  const metrics = httpMetrics(registry);
  const app = Fastify({
    loggerInstance: log.child({ server }),
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

  app.addHook('onResponse', async (req, reply) => {
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

/** Binds `app` and resolves its base URL (`http://host:port`). */
export async function listen(
  app: HttpApp,
  host: string,
  port: number,
): Promise<{ url: string; port: number }> {
  await app.listen({ host, port });
  const addr = app.server.address();
  const bound = typeof addr === 'object' && addr ? addr.port : port;
  return { url: `http://${host.includes(':') ? `[${host}]` : host}:${bound}`, port: bound };
}
