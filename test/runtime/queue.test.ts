/** WorkQueue semantics (client-go workqueue): dedupe, one worker per key, delays, backoff, shutdown. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RuntimeMetrics } from '../../src/runtime/metrics.js';
import { WorkQueue } from '../../src/runtime/queue.js';

const tick = (ms = 0) => new Promise((ok) => setTimeout(ok, ms));

describe('WorkQueue', () => {
  it('hands out a key added several times once, in FIFO order', async () => {
    const q = new WorkQueue();
    for (const k of ['a', 'b', 'a', 'c', 'b']) q.add(k);
    assert.equal(q.len(), 3);
    assert.deepEqual([await q.get(), await q.get(), await q.get()], ['a', 'b', 'c']);
    assert.equal(q.len(), 0);
  });

  it('does not hand out a key in flight; re-adds it after done()', async () => {
    const q = new WorkQueue();
    q.add('a');
    const k = await q.get();
    assert.equal(k, 'a');
    q.add('a');
    q.add('a');
    assert.equal(q.len(), 0, 'a key in flight is not queued again');
    let second: string | undefined;
    void q.get().then((x) => {
      second = x;
    });
    await tick();
    assert.equal(second, undefined, 'no worker gets a key another holds');
    q.done('a');
    await tick();
    assert.equal(second, 'a', 'handed out again exactly once after done()');
    q.done('a');
    assert.equal(q.len(), 0);
  });

  it('wakes a waiting get() on add', async () => {
    const q = new WorkQueue();
    const p = q.get();
    q.add('x');
    assert.equal(await p, 'x');
  });

  it('addAfter keeps the earliest time per key and dedupes with add', async () => {
    const q = new WorkQueue();
    q.addAfter('k', 200);
    q.addAfter('k', 20);
    q.addAfter('k', 500);
    const t0 = Date.now();
    assert.equal(await q.get(), 'k');
    const waited = Date.now() - t0;
    assert.ok(waited >= 15 && waited < 150, `waited ${waited} ms`);
    q.done('k');
    await tick(600);
    assert.equal(q.len(), 0, 'the later timers were cancelled');
  });

  it('addRateLimited backs off exponentially per key; forget resets', () => {
    const q = new WorkQueue({ baseDelayMs: 10, maxDelayMs: 50, burst: 1000 });
    const delays: number[] = [];
    const orig = q.addAfter.bind(q);
    q.addAfter = (key: string, ms: number) => {
      delays.push(ms);
      orig(key, ms);
    };
    for (let i = 0; i < 5; i++) q.addRateLimited('k');
    assert.deepEqual(delays, [10, 20, 40, 50, 50]);
    assert.equal(q.numRequeues('k'), 5);
    q.forget('k');
    q.addRateLimited('k');
    assert.equal(delays.at(-1), 10);
    void q.shutDown();
  });

  it('addRateLimited is also limited by the overall token bucket', () => {
    const q = new WorkQueue({ baseDelayMs: 1, ratePerSecond: 10, burst: 2 });
    const delays: number[] = [];
    q.addAfter = (_key: string, ms: number) => {
      delays.push(ms);
    };
    for (let i = 0; i < 4; i++) q.addRateLimited(`k${i}`);
    assert.equal(delays[0], 1);
    assert.equal(delays[1], 1);
    assert.ok(Math.abs(delays[2]! - 100) < 5, `third waits ~100 ms, got ${delays[2]}`);
    assert.ok(Math.abs(delays[3]! - 200) < 5, `fourth waits ~200 ms, got ${delays[3]}`);
  });

  it('addWithBackoff (conflicts) uses the per-key backoff only, not the overall bucket', () => {
    const q = new WorkQueue({ baseDelayMs: 1, ratePerSecond: 10, burst: 2 });
    const delays: number[] = [];
    q.addAfter = (_key: string, ms: number) => {
      delays.push(ms);
    };
    for (let i = 0; i < 4; i++) q.addWithBackoff(`k${i}`);
    assert.deepEqual(delays, [1, 1, 1, 1], 'a burst of conflicts is not throttled to the bucket rate');
    q.addWithBackoff('k0');
    assert.equal(delays[4], 2, 'but each key still backs off exponentially');
    assert.equal(q.numRequeues('k0'), 2);
  });

  it('shutDown releases waiters, ignores later adds, and drain waits for keys in flight', async () => {
    const q = new WorkQueue();
    q.add('a');
    q.add('b');
    const a = await q.get();
    const waiter = (async () => {
      await q.get(); // b
      return q.get(); // waits
    })();
    await tick();
    let drained = false;
    const shut = q.shutDown(true).then(() => {
      drained = true;
    });
    q.done('b');
    assert.equal(await waiter, undefined);
    q.add('c');
    assert.equal(q.len(), 0);
    assert.equal(await q.get(), undefined);
    await tick(10);
    assert.equal(drained, false, 'a is still in flight');
    q.done(a!);
    await shut;
    assert.equal(drained, true);
  });

  it('exports depth, adds and retries metrics', async () => {
    const m = new RuntimeMetrics();
    const q = new WorkQueue({ name: 'unit', metrics: m });
    q.add('a');
    q.add('a');
    q.add('b');
    q.addRateLimited('c');
    const text = await m.registry.metrics();
    assert.match(text, /workqueue_depth\{name="unit"\} 2/);
    assert.match(text, /workqueue_adds_total\{name="unit"\} 2/);
    assert.match(text, /workqueue_retries_total\{name="unit"\} 1/);
    await q.shutDown();
  });
});
