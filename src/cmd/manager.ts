/**
 * The manager (`node dist/src/cmd/manager.js`): the controllers (BMC, Server, ServerClaim,
 * ServerBootConfiguration), optionally leader-elected, plus the registry and the boot server
 * in-process, all reading the same informer caches. SIGTERM/SIGINT stop it gracefully.
 *
 * `parseManagerConfig` turns flags into a {@link ManagerConfig} (pure, throws on bad input);
 * `runManager` parses, starts everything and returns a handle (tests start it in-process).
 */

import { readFileSync, realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { KubeConfig } from '@kubernetes/client-node';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import type pino from 'pino';
import { collectDefaultMetrics } from 'prom-client';
import { BOOT_METHODS, type BootMethod } from '../api/v1alpha1/boot-method.js';
import { BOOT_POLICIES, type BootPolicy } from '../api/v1alpha1/boot-policy.js';
import { CONDITION_TYPE_PATTERN } from '../api/v1alpha1/schema.js';
import {
  BootSignal,
  CLAIM_COMPLETION_SIGNALS,
  isCompletionSignal,
  REGISTRATION_NOT_FOR_CLAIMS,
} from '../api/vocabulary.js';
import { CALLBACK_KEY_SECRET_NAME, ensureCallbackKey } from '../bootauth/callback-key-secret.js';
import type { CallbackKey } from '../bootauth/callback-token.js';
import { parseAddressSource } from '../bootserver/address-source.js';
import { startBootServer } from '../bootserver/server.js';
import { type ControllerConfig, DEFAULT_CONTROLLER_CONFIG } from '../controllers/common/config.js';
import { formatDuration, parseDuration } from '../controllers/common/duration.js';
import {
  type ConfigMapObject,
  ImageCatalogSource,
} from '../controllers/serverbootconfiguration/image-catalog-source.js';
import { type ControllerSetup, setupControllers } from '../controllers/setup.js';
import { SERVER_LABEL } from '../inventory/registration-record.js';
import { type CallbackAuth, startRegistry } from '../registry/server.js';
import { loadKubeConfig } from '../runtime/kubeconfig.js';
import { newLogger } from '../runtime/logger.js';
import { Manager } from '../runtime/manager.js';
import { Resources } from '../runtime/resource.js';
import { HostUrlError, hostFacingUrl } from './host-url.js';
import {
  addImageOptions,
  type ImageFlags,
  type ImageServices,
  imageFlagsOf,
  imageServices,
} from './image-flags.js';
import { splitAddr } from './listen-address.js';
import { assertManagerNamespace, ManagerNamespaceError } from './manager-namespace.js';
import { NotWritableError } from './writable-dir.js';

export interface ManagerConfig {
  kubeconfig?: string;
  /** Least severe pino level logged (`--log-level`, default `LOG_LEVEL`, else `info`). */
  logLevel: string;
  controllers: ControllerConfig;
  callbackAuth: CallbackAuth;
  /** Name of the callback key Secret in the manager namespace (created when missing). */
  callbackKeySecret: string;
  imageCatalogFile?: string;
  imageCatalogConfigMap?: { namespace: string; name: string };
  /** Port of /metrics, /healthz, /readyz; 0 picks a free one. */
  metricsPort: number;
  leaderElect: boolean;
  /** Client-side limit of API requests (token bucket, as client-go's QPS/Burst); qps 0: unlimited. */
  kubeApi: { qps: number; burst: number };
  registry: { host: string; port: number; url?: string };
  bootServer: {
    host: string;
    port: number;
    url?: string;
    clientIdentity?: 'known-address' | 'first-address';
    /** `--client-mac-source` (bootserver/address-source.ts), e.g. `dnsmasq-leases=/var/lib/misc/dnsmasq.leases`. */
    clientMacSource?: string;
  };
  /** PEM files: the registry and the boot server serve HTTPS with them (S17). */
  tls?: { certFile: string; keyFile: string };
  /** OCI images and Ignition tooling (src/cmd/image-flags.ts). */
  images: ImageFlags;
}

const DURATION = (v: string): number => {
  try {
    return parseDuration(v);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
};
/** A deadline: a Go duration above zero (a zero deadline would time every attempt out at once). */
const DEADLINE = (v: string): number => {
  const ms = DURATION(v);
  if (ms <= 0) throw new InvalidArgumentError(`${v}: a deadline must be longer than 0s`);
  return ms;
};
const POSITIVE_INT = (v: string): number => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${v} is not a positive integer`);
  return n;
};
const NON_NEGATIVE = (v: string): number => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError(`${v} is not a number ≥ 0`);
  return n;
};
/** API requests/s and bucket size; 0 = unlimited (the API server's 429s still slow the client down). */
const KUBE_API_DEFAULTS = { qps: 0, burst: 0 };
const PORT = (v: string): number => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError(`${v} is not a port`);
  return n;
};
const CONDITIONS = (v: string): string[] => {
  const list = v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const re = new RegExp(CONDITION_TYPE_PATTERN);
  const bad = list.filter((c) => !re.test(c) || !isCompletionSignal(c));
  if (list.length === 0 || bad.length)
    throw new InvalidArgumentError(
      `not claim boot signals (${CLAIM_COMPLETION_SIGNALS.join(', ')}) or External<Name> types: ${bad.join(', ') || '(empty)'}${bad.includes(BootSignal.RegistrationReceived) ? ` (${REGISTRATION_NOT_FOR_CLAIMS})` : ''}`,
    );
  return list;
};
const LABELS = (v: string): Record<string, string> => {
  const out: Record<string, string> = {};
  for (const part of v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const m = /^([A-Za-z0-9][-A-Za-z0-9_./]*)=([-A-Za-z0-9_.]*)$/.exec(part);
    if (!m)
      throw new InvalidArgumentError(
        `${part}: only equality selectors (key=value) can scope created objects`,
      );
    out[m[1] as string] = m[2] as string;
  }
  return out;
};

/** An option whose parsed default differs from what `--help` should print. */
function opt<T>(
  flags: string,
  description: string,
  parse: (v: string) => T,
  value: T,
  shown: string,
): Option {
  return new Option(flags, description).argParser(parse).default(value, shown);
}

/** A Go-duration option shown with its default formatted back (`--power-resend-after 5s`). */
const dur = (flags: string, description: string, ms: number) =>
  opt(flags, description, DURATION, ms, formatDuration(ms));
/** A deadline option: a duration that must be above zero. */
const deadline = (flags: string, description: string, ms: number) =>
  opt(flags, description, DEADLINE, ms, formatDuration(ms));

/**
 * The manager's flags, in `--help` order: one builder per group, each adding its options to the
 * command it is given (the order of the groups is the order of the help text).
 */
function command(): Command {
  const cmd = new Command('manager')
    .description('metal-operator manager: controllers, registry and boot server')
    .exitOverride();
  for (const group of [
    processOptions,
    bootOptions,
    discoveryAndCleanupOptions,
    servingOptions,
    bmcAndApiOptions,
  ])
    group(cmd);
  return cmd;
}

/** Kubeconfig, logging, the manager namespace and its callback key Secret. */
function processOptions(cmd: Command): Command {
  const d = DEFAULT_CONTROLLER_CONFIG;
  return cmd
    .option('--kubeconfig <path>', 'kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster)')
    .addOption(
      new Option('--log-level <level>', 'least severe level logged (JSON lines on stdout)')
        .choices(['trace', 'debug', 'info', 'warn', 'error', 'fatal'])
        .default(process.env.LOG_LEVEL || 'info', 'LOG_LEVEL, else info'),
    )
    .option(
      '--manager-namespace <ns>',
      'namespace of discovery boot configurations and the leader Lease',
      d.managerNamespace,
    )
    .option(
      '--callback-key-secret <name>',
      'Secret in --manager-namespace holding the key callback tokens are derived from (created when missing)',
      CALLBACK_KEY_SECRET_NAME,
    );
}

/** Discovery's image, boot policy and method, completion conditions, deadlines and attempts of claims. */
function bootOptions(cmd: Command): Command {
  const d = DEFAULT_CONTROLLER_CONFIG;
  return cmd
    .option('--probe-image <image>', 'image catalog name booted for discovery', d.probeImage)
    .addOption(
      new Option('--default-boot-policy <policy>', 'boot policy of claims without spec.bootPolicy')
        .choices([...BOOT_POLICIES])
        .default(d.defaultBootPolicy),
    )
    .addOption(
      new Option('--default-boot-method <method>', 'boot method of claims without spec.bootMethod')
        .choices([...BOOT_METHODS])
        .default(d.defaultBootMethod),
    )
    .addOption(
      new Option(
        '--discovery-boot-method <method>',
        'boot method of discovery and cleanup boots (PXE: iPXE over the DHCP boot network; VirtualMedia: the BMC inserts the attempt ISO, no DHCP)',
      )
        .choices(['PXE', 'VirtualMedia'])
        .default(undefined, 'VirtualMedia when --default-boot-method is VirtualMedia, else PXE'),
    )
    .addOption(
      opt(
        '--boot-completion-conditions <types>',
        'comma-separated SBC conditions that must all be True for the current attempt',
        CONDITIONS,
        [...d.bootCompletionConditions],
        d.bootCompletionConditions.join(','),
      ),
    )
    .addOption(
      deadline(
        '--boot-timeout <duration>',
        'per-attempt boot deadline of claims (Go duration)',
        d.bootTimeoutMs,
      ),
    )
    .addOption(
      deadline(
        '--netboot-timeout <duration>',
        'per-attempt deadline of the first fetch (iPXE script) after power-on; then the attempt is retried at once (NetbootNotObserved)',
        d.netbootTimeoutMs,
      ),
    )
    .addOption(
      opt(
        '--boot-max-attempts <n>',
        'boot attempts per series (first boot + retries)',
        POSITIVE_INT,
        d.bootMaxAttempts,
        String(d.bootMaxAttempts),
      ),
    );
}

/** Discovery and cleanup deadlines and attempts, then how claims' callbacks and server selection are judged. */
function discoveryAndCleanupOptions(cmd: Command): Command {
  const d = DEFAULT_CONTROLLER_CONFIG;
  return cmd
    .addOption(
      deadline(
        '--discovery-timeout <duration>',
        'per-attempt discovery deadline (Go duration)',
        d.discoveryTimeoutMs,
      ),
    )
    .addOption(
      opt(
        '--discovery-max-attempts <n>',
        'discovery attempts before a Server goes to Error',
        POSITIVE_INT,
        d.discoveryMaxAttempts,
        String(d.discoveryMaxAttempts),
      ),
    )
    .option(
      '--cleanup-image <image>',
      'image (catalog name or OCI reference) booted after every release before the Server is Available again (automated cleaning); none: released Servers are Available at once',
    )
    .addOption(
      deadline(
        '--cleanup-timeout <duration>',
        'per-attempt deadline of the cleanup boot (Go duration)',
        d.cleanupTimeoutMs,
      ),
    )
    .addOption(
      opt(
        '--cleanup-max-attempts <n>',
        'cleanup attempts before a released Server goes to Error (CleanupAttemptsExhausted)',
        POSITIVE_INT,
        d.cleanupMaxAttempts,
        String(d.cleanupMaxAttempts),
      ),
    )
    .addOption(
      new Option(
        '--callback-auth <mode>',
        'required: callbacks need the attempt token; optional: also accept upstream unauthenticated bodies',
      )
        .choices(['required', 'optional'])
        .default('required'),
    )
    .option(
      '--require-server-selection',
      'refuse ServerClaims with neither spec.serverRef nor spec.serverSelector (Bound=False, reason ServerSelectionRequired) instead of binding any Available Server as upstream does',
      false,
    );
}

/** The image catalog, metrics, leader election, TLS, the registry's and boot server's addresses, scoping. */
function servingOptions(cmd: Command): Command {
  return cmd
    .option('--image-catalog <file>', 'YAML image catalog file (see src/oci/image-catalog.ts)')
    .option(
      '--image-catalog-configmap <ns/name>',
      'ConfigMap holding the image catalog under key images.yaml (followed live)',
    )
    .addOption(
      opt(
        '--metrics-port <port>',
        'port of /metrics, /healthz and /readyz (0: any free port)',
        PORT,
        8080,
        '8080',
      ),
    )
    .option(
      '--leader-elect',
      'run controllers only while holding the Lease in --manager-namespace (several replicas)',
      false,
    )
    .option(
      '--tls-cert-file <path>',
      'PEM certificate (chain): the registry and the boot server serve HTTPS (e.g. a mounted kubernetes.io/tls Secret)',
    )
    .option('--tls-key-file <path>', 'PEM private key of --tls-cert-file')
    .option('--registry-addr <host:port>', 'listen address of the registry', '0.0.0.0:10000')
    .option('--registry-url <url>', 'URL hosts use to reach the registry (default: from --registry-addr)')
    .option('--bootserver-addr <host:port>', 'listen address of the boot server', '0.0.0.0:8082')
    .addOption(
      new Option(
        '--script-client-identity <how>',
        "who gets an attempt script or HTTP-boot file: known-address (the server's own registered addresses where they identify it — unique and not behind a NAT —, never another server's address; else the first fetcher) or first-address (the first fetcher alone)",
      )
        .choices(['known-address', 'first-address'])
        .default('known-address'),
    )
    .option(
      '--client-mac-source <sources>',
      "where the client address's MAC is looked up, per fetch, to identify a server by the NICs its BMC reports: comma-separated dnsmasq-leases=<lease file> and neighbours[=<file, default /proc/net/arp>]; none: addresses alone",
      'none',
    )
    .option(
      '--bootserver-url <url>',
      'URL hosts use to reach the boot server (default: from --bootserver-addr)',
    )
    .addOption(
      opt(
        '--object-selector <k=v,...>',
        'handle only objects with these labels, and put them on created objects (several operators per cluster)',
        LABELS,
        {},
        'none',
      ),
    );
}

/** BMC calls and resyncs, the API client's rate limit and the reconcile workers. */
function bmcAndApiOptions(cmd: Command): Command {
  const d = DEFAULT_CONTROLLER_CONFIG;
  return cmd
    .addOption(
      dur(
        '--power-resend-after <duration>',
        'wait this long for a requested power state before sending the action again',
        d.powerActionResendMs,
      ),
    )
    .addOption(
      dur(
        '--bmc-call-budget <duration>',
        'time budget of one BMC call from a reconcile, retries included',
        d.bmc.callBudgetMs,
      ),
    )
    .addOption(
      dur('--bmc-request-timeout <duration>', 'timeout of one HTTP request to a BMC', d.bmc.requestTimeoutMs),
    )
    .option(
      '--bmc-insecure-tls',
      'accept any BMC certificate without verification (default: verify against the system store or --bmc-ca-file)',
      false,
    )
    .option(
      '--bmc-ca-file <path>',
      'PEM CA bundle trusted for BMC certificates instead of the system store (a BMCSecret key ca.crt overrides it)',
    )
    .addOption(dur('--bmc-resync <duration>', 're-read every BMC this often', d.bmcResyncMs))
    .addOption(
      opt(
        '--bmc-max-systems <n>',
        'Servers are created for at most this many systems per BMC (the first by URI; the rest: condition SystemsDiscovered=False SystemLimitExceeded)',
        POSITIVE_INT,
        d.bmcMaxSystems,
        String(d.bmcMaxSystems),
      ),
    )
    .addOption(
      dur(
        '--server-resync <duration>',
        're-read the power state of idle Servers this often',
        d.serverResyncMs,
      ),
    )
    .addOption(
      opt(
        '--kube-api-qps <n>',
        'client-side limit of API requests per second (token bucket, as client-go); 0: unlimited',
        NON_NEGATIVE,
        KUBE_API_DEFAULTS.qps,
        String(KUBE_API_DEFAULTS.qps),
      ),
    )
    .addOption(
      opt(
        '--kube-api-burst <n>',
        'API requests allowed at once above --kube-api-qps (bucket size); 0: ceil(qps)',
        NON_NEGATIVE,
        KUBE_API_DEFAULTS.burst,
        String(KUBE_API_DEFAULTS.burst),
      ),
    )
    .addOption(
      opt(
        '--workers <n>',
        'concurrent reconciles of the Server, ServerClaim and ServerBootConfiguration controllers each',
        POSITIVE_INT,
        d.workers,
        String(d.workers),
      ),
    );
}

/** Reads `--bmc-ca-file`; a missing file or one without a PEM certificate is a flag error. */
function readCaBundle(path: string): string {
  let pem: string;
  try {
    pem = readFileSync(path, 'utf8');
  } catch (err) {
    throw new CommanderError(1, 'manager.invalidCaFile', `--bmc-ca-file: ${(err as Error).message}`);
  }
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) {
    throw new CommanderError(1, 'manager.invalidCaFile', `--bmc-ca-file: ${path} holds no PEM certificate`);
  }
  return pem;
}

/** The `--help` text (flags with their defaults). */
export function managerHelp(): string {
  return addImageOptions(command()).helpInformation();
}

/** The manager's parsed flags as commander names them (the image flags are read by image-flags.ts). */
interface ManagerFlags {
  kubeconfig?: string;
  logLevel: string;
  managerNamespace: string;
  callbackKeySecret: string;
  probeImage: string;
  defaultBootPolicy: BootPolicy;
  defaultBootMethod: BootMethod;
  discoveryBootMethod?: BootMethod;
  bootCompletionConditions: string[];
  bootTimeout: number;
  netbootTimeout: number;
  bootMaxAttempts: number;
  discoveryTimeout: number;
  discoveryMaxAttempts: number;
  cleanupImage?: string;
  cleanupTimeout: number;
  cleanupMaxAttempts: number;
  callbackAuth: CallbackAuth;
  requireServerSelection: boolean;
  imageCatalog?: string;
  imageCatalogConfigmap?: string;
  metricsPort: number;
  leaderElect: boolean;
  kubeApiQps: number;
  kubeApiBurst: number;
  registryAddr: string;
  registryUrl?: string;
  bootserverAddr: string;
  bootserverUrl?: string;
  tlsCertFile?: string;
  tlsKeyFile?: string;
  scriptClientIdentity: 'known-address' | 'first-address';
  clientMacSource: string;
  objectSelector: Record<string, string>;
  powerResendAfter: number;
  bmcCallBudget: number;
  bmcRequestTimeout: number;
  bmcInsecureTls: boolean;
  bmcCaFile?: string;
  bmcResync: number;
  bmcMaxSystems: number;
  serverResync: number;
  workers: number;
}

/** Parses manager flags (without `node` and the script). Throws `CommanderError` for bad or unknown flags and for `--help`. */
export function parseManagerConfig(argv: readonly string[], opts: { silent?: boolean } = {}): ManagerConfig {
  const cmd = addImageOptions(command());
  if (opts.silent) cmd.configureOutput({ writeOut: () => undefined, writeErr: () => undefined });
  cmd.parse([...argv], { from: 'user' });
  const o = cmd.opts<ManagerFlags>();
  const imageCatalogConfigMap = catalogConfigMapOf(o);
  if (!o.tlsCertFile !== !o.tlsKeyFile) {
    throw new CommanderError(1, 'manager.tls', '--tls-cert-file and --tls-key-file go together');
  }
  const [rHost, rPort] = listenAddress('--registry-addr', o.registryAddr);
  const [bHost, bPort] = listenAddress('--bootserver-addr', o.bootserverAddr);
  return {
    kubeconfig: o.kubeconfig,
    logLevel: o.logLevel,
    controllers: controllerConfigOf(o, bHost, bPort),
    callbackAuth: o.callbackAuth,
    callbackKeySecret: o.callbackKeySecret,
    imageCatalogFile: o.imageCatalog,
    imageCatalogConfigMap,
    metricsPort: o.metricsPort,
    leaderElect: o.leaderElect,
    kubeApi: { qps: o.kubeApiQps, burst: o.kubeApiBurst },
    registry: { host: rHost, port: rPort, url: o.registryUrl },
    bootServer: {
      host: bHost,
      port: bPort,
      url: o.bootserverUrl,
      clientIdentity: o.scriptClientIdentity,
      clientMacSource: o.clientMacSource,
    },
    ...(o.tlsCertFile && o.tlsKeyFile ? { tls: { certFile: o.tlsCertFile, keyFile: o.tlsKeyFile } } : {}),
    images: imageFlagsOf(cmd.opts()),
  };
}

/**
 * `--image-catalog-configmap ns/name`, checked against `--image-catalog`. Throws `CommanderError`
 * `manager.invalidConfigMap` (not namespace/name) or `manager.conflictingCatalog` (both given).
 */
function catalogConfigMapOf(o: ManagerFlags): ManagerConfig['imageCatalogConfigMap'] {
  let configMap: ManagerConfig['imageCatalogConfigMap'];
  if (o.imageCatalogConfigmap) {
    const [namespace, name, ...rest] = o.imageCatalogConfigmap.split('/');
    if (!namespace || !name || rest.length) {
      throw new CommanderError(
        1,
        'manager.invalidConfigMap',
        `--image-catalog-configmap wants namespace/name, got ${o.imageCatalogConfigmap}`,
      );
    }
    configMap = { namespace, name };
  }
  if (o.imageCatalog && configMap) {
    throw new CommanderError(
      1,
      'manager.conflictingCatalog',
      '--image-catalog and --image-catalog-configmap exclude each other',
    );
  }
  return configMap;
}

/** `host:port` of a listen flag; a `CommanderError` `manager.invalidAddress` naming the flag otherwise. */
function listenAddress(flag: string, v: string): [string, number] {
  try {
    return splitAddr(v);
  } catch {
    throw new CommanderError(1, 'manager.invalidAddress', `${flag}: bad address ${v}`);
  }
}

/** The controllers' section; the boot server's host and port give the URL scripts and kernels use. */
function controllerConfigOf(o: ManagerFlags, bHost: string, bPort: number): ControllerConfig {
  return {
    managerNamespace: o.managerNamespace,
    probeImage: o.probeImage,
    defaultBootPolicy: o.defaultBootPolicy,
    defaultBootMethod: o.defaultBootMethod,
    ...(o.discoveryBootMethod ? { discoveryBootMethod: o.discoveryBootMethod } : {}),
    bootServerUrl:
      o.bootserverUrl ??
      plannedUrlOrUndefined(bHost, bPort, o.tlsCertFile && o.tlsKeyFile ? 'https' : 'http') ??
      `http://127.0.0.1:${bPort}`,
    bootCompletionConditions: o.bootCompletionConditions,
    bootTimeoutMs: o.bootTimeout,
    netbootTimeoutMs: o.netbootTimeout,
    bootMaxAttempts: o.bootMaxAttempts,
    discoveryTimeoutMs: o.discoveryTimeout,
    discoveryMaxAttempts: o.discoveryMaxAttempts,
    cleanupImage: o.cleanupImage || undefined,
    cleanupTimeoutMs: o.cleanupTimeout,
    cleanupMaxAttempts: o.cleanupMaxAttempts,
    powerActionResendMs: o.powerResendAfter,
    bmcResyncMs: o.bmcResync,
    bmcMaxSystems: o.bmcMaxSystems,
    serverResyncMs: o.serverResync,
    workers: o.workers,
    bmc: {
      ...DEFAULT_CONTROLLER_CONFIG.bmc,
      callBudgetMs: o.bmcCallBudget,
      requestTimeoutMs: o.bmcRequestTimeout,
      insecureTLS: o.bmcInsecureTls,
      ...(o.bmcCaFile ? { caBundle: readCaBundle(o.bmcCaFile) } : {}),
    },
    scopeLabels: o.objectSelector,
    requireServerSelection: o.requireServerSelection,
  };
}

export interface RunningManager {
  config: ManagerConfig;
  manager: Manager;
  registryUrl: string;
  bootServerUrl: string;
  /** Port of /metrics, /healthz, /readyz. */
  metricsPort: number | undefined;
  /** Stops the servers and the manager (controllers drain, Lease released). */
  stop(): Promise<void>;
}

/**
 * Parses `argv`, starts the manager (informers synced, controllers running or campaigning), the
 * registry and the boot server, and resolves once all listen. Throws `CommanderError` for bad flags,
 * and errors of loading the kubeconfig or the image catalog file.
 */
export async function runManager(
  argv: readonly string[],
  opts: {
    kubeConfig?: KubeConfig;
    log?: pino.Logger;
    /** Called when the Lease is lost; default: log and exit the process with status 1 (see below). */
    onLeadershipLost?: () => void;
  } = {},
): Promise<RunningManager> {
  const cfg = parseManagerConfig(argv);
  refuseUnreachableUrls(cfg);
  const log = opts.log ?? newLogger('metal-operator', { level: cfg.logLevel });
  const kubeConfig = opts.kubeConfig ?? kubeConfigOrUsageError(cfg.kubeconfig);
  const mgr = newManager(cfg, kubeConfig, log, opts.onLeadershipLost);
  const catalog = catalogSourceOf(cfg, mgr, log);
  const oci = await imageServices(cfg.images, mgr.client, log);
  await assertManagerNamespace(mgr.client, cfg.controllers.managerNamespace, log);
  const callbackKey = await ensureCallbackKey(
    mgr.client,
    { namespace: cfg.controllers.managerNamespace, name: cfg.callbackKeySecret },
    log,
  );
  const setup = setupControllers(mgr, {
    config: cfg.controllers,
    catalog,
    callbackKey,
    ignition: oci.ignition,
    images: oci.images,
  });
  await mgr.start();
  const servers = await startServers({ cfg, mgr, setup, callbackKey, catalog, oci, log });
  const { registryUrl, bootServerUrl } = servers;
  log.info({ registryUrl, bootServerUrl, metricsPort: mgr.healthPort }, 'manager running');
  let stopping: Promise<void> | undefined;
  return {
    config: cfg,
    manager: mgr,
    registryUrl,
    bootServerUrl,
    metricsPort: mgr.healthPort,
    stop() {
      stopping ??= (async () => {
        await closeWithin(SERVER_CLOSE_GRACE_MS, [servers.registry.close(), servers.bootServer.close()], log);
        await mgr.stop();
        await setup.connections.closeAll();
        await oci.close();
      })();
      return stopping;
    },
  };
}

/** Fails before anything starts: these URLs end up on every kernel command line (S16). Throws `CommanderError` `manager.hostUrl`. */
function refuseUnreachableUrls(cfg: ManagerConfig): void {
  try {
    hostFacingUrl('--registry-url', cfg.registry.url, cfg.registry);
    hostFacingUrl('--bootserver-url', cfg.bootServer.url, cfg.bootServer);
  } catch (err) {
    if (err instanceof HostUrlError) throw new CommanderError(1, 'manager.hostUrl', err.message);
    throw err;
  }
}

/** The runtime manager: leader-elected in the manager namespace with `--leader-elect`, rate-limited as `--kube-api-*`. */
function newManager(
  cfg: ManagerConfig,
  kubeConfig: KubeConfig,
  log: pino.Logger,
  onLeadershipLost: (() => void) | undefined,
): Manager {
  return new Manager({
    kubeConfig,
    name: 'metal-operator',
    leaderElection: cfg.leaderElect
      ? {
          namespace: cfg.controllers.managerNamespace,
          onLost: onLeadershipLost ?? (() => exitOnLeadershipLost(log)),
        }
      : false,
    metricsPort: cfg.metricsPort,
    log,
    client: { qps: cfg.kubeApi.qps, burst: cfg.kubeApi.burst || undefined },
  });
}

/** The image catalog: the file, the followed ConfigMap, or an empty one (warned: every boot configuration fails). */
function catalogSourceOf(cfg: ManagerConfig, mgr: Manager, log: pino.Logger): ImageCatalogSource {
  if (cfg.imageCatalogFile) return ImageCatalogSource.fromFile(cfg.imageCatalogFile, log);
  if (cfg.imageCatalogConfigMap) {
    const { namespace, name } = cfg.imageCatalogConfigMap;
    // Not the registration payload ConfigMaps that share the namespace (tens of KiB each, one per
    // Server; inventory/registration-record.ts): the selector keeps them out of the watch and out
    // of the informer's view of this process's own fresh writes.
    return ImageCatalogSource.fromConfigMap(
      mgr.informer<ConfigMapObject>(Resources.ConfigMap, { namespace, labelSelector: `!${SERVER_LABEL}` }),
      name,
      log,
      namespace,
    );
  }
  log.warn(
    'no image catalog (--image-catalog or --image-catalog-configmap): every boot configuration will be in Error',
  );
  return ImageCatalogSource.empty(log);
}

interface ServerInputs {
  cfg: ManagerConfig;
  mgr: Manager;
  setup: ControllerSetup;
  callbackKey: CallbackKey;
  catalog: ImageCatalogSource;
  oci: ImageServices;
  log: pino.Logger;
}

/**
 * Starts the registry, then the boot server (which hands out the registry's host-facing URL),
 * both over TLS when `--tls-*` are given. Resolves once both listen, with their host-facing URLs.
 */
async function startServers({ cfg, mgr, setup, callbackKey, catalog, oci, log }: ServerInputs) {
  const sources = {
    client: mgr.client,
    servers: setup.servers,
    sbcs: setup.sbcs,
    callbackKey,
    events: mgr.events,
  };
  const tls = cfg.tls
    ? { cert: readFileSync(cfg.tls.certFile), key: readFileSync(cfg.tls.keyFile) }
    : undefined;
  const scheme = tls ? ('https' as const) : ('http' as const);
  const registry = await startRegistry({
    ...sources,
    tls,
    log: log.child({ component: 'registry' }),
    host: cfg.registry.host,
    port: cfg.registry.port,
    callbackAuth: cfg.callbackAuth,
    inventoryNamespace: cfg.controllers.managerNamespace,
    metrics: mgr.metrics.registry,
  });
  const registryUrl = hostFacingUrl('--registry-url', cfg.registry.url, {
    host: cfg.registry.host,
    port: registry.port,
    scheme,
  });
  const bootServer = await startBootServer({
    ...sources,
    tls,
    claims: setup.claims,
    log: log.child({ component: 'bootserver' }),
    host: cfg.bootServer.host,
    port: cfg.bootServer.port,
    externalUrl: cfg.bootServer.url ?? plannedUrl(cfg.bootServer.host, cfg.bootServer.port, scheme),
    registryUrl,
    scriptClientIdentity: cfg.bootServer.clientIdentity,
    clientMacSource: parseAddressSource(cfg.bootServer.clientMacSource),
    catalog: () => catalog.current(),
    metrics: mgr.metrics.registry,
    ignition: oci.ignition,
    oci: { images: oci.images, cache: oci.cache },
  });
  const bootServerUrl = hostFacingUrl('--bootserver-url', cfg.bootServer.url, {
    host: cfg.bootServer.host,
    port: bootServer.port,
    scheme,
  });
  return { registry, registryUrl, bootServer, bootServerUrl };
}

/**
 * Lost the Lease: exit at once, as controller-runtime does ("leader election lost", no graceful
 * shutdown). Exiting is what aborts every BMC call still in flight and every reconcile of the lost
 * term, so an old leader can never power-cycle a server while the new one acts on it (security
 * review S10). The Deployment restarts the process, which campaigns again as a follower.
 */
function exitOnLeadershipLost(log: pino.Logger): never {
  log.fatal('leader election lost: exiting so that no reconcile or BMC call of the lost term continues');
  process.exit(1);
}

/**
 * How long stopping waits for the registry and boot server to close. Fastify waits for every
 * keep-alive connection that was busy when close began (up to its 72 s keep-alive timeout); a
 * stopping manager need not: its exit closes them.
 */
const SERVER_CLOSE_GRACE_MS = 5_000;

async function closeWithin(ms: number, closing: Promise<unknown>[], log: pino.Logger): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((ok) => {
    timer = setTimeout(() => ok('late'), ms);
  });
  const outcome = await Promise.race([Promise.allSettled(closing), late]);
  clearTimeout(timer);
  if (outcome === 'late')
    log.warn({ graceMs: ms }, 'registry / boot server still draining connections; stopping anyway');
}

/** The boot server's URL for its scripts when its port is known before it listens; otherwise it uses its bound URL. */
/** {@link plannedUrl}, or undefined where it throws: runManager refuses such addresses with a clear error later. */
function plannedUrlOrUndefined(host: string, port: number, scheme: 'http' | 'https'): string | undefined {
  try {
    return plannedUrl(host, port, scheme);
  } catch {
    return undefined;
  }
}

function plannedUrl(host: string, port: number, scheme: 'http' | 'https'): string | undefined {
  return port === 0 ? undefined : hostFacingUrl('--bootserver-url', undefined, { host, port, scheme });
}

/** The kubeconfig, or a `CommanderError` (code `manager.kubeconfig`) that main() prints as one line. */
function kubeConfigOrUsageError(path: string | undefined) {
  try {
    return loadKubeConfig(path);
  } catch (err) {
    throw new CommanderError(1, 'manager.kubeconfig', err instanceof Error ? err.message : String(err));
  }
}

async function main(): Promise<void> {
  let running: RunningManager;
  try {
    running = await runManager(process.argv.slice(2));
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander printed its own errors; ours (code manager.*) are printed here.
      if (err.code.startsWith('manager.')) process.stderr.write(`error: ${err.message}\n`);
      process.exit(err.exitCode);
    }
    // Set-up an operator fixes by a flag or a volume: one line naming it, not a stack trace.
    if (err instanceof ManagerNamespaceError || err instanceof NotWritableError) {
      process.stderr.write(`error: ${err.message}\n`);
      process.exit(1);
    }
    throw err;
  }
  // The process's own figures (process_resident_memory_bytes, nodejs_heap_size_used_bytes, GC
  // durations, event-loop lag), as controller-runtime exports Go's: only where this is the process.
  collectDefaultMetrics({ register: running.manager.metrics.registry });
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.once(sig, () => {
      void running.stop().finally(() => process.exit(0));
    });
  }
}

const invoked = process.argv[1] ? realpathSync(process.argv[1]) : '';
if (invoked === realpathSync(fileURLToPath(import.meta.url))) await main();
