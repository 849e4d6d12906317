/**
 * The client-side token bucket (pure logic, fake clock): burst goes at once, then one slot per
 * 1/QPS s in call order; a 429 pauses every request for Retry-After (bounded) and halves the rate,
 * which recovers with successes; unlimited QPS still honours the pause.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MAX_PAUSE_MS, TokenBucketRateLimiter } from '../../src/runtime/rate-limiter.js';

describe('TokenBucketRateLimiter', () => {
  it('lets the burst through, then spaces requests 1/QPS apart, FIFO', () => {
    let now = 0;
    const l = new TokenBucketRateLimiter({ qps: 10, burst: 3, now: () => now });
    assert.deepEqual([l.reserve(), l.reserve(), l.reserve()], [0, 0, 0]);
    const waits = [l.reserve(), l.reserve(), l.reserve()].map(Math.round);
    assert.deepEqual(waits, [100, 200, 300]);
    now = 1000; // 1 s later the bucket refilled (to burst at most)
    assert.deepEqual([l.reserve(), l.reserve()].map(Math.round), [0, 0]);
  });

  it('pauses every request for Retry-After on 429, bounded, and halves the rate', () => {
    const now = 0;
    const l = new TokenBucketRateLimiter({ qps: 100, burst: 1, now: () => now });
    assert.equal(l.reserve(), 0);
    assert.equal(l.throttled(2), 2000);
    assert.equal(l.currentQps, 50);
    assert.ok(l.reserve() >= 2000);
    assert.equal(l.throttled(3600), MAX_PAUSE_MS, 'a huge Retry-After is capped');
    for (let i = 0; i < 10; i++) l.throttled(0);
    assert.equal(l.currentQps, 10, 'the rate never drops below 10 % of qps');
    for (let i = 0; i < 200; i++) l.succeeded();
    assert.equal(l.currentQps, 100, 'successes bring the rate back to qps');
  });

  it('without a QPS limit only the 429 pause applies', () => {
    let now = 0;
    const l = new TokenBucketRateLimiter({ qps: 0, now: () => now });
    for (let i = 0; i < 1000; i++) assert.equal(l.reserve(), 0);
    l.throttled(undefined);
    assert.equal(l.reserve(), 1000, 'no Retry-After: 1 s');
    now = 1000;
    assert.equal(l.reserve(), 0);
    assert.equal(l.currentQps, Number.POSITIVE_INFINITY);
  });
});
