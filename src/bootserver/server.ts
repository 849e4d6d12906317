/**
 * The boot server: what network-booting firmware and the booting OS fetch.
 *
 * - `GET /ipxe` (and `/ipxe/`, as upstream boot-operator answers it) → a script that chains to
 *   `/ipxe/${uuid}` (iPXE expands `${uuid}`).
 * - `GET /ipxe/{uuid}` → the current attempt's script (kernel, initrd, command line with the
 *   ignition URL, the registry URL and the attempt token); sets `IPXEScriptFetched` before answering.
 *   An unknown UUID gets the local-boot script of a server without boot configuration (not 404:
 *   the answer does not tell which UUIDs exist, N16).
 *   A local-boot script when the server has no boot configuration (confirmed by a live read; 503
 *   `BootConfigurationPending` + `Retry-After` instead while the Server has an attempt in progress
 *   whose SBC the cache does not show yet, see attempt-in-progress.ts), and for a NetBootOnce
 *   configuration whose claim completed (`BootCompleted`), so a BIOS boot order with network first
 *   cannot re-provision it. Firmware cannot authenticate, so the token in the script is protected
 *   three times: the client must not be refused by its address (client-identity.ts: 403
 *   `UnknownClient` from an address of another server, or not of this one where its addresses are
 *   known), the script is served only once the power-on of its attempt is recorded (503
 *   `AwaitingPowerOn` before, see bootsignals/power-intent.ts; security review S3), and with
 *   `pinScriptClient` it goes only to the first client address that fetched it in that attempt (403
 *   `ScriptPinned` for others; attempt-pin.ts): the pin is the `IPXEScriptFetched` write itself, a
 *   compare-and-swap on the SBC's resourceVersion, stored before the script is sent. A refused
 *   fetch of the current attempt sets the SBC's `FetchRefused` condition and a Warning Event on its
 *   claim or Server (fetch-refusal.ts). An attempt whose `spec.bootMethod` is not PXE gets no
 *   script: 409 `NotPXEBoot` (security review N2; its token goes out by its own route only, and the
 *   pin spans both routes).
 * - `GET /ignition/{uuid}?token=…` → the ignition (Ignition v3 JSON; Butane translated) with the
 *   `/bootstate` hook merged in, validated first (src/ignition/); 409 with the validator's report
 *   for an invalid config; sets `IgnitionDataFetched` before answering. 401 / 409 as the registry; 409
 *   `TokenRetired` once a NetBootOnce claim completed (S4): the provisioning secrets are not served
 *   again for as long as the claim lives. An SBC without `ignitionSecretRef` gets the callback-only
 *   config (see {@link callbackOnlyIgnition}); with the hook disabled there is nothing to serve:
 *   404 `NoIgnitionConfigured`.
 * - `GET /images/{name}/kernel|initrd` → files of images whose catalog entry is a local path.
 * - `GET /httpboot/{uuid}/{attempt}/uki.efi` → the attempt's UKI for UEFI HTTP boot (http-boot.ts).
 * - `GET /oci/{uuid}/{attempt}/{layer}` → layers of the attempt's OCI image (blob-route.ts).
 * - `GET /vmedia/{uuid}/{attempt}/{capability}/boot.iso` → the attempt's virtual-media ISO, fetched
 *   by the BMC (vmedia-route.ts).
 *
 * Scripts are `text/plain`; errors are JSON `{reason, message}` with the statuses of
 * docs/ARCHITECTURE.md, 'Failure handling in one place each' (503 + `Retry-After` while the API server or a rotation is unavailable).
 * Nothing is rendered from request input except the canonical UUID; every fetch is logged with the
 * client address and never with the token.
 */
import { createReadStream, statSync } from 'node:fs';
import { Registry } from 'prom-client';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import { BootSignal, ConditionType, EventReason, SignalReason } from '../api/vocabulary.js';
import { type BootTarget, BootTargetResolver, provisioned } from '../bootsignals/boot-target.js';
import { clientAddress } from '../bootsignals/client-address.js';
import {
  AUTHENTICATED,
  createHttpApp,
  listen,
  type RunningServer,
  type SignalServerOptions,
  UNSERVED_BUDGETED,
} from '../bootsignals/http-app.js';
import { HttpError, unavailable } from '../bootsignals/http-error.js';
import { PowerIntentGate } from '../bootsignals/power-intent.js';
import { recordSignal } from '../bootsignals/signal-condition.js';
import { DEFAULT_IGNITION_VERSION, type IgnitionConfig } from '../ignition/bootstate-hook.js';
import { IgnitionTools } from '../ignition/ignition-tools.js';
import { IgnitionRenderer } from '../ignition/served-ignition.js';
import type { BlobCache } from '../oci/blob-cache.js';
import type { BootImages } from '../oci/boot-images.js';
import type { ImageCatalog } from '../oci/image-catalog.js';
import type { Informer } from '../runtime/informer.js';
import type { AddressMacSource } from './address-source.js';
import {
  BOOT_CONFIGURATION_PENDING_RETRY_SECONDS,
  LiveBootConfigurationCheck,
} from './attempt-in-progress.js';
import { notPinnedElsewhere, pinMessage } from './attempt-pin.js';
import { registerBlobRoute } from './blob-route.js';
import { bootImageFor } from './boot-image.js';
import { ClientIdentity, type ClientIdentityMode } from './client-identity.js';
import { FetchRefusals, isFetchRefusal } from './fetch-refusal.js';
import { registerHttpBootRoute } from './http-boot.js';
import { servedIgnition } from './ignition.js';
import { attemptScript, chainScript, localBootScript } from './ipxe-script.js';
import { UkiBuilder } from './uki.js';
import { VirtualMediaIsoBuilder } from './vmedia-iso.js';
import { registerVirtualMediaRoute } from './vmedia-route.js';

export interface BootServerOptions extends SignalServerOptions {
  /** Base URL hosts use to reach this boot server (rendered into scripts); defaults to the bound URL. */
  externalUrl?: string;
  /** Base URL hosts use to reach the registry (rendered into the kernel command line). */
  registryUrl: string;
  /** The current image catalog (a function, so a ConfigMap-backed catalog can change at run time). */
  catalog: () => ImageCatalog;
  /**
   * ServerClaims from a cache (the manager's informer when the boot server runs in its process): a
   * claim that already shows the power-on of its attempt there is not read again (power-intent.ts).
   */
  claims?: Informer<ServerClaim>;
  /** Hand an attempt's script or HTTP-boot file only to the first client address that fetched it (default true). */
  pinScriptClient?: boolean;
  /**
   * Who may fetch a server's attempt script or HTTP-boot file (client-identity.ts): `known-address`
   * (default) the server's own addresses where they identify it (unique, not behind a NAT), never
   * an address of another server, else the first-address pin; `first-address` the pin alone.
   */
  scriptClientIdentity?: ClientIdentityMode;
  /**
   * Address → MAC of the boot network (`--client-mac-source`, address-source.ts): with it, a client
   * is identified by the MAC the boot network gives its address, against the Server's BMC-reported
   * NICs (client-identity.ts). `undefined`: addresses alone.
   */
  clientMacSource?: AddressMacSource;
  /** Merge the `/bootstate` systemd unit into served ignition (default true). */
  injectBootstateUnit?: boolean;
  /** Butane translation and Ignition validation (default: the `ignition-tools` binary, see src/ignition/). */
  ignition?: IgnitionRenderer;
  /** OCI images: registry access and the blob cache behind `/oci/...` (blob-route.ts); none = catalog only. */
  oci?: { images: BootImages; cache: BlobCache };
}

/** Field-manager prefix of the boot server's condition writes. */
export const BOOTSERVER_COMPONENT = 'metal-bootserver';
/** Condition set by the claim controller when a claim completed; read for NetBootOnce. */
export const BOOT_COMPLETED_CONDITION = ConditionType.BootCompleted;

const uuidParam = {
  type: 'object',
  properties: { uuid: { type: 'string', maxLength: 16384 } },
  required: ['uuid'],
};

/** Starts the boot server; resolves once it listens. */
export async function startBootServer(opts: BootServerOptions): Promise<RunningServer> {
  const metrics = opts.metrics ?? new Registry();
  const resolver = new BootTargetResolver(opts, metrics);
  const intents = new PowerIntentGate(opts.client, opts.claims);
  const liveCheck = new LiveBootConfigurationCheck(opts.client);
  const app = createHttpApp('bootserver', opts.log, metrics, opts);
  const pin = opts.pinScriptClient ?? true;
  const identity = new ClientIdentity(
    opts.servers,
    opts.scriptClientIdentity ?? 'known-address',
    opts.clientMacSource,
  );
  const inject = opts.injectBootstateUnit ?? true;
  const ignition = opts.ignition ?? new IgnitionRenderer(new IgnitionTools());
  let baseUrl = opts.externalUrl ?? '';
  const refusals = new FetchRefusals(opts.client, opts.events, BOOTSERVER_COMPONENT, opts.log);
  // A refused fetch of an attempt's boot file is made visible on its SBC and claim (fetch-refusal.ts).
  app.addHook('onError', async (req, _reply, err) => {
    if (!isFetchRefusal(err)) return;
    const route = req.routeOptions.url;
    const what =
      route === '/ipxe/:uuid' ? 'script' : route?.startsWith('/httpboot/') ? 'HTTP boot file' : undefined;
    if (!what) return;
    try {
      const target = resolver.resolve(BootTargetResolver.parseUUID((req.params as { uuid: string }).uuid));
      if (target.sbc)
        refusals.record(target.server, target.sbc, what, clientAddress(req.socket.remoteAddress), err);
    } catch {
      // No single Server for the UUID: nothing to attach the refusal to.
    }
  });

  app.get('/ipxe', async (_req, reply) => reply.type('text/plain').send(chainScript(baseUrl)));
  app.get('/ipxe/', async (_req, reply) => reply.type('text/plain').send(chainScript(baseUrl)));

  app.get('/ipxe/:uuid', { ...UNSERVED_BUDGETED, schema: { params: uuidParam } }, async (req, reply) => {
    const uuid = BootTargetResolver.parseUUID((req.params as { uuid: string }).uuid);
    const client = clientAddress(req.socket.remoteAddress);
    let target: BootTarget;
    try {
      target = resolver.resolve(uuid);
    } catch (err) {
      // An unknown UUID gets what a known server without boot configuration gets (security review
      // N16: the answer must not tell which UUIDs exist); it costs no API read and spends the
      // address's 404 budget as a 404 did (the local-boot answer is counted below).
      if (!(err instanceof HttpError) || err.reason !== 'UnknownServer') throw err;
      req.log.info({ systemUUID: uuid, client }, 'no Server with this UUID: local boot');
      (req as { unserved?: boolean }).unserved = true;
      return reply.type('text/plain').send(localBootScript('no boot configuration'));
    }
    const log = req.log.child({ server: target.server.metadata.name, systemUUID: uuid, client });
    // Identity first (security review N4): an address refused by it costs no API read.
    identity.check(target.server, client, log, 'script');
    if (!target.sbc) {
      // The cache may lag the attempt this host was powered on for: ask the API server first.
      const live = await liveCheck.read(target.server);
      if (!live.sbc && live.attemptInProgress) {
        log.info('boot configuration of the attempt in progress not visible yet: retry');
        throw new HttpError(
          503,
          'BootConfigurationPending',
          'the server has a boot attempt in progress whose boot configuration is not visible yet',
          BOOT_CONFIGURATION_PENDING_RETRY_SECONDS,
        );
      }
      if (!live.sbc) {
        log.info('no boot configuration: local boot');
        return reply.type('text/plain').send(localBootScript('no boot configuration'));
      }
      target = resolver.targetFor(uuid, live.server, live.sbc);
    }
    const current = target.sbc;
    if (current && provisioned(current)) {
      log.info({ sbc: current.metadata.name }, 'NetBootOnce configuration already booted: local boot');
      return reply.type('text/plain').send(localBootScript('provisioned (NetBootOnce)'));
    }
    const sbc = target.sbc;
    // Every stored SBC has a uid, so its token can be derived: this guards the type only.
    if (!sbc || !target.callback) throw unavailable('boot configuration not visible yet', 1);
    if ((sbc.spec.bootMethod ?? 'PXE') !== 'PXE') {
      // The attempt boots by another route (security review N2): its token goes out only there,
      // under that route's pin, so this route must not hand it to a second address.
      log.warn(
        { sbc: sbc.metadata.name, bootMethod: sbc.spec.bootMethod },
        'iPXE script of a non-PXE attempt: refused',
      );
      throw new HttpError(
        409,
        'NotPXEBoot',
        `the boot configuration boots by ${sbc.spec.bootMethod}, not PXE`,
      );
    }
    if (sbc.status?.state !== 'Ready')
      throw unavailable(`boot configuration is ${sbc.status?.state ?? 'Pending'}`, 5);
    const attempt = sbc.spec.bootAttempt ?? 1;
    const pinCheck = pin ? notPinnedElsewhere(BootSignal.IPXEScriptFetched, client, log) : undefined;
    pinCheck?.(sbc);
    await intents.require(sbc, target.server);
    const image = bootImageFor(opts.catalog(), sbc, uuid, baseUrl, target.callback.token);
    const script = attemptScript({
      image,
      uuid,
      attempt,
      token: target.callback.token,
      bootServerUrl: baseUrl,
      registryUrl: opts.registryUrl,
    });
    // The pin is stored (compare-and-swap) before a byte of the script leaves.
    await recordSignal(
      opts.client,
      BOOTSERVER_COMPONENT,
      sbc,
      {
        type: BootSignal.IPXEScriptFetched,
        status: 'True',
        reason: SignalReason.ScriptServed,
        message: pinMessage('script', attempt, client),
      },
      { check: pinCheck },
    );
    log.info({ sbc: sbc.metadata.name, attempt, image: image.name }, 'iPXE script served');
    return reply.type('text/plain').send(script);
  });

  app.get('/ignition/:uuid', { ...AUTHENTICATED, schema: { params: uuidParam } }, async (req, reply) => {
    const uuid = BootTargetResolver.parseUUID((req.params as { uuid: string }).uuid);
    const q = req.query as Record<string, unknown>;
    const token = typeof q.token === 'string' ? q.token : undefined;
    let target: BootTarget;
    try {
      target = await resolver.authenticate(uuid, token);
    } catch (err) {
      const sbc =
        err instanceof HttpError && err.reason === 'StaleToken' ? resolver.resolve(uuid).sbc : undefined;
      if (sbc) {
        opts.events.event(
          { ...sbc, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'ServerBootConfiguration' },
          'Warning',
          EventReason.StaleCallback,
          `ignition fetch from ${req.socket.remoteAddress} carried the token of an earlier attempt; refused`,
        );
      }
      throw err;
    }
    const sbc = target.sbc!;
    const attempt = sbc.spec.bootAttempt ?? 1;
    const hook = { registryUrl: opts.registryUrl, uuid, token: target.callback!.token, attempt };
    if (!sbc.spec.ignitionSecretRef?.name) callbackOnlyIgnition(sbc, inject); // 404 without the hook
    const body = await servedIgnition(opts.client, ignition, sbc, inject ? hook : undefined);
    await recordSignal(opts.client, BOOTSERVER_COMPONENT, sbc, {
      type: BootSignal.IgnitionDataFetched,
      status: 'True',
      reason: SignalReason.IgnitionServed,
      message: `ignition for attempt ${attempt} served to ${req.socket.remoteAddress}`,
    });
    req.log.info(
      { server: target.server.metadata.name, systemUUID: uuid, attempt, bytes: body.length },
      'ignition served',
    );
    return reply.type('application/json').send(body);
  });

  // Image names contain '/' (`metal/os:latest`) and firmware decodes %2F before requesting, so the
  // name is everything between /images/ and the last segment.
  app.get('/images/*', async (req, reply) => {
    const rest = (req.params as { '*': string })['*'];
    const cut = rest.lastIndexOf('/');
    const file = rest.slice(cut + 1);
    let name: string;
    try {
      name = decodeURIComponent(rest.slice(0, Math.max(cut, 0)));
    } catch {
      throw new HttpError(400, 'InvalidPath', 'image path is not valid percent-encoding');
    }
    if (file !== 'kernel' && file !== 'initrd') throw new HttpError(404, 'NotFound', 'no such image file');
    const entry = opts.catalog().resolve(name);
    if (!entry.ok) throw new HttpError(404, entry.reason, entry.message);
    const path = entry.image[file];
    if (!path.startsWith('/')) throw new HttpError(404, 'NotFound', 'image file is not served here');
    const size = statSync(path).size;
    return reply
      .type('application/octet-stream')
      .header('content-length', String(size))
      .send(createReadStream(path));
  });

  const uki = new UkiBuilder();
  registerHttpBootRoute(app, {
    client: opts.client,
    resolver,
    catalog: opts.catalog,
    uki,
    component: BOOTSERVER_COMPONENT,
    registryUrl: opts.registryUrl,
    intents,
    identity,
    pin,
    baseUrl: () => baseUrl,
    parseUUID: (raw) => BootTargetResolver.parseUUID(raw),
    oci: opts.oci,
  });
  if (opts.oci) registerBlobRoute(app, { resolver, ...opts.oci });
  const iso = new VirtualMediaIsoBuilder(uki);
  registerVirtualMediaRoute(app, {
    client: opts.client,
    resolver,
    catalog: opts.catalog,
    iso,
    component: BOOTSERVER_COMPONENT,
    registryUrl: opts.registryUrl,
    baseUrl: () => baseUrl,
    parseUUID: (raw) => BootTargetResolver.parseUUID(raw),
    oci: opts.oci,
  });

  const bound = await listen(app, opts.host ?? '127.0.0.1', opts.port, !!opts.tls);
  baseUrl ||= bound.url;
  return {
    ...bound,
    close: async () => {
      await app.close();
      await resolver.aliases.settled();
      iso.close();
      uki.close();
    },
  };
}

/**
 * What `/ignition/{uuid}` serves for an SBC without `ignitionSecretRef` (upstream boot-operator has no
 * answer for it: its handler dereferences the missing reference). The image may still need the
 * `/bootstate` callback that completes the boot, so with the hook enabled the config is
 * `{"ignition":{"version":"3.4.0"}}` and nothing else; the hook is merged into it by the caller, so a
 * host gets only the callback unit and its env file. With the hook disabled: 404 `NoIgnitionConfigured`.
 */
export function callbackOnlyIgnition(sbc: ServerBootConfiguration, inject: boolean): IgnitionConfig {
  if (!inject) {
    throw new HttpError(
      404,
      'NoIgnitionConfigured',
      `ServerBootConfiguration ${sbc.metadata.namespace}/${sbc.metadata.name} has no ignitionSecretRef and the /bootstate hook is disabled: no ignition configured`,
    );
  }
  return { ignition: { version: DEFAULT_IGNITION_VERSION } };
}
