/**
 * Wires the registry and/or the boot server to a cluster: one KubeClient, informers for Servers
 * (indexed by canonical system UUID; registration payloads cached as their projection), ServerBootConfigurations and callback Secrets (label
 * `metal.ironcore.dev/callback=true`, data kept only for Secrets an SBC controls), and an Event
 * recorder. Used by the manager (in-process
 * servers) and by the standalone `registry` / `bootserver` entry points. Holds no state of its own.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { ATTEMPT_KEY, PREVIOUS_KEY, TOKEN_KEY } from '../bootauth/callback-token.js';
import { type BootServerOptions, startBootServer } from '../bootserver/server.js';
import { type RegistryOptions, type RunningServer, startRegistry } from '../registry/server.js';
import { KubeClient } from '../runtime/client.js';
import { EventRecorder } from '../runtime/events.js';
import { Informer, stripManagedFields } from '../runtime/informer.js';
import { RuntimeMetrics } from '../runtime/metrics.js';
import { Resources } from '../runtime/resource.js';
import { SERVER_UUID_INDEX, type SecretObject, serverUUIDIndexer } from './boot-target.js';
import { slimRegistration } from './registration-cache.js';

/** Label carried by every callback Secret, so the signal servers cache only those Secrets. */
export const CALLBACK_SECRET_LABEL = 'metal.ironcore.dev/callback';

/**
 * Informer transform for callback Secrets (security review S15, N13): anyone who may create Secrets
 * can put the label on big ones. What is cached of any of them: name, namespace, uid,
 * resourceVersion, timestamps and owner references; no labels, annotations or managedFields. Only
 * a Secret controlled by a ServerBootConfiguration keeps `data`, and of it only the callback keys
 * (`token`, `attempt`, `previous`); with `sbcOf` (the SBC cache), not when that SBC is cached with
 * another uid than the reference's or names another Secret as its `callbackSecretRef` (an SBC not
 * cached yet, or without `callbackSecretRef` yet, as a hand-made one just adopted, is given the
 * benefit of the doubt: informers start together). A forged controller reference to a
 * missing SBC is removed by the garbage collector with its Secret.
 */
export function keepOnlySbcSecretData(
  secret: SecretObject,
  sbcOf?: (namespace: string, name: string) => ServerBootConfiguration | undefined,
): SecretObject {
  const m = secret.metadata;
  const metadata = {
    name: m.name,
    namespace: m.namespace,
    uid: m.uid,
    resourceVersion: m.resourceVersion,
    ...(m.creationTimestamp ? { creationTimestamp: m.creationTimestamp } : {}),
    ...(m.deletionTimestamp ? { deletionTimestamp: m.deletionTimestamp } : {}),
    ...(m.ownerReferences ? { ownerReferences: m.ownerReferences } : {}),
  } as SecretObject['metadata'];
  const ref = m.ownerReferences?.find(
    (r) =>
      r.controller && r.kind === 'ServerBootConfiguration' && r.apiVersion.startsWith('metal.ironcore.dev/'),
  );
  const sbc = ref && sbcOf ? sbcOf(m.namespace ?? '', ref.name) : undefined;
  const named = sbc?.spec.callbackSecretRef?.name;
  const real = !!ref && (!sbc || (sbc.metadata.uid === ref.uid && (!named || named === m.name)));
  const slim: SecretObject = { apiVersion: secret.apiVersion, kind: secret.kind, metadata };
  if (!real || secret.data === undefined) return slim;
  const data: Record<string, string> = {};
  for (const k of [TOKEN_KEY, ATTEMPT_KEY, PREVIOUS_KEY])
    if (secret.data[k] !== undefined) data[k] = secret.data[k];
  return { ...slim, data };
}

/**
 * Informer transform for Servers, shared by the manager's and the signal servers' caches: no
 * `managedFields`, and the registration payload as its projection (see registration-cache.ts).
 */
export function cachedServer(server: Server): Server {
  return slimRegistration(stripManagedFields(server));
}

export interface SignalSources {
  client: KubeClient;
  servers: Informer<Server>;
  sbcs: Informer<ServerBootConfiguration>;
  secrets: Informer<SecretObject>;
  events: EventRecorder;
}

/** Creates (not starts) the informers the signal servers read. */
export function signalSources(client: KubeClient, log: Logger, events?: EventRecorder): SignalSources {
  const sources: SignalSources = {
    client,
    servers: new Informer<Server>(client, Resources.Server, {
      indexers: { [SERVER_UUID_INDEX]: serverUUIDIndexer },
      transform: cachedServer,
      log,
    }),
    sbcs: new Informer<ServerBootConfiguration>(client, Resources.ServerBootConfiguration, { log }),
    secrets: new Informer<SecretObject>(client, Resources.Secret, {
      labelSelector: `${CALLBACK_SECRET_LABEL}=true`,
      transform: (secret) => keepOnlySbcSecretData(secret, (ns, name) => sources.sbcs.get(name, ns)),
      log,
    }),
    events: events ?? new EventRecorder(client, 'metal-signals', { log }),
  };
  // A callback right after another one of the same attempt then sees that write (no 409, no re-read).
  client.onObject((obj) => {
    sources.servers.observe(obj);
    sources.sbcs.observe(obj);
    sources.secrets.observe(obj);
  });
  return sources;
}

export interface SignalStackOptions {
  kubeConfig: KubeConfig;
  log: Logger;
  metrics?: Registry;
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
  const sources = signalSources(client, opts.log);
  await Promise.all([sources.servers.start(), sources.sbcs.start(), sources.secrets.start()]);
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
      sources.secrets.stop();
      await sources.events.flush?.();
      await client.close();
    },
  };
}
