/**
 * BMC controller: connects to each BMC (inline `spec.access` or a referenced Endpoint, credentials
 * from a BMCSecret), reports what it is (`status`: manufacturer, model, serial, firmware, power state,
 * `Ready` condition) and creates one Server per Redfish ComputerSystem:
 * name `<bmc>-<system id, lower-cased and sanitised>`, `spec.systemUUID` (canonical lower case),
 * `spec.systemURI`, `spec.bmcRef`, owned by the BMC (deleted with it).
 *
 * A system without a usable UUID gets no Server; the BMC's `SystemsDiscovered` condition names it
 * (boot-flow case C01) and the BMC is looked at again at the normal resync pace, not in a hot loop.
 * A system whose UUID another Server already holds (a second BMC object for the same BMC, or a BMC
 * reporting another BMC's UUIDs: issue 15 S14) gets no Server either and nothing is powered: the
 * BMC's condition `DuplicateSystemUUID` names each UUID and its owner, with a Warning Event. At most
 * `maxSystems` systems per BMC (by URI) get Servers (`SystemsDiscovered=False SystemLimitExceeded`).
 * Changes of the BMCSecret or Endpoint re-run the BMC's reconcile; so does a Server that found the
 * BMC unusable (bmc-availability.ts): `Ready=False` with that reason at once, then a re-read decides.
 * A Server made by hand in upstream's shape (`systemUUID` + `bmcRef` to this BMC, no `systemURI`) is
 * that system's Server: its `systemURI` is filled in from the system with its UUID (no duplicate).
 * A BMC that cannot be read is retried with a per-BMC backoff (5 s doubling to 2 min, reset by a
 * good read or a spec edit) and gets one Warning Event per change of its failure reason.
 */
import type pino from 'pino';
import { canonicalSystemUUID } from '../../api/system-uuid.js';
import type { BMC as BMCObject } from '../../api/v1alpha1/bmc.js';
import type { BMCSecret } from '../../api/v1alpha1/bmcsecret.js';
import type { Endpoint } from '../../api/v1alpha1/endpoint.js';
import type { Server } from '../../api/v1alpha1/server.js';
import { BmcReason, EventReason } from '../../api/vocabulary.js';
import { type BMC, type ComputerSystemInfo, describeTransportSecurity } from '../../bmc/bmc.js';
import { RedfishAuthError } from '../../bmc/errors.js';
import { RedfishParseError } from '../../bmc/parse.js';
import { RedfishBMC } from '../../bmc/redfish-bmc.js';
import { SERVER_UUID_INDEX } from '../../inventory/server-index.js';
import { ApiError, type KubeClient } from '../../runtime/client.js';
import { findCondition } from '../../runtime/conditions.js';
import { Controller, type Request, type Result } from '../../runtime/controller.js';
import type { EventRecorder } from '../../runtime/events.js';
import type { Informer } from '../../runtime/informer.js';
import type { RuntimeMetrics } from '../../runtime/metrics.js';
import { controllerOwnerReference } from '../../runtime/ownerrefs.js';
import { Resources } from '../../runtime/resource.js';
import { StatusPatch } from '../../runtime/status-patch.js';
import { type BmcDownReport, type BmcDownReports, bmcDownReport } from '../bmc-actions/bmc-availability.js';
import { BmcAccessError, type BmcConnections, classifyBmcFailure } from '../bmc-actions/bmc-connections.js';
import {
  DEFAULT_MAX_SYSTEMS_PER_BMC,
  DUPLICATE_SYSTEM_UUID,
  describeOwner,
  NO_DUPLICATE_SYSTEM_UUID,
  ownedElsewhere,
  SYSTEM_LIMIT_EXCEEDED,
  uuidOwner,
} from '../common/system-ownership.js';

/** Informer indexes of BMCs, by the BMCSecret and the Endpoint they reference. */
export const BMC_BY_SECRET_INDEX = 'bmcSecret';
export const BMC_BY_ENDPOINT_INDEX = 'endpoint';
export const bmcIndexers = {
  [BMC_BY_SECRET_INDEX]: (b: BMCObject) => (b.spec?.bmcSecretRef?.name ? [b.spec.bmcSecretRef.name] : []),
  [BMC_BY_ENDPOINT_INDEX]: (b: BMCObject) => (b.spec?.endpointRef?.name ? [b.spec.endpointRef.name] : []),
};

export const BMC_READY_CONDITION = 'Ready';
export const SYSTEMS_DISCOVERED_CONDITION = 'SystemsDiscovered';

export interface BmcControllerOptions {
  client: KubeClient;
  bmcs: Informer<BMCObject>;
  bmcSecrets: Informer<BMCSecret>;
  endpoints: Informer<Endpoint>;
  servers: Informer<Server>;
  connections: BmcConnections;
  events: EventRecorder;
  log: pino.Logger;
  metrics?: RuntimeMetrics;
  /** Re-read each BMC this often, ms. */
  resyncMs: number;
  /** Labels put on every Server created (the operator's object scope). */
  labels: Record<string, string>;
  /** Reports of BMC calls made for Servers that found the BMC unusable (power actions). */
  bmcDown?: BmcDownReports;
  /** Servers are created for at most this many systems per BMC (the first by URI); default {@link DEFAULT_MAX_SYSTEMS_PER_BMC}. */
  maxSystems?: number;
  /**
   * The discovery SBC a new Server will get (server.ts): set as `spec.bootConfigurationRef` at
   * creation, so the Server controller's discovery needs no spec patch to set it. The SBC itself is
   * made in state Initial; until then the reference names nothing, which the boot signals treat as
   * no boot configuration.
   */
  discoveryRef?: (server: string) => { name: string; namespace: string };
}

/** What one read of a BMC's systems found. */
export interface SystemScan {
  /** Systems the BMC lists (also those beyond the limit). */
  listed: number;
  /** URIs of systems without a usable UUID. */
  withoutUUID: string[];
  /** Systems whose UUID another Server holds. */
  duplicates: { uri: string; uuid: string; owner: Server }[];
  /** Servers this scan created, `name (UUID u)`. */
  created: string[];
}

/** Most items named in a condition message; the rest are counted. */
const MAX_LISTED = 10;

/** `SystemsDiscovered` of a scan: the limit first, then missing UUIDs, then duplicates. */
export function systemsVerdict(
  scan: SystemScan,
  maxSystems: number,
): { status: 'True' | 'False'; reason: string; message: string } {
  const parts: string[] = [];
  let reason = '';
  if (scan.listed > maxSystems) {
    reason = SYSTEM_LIMIT_EXCEEDED;
    parts.push(
      `${scan.listed} system(s) listed, limit ${maxSystems} per BMC (--bmc-max-systems): Servers only for the first ${maxSystems} by URI`,
    );
  }
  if (scan.withoutUUID.length) {
    reason ||= BmcReason.SystemUUIDMissing;
    parts.push(`no Server created for system(s) without a valid UUID: ${listed(scan.withoutUUID)}`);
  }
  if (scan.duplicates.length) {
    reason ||= DUPLICATE_SYSTEM_UUID;
    parts.push(
      `${scan.duplicates.length} system(s) with a UUID another Server holds (see ${DUPLICATE_SYSTEM_UUID})`,
    );
  }
  if (!reason)
    return {
      status: 'True',
      reason: BmcReason.AllSystemsHaveUUID,
      message: `${scan.listed} system(s), each with a Server`,
    };
  return { status: 'False', reason, message: parts.join('; ') };
}

/** The `DuplicateSystemUUID` message naming each UUID and its owner, or '' when there are none. */
export function duplicatesText(d: SystemScan['duplicates']): string {
  if (!d.length) return '';
  const items = d.map((x) => `${x.uri} reports UUID ${x.uuid}, held by ${describeOwner(x.owner)}`);
  return `no Server created and nothing powered for ${d.length} system(s): ${listed(items, '; ')}`;
}

function listed(items: string[], sep = ', '): string {
  const shown = items.slice(0, MAX_LISTED).join(sep);
  return items.length > MAX_LISTED ? `${shown}${sep}and ${items.length - MAX_LISTED} more` : shown;
}

/** First retry delay of a failing BMC, ms; doubled per consecutive failure up to {@link BMC_RETRY_MAX_MS}. */
export const BMC_RETRY_BASE_MS = 5_000;
/** Cap of a failing BMC's retry delay, ms: a dead BMC is read at most this rarely (a spec edit reads it at once). */
export const BMC_RETRY_MAX_MS = 2 * 60_000;

/**
 * Delay before re-reading a BMC after its `failures`-th consecutive failed sync (1-based), ms: 5 s,
 * 10 s, 20 s, … capped at 2 min, never below the BMC's own `Retry-After` (`retryAfterMs`).
 */
export function bmcRetryDelay(failures: number, retryAfterMs: number): number {
  const backoff = BMC_RETRY_BASE_MS * 2 ** Math.min(Math.max(0, failures - 1), 16);
  return Math.min(BMC_RETRY_MAX_MS, Math.max(backoff, retryAfterMs));
}

/**
 * A failure message without what varies per try (the budget's elapsed milliseconds and attempt
 * count), so a dead BMC's condition message stays the same and its Events aggregate.
 */
export function stableFailureMessage(message: string): string {
  return message.replace(/: gave up after \d+ attempt\(s\) in \d+ ms/g, ': gave up');
}

/**
 * Whether `owner`, the Server holding a system's UUID under another name, is that system's own
 * Server made by hand: it names this BMC and either no system URI (upstream's sample shape) or this
 * system's. A Server naming another BMC, or another system of this one, stays a duplicate.
 */
export function adoptable(owner: Server, bmc: BMCObject, uri: string): boolean {
  return (
    owner.spec.bmcRef?.name === bmc.metadata.name && (!owner.spec.systemURI || owner.spec.systemURI === uri)
  );
}

/** `<bmc>-<system id>` lower-cased, characters outside `[a-z0-9.-]` replaced, at most 253 characters. */
export function serverName(bmcName: string, systemId: string): string {
  const id = systemId
    .toLowerCase()
    .replace(/[^a-z0-9.-]+/g, '-')
    .replace(/^[-.]+|[-.]+$/g, '');
  return `${bmcName}-${id || 'system'}`.slice(0, 253).replace(/[-.]+$/, '');
}

/** A Server this process is creating, until the informer shows it. */
interface InFlightServer {
  metadata: { name: string };
  server: Server;
  at: number;
}

type BmcSettings = BmcControllerOptions & { maxSystems: number };

class BmcReconciler {
  private readonly log: pino.Logger;
  /**
   * Last successful sync per BMC. Status writes (ours, the Servers') trigger reconciles too; those
   * must not cost a round of Redfish calls each, so a BMC whose spec is unchanged is re-read only at
   * the resync pace, unless something it depends on changed (`stale`).
   */
  private readonly synced = new Map<string, { generation: number; at: number }>();
  readonly stale = new Set<string>();
  /** A Server's report that its BMC is down, waiting for the BMC's reconcile (bmc-availability.ts). */
  readonly reportedDown = new Map<string, BmcDownReport>();
  private readonly inFlight = new Map<string, InFlightServer>();
  /** Consecutive failed syncs per BMC name (the backoff's exponent); cleared by a good sync or deletion. */
  private readonly failures = new Map<string, number>();
  /** When a failing BMC's next read is due (and for which generation of it). */
  private readonly backoff = new Map<string, { generation: number; until: number }>();

  constructor(private readonly o: BmcSettings) {
    this.log = o.log.child({ controller: 'bmc' });
  }

  async reconcile(req: Request): Promise<Result | undefined> {
    const o = this.o;
    let bmc = o.bmcs.get(req.name);
    if (!bmc || bmc.metadata.deletionTimestamp) {
      this.failures.delete(req.name);
      this.backoff.delete(req.name);
      await o.connections.release(req.name);
      return undefined;
    }
    const l = this.log.child({ name: req.name });
    const down = this.reportedDown.get(req.name);
    this.reportedDown.delete(req.name);
    if (down) bmc = await this.mirrorDown(bmc, down, l);
    const last = this.synced.get(req.name);
    const age = last ? Date.now() - last.at : Number.POSITIVE_INFINITY;
    const fresh = !down && !this.stale.has(req.name) && last?.generation === bmc.metadata.generation;
    if (last && fresh && age < o.resyncMs) {
      return { requeueAfterMs: o.resyncMs - age };
    }
    // A failing BMC is re-read when its backoff ends, not at every write or watch event meanwhile;
    // a spec edit, a changed Secret or Endpoint (stale) or a Server's report reads it at once.
    const backoff = this.backoff.get(req.name);
    if (backoff && !down && !this.stale.has(req.name) && backoff.generation === bmc.metadata.generation) {
      const left = backoff.until - Date.now();
      if (left > 0) return { requeueAfterMs: left };
    }
    this.stale.delete(req.name);
    this.synced.delete(req.name);
    let client: BMC;
    try {
      client = o.connections.forBmc(bmc);
    } catch (err) {
      if (!(err instanceof BmcAccessError)) throw err;
      await this.setStatus(bmc, { state: 'Error' }, { ok: false, reason: err.reason, message: err.message });
      return undefined; // the BMCSecret / Endpoint watches bring it back
    }
    return this.sync(req, bmc, client, l);
  }

  /**
   * One round of Redfish reads; BMC failures become `Ready=False` and a retry backed off per BMC
   * ({@link bmcRetryDelay}), with a Warning Event only when the failure's reason changes.
   */
  private async sync(req: Request, bmc: BMCObject, client: BMC, l: pino.Logger): Promise<Result> {
    const o = this.o;
    let patch: StatusPatch<BMCObject>;
    try {
      const status = await readManager(client);
      const scan = await this.scanSystems(bmc, client, l);
      const ip = this.addressOf(bmc);
      // Manager facts, Ready and the scan's two conditions: one write of the BMC's status.
      patch = this.statusPatch(
        bmc,
        { ...status, ...(ip ? { ip } : {}), state: 'Enabled' },
        {
          ok: true,
          reason: 'Reachable',
          message: `${scan.listed} system(s); ${describeTransportSecurity(client.transportSecurity)}`,
        },
      );
      this.reportSystems(bmc, scan, patch, l);
    } catch (err) {
      const f = classifyBmcFailure(err);
      if (err instanceof RedfishAuthError) await o.connections.release(req.name);
      const message = stableFailureMessage(f.message);
      const prior = findCondition(bmc.status?.conditions, BMC_READY_CONDITION);
      const failures = (this.failures.get(req.name) ?? 0) + 1;
      this.failures.set(req.name, failures);
      const requeueAfterMs = bmcRetryDelay(failures, f.retryAfterMs);
      this.backoff.set(req.name, {
        generation: bmc.metadata.generation ?? 0,
        until: Date.now() + requeueAfterMs,
      });
      // One Event and one warn line per change of the BMC's state (reason), not per retry.
      if (prior?.status !== 'False' || prior.reason !== f.reason) {
        l.warn({ reason: f.reason, error: f.message, retryInMs: requeueAfterMs }, 'BMC not usable');
        o.events.record(Resources.BMC, bmc, 'Warning', f.reason, message);
      } else {
        l.debug({ reason: f.reason, failures, retryInMs: requeueAfterMs }, 'BMC still not usable');
      }
      await this.setStatus(bmc, { state: 'Error' }, { ok: false, reason: f.reason, message });
      return { requeueAfterMs };
    }
    // Outside the BMC's try: a failed write (409 after a stale read) is the API server's, retried by
    // the controller, not a BMC failure.
    await patch.commit();
    this.failures.delete(req.name);
    this.backoff.delete(req.name);
    this.synced.set(req.name, { generation: bmc.metadata.generation ?? 0, at: Date.now() });
    return { requeueAfterMs: o.resyncMs };
  }

  /** The address the BMC was reached at (`spec.access.ip`, else its Endpoint's), for `status.ip` (the IP column). */
  private addressOf(bmc: BMCObject): string | undefined {
    const ref = bmc.spec.endpointRef?.name;
    return bmc.spec.access?.ip || (ref ? this.o.endpoints.get(ref)?.spec?.ip : undefined) || undefined;
  }

  /**
   * Reads the BMC's systems (at most `maxSystems`, by URI) and creates the Servers of those with a
   * usable UUID that no other Server holds. Throws BMC errors.
   */
  private async scanSystems(bmc: BMCObject, client: BMC, l: pino.Logger): Promise<SystemScan> {
    const systems = [...(await client.listSystems())].sort((a, b) => a.uri.localeCompare(b.uri));
    const scan: SystemScan = { listed: systems.length, withoutUUID: [], duplicates: [], created: [] };
    try {
      await this.scanEach(bmc, client, systems.slice(0, this.o.maxSystems), scan, l);
    } finally {
      // One Event per scan, also when a BMC error ended it early: the Servers exist either way.
      this.tellCreated(bmc, scan.created);
    }
    return scan;
  }

  private async scanEach(
    bmc: BMCObject,
    client: BMC,
    systems: { uri: string }[],
    scan: SystemScan,
    l: pino.Logger,
  ): Promise<void> {
    for (const ref of systems) {
      let info: ComputerSystemInfo;
      try {
        info = await client.getSystem(ref.uri);
      } catch (err) {
        if (err instanceof RedfishParseError && err.field === 'UUID') {
          scan.withoutUUID.push(ref.uri);
          continue;
        }
        throw err;
      }
      const r = await this.ensureServer(bmc, info, l);
      if (r === 'created')
        scan.created.push(
          `${serverName(bmc.metadata.name ?? '', info.id)} (UUID ${canonicalSystemUUID(info.uuid) ?? info.uuid})`,
        );
      else if (r !== 'exists') scan.duplicates.push({ uri: info.uri, uuid: info.uuid, owner: r.owner });
    }
  }

  /**
   * One `ServerCreated` Event for the Servers a scan created (a BMC of 100 systems: one Event, not
   * 100; each Server's own log line has its UUID and system URI).
   */
  private tellCreated(bmc: BMCObject, created: string[]): void {
    if (!created.length) return;
    const named = created.slice(0, MAX_LISTED).join(', ');
    const more = created.length > MAX_LISTED ? ` and ${created.length - MAX_LISTED} more` : '';
    this.o.events.record(
      Resources.BMC,
      bmc,
      'Normal',
      EventReason.ServerCreated,
      `${created.length} Server(s) created: ${named}${more}`,
    );
  }

  /**
   * Conditions `SystemsDiscovered` and `DuplicateSystemUUID` (set on `patch`, written with the
   * sync's status), Warning Events and logs of a scan.
   */
  private reportSystems(
    bmc: BMCObject,
    scan: SystemScan,
    patch: StatusPatch<BMCObject>,
    l: pino.Logger,
  ): void {
    const o = this.o;
    const verdict = systemsVerdict(scan, o.maxSystems);
    patch.setCondition({ type: SYSTEMS_DISCOVERED_CONDITION, ...verdict });
    const dup = duplicatesText(scan.duplicates);
    patch.setCondition(
      dup
        ? { type: DUPLICATE_SYSTEM_UUID, status: 'True', reason: DUPLICATE_SYSTEM_UUID, message: dup }
        : { type: DUPLICATE_SYSTEM_UUID, status: 'False', reason: NO_DUPLICATE_SYSTEM_UUID, message: '' },
    );
    if (scan.listed > o.maxSystems) {
      l.warn({ systems: scan.listed, limit: o.maxSystems }, 'more systems than the per-BMC limit');
      o.events.record(Resources.BMC, bmc, 'Warning', SYSTEM_LIMIT_EXCEEDED, verdict.message);
    }
    if (scan.withoutUUID.length) {
      l.warn({ systems: scan.withoutUUID }, 'systems without a UUID: no Server created');
      o.events.record(
        Resources.BMC,
        bmc,
        'Warning',
        EventReason.SystemUUIDMissing,
        `no valid UUID reported by ${scan.withoutUUID.join(', ')}; no Server created`,
      );
    }
    if (dup) {
      l.warn(
        { duplicates: scan.duplicates.map((d) => ({ systemUUID: d.uuid, owner: d.owner.metadata.name })) },
        'systems whose UUID another Server holds: no Server created, nothing powered',
      );
      o.events.record(Resources.BMC, bmc, 'Warning', DUPLICATE_SYSTEM_UUID, dup);
    }
    if (scan.created.length)
      l.info({ created: scan.created.length, systems: scan.listed }, 'servers created');
  }

  /** `Ready=False` with the Server's reason at once; the re-read that follows decides what is true. */
  private async mirrorDown(bmc: BMCObject, down: BmcDownReport, l: pino.Logger): Promise<BMCObject> {
    const message = `Server ${down.server} reported ${down.reason} at ${down.at}: ${down.message}`;
    l.warn(
      { server: down.server, reason: down.reason },
      'a Server reports its BMC unusable: re-reading the BMC',
    );
    this.o.events.record(Resources.BMC, bmc, 'Warning', down.reason, message);
    // The stored object, so the re-read's own write is compared with (and guarded by) it, not the cache.
    return this.statusPatch(bmc, {}, { ok: false, reason: down.reason, message }).commit();
  }

  /**
   * Servers holding a UUID: the informer's, plus those this process created or is creating and the
   * cache does not show yet (two workers, or two systems of one BMC, must not both create one).
   */
  private holders(uuid: string): Server[] {
    const cached = this.o.servers.byIndex(SERVER_UUID_INDEX, uuid);
    const mine = this.inFlight.get(uuid);
    if (!mine) return cached;
    if (cached.some((s) => s.metadata.name === mine.metadata.name) || Date.now() - mine.at > 60_000) {
      this.inFlight.delete(uuid);
      return cached;
    }
    return [...cached, mine.server];
  }

  /**
   * Creates or corrects the Server of one system: `created`, `exists`, or the Server that owns the
   * UUID when that is another one (then nothing is created or changed).
   */
  private async ensureServer(
    bmc: BMCObject,
    info: ComputerSystemInfo,
    l: pino.Logger,
  ): Promise<'created' | 'exists' | { owner: Server }> {
    const name = serverName(bmc.metadata.name ?? '', info.id);
    const uuid = canonicalSystemUUID(info.uuid) ?? info.uuid;
    const existing = this.o.servers.get(name);
    const rivals = this.holders(uuid).filter((s) => s.metadata.name !== name);
    const owner =
      existing && canonicalSystemUUID(existing.spec.systemUUID) === uuid
        ? ownedElsewhere(existing, rivals)
        : uuidOwner(rivals);
    if (owner && adoptable(owner, bmc, info.uri)) return this.adopt(owner, info.uri, l);
    if (owner) return { owner };
    const spec = { systemUUID: uuid, systemURI: info.uri, bmcRef: { name: bmc.metadata.name ?? '' } };
    if (!existing) return this.createServer(bmc, name, spec, l);
    const s = existing.spec;
    if (
      canonicalSystemUUID(s.systemUUID) !== spec.systemUUID ||
      s.systemURI !== spec.systemURI ||
      s.bmcRef?.name !== spec.bmcRef.name
    ) {
      await this.o.client.mergePatch(Resources.Server, name, undefined, { spec });
      l.info({ server: name, systemUUID: uuid }, 'server identity corrected');
    }
    return 'exists';
  }

  /**
   * A Server made by hand in upstream's shape (`systemUUID` + `bmcRef` to this BMC, no `systemURI`):
   * it is this system's Server, under its own name; the URI of the system with its UUID is filled in
   * (as upstream's BMC controller does), so discovery can start. No owner reference is added: the
   * operator made it and deletes it.
   */
  private async adopt(server: Server, uri: string, l: pino.Logger): Promise<'exists'> {
    if (server.spec.systemURI === uri) return 'exists';
    await this.o.client.mergePatch(Resources.Server, server.metadata.name ?? '', undefined, {
      spec: { systemURI: uri },
    });
    l.info(
      { server: server.metadata.name, systemUUID: server.spec.systemUUID, systemURI: uri },
      'hand-made server adopted: systemURI filled in from the BMC system with its UUID',
    );
    return 'exists';
  }

  /** Creates a BMC-owned Server; `exists` when the API server already has one of that name. */
  private async createServer(
    bmc: BMCObject,
    name: string,
    spec: Server['spec'] & { systemUUID: string; systemURI: string },
    l: pino.Logger,
  ): Promise<'created' | 'exists'> {
    const o = this.o;
    const uuid = spec.systemUUID;
    const placeholder = { metadata: { name, creationTimestamp: new Date().toISOString() }, spec } as Server;
    this.inFlight.set(uuid, { metadata: { name }, server: placeholder, at: Date.now() });
    try {
      await o.client.create<Server>(Resources.Server, {
        apiVersion: 'metal.ironcore.dev/v1alpha1',
        kind: 'Server',
        metadata: {
          name,
          labels: { ...o.labels },
          ownerReferences: [controllerOwnerReference(bmc, Resources.BMC)],
        },
        spec: o.discoveryRef ? { ...spec, bootConfigurationRef: o.discoveryRef(name) } : spec,
      });
    } catch (err) {
      if (err instanceof ApiError && err.conflict) return 'exists'; // cache lag: it exists
      this.inFlight.delete(uuid);
      throw err;
    }
    l.info({ server: name, systemUUID: uuid, systemURI: spec.systemURI }, 'server created');
    return 'created';
  }

  /** Writes `fields` and `Ready` in one request (see {@link statusPatch}). */
  private async setStatus(
    bmc: BMCObject,
    fields: Record<string, string>,
    ready: { ok: boolean; reason: string; message: string },
  ): Promise<void> {
    await this.statusPatch(bmc, fields, ready).commit();
  }

  /**
   * A patch of the BMC's status (this controller is its only writer: guarded by the
   * resourceVersion, runtime/status-patch.ts) with `fields` and the `Ready` condition set; more may
   * be set on it before the commit.
   */
  private statusPatch(
    bmc: BMCObject,
    fields: Record<string, string>,
    ready: { ok: boolean; reason: string; message: string },
  ): StatusPatch<BMCObject> {
    return new StatusPatch(this.o.client, Resources.BMC, bmc).set(fields).setCondition({
      type: BMC_READY_CONDITION,
      status: ready.ok ? 'True' : 'False',
      reason: ready.reason,
      message: ready.message,
    });
  }
}

/** Manager facts. ManagerInfo has no SerialNumber or PowerState, so those come from the raw resource when the client is Redfish. */
async function readManager(client: BMC): Promise<Record<string, string>> {
  const [first] = await client.listManagers();
  if (!first) return {};
  const m = await client.getManager(first.uri);
  const out: Record<string, string> = {};
  if (m.manufacturer) out.manufacturer = m.manufacturer;
  if (m.model) out.model = m.model;
  if (m.firmwareVersion) out.firmwareVersion = m.firmwareVersion;
  if (client instanceof RedfishBMC) {
    const raw = (await client.client.get(first.uri)).body as Record<string, unknown> | undefined;
    if (typeof raw?.SerialNumber === 'string' && raw.SerialNumber) out.serialNumber = raw.SerialNumber;
    if (typeof raw?.PowerState === 'string' && raw.PowerState) out.powerState = raw.PowerState;
  }
  return out;
}

export function newBmcController(opts: BmcControllerOptions): Controller {
  const o = { ...opts, maxSystems: opts.maxSystems ?? DEFAULT_MAX_SYSTEMS_PER_BMC };
  const r = new BmcReconciler(o);
  const c = new Controller('bmc', {
    reconcile: (req) => r.reconcile(req),
    workers: 2,
    log: o.log,
    metrics: o.metrics,
  });
  c.watches(o.bmcs);
  watchServers(c, o, r);
  const byIndex = (index: string) => (obj: { metadata: { name?: string } }) =>
    o.bmcs.byIndex(index, obj.metadata.name ?? '').map((b) => {
      r.stale.add(b.metadata.name ?? '');
      return { name: b.metadata.name ?? '' };
    });
  c.watches(o.bmcSecrets, byIndex(BMC_BY_SECRET_INDEX));
  c.watches(o.endpoints, byIndex(BMC_BY_ENDPOINT_INDEX));
  return c;
}

function watchServers(c: Controller, o: BmcSettings, r: BmcReconciler): void {
  // A deleted Server of a live BMC is created again; other Server changes are none of this controller's business.
  o.servers.on('delete', (s) => {
    const owner = s.metadata.ownerReferences?.find((ref) => ref.controller && ref.kind === 'BMC');
    if (!owner) return;
    r.stale.add(owner.name);
    c.enqueue({ name: owner.name });
  });
  // A Server that finds its BMC down: the BMC says so at once and is re-read (not at the resync pace).
  const onDown = (down: BmcDownReport) => {
    const ready = findCondition(o.bmcs.get(down.bmc)?.status?.conditions, BMC_READY_CONDITION);
    if (ready?.status !== 'True' || Date.parse(down.at) < Date.parse(ready.lastTransitionTime)) return;
    r.reportedDown.set(down.bmc, down);
    r.stale.add(down.bmc);
    c.enqueue({ name: down.bmc });
  };
  const onServer = (s: Server) => {
    const down = bmcDownReport(s);
    if (down) onDown(down);
  };
  o.servers.on('add', onServer);
  o.servers.on('update', onServer);
  o.bmcDown?.subscribe(onDown);
}
