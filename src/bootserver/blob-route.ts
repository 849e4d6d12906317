/**
 * `GET /oci/{uuid}/{attempt}/{layer}` (layer: kernel, initrd, squashfs, uki): a layer of the OCI image
 * resolved for that server's attempt (`status.image` of its SBC), streamed from the registry through
 * the on-disk blob cache (src/oci/blob-cache.ts: one registry download per digest, verified while
 * streaming; a mismatch aborts the transfer and is logged).
 *
 * - Attempt-scoped: `attempt` must be the SBC's current `spec.bootAttempt` and the image resolved for
 *   it, else 409 `StaleAttempt` (a retag between attempts never mixes bytes of two digests).
 * - `Range: bytes=a-b` (one range) → 206 with `Content-Range`; unsatisfiable → 416.
 * - 404 unknown server or a layer the image does not have; 403 `RegistryNotAllowed` when the
 *   image's registry is not (or no longer) in `--allowed-registries`; 503 + `Retry-After` when the
 *   registry cannot be reached or the API server is down.
 * Headers: `Content-Length`, `Accept-Ranges: bytes`, `ETag: "<digest>"`, `Content-Type:
 * application/octet-stream`.
 */
import { apiFailure, BootTargetResolver } from '../bootsignals/boot-target.js';
import type { createHttpApp } from '../bootsignals/http-app.js';
import { HttpError } from '../bootsignals/http-error.js';
import type { BlobCache, BlobRange } from '../oci/blob-cache.js';
import type { BootImages } from '../oci/boot-images.js';
import { BOOT_LAYERS, type BootLayer } from '../oci/media-types.js';
import { parseReference } from '../oci/reference.js';
import { RegistryError } from '../oci/registry-client.js';

const REGISTRY_RETRY_AFTER_S = 5;

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
    const uuid = BootTargetResolver.parseUUID(p.uuid);
    const target = o.resolver.resolve(uuid);
    const sbc = target.sbc;
    const img = sbc?.status?.image;
    const log = req.log.child({
      server: target.server.metadata.name,
      systemUUID: uuid,
      layer: p.layer,
      attempt: p.attempt,
    });
    if (!sbc || !img || (sbc.spec.bootAttempt ?? 1) !== p.attempt || img.bootAttempt !== p.attempt) {
      throw new HttpError(
        409,
        'StaleAttempt',
        `attempt ${p.attempt} is not the current attempt with a resolved image`,
      );
    }
    const digest = img[p.layer];
    if (!digest) throw new HttpError(404, 'LayerNotFound', `image ${img.reference} has no ${p.layer} layer`);
    const ref = parseReference(img.reference);
    let range = parseRange(req.headers.range);
    try {
      let credentials: Awaited<ReturnType<BootImages['credentials']>>;
      try {
        credentials = await o.images.credentials(img.pullSecret, ref);
      } catch (err) {
        if (err instanceof RegistryError) throw err;
        apiFailure(err, 'reading the image pull secret');
      }
      let blob = await o.cache.open(ref, digest, credentials, range && range.start >= 0 ? range : undefined);
      if (range && range.start < 0) {
        blob.stream.destroy();
        range = parseRange(req.headers.range, blob.size);
        blob = await o.cache.open(ref, digest, credentials, range);
      }
      void reply
        .type('application/octet-stream')
        .header('accept-ranges', 'bytes')
        .header('etag', `"${digest}"`);
      blob.stream.on('error', (err) => {
        log.error({ digest, err: err.message }, 'blob transfer aborted');
        reply.raw.destroy(err);
      });
      log.info({ digest, source: blob.source, range: req.headers.range }, 'image layer served');
      if (range) {
        const end = Math.min(range.end, blob.size - 1);
        return reply
          .code(206)
          .header('content-range', `bytes ${range.start}-${end}/${blob.size}`)
          .header('content-length', String(end - range.start + 1))
          .send(blob.stream);
      }
      return reply.header('content-length', String(blob.size)).send(blob.stream);
    } catch (err) {
      if (err instanceof RangeError) throw new HttpError(416, 'RangeNotSatisfiable', err.message);
      if (!(err instanceof RegistryError)) throw err;
      log.warn({ digest, reason: err.reason, err: err.message }, 'image layer not available');
      if (err.reason === 'RegistryNotAllowed') throw new HttpError(403, err.reason, err.message);
      throw new HttpError(503, err.reason, err.message, REGISTRY_RETRY_AFTER_S);
    }
  });
}
