/**
 * A thin, fast Kubernetes REST client for typed and custom resources.
 *
 * `@kubernetes/client-node` supplies configuration and credentials (kubeconfig, in-cluster,
 * exec/OIDC providers) through `KubeConfig.applyToHTTPSOptions`; the HTTP itself goes through one
 * keep-alive undici pool per client, because client-node's generated clients re-read certificate
 * files and build a new agent on every call, which dominates latency under load.
 *
 * Error model: every non-2xx answer and every transport failure is an {@link ApiError}. `status` is
 * the HTTP status, or 0 when the API server could not be reached (refused, reset, DNS, TLS, timeout,
 * credentials that could not be loaded); callers that face clients of their own map 0 to 503 +
 * Retry-After. Bad arguments (an object without `metadata.name`) throw a plain Error.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type https from 'node:https';
import { StringDecoder } from 'node:string_decoder';
import { createSecureContext } from 'node:tls';
import type { KubeConfig } from '@kubernetes/client-node';
import { type Dispatcher, Pool, ProxyAgent } from 'undici';
import { sleep } from './backoff.js';
import type { RuntimeMetrics } from './metrics.js';
import { TokenBucketRateLimiter } from './rate-limiter.js';
import { apiVersionOf, type KObject, type ResourceType, resourcePath } from './resource.js';

/** A failed API request. `status` 0: not reached (see {@link ApiError.unreachable}). */
export class ApiError extends Error {
  override name = 'ApiError';
  /** HTTP status; 0 when the API server could not be reached (connection refused/reset/timeout). */
  status: number;
  /** `Status.reason` from the API server (`NotFound`, `Conflict`, `Expired`, …), or a transport code. */
  reason?: string;
  /** The parsed response body (usually a `metav1.Status`), when there was one. */
  body?: unknown;
  /** From the `Retry-After` response header (429, 503), in seconds. */
  retryAfterSeconds?: number;

  constructor(
    message: string,
    status: number,
    opts: { reason?: string; body?: unknown; retryAfterSeconds?: number; cause?: unknown } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.status = status;
    this.reason = opts.reason;
    this.body = opts.body;
    this.retryAfterSeconds = opts.retryAfterSeconds;
  }

  /** True when no HTTP answer arrived: the request may or may not have been applied. */
  get unreachable(): boolean {
    return this.status === 0;
  }
  get notFound(): boolean {
    return this.status === 404;
  }
  /** 409: stale resourceVersion (update) or already exists (create, reason `AlreadyExists`). */
  get conflict(): boolean {
    return this.status === 409;
  }
  /** 410 Gone: the requested resourceVersion or continue token was compacted away; relist. */
  get gone(): boolean {
    return this.status === 410;
  }
}

/** True for an {@link ApiError} with HTTP status `status`. */
export function isApiStatus(err: unknown, status: number): err is ApiError {
  return err instanceof ApiError && err.status === status;
}

export interface KubeClientOptions {
  /** `fieldManager` for writes (managedFields ownership; required by server-side apply). Default `metal-operator`. */
  fieldManager?: string;
  /** Per-request limit for response headers and for gaps between body chunks, in ms. Default 30 000. */
  timeoutMs?: number;
  /** Keep-alive connections to the API server for non-watch requests. Default 128. */
  maxConnections?: number;
  metrics?: RuntimeMetrics;
  /**
   * Client-side rate limit in requests/s for everything but watches, as client-go's `rest.Config.QPS`
   * (token bucket). 0 or unset: unlimited (429 backpressure still applies).
   */
  qps?: number;
  /** Bucket size of the rate limit (`rest.Config.Burst`). Default max(1, ceil(qps)). */
  burst?: number;
}

/**
 * Who sent the requests made inside `fn` (its async continuations included), for the
 * `metal_api_requests_total{origin}` breakdown: controllers wrap each reconcile with their name.
 */
export function withRequestOrigin<T>(origin: string, fn: () => T): T {
  return originStore.run(origin, fn);
}
const originStore = new AsyncLocalStorage<string>();

/** See {@link KubeClient.onObject}: an object the API server answered, and the origin that wrote it. */
export type ObjectListener = (obj: KObject, writer: string | undefined) => void;

export interface ListOptions {
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  limit?: number;
  continue?: string;
  resourceVersion?: string;
}

export interface WatchOptions {
  namespace?: string;
  /** Stream changes after this version ('' or '0' also sends the current state as ADDED events). */
  resourceVersion: string;
  allowWatchBookmarks?: boolean;
  /** Server-side end of the stream, in seconds (the API server closes it cleanly then). */
  timeoutSeconds?: number;
  labelSelector?: string;
  fieldSelector?: string;
  /** Client-side dead-connection detector: abort when no byte arrived for this many ms. Default 90 000. */
  inactivityTimeoutMs?: number;
  /** Called once the API server accepted the watch (HTTP 200), before any event. */
  onConnected?: () => void;
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

type Verb = 'get' | 'list' | 'create' | 'update' | 'patch' | 'delete' | 'watch';

interface RequestSpec {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  verb: Verb;
  /** For metrics: the resource plural, with `/status` for the subresource. */
  resource: string;
  path: string;
  query?: string;
  body?: string;
  contentType?: string;
}

/** Transport error codes (undici and libuv) that mean "no HTTP answer". */
const UNREACHABLE_CODES: Record<string, string> = {
  ECONNREFUSED: 'ConnectionRefused',
  ECONNRESET: 'ConnectionReset',
  EPIPE: 'ConnectionReset',
  ETIMEDOUT: 'Timeout',
  EHOSTUNREACH: 'HostUnreachable',
  ENETUNREACH: 'HostUnreachable',
  ENOTFOUND: 'DNSError',
  EAI_AGAIN: 'DNSError',
  UND_ERR_CONNECT_TIMEOUT: 'Timeout',
  UND_ERR_HEADERS_TIMEOUT: 'Timeout',
  UND_ERR_BODY_TIMEOUT: 'Timeout',
  UND_ERR_SOCKET: 'ConnectionReset',
  UND_ERR_CLOSED: 'ConnectionClosed',
  UND_ERR_DESTROYED: 'ConnectionClosed',
};

/** client-go retries 429 (request not processed: API Priority and Fairness) honouring Retry-After. */
const MAX_429_RETRIES = 5;
/** Objects whose last resourceVersion is remembered for the no-op write count (bounded, oldest out). */
const MAX_TRACKED_VERSIONS = 200_000;
/** Dynamic credentials (exec plugins, token files) are re-read at most this often, or after a 401. */
const AUTH_REFRESH_MS = 30_000;

export class KubeClient {
  readonly fieldManager: string;
  private readonly timeoutMs: number;
  private readonly maxConnections: number;
  private readonly origin: string;
  private readonly basePath: string;
  private readonly metrics?: RuntimeMetrics;
  private dispatcher?: Dispatcher;
  private watchDispatcher?: Dispatcher;
  private setup?: Promise<void>;
  private authHeaders: Record<string, string> = {};
  private authLoadedAt = 0;
  private readonly dynamicAuth: boolean;
  private authRefresh?: Promise<void>;
  /** The request rate limit and 429 backpressure (see {@link TokenBucketRateLimiter}). */
  readonly limiter: TokenBucketRateLimiter;
  /**
   * object path → last resourceVersion this client saw (responses and watch events), only with
   * metrics: a write answered with the version it had before changed nothing (the API server does not
   * bump the version of a no-op update or patch).
   */
  private readonly versions = new Map<string, string>();
  /** Called with every object a single-object GET, create, update or patch answered (see {@link onObject}). */
  private readonly objectListeners: ObjectListener[] = [];

  /**
   * Reads the current context of `kc`. Credentials and TLS material are loaded once (lazily, on the
   * first request); throws at once when the kubeconfig has no current cluster.
   */
  constructor(
    private readonly kc: KubeConfig,
    opts: KubeClientOptions = {},
  ) {
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('kubeconfig has no current cluster');
    const url = new URL(cluster.server);
    this.origin = url.origin;
    this.basePath = url.pathname.replace(/\/+$/, '');
    this.fieldManager = opts.fieldManager ?? 'metal-operator';
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.metrics = opts.metrics;
    const user = kc.getCurrentUser();
    this.dynamicAuth = !!(user?.authProvider || user?.exec);
    this.maxConnections = opts.maxConnections ?? 128;
    this.limiter = new TokenBucketRateLimiter({ qps: opts.qps ?? 0, burst: opts.burst });
  }

  /**
   * Registers `fn` for every object this client receives from a single-object GET, create, update,
   * patch or apply (not lists, watches or deletes): the Manager hands them to its informers, whose
   * `get()` then serves the newest version this process has seen (client-go's `MutationCache`) —
   * without it a reconcile that follows its own write reads the older cached version, writes again
   * for nothing or is refused with 409. `fn` must not modify the object (it is the caller's answer).
   * `writer`: for a write's answer (create, update, patch), the request origin that made it (see
   * {@link withRequestOrigin}); undefined for a GET.
   */
  onObject(fn: ObjectListener): void {
    this.objectListeners.push(fn);
  }

  /** The object, or undefined on 404. */
  async get<T extends KObject>(rt: ResourceType, name: string, namespace?: string): Promise<T | undefined> {
    try {
      return (await this.request({
        method: 'GET',
        verb: 'get',
        resource: rt.plural,
        path: resourcePath(rt, namespace, name),
      })) as T;
    } catch (err) {
      if (isApiStatus(err, 404)) return undefined;
      throw err;
    }
  }

  /**
   * One page of a collection (all pages when `limit` is unset). `resourceVersion` of the result is the
   * list's version, the starting point for a watch. A stale `continue` token fails with 410 (`Expired`).
   */
  async list<T extends KObject>(
    rt: ResourceType,
    opts: ListOptions = {},
  ): Promise<{ items: T[]; resourceVersion: string; continue?: string }> {
    const q = query({
      labelSelector: opts.labelSelector,
      fieldSelector: opts.fieldSelector,
      limit: opts.limit,
      continue: opts.continue,
      resourceVersion: opts.resourceVersion,
    });
    const res = (await this.request({
      method: 'GET',
      verb: 'list',
      resource: rt.plural,
      path: resourcePath(rt, opts.namespace),
      query: q,
    })) as {
      items?: T[];
      metadata?: { resourceVersion?: string; continue?: string };
    };
    const items = res.items ?? [];
    // List items carry no apiVersion/kind (API conventions); fill them so objects look like GET results.
    const apiVersion = apiVersionOf(rt);
    for (const it of items) {
      it.apiVersion ??= apiVersion;
      it.kind ??= rt.kind;
    }
    return {
      items,
      resourceVersion: res.metadata?.resourceVersion ?? '',
      continue: res.metadata?.continue || undefined,
    };
  }

  /**
   * POST. 409 (`AlreadyExists`) when the name is taken; `generateName` is honoured. With `dryRun`
   * the API server admits and validates but stores nothing (`dryRun=All`, Kubernetes API
   * conventions): 404 then still says the namespace does not exist.
   */
  async create<T extends KObject>(rt: ResourceType, obj: T, opts: { dryRun?: boolean } = {}): Promise<T> {
    return (await this.request({
      method: 'POST',
      verb: 'create',
      resource: rt.plural,
      path: resourcePath(rt, obj.metadata.namespace),
      query: this.managerQuery() + (opts.dryRun ? '&dryRun=All' : ''),
      body: JSON.stringify(withTypeMeta(rt, obj)),
      contentType: 'application/json',
    })) as T;
  }

  /** PUT of the whole object; a set `metadata.resourceVersion` is a precondition (409 when stale). */
  async update<T extends KObject>(rt: ResourceType, obj: T): Promise<T> {
    return this.put(rt, obj);
  }

  /** PUT of the `status` subresource (spec changes are ignored); resourceVersion precondition as {@link update}. */
  async updateStatus<T extends KObject>(rt: ResourceType, obj: T): Promise<T> {
    return this.put(rt, obj, 'status');
  }

  /**
   * JSON merge patch (RFC 7386): objects merge, arrays and scalars replace, `null` deletes. Putting
   * `metadata.resourceVersion` into the patch makes it conditional (409 when stale).
   */
  async mergePatch<T extends KObject>(
    rt: ResourceType,
    name: string,
    namespace: string | undefined,
    patch: unknown,
    opts: { subresource?: 'status' } = {},
  ): Promise<T> {
    return this.patch(
      rt,
      name,
      namespace,
      JSON.stringify(patch),
      'application/merge-patch+json',
      opts.subresource,
    );
  }

  /**
   * JSON patch (RFC 6902). A failing `test` op rejects the whole patch with 422 (`Invalid`), so `test`
   * ops work as preconditions on any field.
   */
  async jsonPatch<T extends KObject>(
    rt: ResourceType,
    name: string,
    namespace: string | undefined,
    ops: unknown[],
    opts: { subresource?: 'status' } = {},
  ): Promise<T> {
    return this.patch(
      rt,
      name,
      namespace,
      JSON.stringify(ops),
      'application/json-patch+json',
      opts.subresource,
    );
  }

  /**
   * Server-side apply: `obj` is this field manager's complete intent for the fields it owns; fields it
   * stops sending are removed if no other manager owns them. 409 when another manager owns a field
   * with a different value, unless `force`. Creates the object when missing.
   */
  async apply<T extends KObject>(
    rt: ResourceType,
    obj: T,
    opts: { subresource?: 'status'; force?: boolean; fieldManager?: string } = {},
  ): Promise<T> {
    const name = obj.metadata.name;
    if (!name) throw new Error('apply needs metadata.name');
    return (await this.request({
      method: 'PATCH',
      verb: 'patch',
      resource: resourceLabel(rt, opts.subresource),
      path: resourcePath(rt, obj.metadata.namespace, name, opts.subresource),
      query: query({
        fieldManager: opts.fieldManager ?? this.fieldManager,
        force: opts.force ? 'true' : undefined,
      }),
      // JSON is YAML; the API server parses apply bodies as YAML.
      body: JSON.stringify(withTypeMeta(rt, obj)),
      contentType: 'application/apply-patch+yaml',
    })) as T;
  }

  /**
   * DELETE. Resolves true when the deletion was accepted (the object may linger while finalizers
   * run), false on 404. `preconditionUid` fails with 409 when the name now belongs to another object.
   */
  async delete(
    rt: ResourceType,
    name: string,
    namespace?: string,
    opts: { propagationPolicy?: 'Background' | 'Foreground' | 'Orphan'; preconditionUid?: string } = {},
  ): Promise<boolean> {
    const body: Record<string, unknown> = { apiVersion: 'v1', kind: 'DeleteOptions' };
    if (opts.propagationPolicy) body.propagationPolicy = opts.propagationPolicy;
    if (opts.preconditionUid) body.preconditions = { uid: opts.preconditionUid };
    try {
      await this.request({
        method: 'DELETE',
        verb: 'delete',
        resource: rt.plural,
        path: resourcePath(rt, namespace, name),
        body: JSON.stringify(body),
        contentType: 'application/json',
      });
      return true;
    } catch (err) {
      if (isApiStatus(err, 404)) return false;
      throw err;
    }
  }

  /**
   * Streams watch events to `onEvent` in order. Resolves when the server ends the stream (normally at
   * `timeoutSeconds`) or `signal` aborts; rejects with an ApiError for a non-200 answer (410 when
   * `resourceVersion` is too old), for transport failures (status 0) and for `inactivityTimeoutMs`
   * (status 0, reason `WatchIdle`). `ERROR` events (a `metav1.Status` object, e.g. code 410) are passed to
   * `onEvent`; the stream normally ends right after one. An exception thrown by `onEvent` aborts the
   * stream and rejects.
   */
  async watch(
    rt: ResourceType,
    opts: WatchOptions,
    // biome-ignore lint/suspicious/noExplicitAny: event objects are whatever kind is watched, or a Status
    onEvent: (type: WatchEventType, obj: any) => void,
    signal: AbortSignal,
  ): Promise<void> {
    await this.ready();
    if (this.dynamicAuth) await this.refreshAuth(false);
    const q = query({
      watch: '1',
      resourceVersion: opts.resourceVersion,
      allowWatchBookmarks: opts.allowWatchBookmarks ? 'true' : undefined,
      timeoutSeconds: opts.timeoutSeconds,
      labelSelector: opts.labelSelector,
      fieldSelector: opts.fieldSelector,
    });
    const path = this.basePath + resourcePath(rt, opts.namespace) + q;
    let res: Dispatcher.ResponseData;
    try {
      res = await this.watchDispatcher!.request({
        origin: this.origin,
        path,
        method: 'GET',
        headers: { ...this.authHeaders, accept: 'application/json' },
        headersTimeout: this.timeoutMs,
        bodyTimeout: opts.inactivityTimeoutMs ?? 90_000,
        signal,
      });
    } catch (err) {
      if (signal.aborted) return;
      this.count('WATCH', 0);
      throw transportError('GET', path, err);
    }
    this.count('WATCH', res.statusCode);
    if (res.statusCode !== 200) {
      const text = await res.body.text().catch(() => '');
      throw httpError('GET', path, res.statusCode, text, res.headers);
    }
    opts.onConnected?.();
    let buf = '';
    // A multi-byte character may straddle two chunks; the decoder holds back the partial bytes.
    const utf8 = new StringDecoder('utf8');
    try {
      for await (const chunk of res.body) {
        buf += typeof chunk === 'string' ? chunk : utf8.write(chunk as Buffer);
        let nl = buf.indexOf('\n');
        while (nl >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line.trim()) {
            const ev = JSON.parse(line) as { type: WatchEventType; object: unknown };
            if (this.metrics) this.noteVersion(rt, ev.type, ev.object);
            onEvent(ev.type, ev.object);
          }
          nl = buf.indexOf('\n');
        }
      }
    } catch (err) {
      res.body.destroy();
      if (signal.aborted) return;
      const code = (err as { code?: string }).code;
      if (err instanceof ApiError || !code) throw err;
      if (code === 'UND_ERR_BODY_TIMEOUT') {
        throw new ApiError(
          `GET ${stripQuery(path)}: watch idle for ${opts.inactivityTimeoutMs ?? 90_000} ms`,
          0,
          {
            reason: 'WatchIdle',
            cause: err,
          },
        );
      }
      throw transportError('GET', path, err);
    }
  }

  private async put<T extends KObject>(rt: ResourceType, obj: T, subresource?: string): Promise<T> {
    const name = obj.metadata.name;
    if (!name) throw new Error('update needs metadata.name');
    return (await this.request({
      method: 'PUT',
      verb: 'update',
      resource: resourceLabel(rt, subresource),
      path: resourcePath(rt, obj.metadata.namespace, name, subresource),
      query: this.managerQuery(),
      body: JSON.stringify(withTypeMeta(rt, obj)),
      contentType: 'application/json',
    })) as T;
  }

  private async patch<T extends KObject>(
    rt: ResourceType,
    name: string,
    namespace: string | undefined,
    body: string,
    contentType: string,
    subresource?: string,
  ): Promise<T> {
    return (await this.request({
      method: 'PATCH',
      verb: 'patch',
      resource: resourceLabel(rt, subresource),
      path: resourcePath(rt, namespace, name, subresource),
      query: this.managerQuery(),
      body,
      contentType,
    })) as T;
  }

  private managerQuery(): string {
    return `?fieldManager=${encodeURIComponent(this.fieldManager)}`;
  }

  /** Loads TLS material and credentials once and builds the connection pools. */
  private ready(): Promise<void> {
    this.setup ??= (async () => {
      const o: https.RequestOptions = {};
      await this.kc.applyToHTTPSOptions(o);
      this.authHeaders = authHeadersOf(o);
      this.authLoadedAt = Date.now();
      // One secure context for every connection: given the PEMs instead, Node parses the CA bundle
      // and the key pair again for each new connection (a CPU profile of the boot server showed
      // that as 14 ms in a 150 ms burst of 50 pin writes).
      const secureContext = createSecureContext({ ca: o.ca, cert: o.cert, key: o.key });
      const tls = {
        secureContext,
        servername: o.servername,
        rejectUnauthorized: o.rejectUnauthorized,
      };
      const proxy = this.kc.getCurrentCluster()?.proxyUrl;
      const make = (connections: number | null): Dispatcher => {
        if (proxy) {
          if (!/^https?:/.test(proxy)) throw new Error(`unsupported proxy-url scheme: ${proxy}`);
          return new ProxyAgent({ uri: proxy, requestTls: tls, connections: connections ?? undefined });
        }
        return new Pool(this.origin, {
          connections,
          connect: tls,
          // The API server's idle timeout is 90 s; reuse sockets well within it.
          keepAliveTimeout: 30_000,
          keepAliveMaxTimeout: 60_000,
          pipelining: 1,
        });
      };
      this.dispatcher = make(this.maxConnections);
      // Watches hold a connection each for minutes; they must never starve ordinary requests.
      this.watchDispatcher = make(null);
    })().catch((err: unknown) => {
      this.setup = undefined; // try again on the next request (e.g. an exec plugin's network hiccup)
      throw credentialsError(err);
    });
    return this.setup;
  }

  private async refreshAuth(force: boolean): Promise<void> {
    if (!this.dynamicAuth) return;
    if (!force && Date.now() - this.authLoadedAt < AUTH_REFRESH_MS) return;
    this.authRefresh ??= (async () => {
      try {
        const o: https.RequestOptions = {};
        await this.kc.applyToHTTPSOptions(o);
        this.authHeaders = authHeadersOf(o);
        this.authLoadedAt = Date.now();
      } catch (err) {
        throw credentialsError(err);
      } finally {
        this.authRefresh = undefined;
      }
    })();
    await this.authRefresh;
  }

  /**
   * One request with JSON response, after a slot of the rate limit; retries 429 (at most
   * {@link MAX_429_RETRIES} times, honouring Retry-After up to 10 s, pausing the whole client) and
   * (once, dynamic credentials only) 401.
   */
  private async request(spec: RequestSpec): Promise<unknown> {
    if (!this.dispatcher) await this.ready();
    if (this.dynamicAuth) await this.refreshAuth(false);
    const path = this.basePath + spec.path + (spec.query ?? '');
    const origin = originStore.getStore() ?? 'other';
    // The version known before sending: a watch event carrying this very write's result can
    // arrive ahead of the response, so the version known after it would count every write a no-op.
    const knownBefore = this.metrics ? this.versions.get(objectPathOf(spec.path)) : undefined;
    for (let attempt = 0; ; attempt++) {
      const waited = await this.limiter.acquire();
      this.metrics?.rateLimiterLatency.observe({ verb: spec.verb }, waited / 1000);
      const headers: Record<string, string> = { ...this.authHeaders, accept: 'application/json' };
      if (spec.contentType) headers['content-type'] = spec.contentType;
      const t0 = performance.now();
      let res: Dispatcher.ResponseData;
      let text: string;
      try {
        res = await this.dispatcher!.request({
          origin: this.origin,
          path,
          method: spec.method,
          headers,
          body: spec.body,
          // undici closes the connection after a request with a body whose method expects none
          // (DELETE with DeleteOptions), so every deletion would cost a new TLS handshake on both
          // ends; kube-apiserver reads DELETE bodies, so the connection stays usable.
          ...(spec.method === 'DELETE' && spec.body !== undefined ? { reset: false } : {}),
          headersTimeout: this.timeoutMs,
          bodyTimeout: this.timeoutMs,
        });
        text = await res.body.text();
      } catch (err) {
        this.observe(spec, 0, t0, origin);
        throw transportError(spec.method, path, err);
      }
      this.observe(spec, res.statusCode, t0, origin);
      if (res.statusCode >= 200 && res.statusCode < 300) {
        this.limiter.succeeded();
        const out = text ? JSON.parse(text) : undefined;
        if (this.metrics) this.noteWrite(spec, out, origin, knownBefore);
        if (spec.verb !== 'list' && spec.verb !== 'delete' && this.objectListeners.length)
          this.tellObject(out, spec.verb === 'get' ? undefined : origin);
        return out;
      }
      const err = httpError(spec.method, path, res.statusCode, text, res.headers);
      if (res.statusCode === 429) this.limiter.throttled(err.retryAfterSeconds);
      if (res.statusCode === 429 && attempt < MAX_429_RETRIES) continue; // the limiter waits out Retry-After
      if (res.statusCode === 401 && this.dynamicAuth && attempt === 0) {
        await this.refreshAuth(true);
        continue;
      }
      throw err;
    }
  }

  private tellObject(out: unknown, writer: string | undefined): void {
    const obj = out as KObject | undefined;
    if (!obj?.metadata?.resourceVersion || !obj.kind || obj.kind.endsWith('List')) return;
    for (const fn of this.objectListeners) fn(obj, writer);
  }

  private observe(spec: RequestSpec, status: number, t0: number, origin: string): void {
    if (!this.metrics) return;
    this.count(spec.method, status);
    this.metrics.restLatency.observe({ verb: spec.verb }, (performance.now() - t0) / 1000);
    this.metrics.apiRequests.inc({ origin, resource: spec.resource, verb: spec.verb, code: String(status) });
  }

  private count(method: string, status: number): void {
    this.metrics?.restRequests.inc({ method, code: String(status) });
  }

  /**
   * Remembers the version a response carried; counts updates and patches that changed nothing
   * (answered with the version this client knew when it sent them).
   */
  private noteWrite(spec: RequestSpec, out: unknown, origin: string, knownBefore: string | undefined): void {
    const meta = (out as KObject | undefined)?.metadata;
    const rv = meta?.resourceVersion;
    if (!rv || spec.verb === 'list' || spec.resource === 'events') return;
    const key = objectPathOf(spec.path);
    if (spec.verb === 'delete') {
      this.versions.delete(key);
      return;
    }
    if ((spec.verb === 'update' || spec.verb === 'patch') && knownBefore === rv) {
      this.metrics!.apiNoopWrites.inc({ origin, resource: spec.resource, verb: spec.verb });
    }
    this.remember(key, rv);
  }

  private noteVersion(rt: ResourceType, type: WatchEventType, obj: unknown): void {
    const m = (obj as KObject | undefined)?.metadata;
    if (!m?.name || !m.resourceVersion || type === 'BOOKMARK' || type === 'ERROR') return;
    const key = resourcePath(rt, m.namespace, m.name);
    if (type === 'DELETED') this.versions.delete(key);
    else this.remember(key, m.resourceVersion);
  }

  private remember(key: string, rv: string): void {
    this.versions.delete(key);
    this.versions.set(key, rv);
    if (this.versions.size > MAX_TRACKED_VERSIONS) this.versions.delete(this.versions.keys().next().value!);
  }

  /** Closes idle and watch connections. Pending requests fail with status 0. */
  async close(): Promise<void> {
    await Promise.all([this.dispatcher?.destroy(), this.watchDispatcher?.destroy()]);
    this.dispatcher = undefined;
    this.watchDispatcher = undefined;
    this.setup = undefined;
  }
}

/**
 * Runs `fn` again after a 409 Conflict, up to `attempts` times in all (default 5), with jittered
 * exponential backoff from 10 ms. `fn` must re-read the object each time: retrying with the same
 * stale resourceVersion can only fail again. Mirrors client-go's `retry.RetryOnConflict`. Other
 * errors, and the last 409, are rethrown.
 */
export async function retryOnConflict<T>(fn: () => Promise<T>, opts: { attempts?: number } = {}): Promise<T> {
  const attempts = Math.max(1, opts.attempts ?? 5);
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (err) {
      if (!isApiStatus(err, 409) || i >= attempts) throw err;
      await sleep(conflictBackoffMs(i));
    }
  }
}

/** Delay before retry `n` (1-based) in ms: 10·2^(n-1), ±50% jitter so contending writers spread out. */
export function conflictBackoffMs(n: number): number {
  return 10 * 2 ** (n - 1) * (0.5 + Math.random());
}

/** `servers`, or `servers/status` for a subresource: the `resource` label of the request metrics. */
function resourceLabel(rt: ResourceType, subresource?: string): string {
  return subresource ? `${rt.plural}/${subresource}` : rt.plural;
}

/** The object's path without query and subresource (one key for an object and its status). */
function objectPathOf(path: string): string {
  const p = stripQuery(path);
  return p.endsWith('/status') ? p.slice(0, -'/status'.length) : p;
}

function withTypeMeta<T extends KObject>(rt: ResourceType, obj: T): T {
  if (obj.apiVersion && obj.kind) return obj;
  return { ...obj, apiVersion: obj.apiVersion ?? apiVersionOf(rt), kind: obj.kind ?? rt.kind };
}

function query(params: Record<string, string | number | undefined>): string {
  let q = '';
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === '') continue;
    q += `${q ? '&' : '?'}${k}=${encodeURIComponent(String(v))}`;
  }
  return q;
}

function authHeadersOf(o: https.RequestOptions): Record<string, string> {
  const h: Record<string, string> = {};
  for (const [k, v] of Object.entries(o.headers ?? {})) {
    if (typeof v === 'string' || typeof v === 'number') h[k.toLowerCase()] = String(v);
  }
  if (o.auth) h.authorization = `Basic ${Buffer.from(o.auth).toString('base64')}`;
  return h;
}

/** Credentials could not be loaded (file, exec plugin, OIDC refresh): no request could be sent, so status 0. */
function credentialsError(err: unknown): ApiError {
  return new ApiError(`loading API server credentials failed: ${(err as Error)?.message ?? String(err)}`, 0, {
    reason: 'CredentialsError',
    cause: err,
  });
}

function transportError(method: string, path: string, err: unknown): ApiError {
  const e = err as { code?: string; message?: string; name?: string; cause?: { code?: string } };
  const code = e.code ?? e.cause?.code ?? '';
  const reason =
    UNREACHABLE_CODES[code] ??
    (code.startsWith('ERR_TLS') || code.includes('CERT') ? 'TLSError' : code || e.name || 'Unreachable');
  return new ApiError(
    `${method} ${stripQuery(path)}: API server unreachable: ${e.message ?? String(err)}`,
    0,
    {
      reason,
      cause: err,
    },
  );
}

function httpError(
  method: string,
  path: string,
  status: number,
  text: string,
  headers: Record<string, string | string[] | undefined>,
): ApiError {
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    // Not a Status (proxies, 502 pages): keep the text.
  }
  const st = body as { reason?: string; message?: string } | undefined;
  const ra = headers['retry-after'];
  const msg =
    typeof st === 'object' && st?.message ? st.message : typeof body === 'string' ? body.slice(0, 200) : '';
  return new ApiError(
    `${method} ${stripQuery(path)}: ${status}${st?.reason ? ` ${st.reason}` : ''}: ${msg}`,
    status,
    {
      reason: typeof st === 'object' ? st?.reason : undefined,
      body,
      retryAfterSeconds: parseRetryAfter(Array.isArray(ra) ? ra[0] : ra),
    },
  );
}

/** `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date; undefined when absent or invalid. */
export function parseRetryAfter(v: string | undefined): number | undefined {
  if (!v) return undefined;
  if (/^\d+$/.test(v.trim())) return Number(v.trim());
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

function stripQuery(path: string): string {
  const i = path.indexOf('?');
  return i < 0 ? path : path.slice(0, i);
}
