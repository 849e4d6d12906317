/**
 * Per-attempt callback tokens (README, 'Security model').
 *
 * Every boot attempt gets a fresh random token of 256 bits, kept in the SBC's callback Secret
 * (`spec.callbackSecretRef`) with the attempt it belongs to and the SHA-256 digests of every earlier
 * attempt's token. That lets a verifier tell three answers apart without keeping state of its own:
 * the current attempt's token (accept), an earlier attempt's token (409, a late callback, boot-flow
 * case C03) and anything else (401). Comparison is constant-time over SHA-256 digests, so neither the
 * content nor the length of the stored token leaks through timing.
 *
 * Secret data keys (values are strings; in a core/v1 Secret they are stored base64-encoded):
 * - `token`: the current attempt's token, base64url (43 characters);
 * - `attempt`: the attempt number the token belongs to (decimal);
 * - `previous`: newline-separated lower-case hex SHA-256 digests of earlier tokens, newest last,
 *   at most {@link MAX_PREVIOUS} entries.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

export const TOKEN_KEY = 'token';
export const ATTEMPT_KEY = 'attempt';
export const PREVIOUS_KEY = 'previous';
/** Earlier tokens remembered per SBC; older ones fall back to 401. 10 series of 10 attempts. */
export const MAX_PREVIOUS = 100;
/** Longest token accepted for comparison; anything longer is `invalid` without hashing it. */
export const MAX_TOKEN_LENGTH = 256;

/** Plain-text view of a callback Secret's data. */
export interface CallbackSecretData {
  token: string;
  attempt: number;
  previous: string[];
}

export type TokenVerdict = 'current' | 'stale' | 'invalid';

/** A new random token: 32 bytes from the CSPRNG, base64url without padding. */
export function newToken(): string {
  return randomBytes(32).toString('base64url');
}

/** Lower-case hex SHA-256 of a token. */
export function tokenDigest(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

/** Data of the callback Secret for the first attempt (or a fresh series). */
export function initialCallbackData(attempt = 1, previous: string[] = []): CallbackSecretData {
  return { token: newToken(), attempt, previous };
}

/** Data for the next attempt: a new token; the old token's digest joins `previous`. */
export function rotateCallbackData(current: CallbackSecretData, nextAttempt: number): CallbackSecretData {
  const previous = [...current.previous, tokenDigest(current.token)].slice(-MAX_PREVIOUS);
  return { token: newToken(), attempt: nextAttempt, previous };
}

/**
 * Classifies a presented token: `current` when it is this attempt's, `stale` when it belonged to an
 * earlier attempt of this SBC, `invalid` otherwise (including empty or over-long input).
 */
export function verifyToken(
  presented: string | undefined,
  data: CallbackSecretData | undefined,
): TokenVerdict {
  if (!presented || !data || presented.length > MAX_TOKEN_LENGTH) return 'invalid';
  const digest = createHash('sha256').update(presented, 'utf8').digest();
  const want = createHash('sha256').update(data.token, 'utf8').digest();
  if (timingSafeEqual(digest, want)) return 'current';
  const hex = digest.toString('hex');
  let stale = false;
  // Visit every entry so the time taken does not depend on where a match is.
  for (const p of data.previous) {
    if (p.length === hex.length && timingSafeEqual(Buffer.from(p), Buffer.from(hex))) stale = true;
  }
  return stale ? 'stale' : 'invalid';
}

/** Encodes callback data as core/v1 Secret `data` (base64 values). */
export function encodeCallbackSecret(data: CallbackSecretData): Record<string, string> {
  const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64');
  return {
    [TOKEN_KEY]: b64(data.token),
    [ATTEMPT_KEY]: b64(String(data.attempt)),
    [PREVIOUS_KEY]: b64(data.previous.join('\n')),
  };
}

/** Decodes a core/v1 Secret's `data`; `undefined` when the token or attempt is missing or malformed. */
export function decodeCallbackSecret(
  data: Record<string, string> | undefined,
): CallbackSecretData | undefined {
  if (!data?.[TOKEN_KEY] || !data[ATTEMPT_KEY]) return undefined;
  const text = (k: string) => Buffer.from(data[k] ?? '', 'base64').toString('utf8');
  const attempt = Number.parseInt(text(ATTEMPT_KEY), 10);
  const token = text(TOKEN_KEY);
  if (!Number.isSafeInteger(attempt) || attempt < 1 || !token) return undefined;
  const previous = text(PREVIOUS_KEY)
    .split('\n')
    .filter((l) => /^[0-9a-f]{64}$/.test(l));
  return { token, attempt, previous };
}
