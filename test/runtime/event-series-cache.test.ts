/**
 * The event recorder's series cache (src/runtime/event-series-cache.ts), pure: bounded, least
 * recently used out first, expired entries out before live ones, a forgotten series out at once.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SeriesCache } from '../../src/runtime/event-series-cache.js';

const WINDOW = 1000;
const keys = <E>(c: SeriesCache<E & { lastSeen: number }>) => [...c.entries()].map(([k]) => k);

test('over its bound, the cache drops the least recently used, and a repeat counts as a use', () => {
  const c = new SeriesCache<{ lastSeen: number }>(3, WINDOW);
  const now = 10_000;
  for (const k of ['a', 'b', 'c']) c.remember(k, { lastSeen: now }, now);
  c.remember('a', c.get('a')!, now); // a repeat of a: now the most recently used
  c.remember('d', { lastSeen: now }, now);
  assert.deepEqual(keys(c), ['c', 'a', 'd']);
  c.remember('e', { lastSeen: now }, now);
  assert.deepEqual(keys(c), ['a', 'd', 'e']);
  assert.equal(c.size, 3);
});

test('expired entries leave before live ones, all of them once the bound is crossed', () => {
  const c = new SeriesCache<{ lastSeen: number }>(4, WINDOW);
  for (const k of ['old1', 'old2', 'old3']) c.remember(k, { lastSeen: 1000 }, 1000);
  c.remember('live', { lastSeen: 5000 }, 5000);
  assert.equal(c.size, 4, 'under the bound nothing is dropped, expired or not');
  c.remember('new', { lastSeen: 5000 }, 5000);
  assert.deepEqual(keys(c), ['live', 'new'], 'every expired entry at the front went, no live one');
});

test('a forgotten series leaves the cache at once; a newer entry under its key stays', () => {
  const c = new SeriesCache<{ lastSeen: number }>(4, WINDOW);
  const first = { lastSeen: 100 };
  c.remember('k', first, 100);
  c.remember('live', { lastSeen: 100 }, 100);
  c.forget('k', first);
  assert.equal(first.lastSeen, 0, 'a timer still holding it finds it out of the window');
  assert.deepEqual(keys(c), ['live']);
  const second = { lastSeen: 200 };
  c.remember('k', second, 200);
  c.forget('k', first);
  assert.equal(c.get('k'), second, "forgetting the old entry does not drop the new one's series");
});
