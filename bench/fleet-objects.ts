/**
 * Object shapes of the simulated fleet as the manager writes them (src/api/v1alpha1), shared by the
 * benchmarks that load kube-apiserver with them (apiserver-cost.ts, claim-floor.ts): a Server as the
 * BMC controller creates it, the status a discovered fleet Server has, conditions with a fixed
 * per-run time. Pure builders: no requests.
 */
import { API_VERSION } from '../src/api/v1alpha1/schema.js';
import type { KObject } from '../src/runtime/resource.js';
import type { HostIdentity } from '../src/virtualbmc/host.js';
import { registrationData } from '../src/virtualbmc/sim.js';

export const NS = 'default';

/** An owner UID that exists nowhere (objects in a control plane without the garbage collector). */
export const FAKE_UID = '00000000-0000-4000-8000-000000000001';

/** A fixed RFC 3339 time per run, so a row's patch is the same within a run and differs between runs. */
export const runTime = (run: number) =>
  new Date(Date.UTC(2026, 0, 1, 0, 0, run)).toISOString().replace('.000Z', 'Z');

export function condition(type: string, reason: string, message: string, run: number) {
  return { type, status: 'True', reason, message, observedGeneration: 1, lastTransitionTime: runTime(run) };
}

/**
 * A Server as the BMC controller creates it (no status). `claimed`: with the references a bound
 * Server carries. `bmc`: its controlling BMC (default `local-bmc` with a made-up UID — give the real
 * one where the garbage collector runs, or it deletes the Server as an orphan).
 */
export function server(
  name: string,
  id: HostIdentity,
  claimed: boolean,
  bmc: { name: string; uid: string } = { name: 'local-bmc', uid: FAKE_UID },
): KObject {
  return {
    apiVersion: API_VERSION,
    kind: 'Server',
    metadata: {
      name,
      ownerReferences: [
        {
          apiVersion: API_VERSION,
          kind: 'BMC',
          name: bmc.name,
          uid: bmc.uid,
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    spec: {
      systemUUID: id.uuid,
      systemURI: `/redfish/v1/Systems/${id.uuid}`,
      bmcRef: { name: bmc.name },
      power: 'On',
      reclaimPolicy: 'Recycle',
      unclaimable: false,
      bootConfigurationRef: { name: `c-${name}`, namespace: NS },
      ...(claimed ? { serverClaimRef: { name: `c-${name}`, namespace: NS } } : {}),
    },
  } as KObject;
}

/**
 * The status of a discovered, reserved fleet server (shape of a `bench:fleet` Server at the end);
 * `overrides` replace top-level fields (e.g. `state: 'Available'` before the claim).
 */
export function discoveredStatus(
  id: HostIdentity,
  run: number,
  overrides: Record<string, unknown> = {},
): Record<string, unknown> {
  const nic = (registrationData(id).networkInterfaces as { ipAddresses: string[] }[])[0]!;
  return {
    biosVersion: '1.16.3',
    conditions: [condition('Discovered', 'Registered', 'registration received in attempt 1', run)],
    discovery: {
      attempt: 1,
      attemptStartedAt: runTime(run),
      phase: 'Completed',
      poweredOnAt: '2026-01-01T00:00:00.947Z',
    },
    manufacturer: id.manufacturer,
    model: id.model,
    networkInterfaces: [
      {
        carrierStatus: 'up',
        ip: nic.ipAddresses[0],
        ips: nic.ipAddresses,
        macAddress: id.macAddress,
        name: 'eth0',
      },
    ],
    powerState: 'On',
    processors: [
      {
        id: '0',
        manufacturer: 'GenuineIntel',
        model: 'Simulated CPU',
        totalCores: id.cpus,
        totalThreads: id.cpus,
        type: 'CPU',
      },
    ],
    serialNumber: id.serialNumber,
    state: 'Reserved',
    storages: [
      {
        drives: [
          {
            capacity: 64 * 1024 ** 3,
            mediaType: 'SSD',
            model: 'Virtual disk',
            name: 'vda',
            type: 'Fixed',
            vendor: '0x1af4',
          },
        ],
        name: 'vda',
      },
    ],
    totalSystemMemory: id.memoryMiB * 1024 * 1024,
    ...overrides,
  };
}
