/**
 * The body of an HTTP-boot GET whose PE headers go out before the attempt's pin is stored
 * (http-boot.ts): the headers, then the pin, then — only once the pin is stored — the rest of the
 * UKI. The secret part of a UKI, the attempt token, lives in its `.cmdline` section, past the
 * headers (pe-headers.ts), so the first byte waits for no API work and no byte of a section leaves
 * before the pin's compare-and-swap succeeded (attempt-pin.ts). A refused pin (another replica's
 * client won it, the API server failed) closes the connection after the headers: the client got
 * no byte of a section, so no token. Pure sequencing: the I/O comes in as functions.
 */
import type { Logger } from 'pino';

export interface HeadFirstBody {
  /** The PE headers (non-empty, checked free of the token: pe-headers.ts `withoutSecret`). */
  head: Buffer;
  /** Stores the pin; rejects when it is refused or cannot be stored. */
  pin: () => Promise<void>;
  /** The rest of the file, from `head.length` on; started only after the pin was stored. */
  rest: () => AsyncIterable<Buffer>;
  /** Whether the response already closed (its client left): then no pin is started. */
  closed: () => boolean;
  /**
   * Resolves when the pin may start (first-byte-priority.ts `turn`: while other requests wait for
   * their first byte, the pin's API write waits too, at most its stall bound); `undefined`: now.
   */
  turn?: () => Promise<unknown> | undefined;
  /** Closes the connection (after a refused pin). */
  abort: () => void;
  log: Logger;
}

/**
 * Yields `head`, then (after its `turn`) stores the pin and yields `rest()` once it is stored. A
 * client gone by then gets no pin written for it; a refused pin is logged, the connection closed
 * (`abort`) and nothing more yielded. Throws what `rest()` throws.
 */
export async function* headersThenFile(b: HeadFirstBody): AsyncGenerator<Buffer> {
  yield b.head;
  const turn = b.turn?.();
  if (turn) await turn;
  if (b.closed()) return;
  try {
    // Started once the headers were taken for the socket: the first byte waits for nothing else.
    await b.pin();
  } catch (err) {
    b.log.warn(
      { error: err instanceof Error ? err.message : String(err) },
      'HTTP boot file refused after its PE headers were sent: connection closed, no section sent',
    );
    b.abort();
    return;
  }
  yield* b.rest();
}
