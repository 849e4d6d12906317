/**
 * From a system UUID to what a boot signal is about: the Server, its current
 * ServerBootConfiguration (via `Server.spec.bootConfigurationRef`) and the attempt's callback token
 * (derived from the SBC's uid and `spec.bootAttempt` with the callback key: bootauth/callback-token.ts).
 *
 * Lookup (two index reads, never a scan): the canonical UUID first, then its one alias, fields 1–3
 * byte-reversed (SMBIOS ≥ 2.6 little-endian, see src/api/system-uuid.ts). A match through the alias
 * is handed to the {@link UUIDAliasRecorder} (Server `status.smbiosUUIDAlias` and an Event) once
 * the request is authenticated (a request without the attempt's token records nothing). A UUID
 * whose canonical and byte-swapped forms name different Servers is 409 `AmbiguousServer`, as two
 * Servers with one UUID are.
 *
 * Reads go to the informer caches (no API call per request). The SBC cache may lag the claim
 * controller's bump of `spec.bootAttempt`, so a genuine token of a later attempt than the cached
 * one (`ahead`), or a Server whose cached copy names no SBC, is checked once more against the API
 * server; while the token is still ahead of the SBC read the caller answers 503 with `Retry-After`
 * (the agent retries). A wrong token needs no read at all: its MAC does not verify.
 *
 * Those live reads are coalesced and paced per SBC ({@link SingleFlight}: at most one per second),
 * so callbacks cannot turn into API load (security review S6).
 *
 * Authenticated routes call {@link BootTargetResolver.authenticate}: without a valid token the answer
 * is 401 whether or not the UUID is known (S13), so UUIDs and provisioning state cannot be probed.
 * The token of a NetBootOnce attempt whose claim completed is retired (409 `TokenRetired`, S4).
 */

import type { Logger } from 'pino';
import { Counter, type Registry } from 'prom-client';
import { byteSwappedSystemUUID, canonicalSystemUUID } from '../api/system-uuid.js';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { ConditionType, countsForCurrentAttempt, EventReason } from '../api/vocabulary.js';
import {
  type AttemptToken,
  attemptToken,
  type CallbackKey,
  type TokenVerdict,
  tokenSubject,
} from '../bootauth/callback-token.js';
import { SERVER_UUID_INDEX } from '../inventory/server-index.js';
import { ApiError, type KubeClient } from '../runtime/client.js';
import type { EventRecorder } from '../runtime/events.js';
import type { Informer } from '../runtime/informer.js';
import { Resources } from '../runtime/resource.js';
import { badRequest, HttpError, unavailable } from './http-error.js';
import { SingleFlight } from './single-flight.js';
import { UUIDAliasRecorder } from './uuid-alias.js';

export interface BootTarget {
  uuid: string;
  server: Server;
  /** True when `uuid` matched the Server's UUID with fields 1–3 byte-reversed (see {@link ServerMatch}). */
  viaAlias?: boolean;
  sbc: ServerBootConfiguration | undefined;
  /** The current attempt's token (what the boot server renders); undefined without an SBC. */
  callback: AttemptToken | undefined;
}

export interface BootTargetSources {
  client: KubeClient;
  servers: Informer<Server>;
  sbcs: Informer<ServerBootConfiguration>;
  /** The operator's callback key (bootauth/callback-key-secret.ts). */
  callbackKey: CallbackKey;
  /**
   * Where alias matches and callbacks refused as ambiguous (a Warning Event on each Server
   * involved) are recorded; without it alias matches are only written to the Server status.
   */
  events?: EventRecorder;
  log?: Logger;
}

/** A UUID's ambiguity is reported at most this often, ms (a host retries its callbacks). */
const AMBIGUOUS_REPORT_INTERVAL_MS = 30_000;

/** How a request's UUID found its Server. */
export interface ServerMatch {
  server: Server;
  /** The canonical form the request used. */
  uuid: string;
  /** True when it matched the Server's UUID with fields 1–3 byte-reversed. */
  viaAlias: boolean;
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

/** True when `sbc` is NetBootOnce and its claim completed the current attempt: nothing more to serve. */
export function provisioned(sbc: ServerBootConfiguration): boolean {
  return sbc.spec.bootPolicy === 'NetBootOnce' && countsForCurrentAttempt(sbc, ConditionType.BootCompleted);
}

const refreshCounters = new WeakMap<Registry, Counter>();
function refreshCounter(registry: Registry | undefined): Counter | undefined {
  if (!registry) return undefined;
  let c = refreshCounters.get(registry);
  if (!c) {
    c = new Counter({
      name: 'metal_boot_target_refreshes_total',
      help: 'Live API reads of a boot configuration after the cache disagreed with a token.',
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
  /** Records matches through the byte-swapped alias (one write per Server and host form). */
  readonly aliases: UUIDAliasRecorder;
  /** Last report per ambiguous UUID (bounded: cleared when it grows past 1024 entries). */
  private readonly reported = new Map<string, number>();

  constructor(
    private readonly src: BootTargetSources,
    metrics?: Registry,
  ) {
    this.refreshes = refreshCounter(metrics);
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

  /**
   * The one Server with this UUID (see {@link match}); an ambiguous UUID is reported. A match
   * through the alias is NOT recorded here: only {@link authenticate} records it, once the request
   * proved it holds the attempt's token (an unauthenticated request must not write the Server).
   */
  private serverMatch(uuid: string): ServerMatch {
    try {
      return this.match(uuid);
    } catch (err) {
      if (err instanceof HttpError && err.reason === 'AmbiguousServer')
        this.reportAmbiguous(uuid, err.message);
      throw err;
    }
  }

  /** A Warning Event `AmbiguousServer` on every Server involved, at most once per interval per UUID. */
  private reportAmbiguous(uuid: string, message: string): void {
    const events = this.src.events;
    if (!events) return;
    const now = Date.now();
    if (now - (this.reported.get(uuid) ?? 0) < AMBIGUOUS_REPORT_INTERVAL_MS) return;
    if (this.reported.size >= 1024) this.reported.clear();
    this.reported.set(uuid, now);
    const swapped = byteSwappedSystemUUID(uuid);
    const found = [
      ...this.src.servers.byIndex(SERVER_UUID_INDEX, uuid),
      ...(swapped === uuid ? [] : this.src.servers.byIndex(SERVER_UUID_INDEX, swapped)),
    ];
    this.src.log?.warn(
      { systemUUID: uuid, servers: found.map((s) => s.metadata.name) },
      'boot callback refused: ambiguous Server',
    );
    for (const s of found) {
      events.record(
        Resources.Server,
        s,
        'Warning',
        EventReason.AmbiguousServer,
        `boot callback for this system refused (409): ${message}; delete the Server that does not belong to this machine`,
      );
    }
  }

  /** A target for a Server and SBC read elsewhere (a live read), with the SBC's attempt token. */
  targetFor(uuid: string, server: Server, sbc: ServerBootConfiguration | undefined): BootTarget {
    return { uuid, server, sbc, callback: sbc ? attemptToken(this.src.callbackKey, sbc) : undefined };
  }

  /** Server, current SBC and callback data from the caches. Writes nothing (see {@link authenticate}). */
  resolve(uuid: string): BootTarget {
    const { server, viaAlias } = this.serverMatch(uuid);
    const ref = server.spec.bootConfigurationRef;
    const sbc = ref ? this.src.sbcs.get(ref.name, ref.namespace) : undefined;
    return {
      uuid,
      server,
      viaAlias,
      sbc,
      callback: sbc ? attemptToken(this.src.callbackKey, sbc) : undefined,
    };
  }

  /**
   * Fresh SBC (and its attempt's token) from the API server, paced per SBC (see the file comment); `fresh`
   * is false when the result came from a read that began before this call. 503 when unreachable.
   */
  async refreshPaced(target: BootTarget): Promise<{ target: BootTarget; fresh: boolean }> {
    const ref = target.server.spec.bootConfigurationRef;
    // No reference in the cached Server: the cache may lag the patch that set it (a boot just
    // started), so the Server is read too — paced per Server, as reads per SBC are.
    const key = ref ? `${ref.namespace ?? ''}/${ref.name}` : `server/${target.server.metadata.name ?? ''}`;
    const r = await this.flights.do(key, () => this.refresh(target));
    return { target: { ...r.value, uuid: target.uuid, viaAlias: target.viaAlias }, fresh: r.fresh };
  }

  /**
   * Fresh SBC (and its attempt's token) from the API server (503 when unreachable); not paced. The Server
   * is read as well when the cached one names no boot configuration.
   */
  async refresh(target: BootTarget): Promise<BootTarget> {
    let server = target.server;
    let ref = server.spec.bootConfigurationRef;
    this.refreshes?.inc();
    try {
      if (!ref) {
        server = (await this.src.client.get<Server>(Resources.Server, server.metadata.name ?? '')) ?? server;
        ref = server.spec.bootConfigurationRef;
        if (!ref) return { ...target, server };
      }
      const sbc = await this.src.client.get<ServerBootConfiguration>(
        Resources.ServerBootConfiguration,
        ref.name,
        ref.namespace,
      );
      return { ...target, server, sbc, callback: sbc ? attemptToken(this.src.callbackKey, sbc) : undefined };
    } catch (err) {
      apiFailure(err, 'reading the boot configuration');
    }
  }

  /**
   * Authenticates a request for `uuid` with `token` (see {@link verify}); an unknown UUID is 401
   * `InvalidToken` like a wrong token (S13). 400 when `uuid` is not a UUID is the caller's check.
   * Only after the token is verified is a match through the byte-swapped alias recorded
   * (`status.smbiosUUIDAlias`, Event): the host proved it is the Server's.
   */
  async authenticate(uuid: string, token: string | undefined): Promise<BootTarget> {
    let target: BootTarget;
    try {
      target = this.resolve(uuid);
    } catch (err) {
      if (err instanceof HttpError && err.status === 404) throw invalidToken();
      throw err;
    }
    const verified = await this.verify(target, token);
    if (target.viaAlias) this.aliases.note(verified.server, uuid);
    return verified;
  }

  /**
   * Verifies a callback token for the target's current attempt. Returns the target the verdict was
   * reached on (possibly refreshed from the API). Throws 401 `InvalidToken` (also when the server has
   * no current SBC), 409 `StaleToken` (an earlier attempt's), 409 `TokenRetired` (NetBootOnce,
   * claim completed), 503 while the token is of a later attempt than even a fresh read of the SBC
   * shows (the bump is in flight).
   */
  async verify(target: BootTarget, token: string | undefined): Promise<BootTarget> {
    let t = target;
    let verdict = this.verdict(t, token);
    // `ahead`: the cached SBC lags its bump. `invalid`: the cached Server may still name an earlier
    // SBC (another uid). Both are cured by one paced read; `stale` is not (caches only move forward).
    if (token && (verdict === 'ahead' || verdict === 'invalid')) {
      t = (await this.refreshPaced(t)).target;
      verdict = this.verdict(t, token);
    }
    if (!t.sbc || !t.callback) throw invalidToken();
    if (verdict === 'stale') throw new HttpError(409, 'StaleToken', 'token of an earlier boot attempt');
    if (verdict === 'invalid') throw invalidToken();
    if (verdict === 'ahead') throw unavailable('boot attempt is being started', 1);
    if (provisioned(t.sbc))
      throw new HttpError(409, 'TokenRetired', 'the claim of this NetBootOnce attempt completed');
    return t;
  }

  private verdict(t: BootTarget, token: string | undefined): TokenVerdict {
    return this.src.callbackKey.verify(token, t.sbc ? tokenSubject(t.sbc) : undefined);
  }
}
