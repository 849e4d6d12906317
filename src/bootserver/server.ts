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
 * - `GET /httpboot/{uuid}/{attempt}/uki.efi` → the attempt's UKI for UEFI HTTP boot (http-boot.ts),
 *   prebuilt when its SBC turns Ready (uki-prebuild.ts; `prebuildUki`).
 * - `GET /oci/{uuid}/{attempt}/{layer}` → layers of the attempt's OCI image (blob-route.ts).
 * - `GET /vmedia/{uuid}/{attempt}/{capability}/boot.iso` → the attempt's virtual-media ISO, fetched
 *   by the BMC (vmedia-route.ts).
 *
 * Scripts are `text/plain`; errors are JSON `{reason, message}` with the statuses of
 * docs/ARCHITECTURE.md, 'Failure handling in one place each' (503 + `Retry-After` while the API server or a rotation is unavailable).
 * Nothing is rendered from request input except the canonical UUID; every fetch is logged with the
 * client address and never with the token.
 *
 * The routes live in ipxe-route.ts, ignition-route.ts, image-route.ts, http-boot.ts, blob-route.ts and
 * vmedia-route.ts; the start and stop sequence is bootsignals/signal-server.ts.
 */
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import { ConditionType } from '../api/vocabulary.js';
import { BootTargetResolver } from '../bootsignals/boot-target.js';
import type { RunningServer, SignalServerOptions } from '../bootsignals/http-app.js';
import { PowerIntentGate } from '../bootsignals/power-intent.js';
import { listenSignalServer, openSignalServer, type SignalServerBase } from '../bootsignals/signal-server.js';
import { IgnitionTools } from '../ignition/ignition-tools.js';
import { IgnitionRenderer } from '../ignition/served-ignition.js';
import type { BlobCache } from '../oci/blob-cache.js';
import type { BootImages } from '../oci/boot-images.js';
import type { ImageCatalog } from '../oci/image-catalog.js';
import type { Informer } from '../runtime/informer.js';
import type { AddressMacSource } from './address-source.js';
import { LiveBootConfigurationCheck } from './attempt-in-progress.js';
import { registerBlobRoute } from './blob-route.js';
import { ClientIdentity, type ClientIdentityMode } from './client-identity.js';
import { FetchRefusals, recordFetchRefusals } from './fetch-refusal.js';
import { FirstBytePriority, holdBodiesForFirstBytes } from './first-byte-priority.js';
import { registerHttpBootRoute, ukiInputFor } from './http-boot.js';
import { registerIgnitionRoute } from './ignition-route.js';
import { registerImageRoute } from './image-route.js';
import { registerIpxeRoutes } from './ipxe-route.js';
import { UkiBuilder } from './uki.js';
import { UkiPrebuilder, type UkiPrebuildOptions } from './uki-prebuild.js';
import { VirtualMediaIsoBuilder } from './vmedia-iso.js';
import { registerVirtualMediaRoute } from './vmedia-route.js';

export { callbackOnlyIgnition } from './ignition-route.js';

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
  /**
   * Build an HTTP-boot attempt's UKI when its SBC turns Ready (uki-prebuild.ts, with these bounds),
   * not on the firmware's first request (default true; false: on request only, as before).
   */
  prebuildUki?: boolean | UkiPrebuildOptions;
}

/** Field-manager prefix of the boot server's condition writes. */
export const BOOTSERVER_COMPONENT = 'metal-bootserver';
/** Condition set by the claim controller when a claim completed; read for NetBootOnce. */
export const BOOT_COMPLETED_CONDITION = ConditionType.BootCompleted;

/** Starts the boot server; resolves once it listens. */
export async function startBootServer(opts: BootServerOptions): Promise<RunningServer> {
  const base = openSignalServer('bootserver', opts);
  let baseUrl = opts.externalUrl ?? '';
  const builders = registerBootRoutes(base, opts, () => baseUrl);
  const running = await listenSignalServer(base, opts, () => {
    builders.prebuilt?.close();
    builders.iso.close();
    builders.uki.close();
  });
  baseUrl ||= running.url;
  // Only now: the command lines of prebuilt UKIs carry the URL the server listens on.
  builders.prebuilt?.start();
  return running;
}

/** Registers every route of the boot server on `base.app`; returns the builders to close on stop. */
function registerBootRoutes(
  { app, resolver, metrics }: SignalServerBase,
  opts: BootServerOptions,
  baseUrl: () => string,
): { uki: UkiBuilder; iso: VirtualMediaIsoBuilder; prebuilt: UkiPrebuilder | undefined } {
  const intents = new PowerIntentGate(opts.client, opts.claims);
  const pin = opts.pinScriptClient ?? true;
  const identity = new ClientIdentity(
    opts.servers,
    opts.scriptClientIdentity ?? 'known-address',
    opts.clientMacSource,
  );
  const component = BOOTSERVER_COMPONENT;
  // First bytes before bulk: every request waits in it, the HTTP-boot bodies and pins give way.
  const priority = new FirstBytePriority();
  holdBodiesForFirstBytes(app, priority);
  const common = {
    client: opts.client,
    resolver,
    catalog: opts.catalog,
    component,
    registryUrl: opts.registryUrl,
  };
  const parseUUID = (raw: unknown) => BootTargetResolver.parseUUID(raw);
  recordFetchRefusals(app, resolver, new FetchRefusals(opts.client, opts.events, component, opts.log));
  const liveCheck = new LiveBootConfigurationCheck(opts.client);
  registerIpxeRoutes(app, { ...common, intents, identity, liveCheck, pin, baseUrl });
  registerIgnitionRoute(app, {
    ...common,
    events: opts.events,
    ignition: opts.ignition ?? new IgnitionRenderer(new IgnitionTools()),
    inject: opts.injectBootstateUnit ?? true,
  });
  registerImageRoute(app, opts.catalog);
  const uki = new UkiBuilder({ metrics });
  const inputs = { catalog: opts.catalog, baseUrl, registryUrl: opts.registryUrl, oci: opts.oci };
  const prebuild = opts.prebuildUki ?? true;
  const prebuilt = prebuild
    ? new UkiPrebuilder(
        {
          sbcs: opts.sbcs,
          servers: opts.servers,
          uki,
          token: (sbc, uuid, server) => resolver.targetFor(uuid, server, sbc).callback?.token,
          inputFor: (sbc, uuid, token) => ukiInputFor(inputs, sbc, uuid, token),
          log: opts.log.child({ component: 'uki-prebuild' }),
          metrics,
        },
        prebuild === true ? {} : prebuild,
      )
    : undefined;
  registerHttpBootRoute(app, {
    ...common,
    uki,
    intents,
    identity,
    pin,
    baseUrl,
    parseUUID,
    oci: opts.oci,
    prebuilt,
    priority,
  });
  if (opts.oci) registerBlobRoute(app, { resolver, ...opts.oci });
  const iso = new VirtualMediaIsoBuilder(uki);
  registerVirtualMediaRoute(app, { ...common, iso, baseUrl, parseUUID, oci: opts.oci });
  return { uki, iso, prebuilt };
}
