/**
 * What the attempt script boots: the image catalog entry of `spec.image`, or the OCI image the
 * ServerBootConfiguration controller resolved for this attempt (`status.image`), whose layers the
 * boot server streams at the attempt-scoped URLs `/oci/{uuid}/{attempt}/{kernel|initrd|squashfs|uki}`
 * (blob-route.ts). The image config's `commandLine` goes first on the kernel command line.
 * No registry call happens here: the digests come from the SBC status.
 */
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { HttpError } from '../bootsignals/http-error.js';
import { formatReference, parseReference } from '../oci/reference.js';
import type { ImageCatalog, ImageEntry } from './image-catalog.js';

/** Seconds the firmware is told to wait while the attempt's image is not resolved yet. */
const UNRESOLVED_RETRY_AFTER_S = 5;

/** URL of layer `layer` of `uuid`'s attempt `attempt`. */
export function ociLayerUrl(bootServerUrl: string, uuid: string, attempt: number, layer: string): string {
  return `${bootServerUrl}/oci/${uuid}/${attempt}/${layer}`;
}

/**
 * The image entry for `sbc`'s current attempt. Throws `HttpError` 503 (with `Retry-After`) while
 * the image is neither in the catalog nor resolved for this attempt.
 */
export function bootImageFor(
  catalog: ImageCatalog,
  sbc: ServerBootConfiguration,
  uuid: string,
  bootServerUrl: string,
): ImageEntry {
  const fromCatalog = catalog.resolve(sbc.spec.image);
  if (fromCatalog.ok) return fromCatalog.image;
  const attempt = sbc.spec.bootAttempt ?? 1;
  const img = sbc.status?.image;
  let reference: string | undefined;
  try {
    reference = sbc.spec.image ? formatReference(parseReference(sbc.spec.image)) : undefined;
  } catch {
    reference = undefined;
  }
  if (
    !img ||
    !reference ||
    img.reference !== reference ||
    img.bootAttempt !== attempt ||
    !img.kernel ||
    !img.initrd
  ) {
    throw new HttpError(
      503,
      'ImageNotResolved',
      `${fromCatalog.reason}: ${fromCatalog.message}; no OCI image with kernel and initrd resolved for attempt ${attempt}`,
      UNRESOLVED_RETRY_AFTER_S,
    );
  }
  return {
    name: img.reference,
    kernel: ociLayerUrl(bootServerUrl, uuid, attempt, 'kernel'),
    initrd: ociLayerUrl(bootServerUrl, uuid, attempt, 'initrd'),
    cmdline: img.commandLine ?? '',
    mode: 'os',
  };
}
