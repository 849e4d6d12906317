/**
 * From a system UUID to what a boot signal is about: the Server, its current
 * ServerBootConfiguration (via `Server.spec.bootConfigurationRef`) and the attempt's callback data.
 *
 * Reads go to the informer caches (no API call per request). A cache may lag a rotation by the
 * claim controller, so a token that does not match the cached Secret, or a Secret whose attempt
 * differs from the SBC's `spec.bootAttempt`, is checked once more against the API server before
 * the caller answers 401/409; while the two still disagree the rotation is in flight and the
 * caller answers 503 with `Retry-After` (the agent retries).
 *
 * Those live reads are coalesced and paced per SBC ({@link SingleFlight}: at most one per second):
 * wrong tokens cannot turn into API load (security review S6). A token that neither the cache nor
 * the last read (at most 1 s old) knows is rejected: the current token reaches a host only after its
 * attempt's power-on, so a read that misses it would have to predate a whole boot.
 *
 * Authenticated routes call {@link BootTargetResolver.authenticate}: without a valid token the answer
 * is 401 whether or not the UUID is known (S13), so UUIDs and provisioning state cannot be probed.
 * The token of a NetBootOnce attempt whose claim completed is retired (409 `TokenRetired`, S4).
 */

import { Counter, type Registry } from 'prom-client';
import { canonicalSystemUUID } from '../api/system-uuid.js';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import {
  type CallbackSecretData,
  decodeCallbackSecret,
  type TokenVerdict,
  verifyToken,
} from '../bootauth/callback-token.js';
import { ApiError, type KubeClient } from '../runtime/client.js';
import { findCondition } from '../runtime/conditions.js';
import type { Informer } from '../runtime/informer.js';
import { type KObject, Resources } from '../runtime/resource.js';
import { badRequest, HttpError, unavailable } from './http-error.js';
import { SingleFlight } from './single-flight.js';

/** Informer index of Servers by canonical `spec.systemUUID`. */
export const SERVER_UUID_INDEX = 'systemUUID';

/** Indexer for {@link SERVER_UUID_INDEX}; register it on the Server informer. */
export function serverUUIDIndexer(server: Server): string[] {
  const uuid = canonicalSystemUUID(server.spec?.systemUUID);
  return uuid ? [uuid] : [];
}

export interface SecretObject extends KObject {
  data?: Record<string, string>;
  type?: string;
}

export interface BootTarget {
  uuid: string;
  server: Server;
  sbc: ServerBootConfiguration | undefined;
  /** Decoded callback Secret; undefined when the SBC has none (or it is unreadable). */
  callback: CallbackSecretData | undefined;
}

export interface BootTargetSources {
  client: KubeClient;
  servers: Informer<Server>;
  sbcs: Informer<ServerBootConfiguration>;
  secrets: Informer<SecretObject>;
}

/**
 * Maps a failed API call: 503 when the API server is unreachable or overloaded, 404 `NotFound` and
 * 409 `Conflict` for the API's own 404/409 (an object deleted or changed mid-request, S13); rethrows
 * others.
 */
export function apiFailure(err: unknown, what: string): never {
  if (err instanceof HttpError) throw err;
  if (err instanceof ApiError && (err.unreachable || err.status === 429 || err.status >= 500)) {
    throw unavailable(`${what}: API server unavailable`, err.retryAfterSeconds);
  }
  if (err instanceof ApiError && err.status === 404) throw new HttpError(404, 'NotFound', `${what}: gone`);
  if (err instanceof ApiError && err.status === 409)
    throw new HttpError(409, 'Conflict', `${what}: changed concurrently`);
  throw err;
}

/** Condition set by the claim controller when a claim completed; read for NetBootOnce. */
export const BOOT_COMPLETED_CONDITION = 'BootCompleted';

/** True when `sbc`'s condition `type` is True and belongs to the current attempt. */
export function currentAndTrue(sbc: ServerBootConfiguration, type: string): boolean {
  const c = findCondition(sbc.status?.conditions, type);
  return !!c && c.status === 'True' && (c.observedGeneration ?? 0) >= (sbc.status?.attemptGeneration ?? 0);
}

/** True when `sbc` is NetBootOnce and its claim completed the current attempt: nothing more to serve. */
export function provisioned(sbc: ServerBootConfiguration): boolean {
  return sbc.spec.bootPolicy === 'NetBootOnce' && currentAndTrue(sbc, BOOT_COMPLETED_CONDITION);
}

const refreshCounters = new WeakMap<Registry, Counter>();
function refreshCounter(registry: Registry | undefined): Counter | undefined {
  if (!registry) return undefined;
  let c = refreshCounters.get(registry);
  if (!c) {
    c = new Counter({
      name: 'metal_boot_target_refreshes_total',
      help: 'Live API reads of a boot configuration and its callback Secret after the cache disagreed with a token.',
      registers: [registry],
    });
    refreshCounters.set(registry, c);
  }
  return c;
}

const invalidToken = () => new HttpError(401, 'InvalidToken', 'missing or wrong callback token');

export class BootTargetResolver {
  private readonly flights = new SingleFlight<BootTarget>();
  private readonly refreshes: Counter | undefined;

  constructor(
    private readonly src: BootTargetSources,
    metrics?: Registry,
  ) {
    this.refreshes = refreshCounter(metrics);
  }

  /** Parses a UUID from a path or body; 400 `InvalidUUID` when it is not one (any case is fine). */
  static parseUUID(raw: unknown): string {
    const uuid = canonicalSystemUUID(raw);
    if (!uuid) throw badRequest('InvalidUUID', 'systemUUID is not a UUID (expected 8-4-4-4-12 hex)');
    return uuid;
  }

  /** The one Server with this UUID: 404 `UnknownServer`, 409 `AmbiguousServer` when several claim it. */
  server(uuid: string): Server {
    const found = this.src.servers.byIndex(SERVER_UUID_INDEX, uuid);
    if (found.length === 0) throw new HttpError(404, 'UnknownServer', `no Server with systemUUID ${uuid}`);
    if (found.length > 1) {
      const names = found.map((s) => s.metadata.name).join(', ');
      throw new HttpError(409, 'AmbiguousServer', `several Servers claim systemUUID ${uuid}: ${names}`);
    }
    return found[0]!;
  }

  /** Server, current SBC and callback data from the caches. */
  resolve(uuid: string): BootTarget {
    const server = this.server(uuid);
    const ref = server.spec.bootConfigurationRef;
    const sbc = ref ? this.src.sbcs.get(ref.name, ref.namespace) : undefined;
    return { uuid, server, sbc, callback: sbc ? this.cachedCallback(sbc) : undefined };
  }

  private cachedCallback(sbc: ServerBootConfiguration): CallbackSecretData | undefined {
    const name = sbc.spec.callbackSecretRef?.name;
    if (!name) return undefined;
    return decodeCallbackSecret(this.src.secrets.get(name, sbc.metadata.namespace)?.data);
  }

  /**
   * Fresh SBC and callback data from the API server, paced per SBC (see the file comment); `fresh`
   * is false when the result came from a read that began before this call. 503 when unreachable.
   */
  async refreshPaced(target: BootTarget): Promise<{ target: BootTarget; fresh: boolean }> {
    const ref = target.server.spec.bootConfigurationRef;
    if (!ref) return { target, fresh: true };
    const r = await this.flights.do(`${ref.namespace ?? ''}/${ref.name}`, () => this.refresh(target));
    return { target: { ...r.value, uuid: target.uuid, server: target.server }, fresh: r.fresh };
  }

  /** Fresh SBC and callback data from the API server (503 when unreachable); not paced. */
  async refresh(target: BootTarget): Promise<BootTarget> {
    const ref = target.server.spec.bootConfigurationRef;
    if (!ref) return target;
    this.refreshes?.inc();
    try {
      const sbc = await this.src.client.get<ServerBootConfiguration>(
        Resources.ServerBootConfiguration,
        ref.name,
        ref.namespace,
      );
      const secretName = sbc?.spec.callbackSecretRef?.name;
      const secret = secretName
        ? await this.src.client.get<SecretObject>(Resources.Secret, secretName, sbc.metadata.namespace)
        : undefined;
      return { ...target, sbc, callback: decodeCallbackSecret(secret?.data) };
    } catch (err) {
      apiFailure(err, 'reading the boot configuration');
    }
  }

  /**
   * Authenticates a request for `uuid` with `token` (see {@link verify}); an unknown UUID is 401
   * `InvalidToken` like a wrong token (S13). 400 when `uuid` is not a UUID is the caller's check.
   */
  async authenticate(uuid: string, token: string | undefined): Promise<BootTarget> {
    let target: BootTarget;
    try {
      target = this.resolve(uuid);
    } catch (err) {
      if (err instanceof HttpError && err.status === 404) throw invalidToken();
      throw err;
    }
    return this.verify(target, token);
  }

  /**
   * Verifies a callback token for the target's current attempt. Returns the target the verdict was
   * reached on (possibly refreshed from the API). Throws 401 `InvalidToken` (also when the server has
   * no current SBC or callback Secret), 409 `StaleToken` (an earlier attempt's), 409 `TokenRetired`
   * (NetBootOnce, claim completed), 503 while a token rotation is in flight.
   */
  async verify(target: BootTarget, token: string | undefined): Promise<BootTarget> {
    let t = target;
    let verdict = this.verdict(t, token);
    if (verdict !== 'current' || !this.consistent(t)) {
      t = (await this.refreshPaced(t)).target;
      verdict = this.verdict(t, token);
    }
    if (!t.sbc || !t.callback) throw invalidToken();
    if (verdict === 'stale') throw new HttpError(409, 'StaleToken', 'token of an earlier boot attempt');
    if (verdict === 'invalid') throw invalidToken();
    if (!this.consistent(t)) throw unavailable('boot attempt is being rotated', 1);
    if (provisioned(t.sbc))
      throw new HttpError(409, 'TokenRetired', 'the claim of this NetBootOnce attempt completed');
    return t;
  }

  private verdict(t: BootTarget, token: string | undefined): TokenVerdict {
    return verifyToken(token, t.callback);
  }

  /** The Secret's attempt matches the SBC's spec.bootAttempt (both default to 1). */
  consistent(t: BootTarget): boolean {
    return !!t.sbc && !!t.callback && t.callback.attempt === (t.sbc.spec.bootAttempt ?? 1);
  }
}
