/**
 * From a system UUID to what a boot signal is about: the Server, its current
 * ServerBootConfiguration (via `Server.spec.bootConfigurationRef`) and the attempt's callback data.
 *
 * Lookup (two index reads, never a scan): the canonical UUID first, then its one alias, fields 1–3
 * byte-reversed (SMBIOS ≥ 2.6 little-endian, see src/api/system-uuid.ts). A match through the alias
 * is handed to the {@link UUIDAliasRecorder} (Server `status.smbiosUUIDAlias` and an Event). A UUID
 * whose canonical and byte-swapped forms name different Servers is 409 `AmbiguousServer`, as two
 * Servers with one UUID are.
 *
 * Reads go to the informer caches (no API call per request). A cache may lag a rotation by the
 * claim controller, so a token that does not match the cached Secret, or a Secret whose attempt
 * differs from the SBC's `spec.bootAttempt`, is checked once more against the API server before
 * the caller answers 401/409; while the two still disagree the rotation is in flight and the
 * caller answers 503 with `Retry-After` (the agent retries).
 */

import type { Logger } from 'pino';
import { byteSwappedSystemUUID, canonicalSystemUUID } from '../api/system-uuid.js';
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
import { UUIDAliasRecorder } from './uuid-alias.js';

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
  /** Where alias matches are recorded as Events; without it they are only written to the Server status. */
  events?: EventRecorder;
  log?: Logger;
}

/** How a request's UUID found its Server. */
export interface ServerMatch {
  server: Server;
  /** The canonical form the request used. */
  uuid: string;
  /** True when it matched the Server's UUID with fields 1–3 byte-reversed. */
  viaAlias: boolean;
}

/** Maps a failed API call to 503 when the API server is unreachable or overloaded; rethrows others. */
export function apiFailure(err: unknown, what: string): never {
  if (err instanceof HttpError) throw err;
  if (err instanceof ApiError && (err.unreachable || err.status === 429 || err.status >= 500)) {
    throw unavailable(`${what}: API server unavailable`, err.retryAfterSeconds);
  }
  throw err;
}

export class BootTargetResolver {
  /** Records matches through the byte-swapped alias (one write per Server and host form). */
  readonly aliases: UUIDAliasRecorder;

  constructor(private readonly src: BootTargetSources) {
    this.aliases = new UUIDAliasRecorder(src.client, src.events, src.log);
  }

  /** Parses a UUID from a path or body; 400 `InvalidUUID` when it is not one (any case is fine). */
  static parseUUID(raw: unknown): string {
    const uuid = canonicalSystemUUID(raw);
    if (!uuid) throw badRequest('InvalidUUID', 'systemUUID is not a UUID (expected 8-4-4-4-12 hex)');
    return uuid;
  }

  /**
   * The one Server for this canonical UUID: by `spec.systemUUID`, else by its byte-swapped alias.
   * 404 `UnknownServer` when neither names a Server; 409 `AmbiguousServer` when several Servers carry
   * the UUID, or the two forms name different Servers. Pure cache reads; records nothing.
   */
  match(uuid: string): ServerMatch {
    const direct = this.src.servers.byIndex(SERVER_UUID_INDEX, uuid);
    const swapped = byteSwappedSystemUUID(uuid);
    const alias = swapped === uuid ? [] : this.src.servers.byIndex(SERVER_UUID_INDEX, swapped);
    const all = [...direct, ...alias];
    if (all.length === 1) return { server: all[0]!, uuid, viaAlias: alias.length === 1 };
    if (all.length === 0) throw new HttpError(404, 'UnknownServer', `no Server with systemUUID ${uuid}`);
    const names = (l: Server[]) => l.map((s) => s.metadata.name).join(', ');
    if (alias.length === 0)
      throw new HttpError(
        409,
        'AmbiguousServer',
        `several Servers claim systemUUID ${uuid}: ${names(direct)}`,
      );
    throw new HttpError(
      409,
      'AmbiguousServer',
      `systemUUID ${uuid} names Server(s) ${names(direct) || '(none)'} and, with fields 1-3 byte-reversed (SMBIOS >= 2.6 byte order), ${swapped} names ${names(alias)}`,
    );
  }

  /** The one Server with this UUID (see {@link match}); a match through the alias is recorded. */
  server(uuid: string): Server {
    const m = this.match(uuid);
    if (m.viaAlias) this.aliases.note(m.server, uuid);
    return m.server;
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
