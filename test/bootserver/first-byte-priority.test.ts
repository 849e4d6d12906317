/**
 * first-byte-priority.ts (issue 35, target 6): bodies give way while a request waits for its first
 * byte. The scheduler alone with real timers (its bounds), then wired into a real Fastify server
 * on loopback: a connection that was accepted and has sent nothing yet, then its request in the
 * handler, each stop the chunks a download pulls from its source, and the download goes on once
 * the request was answered.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Fastify from 'fastify';
import {
  FirstBytePriority,
  holdBodiesForFirstBytes,
  inTurn,
} from '../../src/bootserver/first-byte-priority.js';

/** ms until `p` settles, or `undefined` when it did not within `ms`. */
async function settlesWithin(p: Promise<void>, ms: number): Promise<number | undefined> {
  const t0 = performance.now();
  const won = await Promise.race([p.then(() => true), sleep(ms).then(() => false)]);
  return won ? performance.now() - t0 : undefined;
}

describe('FirstBytePriority', () => {
  it('lets a body go at once while nobody waits, and holds it until the waiting request leaves', async () => {
    const priority = new FirstBytePriority({ holdMs: 10_000, maxStallMs: 10_000 });
    assert.equal(priority.turn(), undefined, 'nobody waits: no promise at all');
    const leave = priority.enter();
    const other = priority.enter();
    const turn = priority.turn();
    assert.ok(turn, 'a request waits: the body waits');
    assert.equal(await settlesWithin(turn, 50), undefined, 'held while both wait');
    leave();
    leave(); // idempotent: the other request still waits
    assert.equal(priority.waiting, 1);
    assert.equal(await settlesWithin(turn, 50), undefined, 'held while one still waits');
    other();
    assert.ok((await settlesWithin(turn, 1000)) !== undefined, 'released once none waits');
    assert.equal(priority.waiting, 0);
  });

  it('stops counting a request after holdMs, and holds no chunk longer than maxStallMs', async () => {
    const held = new FirstBytePriority({ holdMs: 40, maxStallMs: 10_000 });
    held.enter(); // never leaves: stuck on the API server, say
    const expired = await settlesWithin(held.turn()!, 2000);
    assert.ok(expired !== undefined && expired >= 30, `released when the hold expired (${expired} ms)`);
    assert.equal(held.waiting, 0);

    const stalled = new FirstBytePriority({ holdMs: 10_000, maxStallMs: 40 });
    const leave = stalled.enter();
    const waited = await settlesWithin(stalled.turn()!, 2000);
    assert.ok(waited !== undefined && waited >= 30, `the chunk went after maxStallMs (${waited} ms)`);
    assert.equal(stalled.waiting, 1, 'the request still waits');
    leave();
  });
});

describe('holdBodiesForFirstBytes on a Fastify server', () => {
  it('holds a download while a new connection and then its request wait for their answer', async () => {
    const priority = new FirstBytePriority({ holdMs: 10_000, maxStallMs: 10_000 });
    const app = Fastify();
    holdBodiesForFirstBytes(app, priority);
    let pulled = 0;
    async function* endless(): AsyncGenerator<Buffer> {
      for (;;) {
        pulled++;
        yield Buffer.alloc(64 * 1024);
        await sleep(1);
      }
    }
    let answer: () => void = () => {};
    const answered = new Promise<void>((ok) => {
      answer = ok;
    });
    app.get('/file', async (_req, reply) => reply.send(Readable.from(inTurn(endless(), priority))));
    app.get('/slow', async () => {
      await answered;
      return { ok: true };
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const port = (app.server.address() as { port: number }).port;
    const sockets: Socket[] = [];
    const download = request({ host: '127.0.0.1', port, path: '/file', agent: false });
    download.on('response', (res) => res.resume());
    download.on('error', () => {});
    try {
      // A download that reads everything it gets.
      download.end();
      await waitUntil(() => pulled > 20, 'the download streams');
      assert.equal(priority.waiting, 0, 'the download answered: nobody waits');

      // A connection accepted, nothing sent yet: the download stops pulling chunks.
      const idle = connect(port, '127.0.0.1');
      sockets.push(idle);
      await new Promise((ok) => idle.once('connect', ok));
      await waitUntil(() => priority.waiting === 1, 'the accepted connection waits');
      const atAccept = pulled;
      await sleep(150);
      assert.ok(
        pulled - atAccept <= 2,
        `held while the connection waits (${pulled - atAccept} chunks pulled)`,
      );

      // Its request reaches the handler, which does not answer yet: still held.
      idle.write(`GET /slow HTTP/1.1\r\nHost: x\r\n\r\n`);
      await sleep(150);
      assert.equal(priority.waiting, 1, 'the request waits in place of its connection');
      assert.ok(pulled - atAccept <= 2, `held while the request waits (${pulled - atAccept} chunks pulled)`);

      // Answered: the download goes on.
      const reply = new Promise<string>((ok) => idle.once('data', (b: Buffer) => ok(b.toString())));
      answer();
      assert.match(await reply, /^HTTP\/1.1 200/);
      const atAnswer = pulled;
      await waitUntil(() => pulled > atAnswer + 20, 'the download streams again');
      assert.equal(priority.waiting, 0);
    } finally {
      download.destroy();
      for (const s of sockets) s.destroy();
      await app.close();
    }
  });
});

async function waitUntil(ok: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await sleep(5);
  }
}
