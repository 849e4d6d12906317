/**
 * A real virtual BMC with sim hosts on loopback, plus a stand-in boot server, and a Redfish client
 * pointed at it. Test-only helper (not a test file).
 */

import { RedfishBMC, type RedfishBMCOptions } from '../../src/bmc/redfish-bmc.js';
import type { FaultKnobs } from '../../src/virtualbmc/faults.js';
import type { ServiceProfile } from '../../src/virtualbmc/profile.js';
import { startVirtualBmc, type VirtualBmc } from '../../src/virtualbmc/server.js';
import { SimHost, type SimTiming } from '../../src/virtualbmc/sim.js';
import { simIdentity } from '../../src/virtualbmc/sim-fleet.js';
import { type Standin, type StandinMode, startStandin } from '../virtualbmc/standin-boot-server.js';

export const USER = 'admin';
export const PASSWORD = 'test-password';

export interface Fixture {
  vbmc: VirtualBmc;
  bmc: RedfishBMC;
  hosts: SimHost[];
  standin: Standin;
  /** URI of system `i`. */
  uri(i?: number): string;
  close(): Promise<void>;
}

export interface FixtureOptions {
  systems?: number;
  faults?: Partial<FaultKnobs>;
  profile?: Partial<ServiceProfile>;
  client?: Partial<RedfishBMCOptions>;
  manufacturer?: string;
  mode?: StandinMode;
  timing?: Partial<SimTiming>;
}

export async function startFixture(opts: FixtureOptions = {}): Promise<Fixture> {
  const standin = await startStandin({ mode: () => opts.mode ?? 'local' });
  const hosts = Array.from({ length: opts.systems ?? 1 }, (_, i) => {
    const identity = simIdentity(i, 'bmc-test');
    if (opts.manufacturer !== undefined) identity.manufacturer = opts.manufacturer;
    return new SimHost({
      identity,
      bootServerUrl: standin.url,
      timing: { firmwareMs: 1, kernelMs: 1, shutdownMs: 20, ...opts.timing },
    });
  });
  const vbmc = await startVirtualBmc({
    hosts,
    username: USER,
    password: PASSWORD,
    ...(opts.faults ? { faults: opts.faults } : {}),
    ...(opts.profile ? { profile: opts.profile } : {}),
  });
  const bmc = new RedfishBMC({
    endpoint: vbmc.url,
    username: USER,
    password: PASSWORD,
    requestTimeoutMs: 2_000,
    budgetMs: 5_000,
    backoffInitialMs: 20,
    backoffMaxMs: 200,
    ...opts.client,
  });
  return {
    vbmc,
    bmc,
    hosts,
    standin,
    uri: (i = 0) => vbmc.systems[i]!.uri,
    close: async () => {
      await bmc.close();
      await vbmc.close();
      await standin.close();
    },
  };
}

/** Resolves when `predicate` holds, polling every 5 ms; rejects after `timeoutMs`. */
export async function eventually(predicate: () => boolean, timeoutMs = 2_000): Promise<void> {
  const started = Date.now();
  while (!predicate()) {
    if (Date.now() - started > timeoutMs) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
