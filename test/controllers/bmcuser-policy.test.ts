/**
 * The pure BMCUser logic (src/controllers/bmcuser/bmcuser-policy.ts): password length within the Redfish
 * AccountService policy, generated passwords, and the rotation decision. No control plane.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  decideRotation,
  generatePassword,
  PREFERRED_PASSWORD_LENGTH,
  passwordLength,
} from '../../src/controllers/bmcuser/bmcuser-policy.js';

describe('passwordLength / generatePassword', () => {
  it('clamps the preferred length into [Min, Max]', () => {
    assert.equal(passwordLength({}), PREFERRED_PASSWORD_LENGTH);
    assert.equal(passwordLength({ minPasswordLength: 20 }), 20);
    assert.equal(passwordLength({ maxPasswordLength: 8 }), 8);
    assert.equal(passwordLength({ minPasswordLength: 8, maxPasswordLength: 8 }), 8);
  });
  it('refuses a policy no password meets', () => {
    assert.throws(() => passwordLength({ minPasswordLength: 10, maxPasswordLength: 9 }), RangeError);
    assert.throws(() => passwordLength({ minPasswordLength: 0 }), RangeError);
  });
  it('generates distinct alphanumeric passwords of the policy length', () => {
    const a = generatePassword({ minPasswordLength: 12, maxPasswordLength: 12 });
    const b = generatePassword({ minPasswordLength: 12, maxPasswordLength: 12 });
    assert.match(a, /^[A-Za-z0-9]{12}$/);
    assert.notEqual(a, b);
    assert.equal(generatePassword({ minPasswordLength: 40 }).length, 40);
  });
});

describe('decideRotation', () => {
  const now = 1_000_000_000;
  it('rotates when never rotated, requested, or expired at the BMC', () => {
    assert.deepEqual(decideRotation({ now, annotated: false }), { rotate: true, reason: 'Initial' });
    assert.deepEqual(decideRotation({ now, lastRotation: now, annotated: true }), {
      rotate: true,
      reason: 'Requested',
    });
    assert.deepEqual(decideRotation({ now, lastRotation: now, annotated: false, bmcExpiration: now }), {
      rotate: true,
      reason: 'Expired',
    });
    assert.deepEqual(decideRotation({ now, lastRotation: now, annotated: false, changeRequired: true }), {
      rotate: true,
      reason: 'Expired',
    });
  });
  it('rotates when the period elapsed, else requeues at the earlier deadline', () => {
    const last = now - 3_600_000;
    assert.deepEqual(decideRotation({ now, lastRotation: last, rotationPeriod: '1h', annotated: false }), {
      rotate: true,
      reason: 'Period',
    });
    assert.deepEqual(decideRotation({ now, lastRotation: last, rotationPeriod: '2h', annotated: false }), {
      rotate: false,
      requeueAfterMs: 3_600_000,
    });
    assert.deepEqual(
      decideRotation({
        now,
        lastRotation: last,
        rotationPeriod: '2h',
        annotated: false,
        bmcExpiration: now + 60_000,
      }),
      { rotate: false, requeueAfterMs: 60_000 },
    );
    assert.deepEqual(decideRotation({ now, lastRotation: last, annotated: false }), {
      rotate: false,
    });
  });
  it('throws on an unparsable rotationPeriod', () => {
    assert.throws(() =>
      decideRotation({ now, lastRotation: now, rotationPeriod: 'weekly', annotated: false }),
    );
  });
});
