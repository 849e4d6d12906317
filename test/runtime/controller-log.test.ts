/**
 * The Controller's debug line per reconcile (`reconciled`: namespace/name, ms waited in the ready
 * queue, ms of work, result), which bench/e2e.ts reads to tell queue delay from work. No API server:
 * keys are enqueued directly, one worker, so the second key waits for the first.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Controller } from '../../src/runtime/controller.js';
import { captureLogger } from './log-capture.js';

const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));

describe('Controller reconcile log', () => {
  it('logs each reconcile with its queue wait, duration and result; nothing above debug', async () => {
    const { log, records } = captureLogger('test');
    const c = new Controller('logged', {
      log,
      reconcile: async (req) => {
        if (req.name === 'slow') await sleep(60);
        if (req.name === 'bad') throw new Error('boom');
        return req.name === 'later' ? { requeueAfterMs: 60_000 } : undefined;
      },
    });
    c.start();
    c.enqueue({ namespace: 'ns', name: 'slow' });
    c.enqueue({ namespace: 'ns', name: 'later' });
    c.enqueue({ name: 'bad' });
    const deadline = Date.now() + 5_000;
    const lines = () => records.filter((r) => r.msg === 'reconciled');
    while (lines().length < 3 && Date.now() < deadline) await sleep(10);
    await c.stop(true);
    const byName = new Map(lines().map((r) => [r.name, r]));
    const slow = byName.get('slow');
    const later = byName.get('later');
    const bad = byName.get('bad');
    assert.ok(slow && later && bad, `three lines: ${JSON.stringify(lines())}`);
    assert.equal(slow.level, 20, 'debug');
    assert.equal(slow.namespace, 'ns');
    assert.equal(slow.result, 'success');
    assert.ok((slow.ms as number) >= 50, `slow took its 60 ms: ${slow.ms}`);
    assert.ok((later.queuedMs as number) >= 50, `later waited for the one worker: ${later.queuedMs}`);
    assert.equal(later.result, 'requeue_after');
    assert.equal(bad.result, 'error');
    assert.equal(bad.namespace, undefined, 'a cluster-scoped key has no namespace');
    // At info level the line costs nothing and is not written.
    const quiet = captureLogger('test', 'info');
    const q = new Controller('quiet', { log: quiet.log, reconcile: async () => undefined });
    q.start();
    q.enqueue({ name: 'x' });
    await sleep(20);
    await q.stop(true);
    assert.equal(quiet.records.filter((r) => r.msg === 'reconciled').length, 0);
  });
});
