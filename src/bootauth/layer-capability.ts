/**
 * Capabilities of attempt-scoped OCI layer URLs (`/oci/{uuid}/{attempt}/{layer}?cap=…`,
 * src/bootserver/blob-route.ts).
 *
 * Firmware fetches whatever URL its script names and cannot add headers, so the proof travels in the
 * URL: `cap` = HMAC-SHA256, keyed by the attempt's callback token (callback-token.ts), over
 * `metal-oci-layer/v1`, the canonical system UUID, the attempt, the layer name and the layer's digest,
 * newline-separated; base64url without padding (43 characters). Whoever can reach the boot server
 * and knows a UUID still cannot pull a tenant's (possibly private) image layers; the token never
 * appears in the URL (an HMAC does not reveal its key), and rotating the token for the next attempt
 * makes every URL of the earlier attempt worthless without any state of its own.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** Query parameter carrying the capability. */
export const CAPABILITY_PARAM = 'cap';
const CONTEXT = 'metal-oci-layer/v1';
/** Longest `cap` compared; longer input is refused without computing anything. */
const MAX_CAPABILITY_LENGTH = 128;

export interface LayerGrant {
  /** Canonical (lower-case) system UUID. */
  uuid: string;
  attempt: number;
  /** `kernel`, `initrd`, `squashfs` or `uki`. */
  layer: string;
  /** The layer's digest recorded for that attempt (`sha256:<hex>`). */
  digest: string;
}

/** The capability of `g` under the attempt's callback `token`. */
export function layerCapability(token: string, g: LayerGrant): string {
  return createHmac('sha256', token)
    .update([CONTEXT, g.uuid, String(g.attempt), g.layer, g.digest].join('\n'))
    .digest('base64url');
}

/** True when `presented` is the capability of `g` under `token` (constant-time comparison). */
export function verifyLayerCapability(presented: string | undefined, token: string, g: LayerGrant): boolean {
  if (!presented || presented.length > MAX_CAPABILITY_LENGTH || !token) return false;
  const want = Buffer.from(layerCapability(token, g));
  const got = Buffer.from(presented);
  return got.length === want.length && timingSafeEqual(got, want);
}
