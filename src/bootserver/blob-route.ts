/**
 * `GET /oci/{uuid}/{attempt}/{layer}` (layer: kernel, initrd, squashfs, uki): a layer of the OCI image
 * resolved for that server's attempt (`status.image` of its SBC), streamed from the registry through
 * the on-disk blob cache (src/oci/blob-cache.ts: one registry download per digest, verified while
 * streaming; a mismatch aborts the transfer and is logged).
 *
 * - Capability first (security): `?cap=` must be the HMAC of this UUID, attempt, layer and the
 *   layer's digest under the attempt's callback token (src/bootauth/layer-capability.ts), which only
 *   the attempt's script (and UKI) carry. Anything else is 403 `InvalidCapability` with nothing
 *   streamed, also for an unknown UUID, a layer the image does not have, and every URL of an earlier
 *   attempt (its token was rotated), so neither UUIDs nor images can be probed. The check runs on the
 *   informer caches; a miss while the cache lags a rotation is re-checked once against the API
 *   server (paced per SBC, as callbacks are), and 503 + `Retry-After` while the rotation is in flight.
 * - Attempt-scoped: the capability names the SBC's current `spec.bootAttempt` and the digest resolved
 *   for it (a retag between attempts never mixes bytes of two digests). 404 `Provisioned` once a
 *   NetBootOnce claim completed that attempt (as the HTTP boot route: nothing is served again).
 * - `Range: bytes=a-b` (one range) → 206 with `Content-Range`; unsatisfiable → 416.
 * - 403 `RegistryNotAllowed` when the image's registry is not (or no longer) in
 *   `--allowed-registries`; 502 `LayerTooLarge` for a layer beyond `--max-layer-size`, 502
 *   `BlobSizeMismatch` when the registry announces another size than the manifest's descriptor
 *   (nothing streamed), 502 `ImageLayerMissing` when the manifest has no such layer (N10); 503 +
 *   `Retry-After` when the registry cannot be reached, the cache has no room now, or the API server
 *   is down.
 * Headers: `Content-Length`, `Accept-Ranges: bytes`, `ETag: "<digest>"`, `Content-Type:
 * application/octet-stream`.
 *
 * Memory (issue 35): the bytes go from the cache file to the socket through the blob cache's send
 * buffers (`OpenBlob.sendTo`, src/oci/send-buffers.ts), not through a stream piped into the reply:
 * one transfer holds at most 2 × 256 KiB of the process's memory whatever its client reads (the
 * next piece is read only when the socket has written one to the kernel), all transfers together at
 * most `--image-transfer-memory` (32 MiB; further transfers wait for a buffer). A failure after the
 * headers (digest mismatch, broken download) destroys the connection: the client sees fewer bytes
 * than `Content-Length`. `HEAD` gets the headers alone.
 */
import type { FastifyBaseLogger } from 'fastify';
import { CAPABILITY_PARAM, verifyLayerCapability } from '../bootauth/layer-capability.js';
import { apiFailure, type BootTarget, BootTargetResolver, provisioned } from '../bootsignals/boot-target.js';
import type { createHttpApp } from '../bootsignals/http-app.js';
import { HttpError } from '../bootsignals/http-error.js';
import {
  BLOB_SIZE_MISMATCH,
  type BlobCache,
  type BlobRange,
  ClientGone,
  LAYER_TOO_LARGE,
} from '../oci/blob-cache.js';
import type { BootImages } from '../oci/boot-images.js';
import { BOOT_LAYERS, type BootLayer } from '../oci/media-types.js';
import { parseReference } from '../oci/reference.js';
import { RegistryError } from '../oci/registry-client.js';

const REGISTRY_RETRY_AFTER_S = 5;
/** Registry failures no retry helps (the blob or its manifest is what it is): 502, no Retry-After. */
const NOT_TRANSIENT = new Set([LAYER_TOO_LARGE, BLOB_SIZE_MISMATCH, 'ImageLayerMissing']);

export interface BlobRouteOptions {
  resolver: BootTargetResolver;
  images: BootImages;
  cache: BlobCache;
}

/** Parses one `bytes=a-b` / `bytes=a-` / `bytes=-n` range; undefined for none; 416 for others. */
export function parseRange(h: string | undefined, size?: number): BlobRange | undefined {
  if (!h) return undefined;
  const m = /^bytes=(\d*)-(\d*)$/.exec(h.trim());
  if (!m || (m[1] === '' && m[2] === ''))
    throw new HttpError(416, 'RangeNotSatisfiable', `unsupported range ${h}`);
  if (m[1] === '') {
    // Suffix range: the size is needed; the caller resolves it once the blob is open.
    const n = Number(m[2]);
    if (size === undefined) return { start: -n, end: -1 };
    return { start: Math.max(0, size - n), end: size - 1 };
  }
  return { start: Number(m[1]), end: m[2] === '' ? Number.MAX_SAFE_INTEGER : Number(m[2]) };
}

const invalidCapability = () =>
  new HttpError(403, 'InvalidCapability', 'missing or wrong capability for this layer URL');

/** True when `cap` is the capability of `p` under the target's current attempt (see the file comment). */
function capabilityHolds(t: BootTarget, p: { attempt: number; layer: BootLayer }, cap: string | undefined) {
  const img = t.sbc?.status?.image;
  const digest = img?.[p.layer];
  if (!t.sbc || !t.callback || !img || !digest) return false;
  if ((t.sbc.spec.bootAttempt ?? 1) !== p.attempt || img.bootAttempt !== p.attempt) return false;
  return verifyLayerCapability(cap, t.callback.token, { uuid: t.uuid, ...p, digest });
}

/**
 * The target whose current attempt `cap` proves (see the file comment). Throws 403
 * `InvalidCapability`, 503 while a token rotation is in flight or the API server is down.
 */
async function authorize(
  resolver: BootTargetResolver,
  uuid: string,
  p: { attempt: number; layer: BootLayer },
  cap: string | undefined,
  log: FastifyBaseLogger,
): Promise<BootTarget> {
  let t: BootTarget;
  try {
    t = resolver.resolve(uuid);
  } catch (err) {
    if (err instanceof HttpError && err.status === 404) throw invalidCapability();
    throw err;
  }
  if (!capabilityHolds(t, p, cap)) {
    t = (await resolver.refreshPaced(t)).target;
    if (!capabilityHolds(t, p, cap)) {
      log.warn(
        { server: t.server.metadata.name, systemUUID: uuid, layer: p.layer, attempt: p.attempt },
        'image layer requested without a valid capability; refused',
      );
      throw invalidCapability();
    }
  }
  return t;
}

export function registerBlobRoute(app: ReturnType<typeof createHttpApp>, o: BlobRouteOptions): void {
  const params = {
    type: 'object',
    properties: {
      uuid: { type: 'string', maxLength: 16384 },
      attempt: { type: 'integer', minimum: 1 },
      layer: { type: 'string', enum: [...BOOT_LAYERS] },
    },
    required: ['uuid', 'attempt', 'layer'],
  };
  app.get('/oci/:uuid/:attempt/:layer', { schema: { params } }, async (req, reply) => {
    const p = req.params as { uuid: string; attempt: number; layer: BootLayer };
    const cap = (req.query as Record<string, unknown>)[CAPABILITY_PARAM];
    const uuid = BootTargetResolver.parseUUID(p.uuid);
    const target = await authorize(o.resolver, uuid, p, typeof cap === 'string' ? cap : undefined, req.log);
    const sbc = target.sbc!;
    const img = sbc.status!.image!;
    const digest = img[p.layer]!;
    const log = req.log.child({
      server: target.server.metadata.name,
      systemUUID: uuid,
      layer: p.layer,
      attempt: p.attempt,
    });
    if (provisioned(sbc)) {
      log.info({ sbc: sbc.metadata.name }, 'NetBootOnce configuration already booted: layer refused');
      throw new HttpError(404, 'Provisioned', 'provisioned (NetBootOnce): nothing is served again');
    }
    const ref = parseReference(img.reference);
    let range = parseRange(req.headers.range);
    try {
      let credentials: Awaited<ReturnType<BootImages['credentials']>>;
      try {
        credentials = await o.images.credentialsOf(sbc, ref); // never status.image.pullSecret (N5)
      } catch (err) {
        if (err instanceof RegistryError) throw err;
        apiFailure(err, 'reading the image pull secret');
      }
      // No registry Content-Length is trusted beyond the manifest's descriptor size (N10).
      const size = await o.images.layerSize(img, ref, p.layer, credentials);
      if (range && range.start < 0) range = parseRange(req.headers.range, size);
      const blob = await o.cache.open(ref, digest, credentials, range, size);
      log.info({ digest, source: blob.source, range: req.headers.range }, 'image layer served');
      const r = blob.range;
      const headers: Record<string, string> = {
        'content-type': 'application/octet-stream',
        'accept-ranges': 'bytes',
        etag: `"${digest}"`,
        'content-length': String(range ? r.end - r.start + 1 : blob.size),
      };
      if (range) headers['content-range'] = `bytes ${r.start}-${r.end}/${blob.size}`;
      // From here the response is ours (see the file comment, 'Memory'): Fastify's onResponse hook
      // (the request's log line and metrics) still runs when it finishes.
      reply.hijack();
      const res = reply.raw;
      res.writeHead(range ? 206 : 200, headers);
      if (req.method === 'HEAD') {
        await blob.close();
        res.end();
        return;
      }
      try {
        await blob.sendTo(res);
      } catch (err) {
        if (err instanceof ClientGone)
          log.debug({ digest }, 'client closed the connection during the transfer');
        else log.error({ digest, err: (err as Error).message }, 'blob transfer aborted');
        res.destroy();
      }
      return;
    } catch (err) {
      if (err instanceof RangeError) throw new HttpError(416, 'RangeNotSatisfiable', err.message);
      if (!(err instanceof RegistryError)) throw err;
      log.warn({ digest, reason: err.reason, err: err.message }, 'image layer not available');
      if (err.reason === 'RegistryNotAllowed') throw new HttpError(403, err.reason, err.message);
      if (NOT_TRANSIENT.has(err.reason)) throw new HttpError(502, err.reason, err.message); // no retry helps
      throw new HttpError(503, err.reason, err.message, REGISTRY_RETRY_AFTER_S);
    }
  });
}
