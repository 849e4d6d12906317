/**
 * What the attempt script boots: the image catalog entry of `spec.image`, or the OCI image the
 * ServerBootConfiguration controller resolved for this attempt (`status.image`), whose layers the
 * boot server streams at the attempt-scoped URLs `/oci/{uuid}/{attempt}/{kernel|initrd|squashfs|uki}?cap=…`
 * (blob-route.ts; `cap` proves the URL came from this attempt's script). The image config's
 * `commandLine` goes first on the kernel command line; a squashfs layer's URL goes on it too
 * (ipxe-script.ts, as upstream boot-operator's `gl.url=`).
 * No registry call happens here: the digests come from the SBC status.
 */
import { isDiscoveryBootConfiguration } from '../api/boot-configuration-names.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { CAPABILITY_PARAM, type LayerGrant, layerCapability } from '../bootauth/layer-capability.js';
import { HttpError } from '../bootsignals/http-error.js';
import type { ImageCatalog, ImageEntry } from '../oci/image-catalog.js';
import { formatReference, parseReference } from '../oci/reference.js';

/** Seconds the firmware is told to wait while the attempt's image is not resolved yet. */
const UNRESOLVED_RETRY_AFTER_S = 5;

/**
 * URL of layer `layer` (digest `digest`) of `uuid`'s attempt `attempt`, with the capability made from
 * the attempt's callback `token` (src/bootauth/layer-capability.ts) that blob-route.ts verifies.
 */
export function ociLayerUrl(bootServerUrl: string, g: LayerGrant, token: string): string {
  const cap = layerCapability(token, g);
  return `${bootServerUrl}/oci/${g.uuid}/${g.attempt}/${g.layer}?${CAPABILITY_PARAM}=${cap}`;
}

/**
 * The image entry for `sbc`'s current attempt; its OCI layer URLs carry capabilities made from the
 * attempt's callback `token`. Throws `HttpError` 503 (with `Retry-After`) while the image is neither
 * in the catalog nor resolved for this attempt.
 */
export function bootImageFor(
  catalog: ImageCatalog,
  sbc: ServerBootConfiguration,
  uuid: string,
  bootServerUrl: string,
  token: string,
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
  const url = (layer: string, digest: string) =>
    ociLayerUrl(bootServerUrl, { uuid, attempt, layer, digest }, token);
  return {
    name: img.reference,
    kernel: url('kernel', img.kernel),
    initrd: url('initrd', img.initrd),
    ...(img.squashfs ? { squashfs: url('squashfs', img.squashfs) } : {}),
    cmdline: img.commandLine ?? '',
    // An OCI image has no catalog `mode`: a Server's discovery boot configuration boots its image as
    // the probe (a manager in a pod has no probe files to name in a catalog), every other as an OS.
    mode: isDiscoveryBootConfiguration(sbc) ? 'probe' : 'os',
  };
}
