/**
 * Pure logic of the BMCUser controller (no I/O): password generation within a BMC's Redfish
 * AccountService length policy (DMTF AccountService.v1_x `MinPasswordLength` /
 * `MaxPasswordLength`), and the rotation decision from `spec.rotationPeriod`, the
 * `metal.ironcore.dev/operation: rotate-credentials` annotation and the BMC-reported
 * `ManagerAccount.PasswordExpiration` / `PasswordChangeRequired`. Used by the BMCUser controller
 * (`bmcuser.ts`).
 */
import { randomBytes } from 'node:crypto';
import { parseDuration } from '../common/duration.js';

/** Alphabet of generated passwords: letters and digits only, safe in every BMC's basic auth. */
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** Length this controller prefers when the BMC's policy allows it (characters). */
export const PREFERRED_PASSWORD_LENGTH = 16;

/**
 * Length policy from `/redfish/v1/AccountService` (characters; either bound may be absent).
 */
export type PasswordPolicy = { minPasswordLength?: number; maxPasswordLength?: number };

/**
 * The password length to generate: PREFERRED_PASSWORD_LENGTH clamped into [min, max].
 * Throws RangeError when min > max or a bound is not a positive integer (a policy no password meets).
 */
export function passwordLength(policy: PasswordPolicy): number {
  const min = policy.minPasswordLength ?? 1;
  const max = policy.maxPasswordLength ?? Number.POSITIVE_INFINITY;
  if (!Number.isInteger(min) || min < 1) throw new RangeError(`MinPasswordLength ${min} invalid`);
  if (max !== Number.POSITIVE_INFINITY && (!Number.isInteger(max) || max < 1)) {
    throw new RangeError(`MaxPasswordLength ${max} invalid`);
  }
  if (min > max) throw new RangeError(`MinPasswordLength ${min} > MaxPasswordLength ${max}`);
  return Math.min(Math.max(PREFERRED_PASSWORD_LENGTH, min), max);
}

/**
 * A random password (crypto.randomBytes, rejection sampling so every character is uniform) whose
 * length satisfies `policy`. Errors: RangeError as passwordLength.
 */
export function generatePassword(policy: PasswordPolicy): string {
  const length = passwordLength(policy);
  const limit = 256 - (256 % ALPHABET.length);
  let out = '';
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte >= limit) continue;
      out += ALPHABET[byte % ALPHABET.length];
      if (out.length === length) break;
    }
  }
  return out;
}

/** Inputs of the rotation decision; times are epoch milliseconds. */
export type RotationFacts = {
  now: number;
  /** `spec.rotationPeriod` (Go duration text), if set. */
  rotationPeriod?: string;
  /** `status.lastRotation`, if ever rotated. */
  lastRotation?: number;
  /** The rotate-credentials annotation is present. */
  annotated: boolean;
  /** `ManagerAccount.PasswordExpiration` reported by the BMC, if any. */
  bmcExpiration?: number;
  /** `ManagerAccount.PasswordChangeRequired` reported by the BMC. */
  changeRequired?: boolean;
};

/** Why to rotate now, or when to look again (`requeueAfterMs`, absent: no periodic rotation). */
export type RotationDecision =
  | { rotate: true; reason: 'Initial' | 'Requested' | 'Expired' | 'Period' }
  | { rotate: false; requeueAfterMs?: number };

/**
 * Whether to rotate the password now. Order: never rotated (Initial), the annotation (Requested),
 * the BMC says expired or change required (Expired), the period elapsed since lastRotation
 * (Period). Otherwise the time until the earlier of the next period and the BMC's expiration.
 * Throws on an unparsable rotationPeriod (the caller turns that into a condition).
 */
export function decideRotation(f: RotationFacts): RotationDecision {
  if (f.lastRotation === undefined) return { rotate: true, reason: 'Initial' };
  if (f.annotated) return { rotate: true, reason: 'Requested' };
  if (f.changeRequired || (f.bmcExpiration !== undefined && f.bmcExpiration <= f.now)) {
    return { rotate: true, reason: 'Expired' };
  }
  const waits: number[] = [];
  if (f.rotationPeriod !== undefined) {
    const period = parseDuration(f.rotationPeriod);
    if (period > 0) {
      const due = f.lastRotation + period;
      if (due <= f.now) return { rotate: true, reason: 'Period' };
      waits.push(due - f.now);
    }
  }
  if (f.bmcExpiration !== undefined) waits.push(f.bmcExpiration - f.now);
  return waits.length ? { rotate: false, requeueAfterMs: Math.min(...waits) } : { rotate: false };
}
