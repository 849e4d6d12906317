/**
 * Wires the registry and/or the boot server to a cluster: one KubeClient, informers for Servers
 * (indexed by canonical system UUID; without managedFields, inventory/server-index.ts) and
 * ServerBootConfigurations, the callback key (read once from its Secret, or handed in by the
 * manager) and an Event recorder. No Secret informer: tokens are derived from the key
 * (bootauth/callback-token.ts), so a signal server reads no Secret but the key and, for the boot
 * server, the ignition and pull Secrets it serves by name. Used by the manager (in-process servers)
 * and by the standalone `registry` / `bootserver` entry points. Holds no state of its own.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { readCallbackKey, type SecretRef } from '../bootauth/callback-key-secret.js';
import { CallbackKey } from '../bootauth/callback-token.js';
import { type BootServerOptions, startBootServer } from '../bootserver/server.js';
import type { RunningServer } from '../bootsignals/http-app.js';
import { cachedServer, SERVER_UUID_INDEX, serverUUIDIndexer } from '../inventory/server-index.js';
import { type RegistryOptions, startRegistry } from '../registry/server.js';
import { KubeClient } from '../runtime/client.js';
import { EventRecorder } from '../runtime/events.js';
import { Informer } from '../runtime/informer.js';
import { RuntimeMetrics } from '../runtime/metrics.js';
import { Resources } from '../runtime/resource.js';

export interface SignalSources {
  client: KubeClient;
  servers: Informer<Server>;
  sbcs: Informer<ServerBootConfiguration>;
  callbackKey: CallbackKey;
  events: EventRecorder;
}

/** Creates (not starts) the informers the signal servers read. */
export function signalSources(
  client: KubeClient,
  log: Logger,
  callbackKey: CallbackKey,
  events?: EventRecorder,
): SignalSources {
  const sources: SignalSources = {
    client,
    servers: new Informer<Server>(client, Resources.Server, {
      indexers: { [SERVER_UUID_INDEX]: serverUUIDIndexer },
      transform: cachedServer,
      log,
    }),
    sbcs: new Informer<ServerBootConfiguration>(client, Resources.ServerBootConfiguration, { log }),
    callbackKey,
    events: events ?? new EventRecorder(client, 'metal-signals', { log }),
  };
  // A callback right after another one of the same attempt then sees that write (no 409, no re-read).
  client.onObject((obj) => {
    sources.servers.observe(obj);
    sources.sbcs.observe(obj);
  });
  return sources;
}

export interface SignalStackOptions {
  kubeConfig: KubeConfig;
  log: Logger;
  metrics?: Registry;
  /** The key itself (tests), else the Secret it is read from ({@link readCallbackKey}). */
  callbackKey: CallbackKey | SecretRef;
  registry?: Omit<RegistryOptions, keyof SignalSources | 'log' | 'metrics'>;
  bootServer?: Omit<BootServerOptions, keyof SignalSources | 'log' | 'metrics'>;
}

export interface SignalStack {
  registry?: RunningServer;
  bootServer?: RunningServer;
  sources: SignalSources;
  /** Prometheus registry holding the servers' request metrics. */
  metrics: Registry;
  close(): Promise<void>;
}

/** Starts informers (waiting for their first LIST), then the requested servers. */
export async function startSignalStack(opts: SignalStackOptions): Promise<SignalStack> {
  const metrics = opts.metrics ?? new Registry();
  // Its API requests are counted as the manager's are (`metal_api_requests_total`, origin `other`),
  // so a benchmark can add up the requests of every replica.
  const client = new KubeClient(opts.kubeConfig, {
    fieldManager: 'metal-signals',
    metrics: new RuntimeMetrics(metrics),
  });
  const key =
    opts.callbackKey instanceof CallbackKey
      ? opts.callbackKey
      : await readCallbackKey(client, opts.callbackKey, { log: opts.log });
  const sources = signalSources(client, opts.log, key);
  await Promise.all([sources.servers.start(), sources.sbcs.start()]);
  const registry = opts.registry
    ? await startRegistry({ ...sources, ...opts.registry, log: opts.log, metrics })
    : undefined;
  const bootServer = opts.bootServer
    ? await startBootServer({ ...sources, ...opts.bootServer, log: opts.log, metrics })
    : undefined;
  return {
    registry,
    bootServer,
    sources,
    metrics,
    async close() {
      await Promise.all([registry?.close(), bootServer?.close()]);
      sources.servers.stop();
      sources.sbcs.stop();
      await sources.events.flush?.();
      await client.close();
    },
  };
}
