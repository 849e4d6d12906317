import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Budget, isRetryableStatus, parseRetryAfter } from '../../src/bmc/retry.js';

describe('retry policy', () => {
  it('parses Retry-After as delay-seconds or HTTP-date, in ms', () => {
    assert.equal(parseRetryAfter('3'), 3000);
    assert.equal(parseRetryAfter(' 0 '), 0);
    const now = Date.parse('2025-01-01T00:00:00Z');
    assert.equal(parseRetryAfter('Wed, 01 Jan 2025 00:00:05 GMT', now), 5000);
    assert.equal(parseRetryAfter('Tue, 31 Dec 2024 23:00:00 GMT', now), 0);
    assert.equal(parseRetryAfter('soon'), undefined);
    assert.equal(parseRetryAfter(undefined), undefined);
  });

  it('retries 5xx and 429 for idempotent requests, only 503 and 429 for the others', () => {
    for (const s of [429, 500, 502, 503, 504]) assert.equal(isRetryableStatus(s, true), true);
    assert.equal(isRetryableStatus(503, false), true);
    assert.equal(isRetryableStatus(429, false), true);
    assert.equal(isRetryableStatus(500, false), false);
    assert.equal(isRetryableStatus(504, false), false);
    assert.equal(isRetryableStatus(400, true), false);
    assert.equal(isRetryableStatus(412, true), false);
  });

  it('tracks the remaining budget and honours the caller abort', async () => {
    const ac = new AbortController();
    const b = new Budget(1000, ac.signal);
    assert.ok(b.remainingMs() > 900 && b.remainingMs() <= 1000);
    ac.abort(new Error('stop'));
    assert.throws(() => b.throwIfAborted(), /stop/);
    await assert.rejects(b.pause(50), /stop/);
  });
});
