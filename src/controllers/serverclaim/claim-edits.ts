/**
 * Which edits of a claim re-provision its Server (issue 36 item 1): only those that change what
 * would boot. The claim controller asks {@link bootsTheSame} when `spec.image` or
 * `spec.ignitionSecretRef` differs from its SBC's; `true` means the SBC is edited in place, within
 * the current attempt (no new series, no power action), `false` starts a new series.
 *
 * - `spec.bootPolicy` never re-provisions (it decides what the *next* power-on does) and is not
 *   asked about here.
 * - An image that resolves to the platform manifest the SBC's attempt booted (`status.image`: an OCI
 *   reference by digest, or a tag resolved through the registry now, with the SBC's pull secret)
 *   boots the same. Image catalog names are compared by name.
 * - An ignition Secret whose `data` equals that of the Secret the SBC names boots the same.
 *
 * Anything that cannot be decided (a registry error, a Secret that does not exist, a reference that
 * does not parse, a registry not allowed) counts as different: the new series then reports the
 * problem on the claim, and nothing is powered before the SBC is Ready.
 */
import { isDeepStrictEqual } from 'node:util';
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import type { BootImages } from '../../oci/boot-images.js';
import { InvalidReference, parseReference } from '../../oci/reference.js';
import { RegistryError } from '../../oci/registry-client.js';
import { isAllowed } from '../../oci/registry-policy.js';
import type { KubeClient } from '../../runtime/client.js';
import { Resources, type SecretObject } from '../../runtime/resource.js';

export interface ClaimEditDeps {
  client: KubeClient;
  /** OCI resolution; without it an image edit always re-provisions. */
  images?: BootImages;
}

const ignitionName = (ref: { name?: string } | undefined) => ref?.name || undefined;

/** Whether the claim's image and ignition differ from its SBC's by name (a pure comparison). */
export function bootInputsDiffer(sbc: ServerBootConfiguration, claim: ServerClaim): boolean {
  return (
    sbc.spec.image !== claim.spec.image ||
    ignitionName(sbc.spec.ignitionSecretRef) !== ignitionName(claim.spec.ignitionSecretRef)
  );
}

/** See the file comment. Throws only API errors other than 404. */
export async function bootsTheSame(
  sbc: ServerBootConfiguration,
  claim: ServerClaim,
  d: ClaimEditDeps,
): Promise<boolean> {
  if (sbc.spec.image !== claim.spec.image && !(await sameImage(sbc, claim.spec.image, d))) return false;
  const was = ignitionName(sbc.spec.ignitionSecretRef);
  const now = ignitionName(claim.spec.ignitionSecretRef);
  if (was === now) return true;
  if (!was || !now) return false;
  const ns = sbc.metadata.namespace;
  const [a, b] = await Promise.all([
    d.client.get<SecretObject>(Resources.Secret, was, ns),
    d.client.get<SecretObject>(Resources.Secret, now, ns),
  ]);
  return !!a && !!b && isDeepStrictEqual(a.data ?? {}, b.data ?? {});
}

async function sameImage(
  sbc: ServerBootConfiguration,
  image: string | undefined,
  d: ClaimEditDeps,
): Promise<boolean> {
  const booted = sbc.status?.image;
  const want = booted?.manifest ?? booted?.digest;
  if (!image || !want || !d.images) return false;
  try {
    const ref = parseReference(image);
    if (!isAllowed(d.images.policy, ref.domain)) return false;
    if (ref.digest && (ref.digest === booted?.digest || ref.digest === booted?.manifest)) return true;
    const pullSecret = await d.images.pullSecretOf(sbc);
    const r = await d.images.resolver.resolve(ref, await d.images.credentials(pullSecret, ref));
    return (r.manifest ?? r.digest) === want;
  } catch (err) {
    if (err instanceof InvalidReference || err instanceof RegistryError) return false;
    throw err;
  }
}
