/**
 * first-byte-priority.ts (issue 35, target 6): bodies give way while a request waits for its first
 * byte. The scheduler alone with real timers (its bounds), then wired into a real Fastify server
 * on loopback: a connection that was accepted and has sent nothing yet, then its request in the
 * handler, each stop the chunks a download pulls from its source, and the download goes on once
 * the request was answered; over HTTPS the connection's hold is handed to its request as over
 * HTTP; and a stream of connections that never send anything slows a download, never starves it.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect as tlsConnect } from 'node:tls';
import Fastify from 'fastify';
import {
  FirstBytePriority,
  holdBodiesForFirstBytes,
  inTurn,
} from '../../src/bootserver/first-byte-priority.js';
import { writeSelfSignedCertificate } from '../../src/localstack/control-plane.js';

/** ms until `p` settles, or `undefined` when it did not within `ms`. */
async function settlesWithin(p: Promise<unknown>, ms: number): Promise<number | undefined> {
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
    assert.equal(await turn, false, 'released, not stalled out');
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
    const stalledTurn = stalled.turn()!;
    const waited = await settlesWithin(stalledTurn, 2000);
    assert.ok(waited !== undefined && waited >= 30, `the chunk went after maxStallMs (${waited} ms)`);
    assert.equal(await stalledTurn, true, 'stalled out');
    assert.equal(stalled.waiting, 1, 'the request still waits');
    leave();
  });

  it('holds a body at most half of every second, however the holds come', async () => {
    // The holds' and stalls' timers are unref'd: keep this process alive while the body waits.
    const alive = setInterval(() => {}, 1000);
    let timer: NodeJS.Timeout | undefined;
    try {
      const priority = new FirstBytePriority({ holdMs: 45, maxStallMs: 50 });
      let pulled = 0;
      async function* chunks(): AsyncGenerator<Buffer> {
        for (;;) {
          pulled++;
          yield Buffer.alloc(1);
          await sleep(1); // about one chunk per ms: a gap between two holds lets one or two through
        }
      }
      // One request after the other, each ending (by its 45 ms hold) just before the 50 ms stall.
      priority.enter();
      timer = setInterval(() => priority.enter(), 46);
      const body = inTurn(chunks(), priority);
      const t0 = performance.now();
      let longWaits = 0;
      while (performance.now() - t0 < 1500) {
        const t = performance.now();
        await body.next();
        if (performance.now() - t >= 30) longWaits++;
      }
      await body.return(undefined);
      // Giving way on every chunk would let through about 2 per 46 ms cycle (about 65 in 1.5 s).
      assert.ok(pulled > 150, `${pulled} chunks in 1.5 s under back-to-back holds`);
      assert.ok(longWaits >= 5, `the body still gave way (${longWaits} long waits)`);
    } finally {
      clearInterval(timer);
      clearInterval(alive);
    }
  });

  it('lets the first chunk of a response go at once when it is the first byte', async () => {
    const priority = new FirstBytePriority({ holdMs: 10_000, maxStallMs: 10_000 });
    const leave = priority.enter();
    async function* two(): AsyncGenerator<Buffer> {
      yield Buffer.from('a');
      yield Buffer.from('b');
    }
    const body = inTurn(two(), priority, true);
    assert.deepEqual((await body.next()).value, Buffer.from('a'), 'the first byte did not wait');
    const second = body.next().then(() => undefined);
    assert.equal(await settlesWithin(second, 50), undefined, 'the rest waits its turn');
    leave();
    assert.ok((await settlesWithin(second, 1000)) !== undefined);
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

describe('holdBodiesForFirstBytes over HTTPS', () => {
  it('hands the connection hold to its request, so an answered request holds nothing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'first-byte-tls-'));
    const [key, cert] = [join(dir, 'tls.key'), join(dir, 'tls.crt')];
    writeSelfSignedCertificate(key, cert);
    // A hold far longer than the test: only the hand-over can end the connection's.
    const priority = new FirstBytePriority({ holdMs: 60_000, maxStallMs: 60_000 });
    const app = Fastify({ https: { key: readFileSync(key), cert: readFileSync(cert) } });
    holdBodiesForFirstBytes(app, priority);
    app.get('/ok', async () => ({ ok: true }));
    await app.listen({ host: '127.0.0.1', port: 0 });
    const port = (app.server.address() as { port: number }).port;
    const socket = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false });
    try {
      await new Promise((ok) => socket.once('secureConnect', ok));
      assert.equal(priority.waiting, 1, 'the accepted connection waits');
      const reply = new Promise<string>((ok) => socket.once('data', (b: Buffer) => ok(b.toString())));
      socket.write('GET /ok HTTP/1.1\r\nHost: x\r\n\r\n');
      assert.match(await reply, /^HTTP\/1.1 200/);
      await waitUntil(() => priority.waiting === 0, 'nothing waits once the request was answered', 2000);
      assert.equal(priority.turn(), undefined, 'bodies go at once on a kept-alive TLS connection');
    } finally {
      socket.destroy();
      await app.close();
      rmSync(dir, { recursive: true, force: true });
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
