/**
 * The image half of the ServerBootConfiguration controller's verdict: `spec.image` as an image
 * catalog name (plain files), else as an OCI image reference resolved through the registry once
 * per attempt.
 *
 * Once per attempt: when `status.image` already names `spec.image` for `spec.bootAttempt`, its
 * digest is kept (every reconcile, manager restarts) but not its content: status is writable by
 * more than this controller (the `External<Name>` signal writers may write SBC status), so the
 * pinned digest is resolved again with the credentials of the SBC's own pull secret (the resolver's
 * cache, confirmed per credentials: no manifest download while it holds) and the stored layers,
 * command line and pull secret are kept only when they equal that resolution (security review N5);
 * otherwise status is rewritten. A new attempt (or a changed `spec.image`) resolves the tag again,
 * so a retag between attempts is booted by the next attempt and every fetch within one attempt
 * serves the same digests.
 *
 * Failures name what is missing: `InvalidImageReference`, `ImageNotFound` (not in the catalog and
 * its registry not allowed, or unknown to the registry), `RegistryNotAllowed`,
 * `RegistryUnavailable`, `RegistryUnauthorized`, `PullSecretNotFound`, `ImageArchitectureNotFound`,
 * `ImageLayerMissing`, `ImageManifestInvalid`.
 */
import type { SBCImageStatus, ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import { BootConfigurationReason } from '../../api/vocabulary.js';
import type { BootImages } from '../../oci/boot-images.js';
import type { ImageCatalog } from '../../oci/image-catalog.js';
import { requireLayers } from '../../oci/image-resolver.js';
import { formatReference, InvalidReference, parseReference } from '../../oci/reference.js';
import { RegistryError } from '../../oci/registry-client.js';
import { isAllowed } from '../../oci/registry-policy.js';

export type ImageVerdict =
  | { ok: true; name: string; image?: SBCImageStatus; resolvedNow: boolean }
  | { ok: false; reason: string; message: string; askedRegistry: boolean };

const DIGEST = /^sha256:[a-f0-9]{64}$/;

/** Whether a stored `status.image` says exactly what a fresh resolution says (field order aside). */
function sameImage(a: SBCImageStatus, b: SBCImageStatus): boolean {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]) as Set<keyof SBCImageStatus>;
  return [...keys].every((k) => a[k] === b[k]);
}

/** Boot method of an SBC (`spec.bootMethod`, added by the HTTP-boot work; PXE when absent). */
function bootMethodOf(sbc: ServerBootConfiguration): 'PXE' | 'HTTPBoot' | 'VirtualMedia' {
  const m = (sbc.spec as { bootMethod?: string }).bootMethod;
  return m === 'HTTPBoot' || m === 'VirtualMedia' ? m : 'PXE';
}

/** See the file comment. Never throws for registry or input faults; API errors propagate. */
export async function resolveSbcImage(
  sbc: ServerBootConfiguration,
  catalog: ImageCatalog,
  images: BootImages | undefined,
): Promise<ImageVerdict> {
  const fromCatalog = catalog.resolve(sbc.spec.image);
  if (fromCatalog.ok) return { ok: true, name: fromCatalog.image.name, resolvedNow: false };
  if (!images || fromCatalog.reason !== 'ImageNotFound' || !sbc.spec.image)
    return { ok: false, reason: fromCatalog.reason, message: fromCatalog.message, askedRegistry: false };
  let ref: ReturnType<typeof parseReference>;
  try {
    ref = parseReference(sbc.spec.image);
  } catch (err) {
    if (!(err instanceof InvalidReference)) throw err;
    return {
      ok: false,
      reason: BootConfigurationReason.InvalidImageReference,
      message: err.message,
      askedRegistry: false,
    };
  }
  if (!isAllowed(images.policy, ref.domain)) {
    return {
      ok: false,
      reason: BootConfigurationReason.ImageNotFound,
      message: `image ${sbc.spec.image} is not in the image catalog, and its registry ${ref.domain} is not in --allowed-registries (${images.policy.allowed.join(',') || 'none'})`,
      askedRegistry: false,
    };
  }
  const attempt = sbc.spec.bootAttempt ?? 1;
  const reference = formatReference(ref);
  const had = sbc.status?.image;
  const pinned =
    had?.reference === reference && had.bootAttempt === attempt && DIGEST.test(had.digest ?? '')
      ? had
      : undefined;
  try {
    const pullSecret = await images.pullSecretOf(sbc);
    const credentials = await images.credentials(pullSecret, ref);
    const r = await images.resolver.resolve(pinned ? { ...ref, digest: pinned.digest } : ref, credentials);
    requireLayers(r, bootMethodOf(sbc));
    const image: SBCImageStatus = {
      reference,
      digest: r.digest,
      manifest: r.manifest,
      ...r.layers,
      ...(r.commandLine !== undefined ? { commandLine: r.commandLine } : {}),
      bootAttempt: attempt,
      ...(pullSecret ? { pullSecret } : {}),
    };
    if (pinned && sameImage(pinned, image))
      return { ok: true, name: reference, image: pinned, resolvedNow: false };
    return { ok: true, name: reference, image, resolvedNow: true };
  } catch (err) {
    if (!(err instanceof RegistryError)) throw err;
    return { ok: false, reason: err.reason, message: err.message, askedRegistry: true };
  }
}
