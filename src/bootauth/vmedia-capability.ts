/**
 * Capabilities of virtual-media ISO URLs (`/vmedia/{uuid}/{attempt}/{cap}/boot.iso`,
 * src/bootserver/vmedia-route.ts; URL shape `virtualMediaIsoUrl` in src/api/v1alpha1/boot-method.ts).
 *
 * The ISO is fetched by the BMC, not by the host, so neither the host's address nor the power-on gate
 * can protect it; and its command line carries the attempt token. The proof therefore travels in the
 * URL the manager gives the BMC: `cap` = HMAC-SHA256, keyed by the attempt's callback token
 * (callback-token.ts), over `metal-vmedia-iso/v1`, the canonical system UUID and the attempt,
 * newline-separated; base64url without padding (43 characters). Only the manager (which mints the
 * token) and the boot server (which reads it) can compute it; the token never appears in the URL; the
 * next attempt's token rotation makes every earlier URL worthless without any state of its own.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

const CONTEXT = 'metal-vmedia-iso/v1';
/** Longest capability compared; longer input is refused without computing anything. */
const MAX_CAPABILITY_LENGTH = 128;

/** The capability of attempt `attempt` of system `uuid` (canonical lower case) under its callback `token`. */
export function virtualMediaCapability(token: string, uuid: string, attempt: number): string {
  return createHmac('sha256', token)
    .update([CONTEXT, uuid.toLowerCase(), String(attempt)].join('\n'))
    .digest('base64url');
}

/** True when `presented` is the capability of (`uuid`, `attempt`) under `token` (constant-time comparison). */
export function verifyVirtualMediaCapability(
  presented: string | undefined,
  token: string | undefined,
  uuid: string,
  attempt: number,
): boolean {
  if (!presented || presented.length > MAX_CAPABILITY_LENGTH || !token) return false;
  const want = Buffer.from(virtualMediaCapability(token, uuid, attempt));
  const got = Buffer.from(presented);
  return got.length === want.length && timingSafeEqual(got, want);
}
