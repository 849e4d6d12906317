/**
 * HTTP client of the OCI distribution API (distribution-spec v1.1: `GET /v2/<name>/manifests/<ref>`,
 * `GET /v2/<name>/blobs/<digest>`), on undici.
 *
 * - Only registries allowed by the `RegistryPolicy`; HTTPS unless the host is in its insecure list.
 * - Authentication as Docker's token flow (distribution `docs/spec/auth/token.md`): a 401 with
 *   `WWW-Authenticate: Bearer realm=…,service=…` → `GET realm?service=…&scope=repository:<name>:pull`
 *   (anonymous, or with HTTP Basic credentials / an OAuth2 refresh token from the pull secret) →
 *   `{token | access_token, expires_in}` → retry with `Authorization: Bearer`. A `Basic` challenge
 *   gets the credentials directly. Tokens are cached per registry, repository and credentials.
 * - Redirects (blob storage behind a registry) are followed up to 5 times; `Authorization` is sent
 *   only to the registry's own origin, never to another one. A redirect target and a token realm
 *   (security review N11) must be a host of `--allowed-registries` / `--insecure-registries`, or a
 *   public name: IP literals of loopback, private, link-local, unique-local, CGNAT or unspecified
 *   ranges, `localhost`, single-label names and cluster DNS names (`*.svc`, `*.cluster.local`,
 *   `*.local`, `*.internal`) are refused, so a registry cannot make the manager call into the cluster
 *   or the node. (A public name that resolves to a private address is not caught here.)
 * - Registry answer bodies never reach error messages (they end up in SBC conditions, N11).
 * - Bounded: 10 s to connect, 30 s for headers, 60 s between body chunks.
 * - Access confirmation for caches keyed by content (security review N3): {@link RegistryClient.confirm}
 *   asks the registry, with an authenticated `HEAD`, whether a (reference, credentials) pair may read
 *   a digest before a cached manifest or blob is handed to it; a yes is remembered for
 *   {@link ACCESS_TTL_MS} (at most {@link ACCESS_ENTRIES} answers), a no never; concurrent askers
 *   of the same pair share one `HEAD`.
 *
 * Errors are `RegistryError`s with a `reason` for the SBC (`RegistryNotAllowed`,
 * `RegistryUnavailable`, `RegistryUnauthorized`, `ImageNotFound`, `RegistryError`).
 */
import { createHash } from 'node:crypto';
import { Agent, type Dispatcher, request } from 'undici';
import { BootConfigurationReason } from '../api/vocabulary.js';
import type { RegistryCredentials } from './docker-config.js';
import { apiHost, type ImageReference } from './reference.js';
import { isAllowed, isInsecure, type RegistryPolicy } from './registry-policy.js';

/** Reasons of registry failures (src/api/vocabulary.ts), as written to the SBC's Ready condition. */
export const RegistryReason = {
  RegistryNotAllowed: BootConfigurationReason.RegistryNotAllowed,
  RegistryUnavailable: BootConfigurationReason.RegistryUnavailable,
  RegistryUnauthorized: BootConfigurationReason.RegistryUnauthorized,
  ImageNotFound: BootConfigurationReason.ImageNotFound,
  RegistryError: BootConfigurationReason.RegistryError,
} as const;

export class RegistryError extends Error {
  constructor(
    readonly reason: string,
    message: string,
    /** HTTP status of the registry's answer, when there was one. */
    readonly status?: number,
  ) {
    super(message);
  }
  /** True when a later try can succeed without anyone changing anything (network, 5xx, 429). */
  get transient(): boolean {
    return this.reason === RegistryReason.RegistryUnavailable;
  }
}

export interface RegistryResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Dispatcher.ResponseData['body'];
}

const MAX_REDIRECTS = 5;
const MAX_TOKEN_BYTES = 64 * 1024;
/** How long a confirmed (reference, credentials, digest) access is believed without asking again. */
export const ACCESS_TTL_MS = 5 * 60_000;
/** Remembered access confirmations at most (oldest dropped first). */
export const ACCESS_ENTRIES = 4096;

interface CachedToken {
  header: string;
  expiresAt: number;
}

/**
 * Why `host` (`name[:port]` or `[v6]:port`) may not be contacted as a redirect target or token realm
 * unless listed in the policy, or undefined when it may (see the file comment).
 */
export function forbiddenHost(host: string): string | undefined {
  const name = host.startsWith('[') ? host.slice(1, host.indexOf(']')) : host.replace(/:\d+$/, '');
  const n = name.toLowerCase().replace(/\.$/, '');
  if (/^\d{1,3}(\.\d{1,3}){3}$/.test(n)) {
    const [a = 0, b = 0] = n.split('.').map(Number);
    if (
      a === 0 ||
      a === 10 ||
      a === 127 ||
      (a === 169 && b === 254) ||
      (a === 172 && b >= 16 && b <= 31) ||
      (a === 192 && b === 168) ||
      (a === 100 && b >= 64 && b <= 127) ||
      a >= 224
    )
      return `${n} is a loopback, private, link-local or reserved address`;
    return undefined;
  }
  if (n.includes(':')) {
    if (n === '::' || n === '::1' || /^f[cd]/.test(n) || /^fe[89ab]/.test(n) || n.startsWith('::ffff:'))
      return `${n} is a loopback, unique-local, link-local or mapped address`;
    return undefined;
  }
  if (n === 'localhost' || n.endsWith('.localhost') || !n.includes('.'))
    return `${n} is a local or single-label name`;
  if (/\.(svc|cluster\.local|local|internal)$/.test(n)) return `${n} is a cluster or local DNS name`;
  return undefined;
}

function header(h: RegistryResponse['headers'], name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

/** Parses `Bearer realm="…",service="…"` (RFC 7235 auth-params). */
export function parseChallenge(v: string): { scheme: string; params: Record<string, string> } {
  const m = /^\s*(\w+)\s*(.*)$/s.exec(v) ?? [];
  const params: Record<string, string> = {};
  for (const p of (m[2] ?? '').matchAll(/(\w+)=(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))/g)) {
    params[p[1]!.toLowerCase()] = (p[2] ?? p[3] ?? '').replace(/\\(.)/g, '$1');
  }
  return { scheme: (m[1] ?? '').toLowerCase(), params };
}

export class RegistryClient {
  private readonly agent: Agent;
  private readonly tokens = new Map<string, CachedToken>();
  /** `origin|repository|credentials hash|kind|digest` → when the confirmation expires (ms epoch). */
  private readonly access = new Map<string, number>();
  /** Confirmations being asked, by the same key: concurrent askers share one HEAD. */
  private readonly confirming = new Map<string, Promise<void>>();
  /** Registry blob and manifest GETs sent (benchmarks count them). */
  requests = 0;

  constructor(readonly policy: RegistryPolicy) {
    this.agent = new Agent({ connectTimeout: 10_000, headersTimeout: 30_000, bodyTimeout: 60_000 });
  }

  /** `scheme://host` of a registry by the policy; throws `RegistryNotAllowed`. */
  origin(ref: Pick<ImageReference, 'domain'>): string {
    if (!isAllowed(this.policy, ref.domain)) {
      throw new RegistryError(
        RegistryReason.RegistryNotAllowed,
        `registry ${ref.domain} is not in --allowed-registries (${this.policy.allowed.join(',') || 'none'})`,
      );
    }
    return `${isInsecure(this.policy, ref.domain) ? 'http' : 'https'}://${apiHost(ref)}`;
  }

  /**
   * `GET /v2/<repository><path>` with authentication and redirects. Resolves with a 2xx response
   * whose body the caller must consume or destroy; throws `RegistryError` for anything else.
   */
  async get(
    ref: ImageReference,
    path: string,
    opts: {
      accept?: string[];
      credentials?: RegistryCredentials;
      range?: string;
      signal?: AbortSignal;
      method?: 'GET' | 'HEAD';
    } = {},
  ): Promise<RegistryResponse> {
    const origin = this.origin(ref);
    const url = `${origin}/v2/${ref.repository}${path}`;
    const key = this.accessKey(ref, opts.credentials);
    let auth = this.cachedToken(key);
    for (let round = 0; round < 2; round++) {
      const res = await this.follow(url, origin, auth, opts);
      if (res.status !== 401) {
        const ok = await this.check(res, ref, path);
        const byDigest = /^\/(manifests|blobs)\/(sha256:[a-f0-9]{64})$/.exec(path);
        if (byDigest) this.remember(`${key}|${byDigest[1]}|${byDigest[2]}`);
        return ok;
      }
      const challenge = header(res.headers, 'www-authenticate');
      await res.body.dump();
      if (round > 0 || !challenge) break;
      auth = await this.authenticate(challenge, ref, key, opts.credentials);
    }
    throw new RegistryError(
      RegistryReason.RegistryUnauthorized,
      `registry ${ref.domain} refused ${ref.repository}${opts.credentials ? ' with the pull secret credentials' : ' anonymously (no pull secret)'}`,
      401,
    );
  }

  /**
   * Whether `ref` with `credentials` may read `digest` (a manifest or blob), asked with an
   * authenticated `HEAD /v2/<repository>/<kind>/<digest>` unless a yes of the last
   * {@link ACCESS_TTL_MS} is remembered (a successful GET by digest counts as one). Resolves when
   * it may; throws the `RegistryError` of the answer otherwise (`RegistryUnauthorized`,
   * `ImageNotFound`, `RegistryUnavailable`, ...). Callers serving content cached by digest call it
   * before every hit: the cache must never answer for a repository or credentials the registry would
   * refuse (security review N3).
   */
  async confirm(
    ref: ImageReference,
    kind: 'manifests' | 'blobs',
    digest: string,
    credentials: RegistryCredentials | undefined,
    accept?: string[],
  ): Promise<void> {
    const key = `${this.accessKey(ref, credentials)}|${kind}|${digest}`;
    const until = this.access.get(key);
    if (until !== undefined && until > Date.now()) return;
    this.access.delete(key);
    // The same key is the same question (origin, repository, credentials, digest): one HEAD answers
    // everyone asking it at once (50 servers booting one image).
    let asking = this.confirming.get(key);
    if (!asking) {
      asking = (async () => {
        const res = await this.get(ref, `/${kind}/${digest}`, {
          method: 'HEAD',
          credentials,
          ...(accept ? { accept } : {}),
        });
        await res.body.dump();
      })().finally(() => this.confirming.delete(key));
      this.confirming.set(key, asking);
    }
    await asking;
  }

  close(): Promise<void> {
    return this.agent.close();
  }

  /** Token and access cache key: registry origin, repository and a hash of the credentials. */
  private accessKey(ref: ImageReference, c: RegistryCredentials | undefined): string {
    // Cached per credentials (a hash of them), so changed credentials never reuse a token or a yes.
    const who = c
      ? createHash('sha256').update(`${c.username}\0${c.password}\0${c.identityToken}`).digest('hex')
      : '';
    return `${this.origin(ref)}|${ref.repository}|${who}`;
  }

  private remember(key: string): void {
    this.access.delete(key);
    if (this.access.size >= ACCESS_ENTRIES) this.access.delete(this.access.keys().next().value!);
    this.access.set(key, Date.now() + ACCESS_TTL_MS);
  }

  private async check(res: RegistryResponse, ref: ImageReference, path: string): Promise<RegistryResponse> {
    if (res.status >= 200 && res.status < 300) return res;
    // The body is the registry's to choose: it is dropped, never copied into a condition (N11).
    await res.body.dump().catch(() => undefined);
    const what = `${ref.domain}/${ref.repository}${path}`;
    if (res.status === 404)
      throw new RegistryError(RegistryReason.ImageNotFound, `${what}: not found (404)`, 404);
    if (res.status === 429 || res.status >= 500)
      throw new RegistryError(
        RegistryReason.RegistryUnavailable,
        `${what}: registry answered ${res.status}`,
        res.status,
      );
    throw new RegistryError(
      RegistryReason.RegistryError,
      `${what}: registry answered ${res.status}`,
      res.status,
    );
  }

  private async follow(
    start: string,
    registryOrigin: string,
    auth: string | undefined,
    opts: { accept?: string[]; range?: string; signal?: AbortSignal; method?: 'GET' | 'HEAD' },
  ): Promise<RegistryResponse> {
    let url = new URL(start);
    for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
      const headers: Record<string, string> = { 'user-agent': 'metal-operator-ts' };
      if (opts.accept?.length) headers.accept = opts.accept.join(', ');
      if (opts.range) headers.range = opts.range;
      // Credentials stay with their origin: never on a redirect to blob storage elsewhere.
      if (auth && url.origin === registryOrigin) headers.authorization = auth;
      let res: Dispatcher.ResponseData;
      try {
        this.requests++;
        res = await request(url, {
          method: opts.method ?? 'GET',
          headers,
          dispatcher: this.agent,
          signal: opts.signal,
        });
      } catch (err) {
        throw new RegistryError(
          RegistryReason.RegistryUnavailable,
          `registry ${url.host} unreachable: ${(err as Error).message}`,
        );
      }
      const location = header(res.headers, 'location');
      if (res.statusCode >= 300 && res.statusCode < 400 && location) {
        await res.body.dump();
        const next = new URL(location, url);
        if (
          next.protocol !== 'https:' &&
          !(next.protocol === 'http:' && isInsecure(this.policy, next.host))
        ) {
          throw new RegistryError(
            RegistryReason.RegistryError,
            `registry redirected to ${next.protocol}//${next.host}, which is not HTTPS`,
          );
        }
        this.checkTarget(next, 'redirected to');
        url = next;
        continue;
      }
      return { status: res.statusCode, headers: res.headers, body: res.body };
    }
    throw new RegistryError(
      RegistryReason.RegistryError,
      `more than ${MAX_REDIRECTS} redirects from ${start}`,
    );
  }

  /** Throws `RegistryNotAllowed` for a redirect target or token realm outside the policy (N11). */
  private checkTarget(u: URL, what: string): void {
    if (isAllowed(this.policy, u.host) || isInsecure(this.policy, u.host)) return;
    const why = forbiddenHost(u.host);
    if (why)
      throw new RegistryError(
        RegistryReason.RegistryNotAllowed,
        `${what} ${u.protocol}//${u.host}, which is refused: ${why} (not in --allowed-registries)`,
      );
  }

  private cachedToken(key: string): string | undefined {
    const t = this.tokens.get(key);
    if (t && t.expiresAt > Date.now()) return t.header;
    this.tokens.delete(key);
    return undefined;
  }

  /**
   * The `Authorization` header answering `challenge` (cached under `key`): Basic with the pull
   * secret's credentials, or a Bearer token from the challenge's realm (distribution token auth).
   * Throws `RegistryUnauthorized` (no credentials for Basic, 401/403 from the token endpoint),
   * `RegistryNotAllowed` (realm outside the policy), `RegistryUnavailable` (endpoint unreachable or
   * 5xx) and `RegistryError` (unsupported challenge, realm not a URL or not HTTPS, bad answer).
   */
  private async authenticate(
    challenge: string,
    ref: ImageReference,
    key: string,
    creds: RegistryCredentials | undefined,
  ): Promise<string> {
    const { scheme, params } = parseChallenge(challenge);
    const basic = basicHeader(creds);
    if (scheme === 'basic') {
      if (!basic)
        throw new RegistryError(
          RegistryReason.RegistryUnauthorized,
          `registry ${ref.domain} wants credentials (no pull secret)`,
          401,
        );
      this.tokens.set(key, { header: basic, expiresAt: Date.now() + 3600_000 });
      return basic;
    }
    if (scheme !== 'bearer' || !params.realm)
      throw new RegistryError(
        RegistryReason.RegistryError,
        `registry ${ref.domain}: unsupported challenge ${scheme}`,
      );
    const realm = this.tokenRealm(params.realm, params, ref);
    const tok = await this.fetchToken(realm, tokenRequest(realm, params, creds, basic), creds);
    const h = `Bearer ${tok.value}`;
    // The spec's default lifetime is 60 s; renew 10 s early.
    const life = Math.max(10, Number(tok.expiresIn) || 60) - 10;
    this.tokens.set(key, { header: h, expiresAt: Date.now() + life * 1000 });
    return h;
  }

  /**
   * The token endpoint's URL with `service` and `scope` set: `RegistryError` unless it is a URL and
   * HTTPS (HTTP only for an insecure registry of the policy), `RegistryNotAllowed` outside the policy.
   */
  private tokenRealm(raw: string, params: Record<string, string>, ref: ImageReference): URL {
    let realm: URL;
    try {
      realm = new URL(raw);
    } catch {
      throw new RegistryError(
        RegistryReason.RegistryError,
        `registry ${ref.domain}: token realm is not a URL`,
      );
    }
    if (realm.protocol !== 'https:' && !(realm.protocol === 'http:' && isInsecure(this.policy, realm.host))) {
      throw new RegistryError(
        RegistryReason.RegistryError,
        `registry ${ref.domain}: token realm ${realm.origin} is not HTTPS`,
      );
    }
    this.checkTarget(realm, `registry ${ref.domain}: token realm`);
    if (params.service) realm.searchParams.set('service', params.service);
    realm.searchParams.set('scope', params.scope ?? `repository:${ref.repository}:pull`);
    return realm;
  }

  /** The token of the endpoint's answer (at most {@link MAX_TOKEN_BYTES}) and its lifetime in seconds. */
  private async fetchToken(
    realm: URL,
    req: TokenRequest,
    creds: RegistryCredentials | undefined,
  ): Promise<{ value: string; expiresIn: number | undefined }> {
    let res: Dispatcher.ResponseData;
    try {
      res = await request(realm, { ...req, dispatcher: this.agent });
    } catch (err) {
      throw new RegistryError(
        RegistryReason.RegistryUnavailable,
        `token endpoint ${realm.host} unreachable: ${(err as Error).message}`,
      );
    }
    const text = await readLimited(res.body, MAX_TOKEN_BYTES);
    if (res.statusCode === 401 || res.statusCode === 403)
      throw new RegistryError(
        RegistryReason.RegistryUnauthorized,
        `token endpoint ${realm.host} refused the ${creds ? 'pull secret credentials' : 'anonymous request'} (${res.statusCode})`,
        res.statusCode,
      );
    if (res.statusCode !== 200)
      throw new RegistryError(
        res.statusCode >= 500 ? RegistryReason.RegistryUnavailable : RegistryReason.RegistryError,
        `token endpoint ${realm.host} answered ${res.statusCode}`,
        res.statusCode,
      );
    return tokenOf(text, realm);
  }
}

/** The Basic `Authorization` header of a pull secret's username and password, if it has both. */
function basicHeader(creds: RegistryCredentials | undefined): string | undefined {
  return creds?.username !== undefined && creds.password !== undefined
    ? `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`
    : undefined;
}

interface TokenRequest {
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body: string | undefined;
}

/**
 * The token request (pure): with an identity token the OAuth2 refresh-token grant (POST, form body;
 * distribution docs/spec/auth/oauth.md), else a GET with the Basic credentials, if any.
 */
function tokenRequest(
  realm: URL,
  params: Record<string, string>,
  creds: RegistryCredentials | undefined,
  basic: string | undefined,
): TokenRequest {
  const headers: Record<string, string> = { 'user-agent': 'metal-operator-ts' };
  if (creds?.identityToken) {
    headers['content-type'] = 'application/x-www-form-urlencoded';
    const body = new URLSearchParams({
      grant_type: 'refresh_token',
      refresh_token: creds.identityToken,
      service: params.service ?? '',
      scope: realm.searchParams.get('scope') ?? '',
      client_id: 'metal-operator-ts',
    }).toString();
    return { method: 'POST', headers, body };
  }
  if (basic) headers.authorization = basic;
  return { method: 'GET', headers, body: undefined };
}

/** The token of a token endpoint's JSON answer (`access_token`, else `token`); `RegistryError` without one. */
function tokenOf(text: string, realm: URL): { value: string; expiresIn: number | undefined } {
  let tok: { token?: string; access_token?: string; expires_in?: number };
  try {
    tok = JSON.parse(text);
  } catch {
    throw new RegistryError(RegistryReason.RegistryError, `token endpoint ${realm.host}: answer is not JSON`);
  }
  const value = tok.access_token || tok.token;
  if (!value)
    throw new RegistryError(
      RegistryReason.RegistryError,
      `token endpoint ${realm.host}: no token in the answer`,
    );
  return { value, expiresIn: tok.expires_in };
}

/** Reads a body up to `max` bytes; throws `RegistryError` beyond. */
export async function readLimited(body: RegistryResponse['body'], max: number): Promise<string> {
  return (await readLimitedBytes(body, max)).toString('utf8');
}

export async function readLimitedBytes(body: RegistryResponse['body'], max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of body) {
    n += (c as Buffer).length;
    if (n > max) {
      body.destroy();
      throw new RegistryError(RegistryReason.RegistryError, `registry answer larger than ${max} bytes`);
    }
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks);
}
