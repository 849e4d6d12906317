/**
 * Wires the controllers into a runtime Manager: the shared informers (scoped by the operator's object
 * selector), the BMC client cache, power actions, the boot-configuration machinery, metrics, and the
 * controllers (BMC, Server, ServerClaim, SBC, the two of ServerReadinessRule, the Server's `Booted`
 * mirror, BMCUser). The registry and the boot server read the same informers (see src/cmd/manager.ts).
 */
import type { BMC } from '../api/v1alpha1/bmc.js';
import type { BMCSecret } from '../api/v1alpha1/bmcsecret.js';
import type { BMCUser } from '../api/v1alpha1/bmcuser.js';
import type { Endpoint } from '../api/v1alpha1/endpoint.js';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import type { ServerReadinessRule } from '../api/v1alpha1/serverreadinessrule.js';
import type { CallbackKey } from '../bootauth/callback-token.js';
import type { IgnitionRenderer } from '../ignition/served-ignition.js';
import { cachedServer, SERVER_UUID_INDEX, serverUUIDIndexer } from '../inventory/server-index.js';
import type { BootImages } from '../oci/boot-images.js';
import type { Informer } from '../runtime/informer.js';
import type { Manager } from '../runtime/manager.js';
import { Resources } from '../runtime/resource.js';
import { bmcIndexers, newBmcController } from './bmc/bmc.js';
import { BmcDownReports } from './bmc-actions/bmc-availability.js';
import { BmcConnections, type BmcFactory } from './bmc-actions/bmc-connections.js';
import { PowerActions } from './bmc-actions/power.js';
import { newBmcUserController } from './bmcuser/bmcuser.js';
import { BootConfigurations } from './common/boot-configuration.js';
import { type ControllerConfig, selectorOf } from './common/config.js';
import { BootMetrics } from './common/metrics.js';
import { DuplicateServers } from './server/duplicate-servers.js';
import { newReadinessControllers } from './server/readiness-rules.js';
import { discoveryBootConfigurationName, newServerController } from './server/server.js';
import { newServerBootConditionController } from './server/server-boot-condition.js';
import type { ImageCatalogSource } from './serverbootconfiguration/image-catalog-source.js';
import { newServerBootConfigurationController } from './serverbootconfiguration/serverbootconfiguration.js';
import {
  newServerClaimController,
  SERVER_BY_CLAIM_INDEX,
  serverByClaimIndexer,
} from './serverclaim/serverclaim.js';

export interface ControllerSetup {
  servers: Informer<Server>;
  sbcs: Informer<ServerBootConfiguration>;
  claims: Informer<ServerClaim>;
  bmcs: Informer<BMC>;
  connections: BmcConnections;
  bootMetrics: BootMetrics;
}

export interface SetupOptions {
  config: ControllerConfig;
  catalog: ImageCatalogSource;
  /** The operator's callback key (bootauth/callback-key-secret.ts): the attempts' tokens derive from it. */
  callbackKey: CallbackKey;
  /** Replaces the Redfish client factory (tests). */
  bmcFactory?: BmcFactory;
  /** Butane translation and Ignition validation (default: the `ignition-tools` binary). */
  ignition?: IgnitionRenderer;
  /** OCI image resolution (none: image catalog names only). */
  images?: BootImages;
}

/** The shared informers, scoped by the operator's object selector. */
interface Informers {
  servers: Informer<Server>;
  sbcs: Informer<ServerBootConfiguration>;
  claims: Informer<ServerClaim>;
  bmcs: Informer<BMC>;
  bmcSecrets: Informer<BMCSecret>;
  endpoints: Informer<Endpoint>;
  rules: Informer<ServerReadinessRule>;
  users: Informer<BMCUser>;
}

/** Built once and handed to several controllers, so they share BMC sessions, power actions in flight and UUID owners. */
interface SharedParts {
  connections: BmcConnections;
  bmcDown: BmcDownReports;
  duplicates: DuplicateServers;
  power: PowerActions;
  bootConfigs: BootConfigurations;
  bootMetrics: BootMetrics;
}

/** Registers informers and controllers on `mgr` (before or after `mgr.start()`). */
export function setupControllers(mgr: Manager, opts: SetupOptions): ControllerSetup {
  const inf = registerInformers(mgr, opts.config);
  const parts = sharedParts(mgr, opts, inf);
  addControllers(mgr, opts, inf, parts);
  const { servers, sbcs, claims, bmcs } = inf;
  return {
    servers,
    sbcs,
    claims,
    bmcs,
    connections: parts.connections,
    bootMetrics: parts.bootMetrics,
  };
}

function registerInformers(mgr: Manager, cfg: ControllerConfig): Informers {
  const scope = selectorOf(cfg.scopeLabels) || undefined;
  const servers = mgr.informer<Server>(Resources.Server, {
    labelSelector: scope,
    indexers: { [SERVER_UUID_INDEX]: serverUUIDIndexer, [SERVER_BY_CLAIM_INDEX]: serverByClaimIndexer },
    transform: cachedServer,
  });
  const sbcs = mgr.informer<ServerBootConfiguration>(Resources.ServerBootConfiguration, {
    labelSelector: scope,
  });
  const claims = mgr.informer<ServerClaim>(Resources.ServerClaim, { labelSelector: scope });
  const bmcs = mgr.informer<BMC>(Resources.BMC, { labelSelector: scope, indexers: bmcIndexers });
  const bmcSecrets = mgr.informer<BMCSecret>(Resources.BMCSecret, { labelSelector: scope });
  const endpoints = mgr.informer<Endpoint>(Resources.Endpoint, { labelSelector: scope });
  const rules = mgr.informer<ServerReadinessRule>(Resources.ServerReadinessRule, { labelSelector: scope });
  const users = mgr.informer<BMCUser>(Resources.BMCUser, { labelSelector: scope });
  return { servers, sbcs, claims, bmcs, bmcSecrets, endpoints, rules, users };
}

function sharedParts(mgr: Manager, opts: SetupOptions, inf: Informers): SharedParts {
  const cfg = opts.config;
  const log = mgr.log;
  const { servers, bmcs, bmcSecrets, endpoints } = inf;
  const connections = new BmcConnections({
    bmcs,
    bmcSecrets,
    endpoints,
    settings: cfg.bmc,
    log,
    factory: opts.bmcFactory,
  });
  const bmcDown = new BmcDownReports();
  const duplicates = new DuplicateServers({ client: mgr.client, servers, events: mgr.events, log });
  const power = new PowerActions({
    client: mgr.client,
    connections,
    events: mgr.events,
    log,
    resendAfterMs: cfg.powerActionResendMs,
    uuidOwner: (s) => duplicates.ownerOf(s),
    bmcDown,
  });
  const bootConfigs = new BootConfigurations(mgr.client, inf.sbcs, opts.callbackKey);
  const bootMetrics = new BootMetrics(mgr.metrics.registry, () => {
    const counts: Record<string, number> = {};
    for (const s of servers.list()) {
      const st = s.status?.state || 'Initial';
      counts[st] = (counts[st] ?? 0) + 1;
    }
    return counts;
  });
  return { connections, bmcDown, duplicates, power, bootConfigs, bootMetrics };
}

function addControllers(mgr: Manager, opts: SetupOptions, inf: Informers, parts: SharedParts): void {
  const cfg = opts.config;
  const common = { client: mgr.client, events: mgr.events, log: mgr.log, metrics: mgr.metrics };
  const { servers, sbcs, claims, bmcs, bmcSecrets, endpoints } = inf;
  const { connections, bmcDown, duplicates, power, bootConfigs, bootMetrics } = parts;
  mgr.add(
    newBmcController({
      ...common,
      bmcs,
      bmcSecrets,
      endpoints,
      servers,
      connections,
      resyncMs: cfg.bmcResyncMs,
      maxSystems: cfg.bmcMaxSystems,
      bmcDown,
      labels: cfg.scopeLabels,
      discoveryRef: (server) => ({
        name: discoveryBootConfigurationName(server),
        namespace: cfg.managerNamespace,
      }),
    }),
  );
  mgr.add(
    newServerController({
      ...common,
      servers,
      sbcs,
      bootConfigs,
      power,
      connections,
      bootMetrics,
      config: cfg,
      duplicates,
      claims,
    }),
  );
  mgr.add(
    newServerClaimController({
      ...common,
      claims,
      servers,
      sbcs,
      bootConfigs,
      power,
      bootMetrics,
      config: cfg,
      images: opts.images,
    }),
  );
  const labelSelector = selectorOf(cfg.scopeLabels) || undefined;
  for (const c of newReadinessControllers({ ...common, servers, rules: inf.rules, labelSelector }))
    mgr.add(c);
  mgr.add(newServerBootConditionController({ ...common, servers, claims }));
  mgr.add(newBmcUserController({ ...common, users: inf.users, bmcs, connections }));
  mgr.add(
    newServerBootConfigurationController({
      ...common,
      sbcs,
      catalog: opts.catalog,
      ignition: opts.ignition,
      images: opts.images,
      workers: cfg.workers,
    }),
  );
}
