/**
 * {@link PowerActions} wired to a {@link FakeBmc} through the `BmcFactory` seam of
 * {@link BmcConnections} (the one `setupControllers` passes as `bmcFactory`), with no API server:
 * the KubeClient, the EventRecorder and the informers are stand-ins that record what would have been
 * written. For table tests of the power and boot decisions that otherwise need a virtual BMC over HTTP.
 *
 * Contract: {@link powerBench} returns the PowerActions, the Server it acts on (BMC `bmc-1`, system
 * `/redfish/v1/Systems/1` of the fake), and what they did: the condition applies and status patches,
 * the Events, the reports to the BMC controller ({@link BmcDownReports}) and the factory calls.
 */
import type { BMC as BMCObject } from '../../src/api/v1alpha1/bmc.js';
import type { BMCSecret } from '../../src/api/v1alpha1/bmcsecret.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { type BmcDownReport, BmcDownReports } from '../../src/controllers/bmc-actions/bmc-availability.js';
import { BmcConnections } from '../../src/controllers/bmc-actions/bmc-connections.js';
import { PowerActions } from '../../src/controllers/bmc-actions/power.js';
import type { BmcConnectionSettings } from '../../src/controllers/common/config.js';
import type { KubeClient } from '../../src/runtime/client.js';
import type { Condition } from '../../src/runtime/conditions.js';
import type { EventRecorder } from '../../src/runtime/events.js';
import type { Informer } from '../../src/runtime/informer.js';
import { newLogger } from '../../src/runtime/logger.js';
import type { KObject } from '../../src/runtime/resource.js';
import type { FakeBmc } from '../../src/testing/fake-bmc.js';

export const SYSTEM_URI = '/redfish/v1/Systems/1';

export interface PowerBench {
  power: PowerActions;
  server: Server;
  /** Conditions applied on the Server's status (server-side apply), in order. */
  conditions: Condition[];
  /** `status.powerState` values merge-patched, in order. */
  powerStates: string[];
  events: Array<{ type: string; reason: string; message: string }>;
  /** What the BMC controller was told (bmc-availability.ts). */
  down: BmcDownReport[];
  /** Endpoints the factory was asked for. */
  factoryCalls: string[];
}

/** Options: the Server's stored `status.powerState`, another Server owning its UUID, the resend window. */
export function powerBench(
  fake: FakeBmc,
  o: { powerState?: string; uuidOwner?: Server; resendAfterMs?: number } = {},
): PowerBench {
  const bench: Omit<PowerBench, 'power' | 'server'> = {
    conditions: [],
    powerStates: [],
    events: [],
    down: [],
    factoryCalls: [],
  };
  const client = {
    apply: async (_rt: unknown, obj: { status: { conditions: Condition[] } }) => {
      bench.conditions.push(...obj.status.conditions);
      return obj;
    },
    mergePatch: async (
      _rt: unknown,
      _name: string,
      _ns: unknown,
      patch: { status?: { powerState?: string } },
    ) => {
      if (patch.status?.powerState) bench.powerStates.push(patch.status.powerState);
      return {};
    },
  } as unknown as KubeClient;
  const events = {
    event: (_obj: unknown, type: string, reason: string, message: string) =>
      bench.events.push({ type, reason, message }),
    record: (_rt: unknown, _obj: unknown, type: string, reason: string, message: string) =>
      bench.events.push({ type, reason, message }),
  } as unknown as EventRecorder;
  const bmc: BMCObject = {
    apiVersion: 'metal.ironcore.dev/v1alpha1',
    kind: 'BMC',
    metadata: { name: 'bmc-1' },
    spec: {
      access: { ip: '192.0.2.1' },
      bmcSecretRef: { name: 'bmc-1' },
      protocol: { name: 'Redfish', port: 443 },
    },
  } as BMCObject;
  const secret = {
    metadata: { name: 'bmc-1' },
    data: { username: b64('admin'), password: b64('secret') },
  } as BMCSecret;
  const log = newLogger('fake-bmc-test', { level: process.env.LOG_LEVEL ?? 'silent' });
  const connections = new BmcConnections({
    bmcs: cache({ 'bmc-1': bmc }),
    bmcSecrets: cache({ 'bmc-1': secret }),
    endpoints: cache({}),
    settings: { requestTimeoutMs: 1_000, callBudgetMs: 2_000, insecureTLS: false } as BmcConnectionSettings,
    log,
    factory: ({ endpoint }) => {
      bench.factoryCalls.push(endpoint);
      return fake;
    },
  });
  const down = new BmcDownReports();
  down.subscribe((r) => bench.down.push(r));
  const power = new PowerActions({
    client,
    connections,
    events,
    log,
    resendAfterMs: o.resendAfterMs ?? 60_000,
    bmcDown: down,
    ...(o.uuidOwner ? { uuidOwner: () => o.uuidOwner } : {}),
  });
  const server = {
    apiVersion: 'metal.ironcore.dev/v1alpha1',
    kind: 'Server',
    metadata: { name: 'srv-1', generation: 1, uid: 'uid-srv-1' },
    spec: {
      systemUUID: fake.systems[0]!.uuid,
      systemURI: SYSTEM_URI,
      bmcRef: { name: 'bmc-1' },
    },
    status: o.powerState ? { powerState: o.powerState } : {},
  } as Server;
  return { ...bench, power, server };
}

/** An informer stand-in: `get(name)` over a fixed map (BmcConnections reads nothing else). */
function cache<T extends KObject>(items: Record<string, T>): Informer<T> {
  return { get: (name: string) => items[name] } as unknown as Informer<T>;
}

function b64(s: string): string {
  return Buffer.from(s, 'utf8').toString('base64');
}
