/**
 * A Server's report that its BMC cannot be reached, carried to the BMC object at once (issue 20,
 * defect 5): the BMC controller re-reads a BMC only at its resync pace, so without this a dead BMC
 * would read `Ready=True` for up to that long while its Servers already know better.
 *
 * Two ways in: {@link BmcDownReports}, which power actions (every power read and action of the
 * Server and ServerClaim controllers) feed the moment a call fails, and {@link bmcDownReport}, a
 * pure function over a Server's conditions for failures written elsewhere (discovery's system read).
 */
import type { Condition } from '../../api/v1alpha1/schema.js';
import type { Server } from '../../api/v1alpha1/server.js';
import { BmcFailureReason, ConditionType } from '../../api/vocabulary.js';

/** BMC failure reasons (bmc-connections.ts `classifyBmcFailure`) that say the BMC itself is not usable. */
export const BMC_DOWN_REASONS: ReadonlySet<string> = new Set([
  BmcFailureReason.BMCUnavailable,
  BmcFailureReason.BMCTimeout,
  BmcFailureReason.BMCAuthenticationFailed,
]);

/** Server condition types whose failure reasons name a BMC failure (power.ts, server.ts). */
const REPORTING_CONDITIONS: Readonly<Record<string, Condition['status']>> = {
  [ConditionType.PowerActionPending]: 'True',
  [ConditionType.Discovered]: 'False',
};

export interface BmcDownReport {
  /** BMC object name (`spec.bmcRef.name`). */
  bmc: string;
  server: string;
  reason: string;
  message: string;
  /** When the Server's condition took this reason (RFC 3339). */
  at: string;
}

/** What `server` says about its BMC being down, or undefined (also for Servers with an inline BMC). */
export function bmcDownReport(server: Server): BmcDownReport | undefined {
  const bmc = server.spec?.bmcRef?.name;
  if (!bmc) return undefined;
  for (const c of server.status?.conditions ?? []) {
    if (REPORTING_CONDITIONS[c.type] !== c.status || !BMC_DOWN_REASONS.has(c.reason)) continue;
    return {
      bmc,
      server: server.metadata.name ?? '',
      reason: c.reason,
      message: c.message,
      at: c.lastTransitionTime,
    };
  }
  return undefined;
}

/** In-process channel from the code that calls BMCs on behalf of Servers to the BMC controller. */
export class BmcDownReports {
  private listener: ((r: BmcDownReport) => void) | undefined;

  /** The BMC controller's handler (one; a later call replaces it). */
  subscribe(fn: (r: BmcDownReport) => void): void {
    this.listener = fn;
  }

  /** A BMC call for `server` failed with `failure`; only BMC-level reasons are passed on. */
  report(server: Server, failure: { reason: string; message: string }): void {
    const bmc = server.spec?.bmcRef?.name;
    if (!bmc || !BMC_DOWN_REASONS.has(failure.reason)) return;
    this.listener?.({
      bmc,
      server: server.metadata.name ?? '',
      reason: failure.reason,
      message: failure.message,
      at: new Date().toISOString(),
    });
  }
}
