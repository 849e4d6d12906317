/**
 * BMC controller: connects to each BMC (inline `spec.access` or a referenced Endpoint, credentials
 * from a BMCSecret), reports what it is (`status`: manufacturer, model, serial, firmware, power state,
 * `Ready` condition) and creates one Server per Redfish ComputerSystem:
 * name `<bmc>-<system id, lower-cased and sanitised>`, `spec.systemUUID` (canonical lower case),
 * `spec.systemURI`, `spec.bmcRef`, owned by the BMC (deleted with it).
 *
 * A system without a usable UUID gets no Server; the BMC's `SystemsDiscovered` condition names it
 * (boot-flow case C01) and the BMC is looked at again at the normal resync pace, not in a hot loop.
 * Changes of the BMCSecret or Endpoint re-run the BMC's reconcile.
 */
import type pino from 'pino';
import type { BMC as BMCObject } from '../api/v1alpha1/bmc.js';
import type { BMCSecret } from '../api/v1alpha1/bmcsecret.js';
import type { Endpoint } from '../api/v1alpha1/endpoint.js';
import type { Server } from '../api/v1alpha1/server.js';
import { type BMC, type ComputerSystemInfo, describeTransportSecurity } from '../bmc/bmc.js';
import { RedfishAuthError } from '../bmc/errors.js';
import { RedfishParseError } from '../bmc/parse.js';
import { RedfishBMC } from '../bmc/redfish-bmc.js';
import { ApiError, type KubeClient } from '../runtime/client.js';
import { Controller, type Request, type Result } from '../runtime/controller.js';
import type { EventRecorder } from '../runtime/events.js';
import type { Informer } from '../runtime/informer.js';
import type { RuntimeMetrics } from '../runtime/metrics.js';
import { controllerOwnerReference } from '../runtime/ownerrefs.js';
import { Resources } from '../runtime/resource.js';
import { BmcAccessError, type BmcConnections, classifyBmcFailure } from './bmc-connections.js';
import { applyOwnedCondition } from './owned-conditions.js';

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
}

/** `<bmc>-<system id>` lower-cased, characters outside `[a-z0-9.-]` replaced, at most 253 characters. */
export function serverName(bmcName: string, systemId: string): string {
  const id = systemId
    .toLowerCase()
    .replace(/[^a-z0-9.-]+/g, '-')
    .replace(/^[-.]+|[-.]+$/g, '');
  return `${bmcName}-${id || 'system'}`.slice(0, 253).replace(/[-.]+$/, '');
}

export function newBmcController(o: BmcControllerOptions): Controller {
  const log = o.log.child({ controller: 'bmc' });
  const asEventObject = (b: BMCObject) => ({ ...b, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'BMC' });
  /**
   * Last successful sync per BMC. Status writes (ours, the Servers') trigger reconciles too; those
   * must not cost a round of Redfish calls each, so a BMC whose spec is unchanged is re-read only at
   * the resync pace, unless something it depends on changed (`stale`).
   */
  const synced = new Map<string, { generation: number; at: number }>();
  const stale = new Set<string>();

  async function reconcile(req: Request): Promise<Result | undefined> {
    const bmc = o.bmcs.get(req.name);
    if (!bmc || bmc.metadata.deletionTimestamp) {
      await o.connections.release(req.name);
      return undefined;
    }
    const l = log.child({ name: req.name });
    const last = synced.get(req.name);
    const age = last ? Date.now() - last.at : Number.POSITIVE_INFINITY;
    if (last && !stale.has(req.name) && last.generation === bmc.metadata.generation && age < o.resyncMs) {
      return { requeueAfterMs: o.resyncMs - age };
    }
    stale.delete(req.name);
    synced.delete(req.name);
    let client: BMC;
    try {
      client = o.connections.forBmc(bmc);
    } catch (err) {
      if (!(err instanceof BmcAccessError)) throw err;
      await setStatus(bmc, { state: 'Error' }, { ok: false, reason: err.reason, message: err.message });
      return undefined; // the BMCSecret / Endpoint watches bring it back
    }
    try {
      const status = await readManager(client);
      const systems = await client.listSystems();
      const withoutUUID: string[] = [];
      let created = 0;
      for (const ref of systems) {
        let info: ComputerSystemInfo;
        try {
          info = await client.getSystem(ref.uri);
        } catch (err) {
          if (err instanceof RedfishParseError && err.field === 'UUID') {
            withoutUUID.push(ref.uri);
            continue;
          }
          throw err;
        }
        if (await ensureServer(bmc, info, l)) created++;
      }
      await setStatus(
        bmc,
        { ...status, state: 'Enabled' },
        {
          ok: true,
          reason: 'Reachable',
          message: `${systems.length} system(s); ${describeTransportSecurity(client.transportSecurity)}`,
        },
      );
      await applyOwnedCondition(
        o.client,
        Resources.BMC,
        bmc,
        withoutUUID.length === 0
          ? {
              type: SYSTEMS_DISCOVERED_CONDITION,
              status: 'True',
              reason: 'AllSystemsHaveUUID',
              message: `${systems.length} system(s), each with a Server`,
            }
          : {
              type: SYSTEMS_DISCOVERED_CONDITION,
              status: 'False',
              reason: 'SystemUUIDMissing',
              message: `no Server created for system(s) without a valid UUID: ${withoutUUID.join(', ')}`,
            },
      );
      if (withoutUUID.length) {
        l.warn({ systems: withoutUUID }, 'systems without a UUID: no Server created');
        o.events.event(
          asEventObject(bmc),
          'Warning',
          'SystemUUIDMissing',
          `no valid UUID reported by ${withoutUUID.join(', ')}; no Server created`,
        );
      }
      if (created) l.info({ created, systems: systems.length }, 'servers created');
      synced.set(req.name, { generation: bmc.metadata.generation ?? 0, at: Date.now() });
      return { requeueAfterMs: o.resyncMs };
    } catch (err) {
      const f = classifyBmcFailure(err);
      if (err instanceof RedfishAuthError) await o.connections.release(req.name);
      l.warn({ reason: f.reason, error: f.message }, 'BMC not usable');
      o.events.event(asEventObject(bmc), 'Warning', f.reason, f.message);
      await setStatus(bmc, { state: 'Error' }, { ok: false, reason: f.reason, message: f.message });
      return { requeueAfterMs: Math.max(f.retryAfterMs, 5_000) };
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

  /** Creates or corrects the Server of one system; true when created. */
  async function ensureServer(bmc: BMCObject, info: ComputerSystemInfo, l: pino.Logger): Promise<boolean> {
    const name = serverName(bmc.metadata.name ?? '', info.id);
    const existing = o.servers.get(name);
    const spec = { systemUUID: info.uuid, systemURI: info.uri, bmcRef: { name: bmc.metadata.name ?? '' } };
    if (!existing) {
      try {
        await o.client.create<Server>(Resources.Server, {
          apiVersion: 'metal.ironcore.dev/v1alpha1',
          kind: 'Server',
          metadata: {
            name,
            labels: { ...o.labels },
            ownerReferences: [controllerOwnerReference(bmc, Resources.BMC)],
          },
          spec,
        });
      } catch (err) {
        if (err instanceof ApiError && err.conflict) return false; // cache lag: it exists
        throw err;
      }
      l.info({ server: name, systemUUID: info.uuid, systemURI: info.uri }, 'server created');
      o.events.event(
        asEventObject(bmc),
        'Normal',
        'ServerCreated',
        `Server ${name} for system ${info.uri} (UUID ${info.uuid})`,
      );
      return true;
    }
    const s = existing.spec;
    if (
      s.systemUUID !== spec.systemUUID ||
      s.systemURI !== spec.systemURI ||
      s.bmcRef?.name !== spec.bmcRef.name
    ) {
      await o.client.mergePatch(Resources.Server, name, undefined, { spec });
      l.info({ server: name, systemUUID: info.uuid }, 'server identity corrected');
    }
    return false;
  }

  async function setStatus(
    bmc: BMCObject,
    fields: Record<string, string>,
    ready: { ok: boolean; reason: string; message: string },
  ): Promise<void> {
    const cur = (bmc.status ?? {}) as Record<string, unknown>;
    const changed = Object.entries(fields).filter(([k, v]) => cur[k] !== v);
    if (changed.length) {
      await o.client.mergePatch(
        Resources.BMC,
        bmc.metadata.name ?? '',
        undefined,
        { status: Object.fromEntries(changed) },
        { subresource: 'status' },
      );
    }
    await applyOwnedCondition(o.client, Resources.BMC, bmc, {
      type: BMC_READY_CONDITION,
      status: ready.ok ? 'True' : 'False',
      reason: ready.reason,
      message: ready.message,
    });
  }

  const c = new Controller('bmc', { reconcile, workers: 2, log: o.log, metrics: o.metrics });
  c.watches(o.bmcs);
  const byIndex = (index: string) => (obj: { metadata: { name?: string } }) =>
    o.bmcs.byIndex(index, obj.metadata.name ?? '').map((b) => {
      stale.add(b.metadata.name ?? '');
      return { name: b.metadata.name ?? '' };
    });
  // A deleted Server of a live BMC is created again; other Server changes are none of this controller's business.
  o.servers.on('delete', (s) => {
    const owner = s.metadata.ownerReferences?.find((r) => r.controller && r.kind === 'BMC');
    if (!owner) return;
    stale.add(owner.name);
    c.enqueue({ name: owner.name });
  });
  c.watches(o.bmcSecrets, byIndex(BMC_BY_SECRET_INDEX));
  c.watches(o.endpoints, byIndex(BMC_BY_ENDPOINT_INDEX));
  return c;
}
