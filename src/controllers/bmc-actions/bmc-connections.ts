/**
 * Redfish clients for BMC objects and the Servers they manage, cached per BMC so that reconciles reuse
 * one session and one connection pool instead of logging in every time. A client is replaced when
 * what it was built from changes (address, credentials), and closed when its BMC goes away.
 *
 * Also turns the BMC layer's typed errors into condition reasons and requeue delays.
 */
import { createHash } from 'node:crypto';
import type pino from 'pino';
import type { BMC as BMCObject } from '../../api/v1alpha1/bmc.js';
import type { BMCSecret } from '../../api/v1alpha1/bmcsecret.js';
import type { Endpoint } from '../../api/v1alpha1/endpoint.js';
import type { Server } from '../../api/v1alpha1/server.js';
import { BmcFailureReason } from '../../api/vocabulary.js';
import type { BMC } from '../../bmc/bmc.js';
import {
  BmcError,
  BootTargetNotSupportedError,
  HttpBootUriNotSupportedError,
  isBmcBusy,
  RedfishAuthError,
  RedfishBudgetExceededError,
  RedfishHttpError,
  RedfishTransportError,
  ResetTypeNotSupportedError,
  VirtualMediaNotSupportedError,
} from '../../bmc/errors.js';
import { RedfishParseError } from '../../bmc/parse.js';
import { RedfishBMC } from '../../bmc/redfish-bmc.js';
import type { Informer } from '../../runtime/informer.js';
import type { BmcConnectionSettings } from '../common/config.js';

/** The BMC cannot be reached because of how it is described (missing secret, no address): a condition, not a crash. */
export class BmcAccessError extends Error {
  override name = 'BmcAccessError';
  constructor(
    /** CamelCase condition reason, e.g. `BMCSecretNotFound`. */
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

/** A Server's system as the BMC layer addresses it. */
export interface SystemHandle {
  bmc: BMC;
  /** Redfish URI of the ComputerSystem (`Server.spec.systemURI`). */
  systemUri: string;
}

/** What went wrong with a BMC call, for conditions, Events and the requeue decision. */
export interface BmcFailure {
  /** CamelCase reason: BMCUnavailable, BMCBusy, BMCTimeout, BMCCertificateRejected, BMCAuthenticationFailed, BMCRejected, BMCUnsupported, BMCInvalidResponse, BMCAccess. */
  reason: string;
  message: string;
  /** When to try again, ms (the BMC's `Retry-After` when it gave one). */
  retryAfterMs: number;
  /** False only when the BMC certainly did not act on the request. */
  maybeApplied: boolean;
  /**
   * The BMC is busy (a transient MessageId such as HPE's POST window, see `bmc/vendor.ts`): nothing was
   * changed, the same call succeeds shortly. Worth a pending condition, not a Warning.
   */
  busy?: boolean;
  /**
   * The BMC refused for good: asking again the same way gets the same answer (a boot target or
   * `Boot.HttpBootUri` it does not offer, no usable ResetType, a 4xx that is not transient). A boot
   * ends on it instead of retrying; `retryAfterMs` still paces callers that keep trying.
   */
  permanent?: 'unsupported' | 'refused';
}

/** Creates the BMC client; tests and embedders may replace it. */
export type BmcFactory = (o: {
  endpoint: string;
  username: string;
  password: string;
  /** PEM CA bundle of this BMC (BMCSecret key `ca.crt`); replaces `settings.caBundle`. */
  ca?: string;
  settings: BmcConnectionSettings;
  log: pino.Logger;
}) => BMC;

/** The Redfish client with the manager's TLS settings: verification on unless `insecureTLS`. */
export const defaultBmcFactory: BmcFactory = ({ endpoint, username, password, ca, settings, log }) =>
  new RedfishBMC({
    endpoint,
    username,
    password,
    insecureTLS: settings.insecureTLS,
    ...((ca ?? settings.caBundle) ? { ca: ca ?? settings.caBundle } : {}),
    requestTimeoutMs: settings.requestTimeoutMs,
    budgetMs: settings.callBudgetMs,
    logger: log,
  });

interface Entry {
  fingerprint: string;
  bmc: BMC;
}

export interface BmcConnectionsOptions {
  bmcs: Informer<BMCObject>;
  bmcSecrets: Informer<BMCSecret>;
  endpoints: Informer<Endpoint>;
  settings: BmcConnectionSettings;
  log: pino.Logger;
  factory?: BmcFactory;
}

export class BmcConnections {
  private readonly cache = new Map<string, Entry>();
  private readonly factory: BmcFactory;

  constructor(private readonly opts: BmcConnectionsOptions) {
    this.factory = opts.factory ?? defaultBmcFactory;
  }

  /** The client of a BMC object. Throws {@link BmcAccessError} when its address or credentials are missing. */
  forBmc(bmc: BMCObject): BMC {
    const name = bmc.metadata.name ?? '';
    const address = this.bmcAddress(bmc);
    const endpoint = endpointUrl(address, bmc.spec.protocol);
    return this.client(`bmc/${name}`, endpoint, this.credentials(bmc.spec.bmcSecretRef?.name));
  }

  /**
   * The client and system URI of a Server: through `spec.bmcRef` (the BMC controller's Servers), or
   * the inline `spec.bmc`. Throws {@link BmcAccessError} when neither leads to a usable BMC.
   */
  forServer(server: Server): SystemHandle {
    const systemUri = server.spec.systemURI;
    if (!systemUri) throw new BmcAccessError(BmcFailureReason.NoSystemURI, 'spec.systemURI is not set');
    const ref = server.spec.bmcRef?.name;
    if (ref) {
      const bmc = this.opts.bmcs.get(ref);
      if (!bmc) throw new BmcAccessError(BmcFailureReason.BMCNotFound, `BMC ${ref} does not exist`);
      return { bmc: this.forBmc(bmc), systemUri };
    }
    const inline = server.spec.bmc;
    if (inline) {
      const endpoint = endpointUrl(inline.address, inline.protocol);
      const bmc = this.client(
        `server/${server.metadata.name}`,
        endpoint,
        this.credentials(inline.bmcSecretRef?.name),
      );
      return { bmc, systemUri };
    }
    throw new BmcAccessError(BmcFailureReason.NoBMC, 'the Server has neither spec.bmcRef nor spec.bmc');
  }

  /**
   * Tries `username`/`password` once against BMC `bmc` (a one-off client, never cached: one GET of
   * `accountUri`, the account's own resource, which even an expired password may read). Resolves
   * `accepted`, or `refused` on 401 (the BMC counted one failed login towards its lockout). Other
   * failures throw as the BMC layer's errors. Errors: {@link BmcAccessError} as {@link forBmc}.
   */
  async probeCredentials(
    bmc: BMCObject,
    username: string,
    password: string,
    accountUri: string,
  ): Promise<'accepted' | 'refused'> {
    const endpoint = endpointUrl(this.bmcAddress(bmc), bmc.spec.protocol);
    const admin = this.credentials(bmc.spec.bmcSecretRef?.name);
    const client = this.factory({
      endpoint,
      username,
      password,
      ...(admin.ca ? { ca: admin.ca } : {}),
      settings: this.opts.settings,
      log: this.opts.log.child({ bmcClient: `probe/${bmc.metadata.name ?? ''}` }),
    });
    try {
      if (!client.getAccount) throw new BmcError('this BMC client has no account support');
      await client.getAccount(accountUri);
      return 'accepted';
    } catch (err) {
      if (err instanceof RedfishAuthError) return 'refused';
      // Redfish spec "Password change required handling": the password was right, and has expired.
      if (
        err instanceof RedfishHttpError &&
        err.status === 403 &&
        err.info.messageIds.some((m) => m.endsWith('.PasswordChangeRequired'))
      )
        return 'accepted';
      throw err;
    } finally {
      await client.close().catch(() => undefined);
    }
  }

  /** Closes and forgets the client of BMC `name` (its object was deleted, or a login was refused). */
  async release(name: string): Promise<void> {
    await this.drop(`bmc/${name}`);
  }

  async closeAll(): Promise<void> {
    const all = [...this.cache.keys()];
    await Promise.all(all.map((k) => this.drop(k)));
  }

  private async drop(key: string): Promise<void> {
    const e = this.cache.get(key);
    this.cache.delete(key);
    await e?.bmc.close().catch(() => undefined);
  }

  private client(key: string, endpoint: string, cred: BmcCredentials): BMC {
    // The digest only tells "same inputs?" apart; credentials never leave this function.
    const fingerprint = createHash('sha256')
      .update(`${endpoint}\0${cred.username}\0${cred.password}\0${cred.ca ?? ''}`)
      .digest('hex');
    const cached = this.cache.get(key);
    if (cached?.fingerprint === fingerprint) return cached.bmc;
    if (cached) void cached.bmc.close().catch(() => undefined);
    const bmc = this.factory({
      endpoint,
      ...cred,
      settings: this.opts.settings,
      log: this.opts.log.child({ bmcClient: key }),
    });
    this.cache.set(key, { fingerprint, bmc });
    return bmc;
  }

  private bmcAddress(bmc: BMCObject): string {
    if (bmc.spec.access?.ip) return bmc.spec.access.ip;
    const ep = bmc.spec.endpointRef?.name;
    if (ep) {
      const endpoint = this.opts.endpoints.get(ep);
      if (!endpoint)
        throw new BmcAccessError(BmcFailureReason.EndpointNotFound, `Endpoint ${ep} does not exist`);
      if (!endpoint.spec?.ip)
        throw new BmcAccessError(BmcFailureReason.EndpointHasNoIP, `Endpoint ${ep} has no spec.ip`);
      return endpoint.spec.ip;
    }
    if (bmc.spec.hostname) return bmc.spec.hostname;
    throw new BmcAccessError(
      BmcFailureReason.NoAddress,
      'the BMC has neither spec.access.ip nor spec.endpointRef',
    );
  }

  private credentials(secretName: string | undefined): BmcCredentials {
    if (!secretName)
      throw new BmcAccessError(BmcFailureReason.BMCSecretNotSet, 'spec.bmcSecretRef.name is empty');
    const secret = this.opts.bmcSecrets.get(secretName);
    if (!secret)
      throw new BmcAccessError(BmcFailureReason.BMCSecretNotFound, `BMCSecret ${secretName} does not exist`);
    return bmcSecretCredentials(secret);
  }
}

/** What a BMCSecret holds for one BMC. */
export interface BmcCredentials {
  username: string;
  password: string;
  /** PEM CA bundle for this BMC's certificate (key `ca.crt`, as in Kubernetes TLS Secrets). */
  ca?: string;
}

/**
 * username/password (and optional `ca.crt`) from a BMCSecret: `data` (base64) first, `stringData`
 * otherwise. Throws {@link BmcAccessError} `BMCSecretIncomplete` without username or password.
 */
export function bmcSecretCredentials(secret: BMCSecret): BmcCredentials {
  const read = (key: string): string | undefined => {
    const b64 = secret.data?.[key];
    if (b64 !== undefined) return Buffer.from(b64, 'base64').toString('utf8');
    return secret.stringData?.[key];
  };
  const username = read('username');
  const password = read('password');
  if (!username || password === undefined) {
    throw new BmcAccessError(
      BmcFailureReason.BMCSecretIncomplete,
      `BMCSecret ${secret.metadata.name ?? ''} lacks username or password`,
    );
  }
  const ca = read('ca.crt');
  return { username, password, ...(ca ? { ca } : {}) };
}

/**
 * `scheme://host:port`. The scheme is `protocol.scheme` when set, else `http` for `RedfishLocal`
 * (upstream's local emulator protocol) and `https` otherwise. IPv6 literals get brackets.
 */
export function endpointUrl(
  address: string,
  protocol: { name: string; port: number; scheme?: string },
): string {
  const scheme = protocol.scheme || (protocol.name === 'RedfishLocal' ? 'http' : 'https');
  const host = address.includes(':') && !address.startsWith('[') ? `[${address}]` : address;
  return `${scheme}://${host}:${protocol.port}`;
}

/** The longest wait a BMC's `Retry-After` may ask for, ms: a larger value (or a bogus one) is capped. */
export const MAX_BMC_RETRY_AFTER_MS = 5 * 60_000;

/**
 * Whether a BMC that answered `status` may have acted on the request. Only 503 (Service Unavailable)
 * and 429 (Too Many Requests) say it did not (RFC 9110 §15.6.4, RFC 6585 §4); a 500, 502 or 504 may
 * come after the action was taken (BMCs that act and then fail to answer), and 4xx refusals did not act.
 */
export function httpMaybeApplied(status: number): boolean {
  return status >= 500 && status !== 503;
}

/**
 * A 4xx refusal that the same request gets again (RFC 9110 §15.5): not 408 (timeout), 409 (conflict
 * with the current state), 412/428 (a changed ETag: the client retries with the new one), 423, 425
 * or 429 (wait and retry). 401 is an authentication failure of its own; transient MessageIds
 * (a 400 during POST) were classified as busy before this is asked.
 */
export function permanentHttpRefusal(status: number): boolean {
  return status >= 400 && status < 500 && ![401, 408, 409, 412, 423, 425, 428, 429].includes(status);
}

/** Maps a failure of a BMC call to a reason, a message and when to retry (at most {@link MAX_BMC_RETRY_AFTER_MS}). */
export function classifyBmcFailure(err: unknown): BmcFailure {
  const f = classify(err);
  const wait = Number.isFinite(f.retryAfterMs) ? f.retryAfterMs : MAX_BMC_RETRY_AFTER_MS;
  return { ...f, retryAfterMs: Math.min(MAX_BMC_RETRY_AFTER_MS, Math.max(0, wait)) };
}

function classify(err: unknown): BmcFailure {
  if (err instanceof BmcAccessError) {
    return { reason: err.reason, message: err.message, retryAfterMs: 30_000, maybeApplied: false };
  }
  if (err instanceof RedfishAuthError) {
    return {
      reason: BmcFailureReason.BMCAuthenticationFailed,
      message: err.message,
      retryAfterMs: 60_000,
      maybeApplied: false,
    };
  }
  if (isBmcBusy(err)) {
    const retryAfterMs =
      err instanceof RedfishHttpError ? err.retryAfterMs : (err as RedfishBudgetExceededError).retryAfterMs;
    return {
      reason: BmcFailureReason.BMCBusy,
      message: err instanceof Error ? err.message : String(err),
      retryAfterMs: Math.max(retryAfterMs ?? 0, 2_000),
      maybeApplied: false,
      busy: true,
    };
  }
  if (err instanceof RedfishBudgetExceededError) {
    const cause = err.cause;
    const maybeApplied =
      cause instanceof RedfishTransportError
        ? cause.maybeApplied
        : cause instanceof RedfishHttpError
          ? httpMaybeApplied(cause.status)
          : true;
    const timeout = cause instanceof RedfishTransportError && cause.kind === 'timeout';
    return {
      reason: timeout ? BmcFailureReason.BMCTimeout : BmcFailureReason.BMCUnavailable,
      message: err.message,
      retryAfterMs: Math.max(err.retryAfterMs ?? 0, 2_000),
      maybeApplied,
    };
  }
  return classifyTransportOrHttp(err);
}

/** The transport, HTTP and parse failures of {@link classify}. */
function classifyTransportOrHttp(err: unknown): BmcFailure {
  if (err instanceof RedfishTransportError && err.kind === 'tls') {
    // Configuration, not weather: a new CA bundle (or --bmc-insecure-tls) is needed.
    return {
      reason: BmcFailureReason.BMCCertificateRejected,
      message: err.message,
      retryAfterMs: 60_000,
      maybeApplied: false,
    };
  }
  if (err instanceof RedfishTransportError) {
    return {
      reason: err.kind === 'timeout' ? BmcFailureReason.BMCTimeout : BmcFailureReason.BMCUnavailable,
      message: err.message,
      retryAfterMs: 5_000,
      maybeApplied: err.maybeApplied,
    };
  }
  if (err instanceof RedfishHttpError) {
    const busy = err.status === 503 || err.status === 429 || err.status >= 500;
    return {
      reason: busy ? BmcFailureReason.BMCUnavailable : BmcFailureReason.BMCRejected,
      message: err.message,
      retryAfterMs: Math.max(err.retryAfterMs ?? 0, busy ? 2_000 : 30_000),
      maybeApplied: httpMaybeApplied(err.status),
      ...(permanentHttpRefusal(err.status) ? { permanent: 'refused' as const } : {}),
    };
  }
  if (
    err instanceof ResetTypeNotSupportedError ||
    err instanceof BootTargetNotSupportedError ||
    err instanceof HttpBootUriNotSupportedError ||
    err instanceof VirtualMediaNotSupportedError
  ) {
    return {
      reason: BmcFailureReason.BMCUnsupported,
      message: err.message,
      retryAfterMs: 5 * 60_000,
      maybeApplied: false,
      permanent: err instanceof ResetTypeNotSupportedError ? 'refused' : 'unsupported',
    };
  }
  if (err instanceof RedfishParseError) {
    return {
      reason: BmcFailureReason.BMCInvalidResponse,
      message: err.message,
      retryAfterMs: 60_000,
      maybeApplied: false,
    };
  }
  if (err instanceof BmcError) {
    return {
      reason: BmcFailureReason.BMCError,
      message: err.message,
      retryAfterMs: 10_000,
      maybeApplied: true,
    };
  }
  throw err;
}
