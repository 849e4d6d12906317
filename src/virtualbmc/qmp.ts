/**
 * A minimal client for the QEMU Machine Protocol (QMP): JSON objects, one per line, over a unix
 * socket. Just enough for the QEMU back end of the virtual BMC: capability negotiation, commands
 * with replies matched by `id`, and asynchronous events (`SHUTDOWN`, `RESET`, `POWERDOWN`, …).
 */

import net from 'node:net';

/** A QMP event as QEMU sends it, e.g. `{event: 'SHUTDOWN', data: {guest: true, reason: 'guest-shutdown'}}`. */
export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
  timestamp?: { seconds: number; microseconds: number };
}

/** The `error` member of a failed QMP reply. */
export class QmpError extends Error {
  constructor(
    readonly errorClass: string,
    readonly description: string,
    readonly command: string,
  ) {
    super(`QMP ${command}: ${errorClass}: ${description}`);
    this.name = 'QmpError';
  }
}

interface Pending {
  command: string;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

export interface QmpConnectOptions {
  /** Give up connecting after this many milliseconds (default 10000). The socket may not exist yet: QEMU creates it during start-up. */
  timeoutMs?: number;
  /** Aborts the connection attempts, e.g. when the QEMU process exited. */
  signal?: AbortSignal;
  /** Receives every event from the moment the connection is up. */
  onEvent?: (event: QmpEvent) => void;
}

const DEFAULT_COMMAND_TIMEOUT_MS = 10_000;
const CONNECT_RETRY_MS = 50;

export class QmpClient {
  private buffer = '';
  private nextId = 1;
  private readonly pending = new Map<string, Pending>();
  private closedError: Error | undefined;
  private greeted: (() => void) | undefined;
  private gotGreeting = false;

  private constructor(
    private readonly socket: net.Socket,
    private readonly onEvent: ((event: QmpEvent) => void) | undefined,
  ) {
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => this.onData(chunk));
    socket.on('error', (err) => this.fail(err));
    socket.on('close', () => this.fail(new Error('QMP connection closed')));
  }

  /**
   * Connects to the QMP socket at `path`, retrying while it does not exist or refuses, waits for
   * the greeting and negotiates capabilities (`qmp_capabilities`).
   * @throws Error when `timeoutMs` passes, `signal` aborts, or QEMU answers with an error.
   */
  static async connect(path: string, options: QmpConnectOptions = {}): Promise<QmpClient> {
    const deadline = Date.now() + (options.timeoutMs ?? 10_000);
    for (;;) {
      options.signal?.throwIfAborted();
      let socket: net.Socket;
      try {
        socket = await openSocket(path);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if ((code !== 'ENOENT' && code !== 'ECONNREFUSED') || Date.now() >= deadline) {
          throw new Error(`QMP connect ${path}: ${(err as Error).message}`);
        }
        await new Promise((r) => setTimeout(r, CONNECT_RETRY_MS));
        continue;
      }
      const client = new QmpClient(socket, options.onEvent);
      try {
        await client.waitForGreeting(Math.max(1000, deadline - Date.now()));
        await client.execute('qmp_capabilities');
        return client;
      } catch (err) {
        client.close();
        throw err;
      }
    }
  }

  /**
   * Runs `command` with optional `args` and resolves with its `return` value.
   * @throws QmpError when QEMU answers with `error`; Error on timeout or a closed connection.
   */
  execute<T = unknown>(
    command: string,
    args?: Record<string, unknown>,
    timeoutMs = DEFAULT_COMMAND_TIMEOUT_MS,
  ): Promise<T> {
    if (this.closedError) return Promise.reject(this.closedError);
    const id = `c${this.nextId++}`;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`QMP ${command}: no reply within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { command, resolve: resolve as (v: unknown) => void, reject, timer });
      const message = args ? { execute: command, arguments: args, id } : { execute: command, id };
      this.socket.write(`${JSON.stringify(message)}\n`);
    });
  }

  /** True once the connection is gone (QEMU exited or {@link close} was called). */
  get closed(): boolean {
    return this.closedError !== undefined;
  }

  /** Closes the connection; pending commands reject. Idempotent. */
  close(): void {
    this.fail(new Error('QMP connection closed'));
    this.socket.destroy();
  }

  private waitForGreeting(timeoutMs: number): Promise<void> {
    if (this.gotGreeting) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('QMP: no greeting from QEMU')), timeoutMs);
      this.greeted = () => {
        clearTimeout(timer);
        resolve();
      };
      this.socket.once('close', () => {
        clearTimeout(timer);
        reject(new Error('QMP connection closed before the greeting'));
      });
    });
  }

  private onData(chunk: string): void {
    this.buffer += chunk;
    for (let nl = this.buffer.indexOf('\n'); nl >= 0; nl = this.buffer.indexOf('\n')) {
      const line = this.buffer.slice(0, nl).trim();
      this.buffer = this.buffer.slice(nl + 1);
      if (line) this.onMessage(line);
    }
  }

  private onMessage(line: string): void {
    let msg: Record<string, unknown>;
    try {
      msg = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return; // QEMU only sends JSON; a torn line cannot be acted upon anyway.
    }
    if ('QMP' in msg) {
      this.gotGreeting = true;
      this.greeted?.();
      this.greeted = undefined;
      return;
    }
    if (typeof msg.event === 'string') {
      this.onEvent?.(msg as unknown as QmpEvent);
      return;
    }
    const id = typeof msg.id === 'string' ? msg.id : undefined;
    const pending = id ? this.pending.get(id) : undefined;
    if (!pending || !id) return;
    this.pending.delete(id);
    clearTimeout(pending.timer);
    const error = msg.error as { class?: string; desc?: string } | undefined;
    if (error) {
      pending.reject(new QmpError(error.class ?? 'GenericError', error.desc ?? '', pending.command));
    } else {
      pending.resolve(msg.return);
    }
  }

  private fail(err: Error): void {
    if (!this.closedError) this.closedError = err;
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      this.pending.delete(id);
      p.reject(new Error(`QMP ${p.command}: ${err.message}`));
    }
  }
}

function openSocket(path: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(path);
    socket.once('connect', () => {
      socket.removeListener('error', reject);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}
