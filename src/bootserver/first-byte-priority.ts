/**
 * First bytes before bulk (issue 35, target 6): while a request to the boot server still waits for
 * its first byte, the boot-file bodies already streaming hold their next chunk (and the HTTP-boot
 * pins their API write), so the one thread that does both answers the new request instead of
 * copying more of files already answered. A request waits from the moment its connection is
 * accepted (or, on a kept-alive connection, its headers are parsed) until its answer is handed to
 * the socket (Fastify's `onSend`) or it closes: {@link holdBodiesForFirstBytes}.
 *
 * Why: with 50 hosts HTTP-booting at once, a GET's first byte waited behind the bodies of the GETs
 * before it (a CPU profile showed the boot server 96 % busy with their file reads and socket writes),
 * and a firmware waiting for its first byte may time out, while one in the middle of a download
 * loses nothing by a pause of milliseconds. The same bytes go out either way; only their order
 * changes. The cost shows in `bench:http-boot`'s last-byte figures.
 *
 * Bounded both ways, so neither side starves: a request counts as waiting for at most `holdMs`
 * after it entered (one held up by the API server or another replica's pin stops holding bodies),
 * and a body's chunk waits at most `maxStallMs` however many requests keep arriving: a client that
 * opens connections and sends nothing slows the downloads of others, never stops them. The class is
 * pure scheduling (timers, no I/O) and never throws.
 */
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';

export interface FirstBytePriorityOptions {
  /** ms a request holds the bodies at most, from {@link FirstBytePriority.enter} (default 50). */
  holdMs?: number;
  /** ms one body chunk waits at most in {@link FirstBytePriority.turn} (default 100). */
  maxStallMs?: number;
}

export class FirstBytePriority {
  readonly #holdMs: number;
  readonly #maxStallMs: number;
  /** Requests that entered and have neither left nor outlived `holdMs`. */
  #waiting = 0;
  /** Bodies held: each resolves its chunk's turn. */
  #held = new Set<() => void>();

  constructor(opts: FirstBytePriorityOptions = {}) {
    this.#holdMs = opts.holdMs ?? 200;
    this.#maxStallMs = opts.maxStallMs ?? 200;
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
   * promise that resolves when none waits any more or after `maxStallMs`, whichever is first.
   */
  turn(): Promise<void> | undefined {
    if (this.#waiting === 0) return undefined;
    return new Promise<void>((resolve) => {
      const go = () => {
        clearTimeout(timer);
        this.#held.delete(go);
        resolve();
      };
      const timer = setTimeout(go, this.#maxStallMs);
      timer.unref();
      this.#held.add(go);
    });
  }

  #release(): void {
    for (const go of [...this.#held]) go();
  }
}

/**
 * `chunks` (a file's read stream), each chunk yielded only once `priority` gives it its turn.
 * Throws what `chunks` throws.
 */
export async function* inTurn(
  chunks: AsyncIterable<Buffer>,
  priority: FirstBytePriority,
): AsyncGenerator<Buffer> {
  for await (const chunk of chunks) {
    const wait = priority.turn();
    if (wait) await wait;
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

/**
 * Makes every request of `app` wait in `priority` for its first byte: from its connection's accept
 * (a TLS handshake included) to its request's headers, then from those to the answer's `onSend`
 * (or the response's close). Call before the app is ready (it adds a hook).
 */
export function holdBodiesForFirstBytes(app: PrioritizedApp, priority: FirstBytePriority): void {
  /** Accepted connections whose first request has not been parsed yet. */
  const accepted = new WeakMap<Socket, () => void>();
  /** Requests whose answer has not been handed over yet. */
  const asked = new WeakMap<IncomingMessage, () => void>();
  app.server.on('connection', (socket) => {
    const leave = priority.enter();
    accepted.set(socket, leave);
    socket.once('close', leave);
  });
  // Before Fastify's own listener, so a request it answers at once still entered first.
  app.server.prependListener('request', (req, res) => {
    accepted.get(req.socket)?.();
    const leave = priority.enter();
    asked.set(req, leave);
    res.once('close', leave);
  });
  app.addHook('onSend', async (req, _reply, payload) => {
    asked.get(req.raw)?.();
    return payload;
  });
}
