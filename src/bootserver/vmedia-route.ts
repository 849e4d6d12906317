/**
 * Virtual media: `GET|HEAD /vmedia/{uuid}/{attempt}/{capability}/boot.iso` serves the attempt's ISO
 * (bootserver/vmedia-iso.ts) to the BMC that the manager told to insert it (Redfish
 * `VirtualMedia.InsertMedia`, `bootMethod: VirtualMedia`; URL shape `virtualMediaIsoUrl`).
 *
 * The fetcher is the BMC, not the host, so the host-address checks of the iPXE script and the UKI
 * (client identity, power-on gate, first-address pin) do not apply; the URL itself is the proof: its
 * capability is an HMAC keyed by the attempt's token (bootauth/vmedia-capability.ts). BMCs read the
 * image in pieces, so single byte ranges are served (RFC 9110 §14: `Accept-Ranges: bytes`, 206 with
 * `Content-Range`, 416 for an unsatisfiable range; several ranges get the whole file, as the RFC allows).
 * Answers:
 * - 200 / 206 `application/octet-stream` (the ISO: the UKI with the attempt token on its command
 *   line, `ip=` from the Server's `metal.ironcore.dev/boot-ip` annotation when set); the first GET
 *   of the attempt sets `VirtualMediaFetched` before a byte is sent (later range reads write nothing);
 * - 400 malformed path; 404 unknown server, no boot configuration, NetBootOnce after completion;
 * - 403 `CapabilityRejected`: the capability is not that of the current attempt (another attempt's
 *   URL, an earlier token, a guess), checked before anything is built or streamed;
 * - 409 `NotVirtualMedia` (the configuration boots otherwise), `InvalidStaticNetwork` (annotation
 *   not in the `ip=` syntax), `MediaTooLarge`, `NoLocalFiles`;
 * - 503 + `Retry-After` while the configuration is not Ready or is being rotated, the registry is
 *   unreachable, or too many ISOs are being built.
 */
import { createReadStream } from 'node:fs';
import type { Logger } from 'pino';
import { STATIC_IP_ANNOTATION, STATIC_IP_PATTERN } from '../api/v1alpha1/boot-method.js';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { BootSignal, ConditionType, countsForCurrentAttempt, SignalReason } from '../api/vocabulary.js';
import { verifyVirtualMediaCapability } from '../bootauth/vmedia-capability.js';
import type { BootTarget } from '../bootsignals/boot-target.js';
import { clientAddress } from '../bootsignals/client-address.js';
import type { HttpApp } from '../bootsignals/http-app.js';
import { HttpError, unavailable } from '../bootsignals/http-error.js';
import { recordSignal } from '../bootsignals/signal-condition.js';
import { pinMessage } from './attempt-pin.js';
import { bootImageFor } from './boot-image.js';
import { type HttpBootRouteOptions, localBootFiles } from './http-boot.js';
import { attemptKernelArgs } from './ipxe-script.js';
import { IsoBusyError, IsoTooLargeError, type VirtualMediaIsoBuilder } from './vmedia-iso.js';

export type VirtualMediaRouteOptions = Pick<
  HttpBootRouteOptions,
  'client' | 'resolver' | 'catalog' | 'component' | 'registryUrl' | 'baseUrl' | 'parseUUID' | 'oci'
> & { iso: VirtualMediaIsoBuilder };

const BUSY_RETRY_AFTER_S = 5;

/** A single byte range of a file of `size` bytes; `undefined`: the whole file; `'unsatisfiable'`: 416. Pure. */
export function parseRange(
  header: string | undefined,
  size: number,
): { start: number; end: number } | 'unsatisfiable' | undefined {
  if (!header) return undefined;
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m) return undefined; // several ranges or another unit: the whole file (RFC 9110 §14.2)
  const [, a, b] = m;
  if (a === '' && b === '') return undefined;
  let start: number;
  let end: number;
  if (a === '') {
    const suffix = Number(b);
    if (suffix === 0) return 'unsatisfiable';
    start = Math.max(0, size - suffix);
    end = size - 1;
  } else {
    start = Number(a);
    end = b === '' ? size - 1 : Math.min(Number(b), size - 1);
  }
  if (start >= size || start > end) return 'unsatisfiable';
  return { start, end };
}

/** The `ip=` argument of a Server's static network annotation; 409 `InvalidStaticNetwork` when malformed. */
export function staticIpArgs(server: Server): string[] {
  const v = server.metadata.annotations?.[STATIC_IP_ANNOTATION];
  if (v === undefined || v === '') return [];
  if (!STATIC_IP_PATTERN.test(v))
    throw new HttpError(
      409,
      'InvalidStaticNetwork',
      `annotation ${STATIC_IP_ANNOTATION} is not a kernel ip= value (fields of [0-9A-Za-z.:[]_-], at most 256 characters)`,
    );
  return [`ip=${v}`];
}

const params = {
  type: 'object',
  properties: {
    uuid: { type: 'string', maxLength: 16384 },
    attempt: { type: 'string', pattern: '^[1-9][0-9]{0,8}$' },
    cap: { type: 'string', pattern: '^[A-Za-z0-9_-]{1,128}$' },
  },
  required: ['uuid', 'attempt', 'cap'],
};

export function registerVirtualMediaRoute(app: HttpApp, o: VirtualMediaRouteOptions): void {
  app.get('/vmedia/:uuid/:attempt/:cap/boot.iso', { schema: { params } }, async (req, reply) => {
    const p = req.params as { uuid: string; attempt: string; cap: string };
    const uuid = o.parseUUID(p.uuid);
    const wanted = Number(p.attempt);
    const client = clientAddress(req.socket.remoteAddress);
    let target = o.resolver.resolve(uuid);
    const log = req.log.child({ server: target.server.metadata.name, systemUUID: uuid, client });
    if (!target.sbc) throw new HttpError(404, 'NoBootConfiguration', 'the server has no boot configuration');
    // A later attempt than cached: the cache lags the bump the BMC was told about (one paced read).
    if (!target.callback || wanted > (target.sbc.spec.bootAttempt ?? 1))
      target = (await o.resolver.refreshPaced(target)).target;
    const { sbc, token, attempt } = vmediaAttempt(target, uuid, wanted, p.cap, log);
    const { image, iso } = await buildIso(o, target.server, sbc, uuid, attempt, token, log);
    const range = parseRange(req.headers.range, iso.size);
    if (range === 'unsatisfiable')
      return reply.code(416).header('content-range', `bytes */${iso.size}`).send();
    if (req.method === 'GET' && !countsForCurrentAttempt(sbc, BootSignal.VirtualMediaFetched)) {
      // Once per attempt, before a byte leaves: BMCs read the image in many ranges.
      await recordSignal(o.client, o.component, sbc, {
        type: BootSignal.VirtualMediaFetched,
        status: 'True',
        reason: SignalReason.MediaServed,
        message: pinMessage('virtual-media ISO', attempt, client),
      });
      log.info(
        { sbc: sbc.metadata.name, attempt, image: image.name, bytes: iso.size },
        'virtual-media ISO served',
      );
    }
    reply.type('application/octet-stream').header('accept-ranges', 'bytes');
    if (range === undefined)
      return reply.header('content-length', String(iso.size)).send(createReadStream(iso.path));
    return reply
      .code(206)
      .header('content-range', `bytes ${range.start}-${range.end}/${iso.size}`)
      .header('content-length', String(range.end - range.start + 1))
      .send(createReadStream(iso.path, { start: range.start, end: range.end }));
  });
}

/**
 * The attempt whose ISO a request may get, in this order: 503 + `Retry-After` while its SBC is not
 * visible, 403 `CapabilityRejected` unless the URL is the current attempt's (attempt number and
 * capability), 409 `NotVirtualMedia`, 404 `Provisioned` for a completed NetBootOnce configuration,
 * 503 + `Retry-After` while the SBC is not `Ready`.
 */
function vmediaAttempt(
  target: BootTarget,
  uuid: string,
  wanted: number,
  cap: string,
  log: Logger,
): { sbc: ServerBootConfiguration; token: string; attempt: number } {
  const sbc = target.sbc;
  if (!sbc || !target.callback) throw unavailable('boot configuration not visible yet', 1);
  const attempt = sbc.spec.bootAttempt ?? 1;
  if (wanted !== attempt || !verifyVirtualMediaCapability(cap, target.callback.token, uuid, attempt)) {
    log.warn(
      { sbc: sbc.metadata.name, wanted, attempt },
      'virtual-media ISO refused: not the current attempt',
    );
    throw new HttpError(403, 'CapabilityRejected', 'this URL is not the current attempt’s');
  }
  if (sbc.spec.bootMethod !== 'VirtualMedia')
    throw new HttpError(
      409,
      'NotVirtualMedia',
      `the boot configuration boots over ${sbc.spec.bootMethod ?? 'PXE'}`,
    );
  if (sbc.spec.bootPolicy === 'NetBootOnce' && countsForCurrentAttempt(sbc, ConditionType.BootCompleted))
    throw new HttpError(404, 'Provisioned', 'provisioned (NetBootOnce): boot from disk');
  if (sbc.status?.state !== 'Ready')
    throw unavailable(`boot configuration is ${sbc.status?.state ?? 'Pending'}`, 5);
  return { sbc, token: target.callback.token, attempt };
}

/**
 * The attempt's ISO from the builder: 503 `MediaBusy` + `Retry-After` while builds are at their
 * bound, 409 `MediaTooLarge`, 503 when the build failed; the errors of {@link localBootFiles}.
 */
async function buildIso(
  o: VirtualMediaRouteOptions,
  server: Server,
  sbc: ServerBootConfiguration,
  uuid: string,
  attempt: number,
  token: string,
  log: Logger,
): Promise<{ image: ReturnType<typeof bootImageFor>; iso: { path: string; size: number } }> {
  const image = bootImageFor(o.catalog(), sbc, uuid, o.baseUrl(), token);
  const { kernel, initrd } = await localBootFiles(o, sbc, image.kernel, image.initrd);
  const cmdline = [
    ...attemptKernelArgs({
      image,
      uuid,
      attempt,
      token,
      bootServerUrl: o.baseUrl(),
      registryUrl: o.registryUrl,
    }),
    ...staticIpArgs(server),
  ].join(' ');
  try {
    return { image, iso: await o.iso.get(`${sbc.metadata.uid}/${attempt}`, { kernel, initrd, cmdline }) };
  } catch (err) {
    if (err instanceof IsoBusyError) throw new HttpError(503, 'MediaBusy', err.message, BUSY_RETRY_AFTER_S);
    if (err instanceof IsoTooLargeError) throw new HttpError(409, 'MediaTooLarge', err.message);
    log.error({ err: (err as Error).message }, 'building the virtual-media ISO failed');
    throw unavailable('the ISO could not be built', 30);
  }
}
