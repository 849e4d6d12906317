/**
 * Per-attempt callback tokens (README, 'Security model'; docs/ARCHITECTURE.md, 'Callback tokens').
 *
 * A token is derived, not stored: `<attempt>.<mac>`, where `<attempt>` is the SBC's
 * `spec.bootAttempt` (decimal, ≥ 1) and `<mac>` is HMAC-SHA256 (RFC 2104) over the SBC's
 * `metadata.uid` and that attempt, keyed with the operator's one callback key (a Secret in the
 * manager namespace, see callback-key-secret.ts), base64url without padding (43 characters). Every
 * process holding the key computes the same token for the same attempt, so no per-attempt Secret
 * is written, no tenant namespace holds token material, and the signal servers need no Secret
 * informer (security review N9).
 *
 * A verifier tells four answers apart without state of its own: the current attempt's token
 * (`current`), an earlier attempt's (`stale`: 409, a late callback, boot-flow case C03), a later
 * attempt's (`ahead`: the verifier's cache lags the SBC's bump; re-read and retry) and anything else
 * (`invalid`: 401). The MAC binds the attempt number, so a host cannot turn its own token into
 * another attempt's; the uid binds the SBC object, so a token of a deleted SBC of the same name is
 * `invalid`. Comparison is constant-time over the MAC bytes.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';

/** Longest token accepted for comparison; anything longer is `invalid` without hashing it. */
export const MAX_TOKEN_LENGTH = 256;
/** Bytes of a generated callback key (HMAC-SHA256 keys of the hash's block size or less, RFC 2104 §3). */
export const CALLBACK_KEY_BYTES = 32;
/** Domain separation: a MAC for this purpose cannot be confused with one computed for another. */
const CONTEXT = 'metal.ironcore.dev/callback-token/v1';

export type TokenVerdict = 'current' | 'stale' | 'ahead' | 'invalid';

/** What a token is derived from: an SBC's `metadata.uid` and `spec.bootAttempt`. */
export interface TokenSubject {
  uid: string;
  attempt: number;
}

/** The subject of an SBC (`spec.bootAttempt` defaults to 1); `undefined` without a uid (not stored yet). */
export function tokenSubject(sbc: {
  metadata: { uid?: string };
  spec: { bootAttempt?: number };
}): TokenSubject | undefined {
  const uid = sbc.metadata.uid;
  return uid ? { uid, attempt: sbc.spec.bootAttempt ?? 1 } : undefined;
}

/** The operator's callback key. Holds the key bytes only; never logged or serialised. */
export class CallbackKey {
  private readonly key: Buffer;

  /** @throws Error when `key` is shorter than {@link CALLBACK_KEY_BYTES}. */
  constructor(key: Buffer) {
    if (key.length < CALLBACK_KEY_BYTES)
      throw new Error(`callback key must be at least ${CALLBACK_KEY_BYTES} bytes, got ${key.length}`);
    this.key = Buffer.from(key);
  }

  /** A new key from the CSPRNG (for tests and for the manager's first start). */
  static generate(): CallbackKey {
    return new CallbackKey(randomBytes(CALLBACK_KEY_BYTES));
  }

  /** The raw bytes, to store the key in its Secret. */
  bytes(): Buffer {
    return Buffer.from(this.key);
  }

  private mac(uid: string, attempt: number): Buffer {
    return createHmac('sha256', this.key).update(`${CONTEXT}\n${uid}\n${attempt}`, 'utf8').digest();
  }

  /** The token of `subject`'s attempt: `<attempt>.<base64url MAC>`. */
  tokenFor(subject: TokenSubject): string {
    return `${subject.attempt}.${this.mac(subject.uid, subject.attempt).toString('base64url')}`;
  }

  /**
   * Classifies a presented token against `subject` (the SBC as the verifier knows it): `current`,
   * `stale` (a genuine token of an earlier attempt of this SBC), `ahead` (a genuine token of a later
   * attempt: the verifier's view lags) or `invalid` (anything else, empty or over-long input too).
   */
  verify(presented: string | undefined, subject: TokenSubject | undefined): TokenVerdict {
    if (!presented || !subject || presented.length > MAX_TOKEN_LENGTH) return 'invalid';
    const m = /^([1-9][0-9]{0,14})\.([A-Za-z0-9_-]{43})$/.exec(presented);
    if (!m) return 'invalid';
    const attempt = Number(m[1]);
    const given = Buffer.from(m[2]!, 'base64url');
    const want = this.mac(subject.uid, attempt);
    if (given.length !== want.length || !timingSafeEqual(given, want)) return 'invalid';
    if (attempt === subject.attempt) return 'current';
    return attempt < subject.attempt ? 'stale' : 'ahead';
  }
}

/** The callback token of an SBC's current attempt. */
export interface AttemptToken {
  /** `spec.bootAttempt` (default 1). */
  attempt: number;
  token: string;
}

/** The token of `sbc`'s current attempt; `undefined` for an SBC not stored yet (no uid). */
export function attemptToken(key: CallbackKey, sbc: ServerBootConfiguration): AttemptToken | undefined {
  const subject = tokenSubject(sbc);
  return subject ? { attempt: subject.attempt, token: key.tokenFor(subject) } : undefined;
}
