/**
 * Settings shared by the controllers, filled from the manager's flags (src/cmd/manager.ts). Durations
 * are milliseconds.
 */
import type { BootMethod } from '../../api/v1alpha1/boot-method.js';
import type { BootPolicy } from '../../api/v1alpha1/boot-policy.js';
import { BootSignal } from '../../api/vocabulary.js';
import { DEFAULT_MAX_SYSTEMS_PER_BMC } from './system-ownership.js';

export interface BmcConnectionSettings {
  /** Timeout of one HTTP request to a BMC, ms. */
  requestTimeoutMs: number;
  /**
   * Budget of one BMC call made from a reconcile (all retries and backoff), ms. Kept short so that a
   * slow or failing BMC never holds a worker for long: the reconcile requeues and tries again.
   */
  callBudgetMs: number;
  /**
   * Accept any BMC certificate without verification (`--bmc-insecure-tls`). Default false: most BMCs
   * ship a self-signed certificate, so a fleet needs either its CA bundle or this flag.
   */
  insecureTLS: boolean;
  /**
   * PEM CA certificate(s) trusted for BMC certificates instead of the system store (`--bmc-ca-file`).
   * A BMCSecret's `ca.crt` key replaces it for that BMC.
   */
  caBundle?: string;
}

export interface ControllerConfig {
  /** Namespace of discovery ServerBootConfigurations, the leader Lease and the callback key Secret. */
  managerNamespace: string;
  /** Image (catalog name) booted for discovery; its catalog entry should have `mode: probe`. */
  probeImage: string;
  defaultBootPolicy: BootPolicy;
  /** Boot method of claims without `spec.bootMethod` (`--default-boot-method`). */
  defaultBootMethod: BootMethod;
  /**
   * Boot method of discovery and cleanup boots (`--discovery-boot-method`); absent: `VirtualMedia`
   * when `defaultBootMethod` is, else `PXE` (netboot-via.ts `managerBootMethod`).
   */
  discoveryBootMethod?: BootMethod;
  /** Base URL hosts use to reach the boot server: the `Boot.HttpBootUri` of HTTPBoot attempts points there. */
  bootServerUrl: string;
  /** SBC condition types that must all be True for the current attempt (claim default). */
  bootCompletionConditions: string[];
  /** Per-attempt boot deadline of claims, ms. */
  bootTimeoutMs: number;
  /** Per-attempt deadline of the first fetch after power-on (claims and discovery), ms. */
  netbootTimeoutMs: number;
  bootMaxAttempts: number;
  /** Per-attempt discovery deadline, ms. */
  discoveryTimeoutMs: number;
  discoveryMaxAttempts: number;
  /**
   * Image booted after every release (`--cleanup-image`, a catalog name or OCI reference); undefined:
   * no cleanup boot unless a Server asks for one (src/controllers/server/cleanup.ts).
   */
  cleanupImage?: string;
  /** Per-attempt deadline of the cleanup boot, ms. */
  cleanupTimeoutMs: number;
  cleanupMaxAttempts: number;
  /**
   * How long a requested power state may take to show in the BMC's `PowerState` before the action is
   * sent again, ms. Longer than the slowest BMC transition (boot-flow case C09: 90 s).
   */
  powerActionResendMs: number;
  /** Re-read BMCs (systems, firmware) this often, ms. */
  bmcResyncMs: number;
  /**
   * Servers are created for at most this many systems per BMC (issue 15, S14: a BMC must not be able
   * to create unbounded Servers).
   */
  bmcMaxSystems: number;
  /** Re-read a Server's power state this often when nothing else happens, ms. */
  serverResyncMs: number;
  /**
   * Concurrent reconciles of the Server, ServerClaim and ServerBootConfiguration controllers each. Their reconciles wait on
   * BMC and API round trips, not CPU, so a fleet needs more than a handful.
   */
  workers: number;
  bmc: BmcConnectionSettings;
  /**
   * Equality labels every watched object must carry (`--object-selector`), also put on every object
   * the controllers create, so several operator instances can share one cluster. Empty: watch all.
   */
  scopeLabels: Record<string, string>;
  /**
   * Refuse claims with neither `serverRef` nor `serverSelector` (`--require-server-selection`) instead
   * of binding any Available Server as upstream does.
   */
  requireServerSelection: boolean;
}

export const DEFAULT_CONTROLLER_CONFIG: Readonly<ControllerConfig> = {
  managerNamespace: 'metal-system',
  probeImage: 'metal/probe:latest',
  defaultBootPolicy: 'NetBootAlways',
  defaultBootMethod: 'PXE',
  bootServerUrl: 'http://127.0.0.1:8082',
  bootCompletionConditions: [BootSignal.BootStateReceived],
  bootTimeoutMs: 15 * 60_000,
  netbootTimeoutMs: 5 * 60_000,
  bootMaxAttempts: 3,
  discoveryTimeoutMs: 10 * 60_000,
  discoveryMaxAttempts: 3,
  cleanupTimeoutMs: 30 * 60_000,
  cleanupMaxAttempts: 3,
  powerActionResendMs: 120_000,
  bmcResyncMs: 10 * 60_000,
  bmcMaxSystems: DEFAULT_MAX_SYSTEMS_PER_BMC,
  serverResyncMs: 5 * 60_000,
  workers: 16,
  bmc: { requestTimeoutMs: 5_000, callBudgetMs: 8_000, insecureTLS: false },
  scopeLabels: {},
  requireServerSelection: false,
};

/** `k=v,k2=v2` label selector of `labels` (empty string when there are none). */
export function selectorOf(labels: Record<string, string>): string {
  return Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
}

/** Joins label selectors, skipping empty ones; `undefined` when all are empty. */
export function joinSelectors(...parts: (string | undefined)[]): string | undefined {
  const s = parts.filter((p) => !!p).join(',');
  return s || undefined;
}
