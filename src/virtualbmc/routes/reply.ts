/**
 * What a Redfish route handler of the virtual BMC returns or throws: a {@link Reply} (status, JSON
 * body, extra headers), or an {@link HttpFailure} carrying the Redfish error reply ({@link fail}).
 * The helpers here refuse with the statuses the service documents: 400 (body not a JSON object),
 * 405 (method not allowed, with `Allow`). Pure, apart from throwing.
 */
import { redfishError } from '../resources.js';

/** One response: status, body (serialised as JSON; absent: none), extra headers (lower-case names). */
export interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

/** A refusal: thrown by handlers, answered with its {@link Reply} by the request loop. */
export class HttpFailure extends Error {
  constructor(readonly reply: Reply) {
    super(`HTTP ${reply.status}`);
  }
}

/** Throws the Redfish error reply `status` with Base registry message `messageId`. */
export const fail = (
  status: number,
  messageId: string,
  message: string,
  headers?: Record<string, string>,
): never => {
  throw new HttpFailure({ status, body: redfishError(messageId, message), ...(headers ? { headers } : {}) });
};

/** 200 with `body`. */
export function ok(body: unknown): Reply {
  return { status: 200, body };
}

/** Throws 405 (with `Allow`) unless `method` is one of `allowed`. */
export function methods(method: string, allowed: string[]): void {
  if (!allowed.includes(method)) {
    fail(405, 'OperationNotAllowed', `${method} is not allowed here`, { allow: allowed.join(', ') });
  }
}

/** The body as a JSON object; 400 `MalformedJSON` for anything else (absent, array, scalar). */
export function asObject(body: unknown): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return fail(400, 'MalformedJSON', 'the request body must be a JSON object');
  }
  return body as Record<string, unknown>;
}

/** `If-Match` evaluation (RFC 9110 §13.1.1): `*` or a list of entity tags, strong comparison. */
export function etagMatches(header: string, current: string): boolean {
  return header.split(',').some((t) => {
    const tag = t.trim();
    return tag === '*' || tag === current;
  });
}
