/**
 * Liveness, readiness and metrics over plain HTTP, at the paths Kubernetes probes and Prometheus
 * scrapers expect: `GET /healthz` (200 while the event loop answers), `GET /readyz` (200 once
 * `ready()` is true, 503 before), `GET /metrics` (Prometheus text format). Anything else: 404;
 * methods other than GET/HEAD: 405.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

export interface HealthServerOptions {
  /** TCP port; 0 picks a free one (see the returned `port`). */
  port: number;
  /** Listen address. Default `0.0.0.0`. */
  host?: string;
  registry: Registry;
  ready: () => boolean;
}

/** Starts listening; resolves with the bound port once listening. Rejects when the port is taken. */
export function startHealthServer(
  opts: HealthServerOptions,
): Promise<{ port: number; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    void handle(req, res, opts);
  });
  server.keepAliveTimeout = 5_000;
  return new Promise((ok, fail) => {
    server.once('error', fail);
    server.listen(opts.port, opts.host ?? '0.0.0.0', () => {
      server.off('error', fail);
      ok({
        port: (server.address() as AddressInfo).port,
        close: () =>
          new Promise<void>((done) => {
            server.close(() => done());
            server.closeAllConnections();
          }),
      });
    });
  });
}

async function handle(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  opts: HealthServerOptions,
): Promise<void> {
  const path = (req.url ?? '/').split('?')[0];
  if (req.method !== 'GET' && req.method !== 'HEAD')
    return send(res, 405, 'method not allowed\n', { allow: 'GET, HEAD' });
  try {
    switch (path) {
      case '/healthz':
        return send(res, 200, 'ok\n');
      case '/readyz':
        return opts.ready() ? send(res, 200, 'ok\n') : send(res, 503, 'not ready\n');
      case '/metrics':
        return send(res, 200, await opts.registry.metrics(), { 'content-type': opts.registry.contentType });
      default:
        return send(res, 404, 'not found\n');
    }
  } catch (err) {
    return send(res, 500, `${String(err)}\n`);
  }
}

function send(
  res: http.ServerResponse,
  status: number,
  body: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', ...headers });
  res.end(res.req.method === 'HEAD' ? undefined : body);
}
