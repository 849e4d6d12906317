/**
 * head-first-body.ts: the order that keeps an attempt's token behind its pin. The PE headers go
 * first; the pin starts on its turn; nothing of the rest of the UKI is even asked for before the
 * pin was stored; a refused pin closes the connection with nothing after the headers; a client
 * gone before the pin gets none written for it. Pure sequencing, so the pin, the file and the socket are functions here.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { headersThenFile } from '../../src/bootserver/head-first-body.js';

const log = pino({ level: 'silent' });

/** A promise and the function that resolves it. */
function deferred(): [Promise<void>, () => void] {
  let resolve: () => void = () => {};
  const p = new Promise<void>((ok) => {
    resolve = ok;
  });
  return [p, resolve];
}

/** A pin whose outcome the test decides, and a record of what the body asked for. */
function harness(closed = false, turn?: () => Promise<unknown>) {
  const seen: string[] = [];
  let gone = closed;
  let decide: (ok: boolean) => void = () => {};
  const body = headersThenFile({
    head: Buffer.from('HEAD'),
    pin: () => {
      seen.push('pin');
      return new Promise<void>((ok, fail) => {
        decide = (yes) => (yes ? ok() : fail(new Error('pinned to another client')));
      });
    },
    rest: async function* () {
      seen.push('rest');
      yield Buffer.from('SECTION-WITH-TOKEN');
    },
    closed: () => gone,
    turn,
    abort: () => seen.push('abort'),
    log,
  });
  return {
    body,
    seen,
    decide: (yes: boolean) => decide(yes),
    leave: () => {
      gone = true;
    },
  };
}

describe('headersThenFile', () => {
  it('sends the headers, then the rest only once the pin was stored', async () => {
    const h = harness();
    assert.equal((await h.body.next()).value?.toString(), 'HEAD');
    const next = h.body.next();
    await sleep(20);
    assert.deepEqual(h.seen, ['pin'], 'the rest is not read while the pin is being stored');
    h.decide(true);
    assert.equal((await next).value?.toString(), 'SECTION-WITH-TOKEN');
    assert.deepEqual(h.seen, ['pin', 'rest']);
    assert.equal((await h.body.next()).done, true);
  });

  it('closes the connection after the headers when the pin is refused', async () => {
    const h = harness();
    await h.body.next();
    const next = h.body.next();
    h.decide(false);
    assert.equal((await next).done, true, 'nothing after the headers');
    assert.deepEqual(h.seen, ['pin', 'abort'], 'the rest never read; the connection closed');
  });

  it('starts the pin only on its turn, and none for a client that left meanwhile', async () => {
    const [turn, letGo] = deferred();
    const h = harness(false, () => turn);
    await h.body.next();
    const next = h.body.next();
    await sleep(20);
    assert.deepEqual(h.seen, [], 'no pin before its turn');
    letGo();
    await sleep(5);
    assert.deepEqual(h.seen, ['pin'], 'the pin started on its turn');
    h.decide(true);
    assert.equal((await next).value?.toString(), 'SECTION-WITH-TOKEN');

    const [laterTurn, later] = deferred();
    const gone = harness(false, () => laterTurn);
    await gone.body.next();
    const end = gone.body.next();
    gone.leave(); // the client closed while the pin waited its turn
    later();
    assert.equal((await end).done, true);
    assert.deepEqual(gone.seen, [], 'neither pin nor rest for a client that left');
  });

  it('writes no pin for a client that left after the headers', async () => {
    const h = harness(true);
    await h.body.next();
    assert.equal((await h.body.next()).done, true);
    assert.deepEqual(h.seen, [], 'neither pin nor rest');
  });
});
