/**
 * Derived callback tokens (src/bootauth/callback-token.ts), pure: the four verdicts, what the MAC
 * binds (attempt and SBC uid) and what is refused before hashing.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  CALLBACK_KEY_BYTES,
  CallbackKey,
  MAX_TOKEN_LENGTH,
  tokenSubject,
} from '../../src/bootauth/callback-token.js';

const key = new CallbackKey(Buffer.alloc(CALLBACK_KEY_BYTES, 1));
const subject = { uid: '0b7c1c9e-7d1f-4c55-9c1e-2f7b0d1a9a01', attempt: 3 };

describe('callback tokens', () => {
  it('tells current, stale, ahead and invalid apart', () => {
    assert.equal(key.verify(key.tokenFor(subject), subject), 'current');
    assert.equal(key.verify(key.tokenFor({ ...subject, attempt: 2 }), subject), 'stale');
    assert.equal(key.verify(key.tokenFor({ ...subject, attempt: 4 }), subject), 'ahead');
    assert.equal(key.verify('3.made-up', subject), 'invalid');
  });

  it('binds the attempt: a token relabelled with another attempt number is invalid', () => {
    const [, mac] = key.tokenFor(subject).split('.');
    assert.equal(key.verify(`4.${mac}`, subject), 'invalid');
    assert.equal(key.verify(`2.${mac}`, subject), 'invalid');
  });

  it('binds the SBC object (uid) and the key', () => {
    const other = { ...subject, uid: '0b7c1c9e-7d1f-4c55-9c1e-2f7b0d1a9a02' };
    assert.equal(key.verify(key.tokenFor(subject), other), 'invalid', 'a re-created SBC of the same name');
    assert.equal(CallbackKey.generate().verify(key.tokenFor(subject), subject), 'invalid', 'another key');
    assert.notEqual(key.tokenFor(subject), key.tokenFor(other));
  });

  it('refuses empty, malformed and over-long input, and a subject without uid', () => {
    const good = key.tokenFor(subject);
    for (const t of [
      undefined,
      '',
      '0.x',
      `03.${good.split('.')[1]}`,
      `${good}=`,
      ` ${good}`,
      'x'.repeat(MAX_TOKEN_LENGTH + 1),
    ])
      assert.equal(key.verify(t, subject), 'invalid', JSON.stringify(t));
    assert.equal(key.verify(good, undefined), 'invalid');
    assert.equal(tokenSubject({ metadata: {}, spec: { bootAttempt: 1 } }), undefined);
    assert.deepEqual(tokenSubject({ metadata: { uid: 'u' }, spec: {} }), { uid: 'u', attempt: 1 });
  });

  it('is deterministic for a key and refuses keys shorter than 32 bytes', () => {
    const same = new CallbackKey(key.bytes());
    assert.equal(same.tokenFor(subject), key.tokenFor(subject));
    assert.match(key.tokenFor(subject), /^3\.[A-Za-z0-9_-]{43}$/);
    assert.throws(() => new CallbackKey(Buffer.alloc(CALLBACK_KEY_BYTES - 1)), /at least 32 bytes/);
  });
});
