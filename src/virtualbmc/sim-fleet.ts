/**
 * A fleet of simulated hosts with deterministic identities, sharing one HTTP connection pool.
 */

import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { Agent } from 'undici';
import type { HostIdentity } from './host.js';
import { SimHost, type SimHostFaults, type SimTiming } from './sim.js';

/**
 * Identity of sim host number `index` (0-based): the same `seed` and `index` always give the same
 * UUID (RFC 9562 version 8 layout, lower case), serial number and locally administered MAC.
 */
export function simIdentity(index: number, seed = 'sim'): HostIdentity {
  const h = createHash('sha256').update(`${seed}/${index}`).digest();
  h[6] = (h[6]! & 0x0f) | 0x80; // version 8: custom
  h[8] = (h[8]! & 0x3f) | 0x80; // RFC 9562 variant
  const hex = h.subarray(0, 16).toString('hex');
  const uuid = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
  // 0x02 in the first octet: locally administered, unicast.
  const mac = ['02', ...[...h.subarray(16, 21)].map((b) => b.toString(16).padStart(2, '0'))].join(':');
  return {
    uuid,
    serialNumber: `SIM-${seed}-${String(index).padStart(5, '0')}`,
    macAddress: mac,
    manufacturer: 'Contoso',
    model: 'Sim 1U',
    memoryMiB: 16_384,
    cpus: 8,
  };
}

export interface SimFleetOptions {
  count: number;
  bootServerUrl: string;
  /** Identity seed; distinct seeds give disjoint fleets. Default `sim`. */
  seed?: string;
  uuidCase?: 'lower' | 'upper';
  timing?: Partial<SimTiming>;
  faults?: Partial<SimHostFaults>;
  /** Registration payload size per host, KiB (sim.ts `payloadKib`); default the small sim payload. */
  payloadKib?: number;
  /** Concurrent connections per origin from the whole fleet. Default 64. */
  maxConnections?: number;
  logger?: Logger;
}

export interface SimFleet {
  hosts: SimHost[];
  /** Closes every host and the shared connection pool. */
  close(): Promise<void>;
}

export function createSimFleet(opts: SimFleetOptions): SimFleet {
  const dispatcher = new Agent({ connections: opts.maxConnections ?? 64 });
  const hosts = Array.from(
    { length: opts.count },
    (_, i) =>
      new SimHost({
        identity: simIdentity(i, opts.seed),
        bootServerUrl: opts.bootServerUrl,
        dispatcher,
        ...(opts.uuidCase ? { uuidCase: opts.uuidCase } : {}),
        ...(opts.timing ? { timing: opts.timing } : {}),
        ...(opts.faults ? { faults: opts.faults } : {}),
        ...(opts.logger ? { logger: opts.logger } : {}),
        ...(opts.payloadKib ? { payloadKib: opts.payloadKib } : {}),
      }),
  );
  return {
    hosts,
    close: async () => {
      await Promise.all(hosts.map((h) => h.close()));
      await dispatcher.close();
    },
  };
}
