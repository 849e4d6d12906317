/**
 * From a system UUID to what a boot signal is about: the Server, its current
 * ServerBootConfiguration (via `Server.spec.bootConfigurationRef`) and the attempt's callback data.
 *
 * Reads go to the informer caches (no API call per request). A cache may lag a rotation by the
 * claim controller, so a token that does not match the cached Secret, or a Secret whose attempt
 * differs from the SBC's `spec.bootAttempt`, is checked once more against the API server before
 * the caller answers 401/409; while the two still disagree the rotation is in flight and the
 * caller answers 503 with `Retry-After` (the agent retries).
 */

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
import type { EventRecorder } from '../runtime/events.js';
import type { Informer } from '../runtime/informer.js';
import { type KObject, Resources } from '../runtime/resource.js';
import { badRequest, HttpError, unavailable } from './http-error.js';

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
  /** Where a callback refused as ambiguous is reported (a Warning Event on each Server involved). */
  events?: EventRecorder;
}

/** A UUID's ambiguity is reported at most this often, ms (a host retries its callbacks). */
const AMBIGUOUS_REPORT_INTERVAL_MS = 30_000;

/** Maps a failed API call to 503 when the API server is unreachable or overloaded; rethrows others. */
export function apiFailure(err: unknown, what: string): never {
  if (err instanceof HttpError) throw err;
  if (err instanceof ApiError && (err.unreachable || err.status === 429 || err.status >= 500)) {
    throw unavailable(`${what}: API server unavailable`, err.retryAfterSeconds);
  }
  throw err;
}

export class BootTargetResolver {
  /** Last report per ambiguous UUID (bounded: cleared when it grows past 1024 entries). */
  private readonly reported = new Map<string, number>();

  constructor(private readonly src: BootTargetSources) {}

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
      const message = `several Servers claim systemUUID ${uuid}: ${names}`;
      this.reportAmbiguous(uuid, found, message);
      throw new HttpError(409, 'AmbiguousServer', message);
    }
    return found[0]!;
  }

  /** A Warning Event `AmbiguousServer` on every Server involved, at most once per interval per UUID. */
  private reportAmbiguous(uuid: string, found: Server[], message: string): void {
    const events = this.src.events;
    if (!events) return;
    const now = Date.now();
    if (now - (this.reported.get(uuid) ?? 0) < AMBIGUOUS_REPORT_INTERVAL_MS) return;
    if (this.reported.size >= 1024) this.reported.clear();
    this.reported.set(uuid, now);
    for (const s of found) {
      events.event(
        { ...s, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'Server' },
        'Warning',
        'AmbiguousServer',
        `boot callback for this system refused (409): ${message}; delete the Server that does not belong to this machine`,
      );
    }
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

  /** Fresh SBC and callback data from the API server (503 when unreachable). */
  async refresh(target: BootTarget): Promise<BootTarget> {
    const ref = target.server.spec.bootConfigurationRef;
    if (!ref) return target;
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
   * Verifies a callback token for the target's current attempt. Returns the target the verdict was
   * reached on (possibly refreshed from the API). Throws 404 `NoBootConfiguration` when the server has
   * no current SBC or callback Secret, 401 `InvalidToken`, 409 `StaleToken` (an earlier attempt's),
   * 503 while a token rotation is in flight.
   */
  async verify(target: BootTarget, token: string | undefined): Promise<BootTarget> {
    let t = target;
    let verdict = this.verdict(t, token);
    if (verdict !== 'current' || !this.consistent(t)) {
      t = await this.refresh(t);
      verdict = this.verdict(t, token);
    }
    if (!t.sbc || !t.callback) {
      throw new HttpError(
        404,
        'NoBootConfiguration',
        `Server ${t.server.metadata.name} has no current boot configuration`,
      );
    }
    if (verdict === 'stale') throw new HttpError(409, 'StaleToken', 'token of an earlier boot attempt');
    if (verdict === 'invalid') throw new HttpError(401, 'InvalidToken', 'missing or wrong callback token');
    if (!this.consistent(t)) throw unavailable('boot attempt is being rotated', 1);
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
