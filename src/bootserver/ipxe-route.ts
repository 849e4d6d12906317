/**
 * The iPXE routes of the boot server (the contract is in server.ts's file comment):
 *
 * - `GET /ipxe` and `/ipxe/` → the chain script to `/ipxe/${uuid}`.
 * - `GET /ipxe/{uuid}` → the current attempt's script, or a local-boot script (unknown UUID, no boot
 *   configuration confirmed by a live read, NetBootOnce configuration already booted).
 *
 * The checks run in this order, each before what it guards: the client's identity (403
 * `UnknownClient`/`MACMismatch`, before any API read), the live read (503 `BootConfigurationPending`
 * + `Retry-After`), the boot method (409 `NotPXEBoot`), the SBC's state (503 + `Retry-After`), the
 * first-address pin (403 `ScriptPinned`), the recorded power-on (503 `AwaitingPowerOn`); then the
 * pin is stored (compare-and-swap with `IPXEScriptFetched`) before a byte of the script leaves.
 */
import type { FastifyReply } from 'fastify';
import type { Logger } from 'pino';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { BootSignal, SignalReason } from '../api/vocabulary.js';
import { type BootTarget, BootTargetResolver, provisioned } from '../bootsignals/boot-target.js';
import { clientAddress } from '../bootsignals/client-address.js';
import { type HttpApp, type SignalServerOptions, UNSERVED_BUDGETED } from '../bootsignals/http-app.js';
import { HttpError, unavailable } from '../bootsignals/http-error.js';
import type { PowerIntentGate } from '../bootsignals/power-intent.js';
import { recordSignal } from '../bootsignals/signal-condition.js';
import type { ImageCatalog } from '../oci/image-catalog.js';
import {
  BOOT_CONFIGURATION_PENDING_RETRY_SECONDS,
  type LiveBootConfigurationCheck,
} from './attempt-in-progress.js';
import { notPinnedElsewhere, pinMessage } from './attempt-pin.js';
import { bootImageFor } from './boot-image.js';
import type { ClientIdentity } from './client-identity.js';
import { attemptScript, chainScript, localBootScript } from './ipxe-script.js';

export interface IpxeRouteOptions {
  client: SignalServerOptions['client'];
  resolver: BootTargetResolver;
  catalog: () => ImageCatalog;
  /** Field manager of the condition write. */
  component: string;
  registryUrl: string;
  intents: PowerIntentGate;
  identity: ClientIdentity;
  liveCheck: LiveBootConfigurationCheck;
  /** The first-address pin (`BootServerOptions.pinScriptClient`). */
  pin: boolean;
  /** The boot server's external base URL (rendered into scripts). */
  baseUrl: () => string;
}

export const uuidParam = {
  type: 'object',
  properties: { uuid: { type: 'string', maxLength: 16384 } },
  required: ['uuid'],
};

function sendScript(reply: FastifyReply, script: string) {
  return reply.type('text/plain').send(script);
}

export function registerIpxeRoutes(app: HttpApp, o: IpxeRouteOptions): void {
  app.get('/ipxe', async (_req, reply) => sendScript(reply, chainScript(o.baseUrl())));
  app.get('/ipxe/', async (_req, reply) => sendScript(reply, chainScript(o.baseUrl())));

  app.get('/ipxe/:uuid', { ...UNSERVED_BUDGETED, schema: { params: uuidParam } }, async (req, reply) => {
    const uuid = BootTargetResolver.parseUUID((req.params as { uuid: string }).uuid);
    const client = clientAddress(req.socket.remoteAddress);
    let target: BootTarget;
    try {
      target = o.resolver.resolve(uuid);
    } catch (err) {
      // An unknown UUID gets what a known server without boot configuration gets (security review
      // N16: the answer must not tell which UUIDs exist); it costs no API read and spends the
      // address's 404 budget as a 404 did (the local-boot answer is counted below).
      if (!(err instanceof HttpError) || err.reason !== 'UnknownServer') throw err;
      req.log.info({ systemUUID: uuid, client }, 'no Server with this UUID: local boot');
      (req as { unserved?: boolean }).unserved = true;
      return sendScript(reply, localBootScript('no boot configuration'));
    }
    const log = req.log.child({ server: target.server.metadata.name, systemUUID: uuid, client });
    // Identity first (security review N4): an address refused by it costs no API read.
    o.identity.check(target.server, client, log, 'script');
    const visible = target.sbc ? target : await liveTarget(o, uuid, target, log);
    if (!visible) return sendScript(reply, localBootScript('no boot configuration'));
    const current = visible.sbc;
    if (current && provisioned(current)) {
      log.info({ sbc: current.metadata.name }, 'NetBootOnce configuration already booted: local boot');
      return sendScript(reply, localBootScript('provisioned (NetBootOnce)'));
    }
    return sendScript(reply, await serveAttemptScript(o, uuid, visible, client, log));
  });
}

/**
 * The target as the API server shows it when the cache has no SBC for it: 503
 * `BootConfigurationPending` + `Retry-After` while the Server has an attempt in progress whose SBC
 * is not visible yet; `undefined` (local boot) when there is none.
 */
async function liveTarget(
  o: IpxeRouteOptions,
  uuid: string,
  target: BootTarget,
  log: Logger,
): Promise<BootTarget | undefined> {
  // The cache may lag the attempt this host was powered on for: ask the API server first.
  const live = await o.liveCheck.read(target.server);
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
    return undefined;
  }
  return o.resolver.targetFor(uuid, live.server, live.sbc);
}

/**
 * The SBC and token of a target whose attempt may get a script: 409 `NotPXEBoot` for an attempt
 * that boots by another route (its token goes out only there, under that route's pin), 503 +
 * `Retry-After` while the SBC is not `Ready`.
 */
function pxeAttempt(target: BootTarget, log: Logger): { sbc: ServerBootConfiguration; token: string } {
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
    throw new HttpError(409, 'NotPXEBoot', `the boot configuration boots by ${sbc.spec.bootMethod}, not PXE`);
  }
  if (sbc.status?.state !== 'Ready')
    throw unavailable(`boot configuration is ${sbc.status?.state ?? 'Pending'}`, 5);
  return { sbc, token: target.callback.token };
}

/** The attempt's script, once the pin and the power-on allow it and the pin is stored. */
async function serveAttemptScript(
  o: IpxeRouteOptions,
  uuid: string,
  target: BootTarget,
  client: string,
  log: Logger,
): Promise<string> {
  const { sbc, token } = pxeAttempt(target, log);
  const attempt = sbc.spec.bootAttempt ?? 1;
  const pinCheck = o.pin ? notPinnedElsewhere(BootSignal.IPXEScriptFetched, client, log) : undefined;
  pinCheck?.(sbc);
  await o.intents.require(sbc, target.server);
  const baseUrl = o.baseUrl();
  const image = bootImageFor(o.catalog(), sbc, uuid, baseUrl, token);
  const script = attemptScript({
    image,
    uuid,
    attempt,
    token,
    bootServerUrl: baseUrl,
    registryUrl: o.registryUrl,
  });
  // The pin is stored (compare-and-swap) before a byte of the script leaves.
  await recordSignal(
    o.client,
    o.component,
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
  return script;
}
