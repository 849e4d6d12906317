/**
 * Minimal stand-in for the boot server and the registry (one node:http server, both roles), for tests
 * and the sim benchmark. It renders iPXE scripts with the kernel command-line keys documented in
 * `src/virtualbmc/ipxe.ts`, checks per-host tokens, and records what the hosts did.
 *
 * Routes: `GET /ipxe/{uuid}`, `GET /ignition/{uuid}?token=…`, `POST /register`, `POST /bootstate`
 * (Bearer token). UUIDs are accepted in any case.
 */

import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { canonicalSystemUUID } from '../api/system-uuid.js';

export type StandinMode = 'probe' | 'os' | 'local';

export interface StandinOptions {
  /** What each host is told to do. Default `probe`. */
  mode?: (uuid: string) => StandinMode;
  /** The first N `/register` and `/bootstate` requests get 503 with `Retry-After: 0`. */
  failCallbacks?: number;
  /** Answer every callback with this status (e.g. 409 for a token of an earlier attempt). */
  callbackStatus?: number;
}

export interface Callback {
  path: '/register' | '/bootstate';
  uuid: string;
  body: Record<string, unknown>;
  authorization: string | undefined;
  status: number;
  /** When the request arrived (`performance.now()`, ms). */
  at: number;
}

export interface Standin {
  url: string;
  /** Raw paths of every `/ipxe/…` request, in arrival order. */
  ipxePaths: string[];
  /** Canonical UUIDs whose ignition was fetched with the right token. */
  ignitionFetched: string[];
  /** Every callback received, including rejected ones. */
  callbacks: Callback[];
  /** The token the stand-in rendered for a host. */
  tokenFor(uuid: string): string;
  /** Resolves once `n` callbacks were answered 2xx; rejects after `timeoutMs`. */
  waitForAccepted(n: number, timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}

export async function startStandin(opts: StandinOptions = {}): Promise<Standin> {
  const tokens = new Map<string, string>();
  // One random token per host, made when its script is first rendered.
  const tokenFor = (uuid: string): string =>
    tokens.get(uuid) ?? (tokens.set(uuid, randomBytes(16).toString('hex')).get(uuid) as string);
  let failuresLeft = opts.failCallbacks ?? 0;
  const acceptance = new Acceptance();
  const state = {
    ipxePaths: [] as string[],
    ignitionFetched: [] as string[],
    callbacks: [] as Callback[],
  };
  let base = '';

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://standin');
    const parts = url.pathname.split('/').filter((p) => p !== '');
    if (req.method === 'GET' && parts[0] === 'ipxe' && parts.length === 2) {
      state.ipxePaths.push(url.pathname);
      const uuid = canonicalSystemUUID(parts[1]);
      if (uuid === undefined) return send(res, 400, 'not a UUID');
      const mode = opts.mode?.(uuid) ?? 'probe';
      if (mode === 'local') return send(res, 200, '#!ipxe\necho booting from local disk\nexit\n');
      return send(res, 200, ipxeScript(base, uuid, mode, tokenFor(uuid)));
    }
    if (req.method === 'GET' && parts[0] === 'ignition' && parts.length === 2) {
      const uuid = canonicalSystemUUID(parts[1]);
      if (uuid === undefined) return send(res, 400, 'not a UUID');
      if (url.searchParams.get('token') !== tokens.get(uuid)) return send(res, 401, 'bad token');
      state.ignitionFetched.push(uuid);
      return send(res, 200, JSON.stringify({ ignition: { version: '3.3.0' } }), 'application/json');
    }
    if (req.method === 'POST' && (url.pathname === '/register' || url.pathname === '/bootstate')) {
      const body = await readJson(req);
      if (!body) return send(res, 400, 'bad JSON');
      const uuid = canonicalSystemUUID(body['systemUUID']) ?? '';
      const cb: Callback = {
        path: url.pathname,
        uuid,
        body,
        authorization: req.headers.authorization,
        status: 0,
        at: performance.now(),
      };
      state.callbacks.push(cb);
      if (failuresLeft > 0) {
        failuresLeft--;
        cb.status = 503;
        return send(res, 503, 'try again');
      }
      cb.status = opts.callbackStatus ?? callbackStatus(cb, tokens.get(uuid));
      send(res, cb.status, cb.status === 200 ? '{}' : 'rejected', 'application/json');
      if (cb.status === 200) acceptance.accept();
      return;
    }
    send(res, 404, 'not found');
  };

  const server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) send(res, 500, 'error');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  return {
    url: base,
    ...state,
    tokenFor,
    waitForAccepted: (n, timeoutMs) => acceptance.wait(n, timeoutMs),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function send(res: ServerResponse, status: number, body: string, type = 'text/plain'): void {
  res.writeHead(status, { 'content-type': type, ...(status === 503 ? { 'retry-after': '0' } : {}) });
  res.end(body);
}

/** The request body as a JSON object; undefined when it is not JSON. */
async function readJson(req: IncomingMessage): Promise<Record<string, unknown> | undefined> {
  const chunks: Buffer[] = [];
  for await (const c of req as AsyncIterable<Buffer>) chunks.push(c);
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

/** The iPXE script of `uuid` in `mode` (probe or os): kernel, initrd and the agent's arguments. */
function ipxeScript(base: string, uuid: string, mode: StandinMode, token: string): string {
  const args = [
    `metal.mode=${mode}`,
    `metal.registry=${base}`,
    `metal.uuid=${uuid}`,
    ...(mode === 'os' ? [`metal.token=${token}`] : []),
    `ignition.config.url=${base}/ignition/${uuid}?token=${token}`,
    'console=ttyS0',
  ];
  return `#!ipxe\nkernel ${base}/images/vmlinuz initrd=initrd.img ${args.join(' ')}\ninitrd ${base}/images/initrd.img\nboot\n`;
}

/** The status a callback gets: 400 for a malformed one, 401 for /bootstate without the host's token, else 200. */
function callbackStatus(cb: Callback, token: string | undefined): number {
  if (cb.uuid === '') return 400;
  if (cb.path === '/register' && typeof cb.body['data'] !== 'object') return 400;
  if (cb.path === '/bootstate' && cb.body['booted'] !== true) return 400;
  if (cb.path === '/bootstate' && cb.authorization !== `Bearer ${token}`) return 401;
  return 200;
}

/** Counts accepted callbacks and resolves the waiters whose count was reached. */
class Acceptance {
  private accepted = 0;
  private readonly waiters: Array<{ n: number; resolve: () => void }> = [];

  accept(): void {
    this.accepted++;
    for (const w of [...this.waiters]) {
      if (this.accepted >= w.n) {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        w.resolve();
      }
    }
  }

  /** Resolves once `n` callbacks were accepted; rejects after `timeoutMs`. */
  wait(n: number, timeoutMs: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (this.accepted >= n) return resolve();
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(entry), 1);
        reject(new Error(`only ${this.accepted} of ${n} callbacks accepted within ${timeoutMs} ms`));
      }, timeoutMs);
      const entry = {
        n,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      this.waiters.push(entry);
    });
  }
}
