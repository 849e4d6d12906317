/**
 * UEFI HTTP boot: `GET|HEAD /httpboot/{uuid}/{attempt}/uki.efi` serves the attempt's unified
 * kernel image (src/bootserver/uki.ts) to firmware told that URI by its BMC (`Boot.HttpBootUri`,
 * set by the claim controller for `bootMethod: HTTPBoot`; URL shape: `httpBootFileUrl`).
 *
 * Firmware cannot authenticate and the UKI's command line carries the attempt token, so it is
 * protected as the iPXE script is (server.ts): by the client's address (client-identity.ts, as
 * ironcore's boot-operator identifies its HTTP-boot clients), by the power-on gate (served only
 * once the manager recorded the power-on of this attempt, bootsignals/power-intent.ts) and by the
 * first-address pin (attempt-pin.ts; the `HTTPBootFileFetched` write is the compare-and-swap).
 * Answers:
 * - 200 `application/efi` with the UKI (command line with the attempt token); a GET sets
 *   `HTTPBootFileFetched` (the pin) before anything past the PE headers is sent (OVMF sends HEAD
 *   first, which sets nothing and pins nothing). The status, headers and the PE headers
 *   (pe-headers.ts: no section, so no token) go out at once, so the first byte does not wait for the
 *   API server; a request of an attempt another request is being pinned for in this process waits for
 *   that pin and then gets the file or 403 as before. Only a client that loses the compare-and-swap to
 *   a request on another replica at the same moment, or a pin the API server fails, sees its
 *   connection closed after the PE headers instead of a 403 / 503;
 * - 400 malformed UUID or attempt; 404 unknown server, no boot configuration, or NetBootOnce after
 *   completion (`Provisioned`: the firmware then boots the next entry, the disk);
 * - 409 `NotHTTPBoot` (the configuration boots over PXE) or `StaleAttempt` (another attempt's URL);
 * - 403 `UnknownClient` (checked first; client-identity.ts) or `ScriptPinned` (this attempt's file
 *   went to another address), logged with the address;
 * - 503 + `Retry-After` while the configuration is not Ready or is being rotated,
 *   `AwaitingPowerOn` while the power-on of the attempt is not recorded, and `BootFileBusy` while
 *   the UKI builds are at their bound (uki.ts, security review N7).
 * The body and the pin of a GET give way while other requests wait for their first byte
 * (first-byte-priority.ts, head-first-body.ts): the same bytes in the same order, only later.
 * The UKI is normally prebuilt when the SBC turned Ready (uki-prebuild.ts), so the first request
 * is answered from disk; a request during the prebuild waits for it, one the prebuild missed (its
 * bound, another replica's event, a UUID asked in its byte-swapped form) builds it as before.
 */
import { createReadStream } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import type { Logger } from 'pino';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { BootSignal, ConditionType, countsForCurrentAttempt, SignalReason } from '../api/vocabulary.js';
import type { BootTarget, BootTargetResolver } from '../bootsignals/boot-target.js';
import { clientAddress } from '../bootsignals/client-address.js';
import { type HttpApp, type SignalServerOptions, UNSERVED_BUDGETED } from '../bootsignals/http-app.js';
import { HttpError, unavailable } from '../bootsignals/http-error.js';
import type { PowerIntentGate } from '../bootsignals/power-intent.js';
import { recordSignal } from '../bootsignals/signal-condition.js';
import { BLOB_SIZE_MISMATCH, type BlobCache, LAYER_TOO_LARGE } from '../oci/blob-cache.js';
import type { BootImages } from '../oci/boot-images.js';
import type { ImageCatalog } from '../oci/image-catalog.js';
import { parseReference } from '../oci/reference.js';
import { RegistryError } from '../oci/registry-client.js';
import { notPinnedElsewhere, pinMessage } from './attempt-pin.js';
import { bootImageFor } from './boot-image.js';
import type { ClientIdentity } from './client-identity.js';
import { FirstBytePriority, inTurn } from './first-byte-priority.js';
import { headersThenFile } from './head-first-body.js';
import { attemptKernelArgs } from './ipxe-script.js';
import { withoutSecret } from './pe-headers.js';
import { type UkiBuilder, UkiBusy, type UkiInput, type UkiLease } from './uki.js';

export interface HttpBootRouteOptions {
  client: SignalServerOptions['client'];
  resolver: BootTargetResolver;
  catalog: () => ImageCatalog;
  uki: UkiBuilder;
  /** Field manager of the condition write. */
  component: string;
  registryUrl: string;
  /** The power-on gate shared with the script route. */
  intents: PowerIntentGate;
  /** Who the client is (client-identity.ts), shared with the script route. */
  identity: ClientIdentity;
  /** The first-address pin (`BootServerOptions.pinScriptClient`). */
  pin: boolean;
  /** The boot server's external base URL (rendered into the command line). */
  baseUrl: () => string;
  /** BootTargetResolver.parseUUID. */
  parseUUID: (raw: unknown) => string;
  /** OCI images: kernel and initrd layers of the attempt's resolved image come through the blob cache. */
  oci?: { images: BootImages; cache: BlobCache } | undefined;
  /** The prebuilds (uki-prebuild.ts), told when a GET served an attempt's file so it stops holding it. */
  prebuilt?: { served(sbc: ServerBootConfiguration): void } | undefined;
  /**
   * First bytes before bulk (first-byte-priority.ts): the bodies and the pins of head-first GETs
   * wait their turn in it; the server makes its requests wait there (holdBodiesForFirstBytes).
   * Default: one nobody waits in.
   */
  priority?: FirstBytePriority;
}

const REGISTRY_RETRY_AFTER_S = 5;
/** Seconds firmware is told to wait while the UKI build queue is full (a build takes about a second). */
const UKI_BUSY_RETRY_AFTER_S = 5;

/**
 * Local files of the attempt's kernel and initrd: catalog paths as they are, OCI layers (`status.image`)
 * as verified blob-cache files. 409 `NoLocalFiles` for a catalog image served from URLs or OCI without
 * a blob cache; 403 `RegistryNotAllowed`; 502 `LayerTooLarge`, `BlobSizeMismatch` (registry size is
 * not the descriptor's, N10), `ImageLayerMissing`; 503 + `Retry-After` when the registry cannot be reached.
 */
export async function localBootFiles(
  o: Pick<HttpBootRouteOptions, 'oci'>,
  sbc: ServerBootConfiguration,
  kernel: string,
  initrd: string,
): Promise<{ kernel: string; initrd: string }> {
  if (kernel.startsWith('/') && initrd.startsWith('/')) return { kernel, initrd };
  const img = sbc.status?.image;
  if (!o.oci || !img?.kernel || !img.initrd) {
    throw new HttpError(409, 'NoLocalFiles', 'HTTP boot needs local kernel and initrd files or an OCI image');
  }
  const ref = parseReference(img.reference);
  try {
    const credentials = await o.oci.images.credentialsOf(sbc, ref); // never status.image.pullSecret (N5)
    // Held to the manifest's descriptor sizes, not the registry's Content-Length (N10).
    const [kernelSize, initrdSize] = [
      await o.oci.images.layerSize(img, ref, 'kernel', credentials),
      await o.oci.images.layerSize(img, ref, 'initrd', credentials),
    ];
    return {
      kernel: await o.oci.cache.file(ref, img.kernel, credentials, kernelSize),
      initrd: await o.oci.cache.file(ref, img.initrd, credentials, initrdSize),
    };
  } catch (err) {
    if (!(err instanceof RegistryError)) throw err;
    if (err.reason === 'RegistryNotAllowed') throw new HttpError(403, err.reason, err.message);
    if ([LAYER_TOO_LARGE, BLOB_SIZE_MISMATCH, 'ImageLayerMissing'].includes(err.reason))
      throw new HttpError(502, err.reason, err.message); // no retry helps
    throw new HttpError(503, err.reason, err.message, REGISTRY_RETRY_AFTER_S);
  }
}

const params = {
  type: 'object',
  properties: {
    uuid: { type: 'string', maxLength: 16384 },
    attempt: { type: 'string', pattern: '^[1-9][0-9]{0,8}$' },
  },
  required: ['uuid', 'attempt'],
};

export function registerHttpBootRoute(app: HttpApp, o: HttpBootRouteOptions): void {
  /** `sbc uid/attempt` → settles once the pin of the last GET of that attempt here is decided (pinInTurn). */
  const pinning = new Map<string, Promise<void>>();
  const priority = o.priority ?? new FirstBytePriority();
  app.get(
    '/httpboot/:uuid/:attempt/uki.efi',
    { ...UNSERVED_BUDGETED, schema: { params } },
    async (req, reply) => {
      const asked = {
        params: req.params,
        method: req.method,
        address: req.socket.remoteAddress,
        log: req.log,
      };
      const answer = await bootFileAnswer(o, pinning, asked, reply.raw);
      // Set only now: an error answer must not carry the file's length.
      const fileHeaders = reply.type('application/efi').header('content-length', String(answer.size));
      if (answer.kind === 'head-first') {
        const { head, pin } = answer.early;
        const body = headersThenFile({
          head,
          pin,
          rest: () => inTurn(createReadStream(answer.file, { start: head.length }), priority),
          closed: () => reply.raw.destroyed,
          // The pin's API write is work on this thread too: it gives way like a body chunk. A GET
          // of the same attempt waiting for this pin (pinInTurn) holds it up to the stall bound.
          turn: () => priority.turn(),
          abort: () => reply.raw.destroy(),
          log: answer.log,
        });
        return fileHeaders.send(Readable.from(body));
      }
      // HEAD (Fastify's route of the GET): an empty stream. Fastify reads a HEAD's stream to its end
      // and discards it, which for the file is the whole UKI, tens of MiB per HEAD (OVMF sends one
      // before every GET); no payload at all would make it answer `content-length: 0`.
      const body =
        req.method === 'HEAD'
          ? Readable.from([])
          : Readable.from(inTurn(createReadStream(answer.file), priority, true));
      return fileHeaders.send(body);
    },
  );
}

/**
 * Runs `fn` once `raw` closed: now when it already has (the client left while the route awaited
 * something; its 'close' will not come again), else on its 'close'.
 */
function whenClosed(raw: ServerResponse, fn: () => void): void {
  if (raw.destroyed) fn();
  else raw.once('close', fn);
}

/** What {@link bootFileAnswer} decided: the file, and for a GET sent head first its PE headers and pin. */
type BootFileAnswer = { file: string; size: number; log: Logger } & (
  | { kind: 'file' }
  | { kind: 'head-first'; early: { head: Buffer; pin: () => Promise<void>; abandon: () => void } }
);

/**
 * Decides one request of the route (see the file's contract): the attempt's leased UKI, for a GET
 * whose PE headers can go first also those headers and its pin to start after them; a GET that
 * waited for another GET's pin of the same attempt got its own pin stored here. Throws HttpError
 * with the statuses listed atop this file. The lease is released when `raw` closes.
 */
async function bootFileAnswer(
  o: HttpBootRouteOptions,
  pinning: Map<string, Promise<void>>,
  req: { params: unknown; method: string; address: string | undefined; log: Logger },
  raw: ServerResponse,
): Promise<BootFileAnswer> {
  const p = req.params as { uuid: string; attempt: string };
  const uuid = o.parseUUID(p.uuid);
  const wanted = Number(p.attempt);
  const client = clientAddress(req.address);
  const { target, log } = await currentTarget(o, req.log, uuid, wanted, client);
  const { sbc, token, attempt } = httpBootAttempt(target, wanted);
  const pinCheck = o.pin ? notPinnedElsewhere(BootSignal.HTTPBootFileFetched, client, log) : undefined;
  pinCheck?.(sbc);
  await o.intents.require(sbc, target.server);
  const { image, lease } = await buildUki(o, sbc, uuid, token, log);
  // The lease keeps the file from eviction until the response is over (sent, aborted or failed).
  whenClosed(raw, lease.release);
  const file = { file: lease.path, size: lease.size, log };
  if (req.method !== 'GET') return { ...file, kind: 'file' };
  // The pin (compare-and-swap) is stored before anything past the PE headers leaves.
  const pin = () =>
    recordSignal(
      o.client,
      o.component,
      sbc,
      {
        type: BootSignal.HTTPBootFileFetched,
        status: 'True',
        reason: SignalReason.BootFileServed,
        message: pinMessage('boot file', attempt, client),
      },
      { check: pinCheck },
    ).then(() => {
      log.info(
        { sbc: sbc.metadata.name, attempt, image: image.name, bytes: lease.size },
        'HTTP boot file served',
      );
      o.prebuilt?.served(sbc);
    });
  const early = await pinInTurn(
    pinning,
    `${sbc.metadata.uid}/${attempt}`,
    () => withoutSecret(lease.peHeaders, token),
    pin,
    () => raw.destroyed,
  );
  if (!early) return { ...file, kind: 'file' };
  // A client gone before its body started must not hold the GETs of its attempt behind it.
  whenClosed(raw, early.abandon);
  return { ...file, kind: 'head-first', early };
}

/**
 * Runs the GETs of one attempt (`key`) in this process one pin after the other. The first one not
 * behind another gets `{head, pin}`: its PE headers (`headers()`; none when they cannot be told),
 * to be sent before it starts `pin` (so the first byte waits for no API work at all), and
 * `abandon`, for a response that ends before it started `pin` (a no-op after), so the GETs behind
 * it go on. One that had to wait, or whose headers are empty, awaits its pin here and gets
 * `undefined` (then nothing was sent: a refusal is still its 403 or 503). Throws what `headers()`
 * or, when awaited here, `pin()` throws, and HttpError 499 (never delivered) when its client
 * left (`gone()`) while it waited for the GET before it.
 */
async function pinInTurn(
  pinning: Map<string, Promise<void>>,
  key: string,
  headers: () => Buffer,
  pin: () => Promise<void>,
  gone: () => boolean,
): Promise<{ head: Buffer; pin: () => Promise<void>; abandon: () => void } | undefined> {
  const earlier = pinning.get(key);
  let settle: () => void = () => {};
  const mine = new Promise<void>((resolve) => {
    settle = resolve;
  });
  pinning.set(key, mine);
  void mine.then(() => {
    if (pinning.get(key) === mine) pinning.delete(key);
  });
  try {
    if (earlier) await earlier;
    // Its client left while it waited: no pin is written for an address that gets nothing.
    if (gone()) throw new HttpError(499, 'ClientClosedRequest', 'the client closed the connection');
    const head = earlier ? Buffer.alloc(0) : headers();
    let started = false;
    const start = () => {
      started = true;
      let pinned: Promise<void>;
      try {
        pinned = pin();
      } catch (err) {
        pinned = Promise.reject(err);
      }
      void pinned.then(settle, settle);
      return pinned;
    };
    // Once the pin started, the GETs behind wait for its outcome, whether or not its client stayed.
    const abandon = () => {
      if (!started) settle();
    };
    if (head.length > 0) return { head, pin: start, abandon };
    await start();
    return undefined;
  } catch (err) {
    settle();
    throw err;
  }
}

/**
 * The server's target for an HTTP-boot request of attempt `wanted`, and the request's log: 404
 * `NoBootConfiguration` without an SBC, then the client's identity (403), then 404 `Provisioned`
 * for a completed NetBootOnce configuration; one paced refresh when the cache lags the attempt.
 */
async function currentTarget(
  o: HttpBootRouteOptions,
  reqLog: Logger,
  uuid: string,
  wanted: number,
  client: string,
): Promise<{ target: BootTarget; log: Logger }> {
  let target = o.resolver.resolve(uuid);
  const log = reqLog.child({ server: target.server.metadata.name, systemUUID: uuid, client });
  if (!target.sbc) {
    log.info('HTTP boot without boot configuration: refused, local boot');
    throw new HttpError(404, 'NoBootConfiguration', 'the server has no boot configuration');
  }
  o.identity.check(target.server, client, log, 'HTTP boot file');
  if (
    target.sbc.spec.bootPolicy === 'NetBootOnce' &&
    countsForCurrentAttempt(target.sbc, ConditionType.BootCompleted)
  ) {
    log.info(
      { sbc: target.sbc.metadata.name },
      'NetBootOnce configuration already booted: HTTP boot refused, local boot',
    );
    throw new HttpError(404, 'Provisioned', 'provisioned (NetBootOnce): boot from disk');
  }
  // A later attempt than cached: the cache lags the bump (one read, paced per SBC: N4).
  if (!target.callback || wanted > (target.sbc.spec.bootAttempt ?? 1))
    target = (await o.resolver.refreshPaced(target)).target;
  return { target, log };
}

/**
 * The attempt a target may get the file of (pure): 503 + `Retry-After` while its SBC is not visible
 * or not `Ready`, 409 `NotHTTPBoot` for a PXE configuration, 409 `StaleAttempt` when `wanted` is not
 * the current attempt.
 */
function httpBootAttempt(
  target: BootTarget,
  wanted: number,
): { sbc: ServerBootConfiguration; token: string; attempt: number } {
  const sbc = target.sbc;
  if (!sbc || !target.callback) throw unavailable('boot configuration not visible yet', 1);
  if (sbc.spec.bootMethod !== 'HTTPBoot')
    throw new HttpError(409, 'NotHTTPBoot', 'the boot configuration boots over PXE');
  if (sbc.status?.state !== 'Ready')
    throw unavailable(`boot configuration is ${sbc.status?.state ?? 'Pending'}`, 5);
  const attempt = sbc.spec.bootAttempt ?? 1;
  if (wanted !== attempt)
    throw new HttpError(409, 'StaleAttempt', `the current attempt is ${attempt}, not ${wanted}`);
  return { sbc, token: target.callback.token, attempt };
}

/** What the attempt's UKI is built from, and the image it boots (see {@link ukiInputFor}). */
export interface AttemptUki {
  image: ReturnType<typeof bootImageFor>;
  input: UkiInput;
}

/**
 * The UKI input of `sbc`'s current attempt for the canonical `uuid` and the attempt's `token`: the
 * same for the route and the prebuild (uki-prebuild.ts), so both name one builder entry and a
 * request waits for a prebuild in progress instead of starting a second build. Throws HttpError
 * 503 + `Retry-After` while the image is neither in the catalog nor resolved for this attempt,
 * and the errors of {@link localBootFiles}.
 */
export async function ukiInputFor(
  o: Pick<HttpBootRouteOptions, 'catalog' | 'baseUrl' | 'registryUrl' | 'oci'>,
  sbc: ServerBootConfiguration,
  uuid: string,
  token: string,
): Promise<AttemptUki> {
  const attempt = sbc.spec.bootAttempt ?? 1;
  // Catalog entry or the OCI image resolved for this attempt (503 while unresolved), as iPXE boots.
  const image = bootImageFor(o.catalog(), sbc, uuid, o.baseUrl(), token);
  const { kernel, initrd } = await localBootFiles(o, sbc, image.kernel, image.initrd);
  const cmdline = attemptKernelArgs({
    image,
    uuid,
    attempt,
    token,
    bootServerUrl: o.baseUrl(),
    registryUrl: o.registryUrl,
  }).join(' ');
  return { image, input: { kernel, initrd, cmdline } };
}

/**
 * The attempt's UKI, leased from the builder (prebuilt when its SBC turned Ready, uki-prebuild.ts;
 * else built now): 503 `BootFileBusy` + `Retry-After` while the builds are at their bound, 503
 * when the build failed; the errors of {@link ukiInputFor}.
 */
async function buildUki(
  o: HttpBootRouteOptions,
  sbc: ServerBootConfiguration,
  uuid: string,
  token: string,
  log: Logger,
): Promise<{ image: ReturnType<typeof bootImageFor>; lease: UkiLease }> {
  const { image, input } = await ukiInputFor(o, sbc, uuid, token);
  try {
    return { image, lease: await o.uki.lease(input) };
  } catch (err) {
    if (err instanceof UkiBusy) {
      log.warn({ err: err.message }, 'UKI builds busy: retry later');
      throw new HttpError(
        503,
        'BootFileBusy',
        `the boot file cannot be built now: ${err.message}`,
        UKI_BUSY_RETRY_AFTER_S,
      );
    }
    log.error({ err: (err as Error).message }, 'building the UKI failed');
    throw unavailable('the boot file could not be built', 30);
  }
}
