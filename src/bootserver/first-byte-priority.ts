/**
 * First bytes before bulk (issue 35, target 6): while a request to the boot server still waits for
 * its first byte, the HTTP-boot bodies already streaming hold their next chunk (and the pins of
 * head-first GETs their API write: head-first-body.ts), so the one thread that does both answers
 * the new request instead of copying more of files already answered. A request waits from the
 * moment its connection is accepted (or, on a kept-alive connection, its headers are parsed) until
 * its answer is handed to the socket (Fastify's `onSend`) or it closes:
 * {@link holdBodiesForFirstBytes}. Only bodies that go through {@link inTurn} give way (the
 * HTTP-boot route's); the image, OCI layer and ISO routes stream as before.
 *
 * Why: with 50 hosts HTTP-booting at once, a GET's first byte waited behind the bodies of the GETs
 * before it (a CPU profile showed the boot server 96 % busy with their file reads and socket writes),
 * and a firmware waiting for its first byte may time out, while one in the middle of a download
 * loses nothing by a pause of milliseconds. The same bytes go out either way; only their order
 * changes. The cost shows in `bench:http-boot`'s last-byte figures.
 *
 * Bounded both ways, so neither side starves:
 * - a request counts as waiting for at most `holdMs` after it entered (one held up by the API server
 *   stops holding bodies; a connection's hold and then its request's are two holds, so one client
 *   holds for at most 2 × `holdMs`);
 * - a chunk waits at most `maxStallMs`, and a body is held at most half of every second
 *   ({@link MAX_HELD_PER_WINDOW_MS}): a burst of requests (tens of milliseconds) is served first in
 *   full, while however requests keep arriving (a client opening connections and sending nothing,
 *   one after the other or many at once), every body keeps at least half its time.
 * The class is pure scheduling (timers, no I/O) and never throws.
 */
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';

export interface FirstBytePriorityOptions {
  /** ms a request holds the bodies at most, from {@link FirstBytePriority.enter} (default 100). */
  holdMs?: number;
  /** ms one body chunk waits at most in {@link FirstBytePriority.turn} (default 100). */
  maxStallMs?: number;
}

export class FirstBytePriority {
  readonly #holdMs: number;
  readonly maxStallMs: number;
  /** Requests that entered and have neither left nor outlived `holdMs`. */
  #waiting = 0;
  /** Bodies held: each resolves its chunk's turn (false: released, not stalled out). */
  #held = new Set<(stalled: boolean) => void>();

  constructor(opts: FirstBytePriorityOptions = {}) {
    this.#holdMs = opts.holdMs ?? 100;
    this.maxStallMs = opts.maxStallMs ?? 100;
  }

  /** Requests currently waiting for their first byte (for tests and metrics). */
  get waiting(): number {
    return this.#waiting;
  }

  /**
   * A request starts waiting for its first byte; returns `leave`, to call once its first byte
   * (or its error answer) is handed to the socket, or when it closes. `leave` may be called any
   * number of times; the request leaves by itself after `holdMs`.
   */
  enter(): () => void {
    this.#waiting++;
    let left = false;
    const leave = () => {
      if (left) return;
      left = true;
      clearTimeout(timer);
      this.#waiting--;
      if (this.#waiting === 0) this.#release();
    };
    const timer = setTimeout(leave, this.#holdMs);
    timer.unref();
    return leave;
  }

  /**
   * A body's next chunk: `undefined` when no request waits (go on at once, no promise), else a
   * promise that resolves `false` when none waits any more, or `true` after `maxStallMs` (stalled
   * out), whichever is first.
   */
  turn(): Promise<boolean> | undefined {
    if (this.#waiting === 0) return undefined;
    return new Promise<boolean>((resolve) => {
      const go = (stalled: boolean) => {
        clearTimeout(timer);
        this.#held.delete(go);
        resolve(stalled);
      };
      const timer = setTimeout(() => go(true), this.maxStallMs);
      timer.unref();
      this.#held.add(go);
    });
  }

  #release(): void {
    for (const go of [...this.#held]) go(false);
  }
}

/** The window of a body's hold budget, ms. */
export const HOLD_WINDOW_MS = 1000;
/** Most a body is held per {@link HOLD_WINDOW_MS} (a wait that starts under it may end up to `maxStallMs` over). */
export const MAX_HELD_PER_WINDOW_MS = 500;

/**
 * `chunks` (a file's read stream), each chunk yielded only once `priority` gives it its turn, as
 * long as this body was held less than {@link MAX_HELD_PER_WINDOW_MS} of the current
 * {@link HOLD_WINDOW_MS}; beyond, its chunks go without waiting until the next window.
 * `firstIsFirstByte`: the first chunk is the response's first byte, so it does not wait. Throws
 * what `chunks` throws.
 */
export async function* inTurn(
  chunks: AsyncIterable<Buffer>,
  priority: FirstBytePriority,
  firstIsFirstByte = false,
): AsyncGenerator<Buffer> {
  let first = firstIsFirstByte;
  // This body's held time in the current second: a burst of requests is served first in full,
  // but however requests keep arriving, the body is held at most half of every second.
  let windowStart = performance.now();
  let held = 0;
  for await (const chunk of chunks) {
    if (first) {
      first = false; // the response's first byte goes at once
    } else {
      const now = performance.now();
      if (now - windowStart >= HOLD_WINDOW_MS) [windowStart, held] = [now, 0];
      const wait = held < MAX_HELD_PER_WINDOW_MS ? priority.turn() : undefined;
      if (wait) {
        await wait;
        held += performance.now() - now;
      }
    }
    yield chunk;
  }
}

/** What {@link holdBodiesForFirstBytes} needs of a Fastify app (the boot server's). */
export interface PrioritizedApp {
  server: {
    on(event: 'connection', listener: (socket: Socket) => void): unknown;
    prependListener(
      event: 'request',
      listener: (req: IncomingMessage, res: { once(event: 'close', l: () => void): unknown }) => void,
    ): unknown;
  };
  addHook(
    name: 'onSend',
    hook: (req: { raw: IncomingMessage }, reply: unknown, payload: unknown) => Promise<unknown>,
  ): unknown;
}

/** A connection's peer as `address port`: the same for a TLS socket and the TCP socket under it. */
const peerOf = (s: { remoteAddress?: string | undefined; remotePort?: number | undefined }) =>
  s.remoteAddress === undefined ? undefined : `${s.remoteAddress} ${s.remotePort}`;

/**
 * Makes every request of `app` wait in `priority` for its first byte: from its connection's accept
 * (a TLS handshake included) to its request's headers, then from those to the answer's `onSend`
 * (or the response's close). Call before the app is ready (it adds a hook).
 */
export function holdBodiesForFirstBytes(app: PrioritizedApp, priority: FirstBytePriority): void {
  // By peer, not by socket object: over HTTPS, 'connection' gives the TCP socket and a request's
  // `socket` is the TLS socket on top of it.
  /** Accepted connections whose first request has not been parsed yet. */
  const accepted = new Map<string, () => void>();
  /** Requests whose answer has not been handed over yet. */
  const asked = new WeakMap<IncomingMessage, () => void>();
  app.server.on('connection', (socket) => {
    const peer = peerOf(socket);
    if (peer === undefined) return; // already gone
    const entered = priority.enter();
    const leave = () => {
      entered();
      if (accepted.get(peer) === leave) accepted.delete(peer);
    };
    accepted.set(peer, leave);
    socket.once('close', leave);
  });
  // Before Fastify's own listener, so a request it answers at once still entered first.
  app.server.prependListener('request', (req, res) => {
    // Enter before the connection's hold ends, so the count does not touch 0 in between.
    const leave = priority.enter();
    const peer = peerOf(req.socket);
    if (peer !== undefined) accepted.get(peer)?.();
    asked.set(req, leave);
    res.once('close', leave);
  });
  app.addHook('onSend', async (req, _reply, payload) => {
    asked.get(req.raw)?.();
    return payload;
  });
}
