/**
 * A request to the virtual BMC as the route handlers see it: the record kept for tests
 * ({@link RequestRecord}), the body read and parsed ({@link readBody}: 413 over 64 KiB, 415 for a
 * non-JSON content type, 400 for malformed JSON), the path cut into segments ({@link pathSegments}:
 * 400 for a malformed escape), and the parsed request with its authenticated caller
 * ({@link RedfishRequest}).
 */
import type { IncomingMessage } from 'node:http';
import type { AccountView } from '../accounts.js';
import { fail } from './reply.js';

/** One request as the service saw it, for tests. Passwords in bodies are replaced by `***`. */
export interface RequestRecord {
  /** When the request arrived, ms since the epoch. */
  at: number;
  method: string;
  path: string;
  /** HTTP status sent; 0 when the connection was dropped by the `dropConnections` fault. */
  status: number;
  /**
   * When the response was written, ms since the epoch; absent while it is held back by a delay
   * fault (`responseDelayMs`, `slowRequests`) and when the connection was dropped. The status is
   * set before the delay, so this is what tells a request still in flight.
   */
  answeredAt?: number;
  auth: 'none' | 'basic' | 'session';
  /** The account that authenticated, when one did. */
  user?: string;
  ifMatch: string | undefined;
  body: unknown;
  /**
   * Boot properties of an accepted PATCH whose value equalled the one already in effect (current or
   * pending): a re-sent unchanged field. Absent on other requests.
   */
  unchangedFields?: string[];
}

/** An authenticated request below `/redfish/v1`, as the resource handlers get it. */
export interface RedfishRequest {
  method: string;
  /** The path without trailing slashes, e.g. `/redfish/v1/Systems/abc`. */
  path: string;
  /** The decoded segments below `/redfish/v1`, e.g. `['Systems', 'abc']`. */
  seg: string[];
  /** The parsed JSON body; undefined when there was none. */
  body: unknown;
  caller: AccountView;
  /** The request's record: handlers note what they saw (`unchangedFields`), `ifMatch` is read there. */
  rec: RequestRecord;
}

const MAX_BODY_BYTES = 64 * 1024;

/** The decoded segments of `path` below `/redfish/v1` (empty ones dropped); 400 for a malformed escape. */
export function pathSegments(path: string): string[] {
  return path
    .slice('/redfish/v1'.length)
    .split('/')
    .filter((s) => s !== '')
    .map((s) => {
      try {
        return decodeURIComponent(s);
      } catch {
        return fail(400, 'ResourceMissingAtURI', `malformed path ${path}`);
      }
    });
}

/** The JSON body of `req`, or undefined when it has none (413, 415, 400 as above). */
export async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) fail(413, 'PayloadTooLarge', `request body over ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  if (size === 0) return undefined;
  const type = req.headers['content-type'];
  if (type !== undefined && !/^application\/json\b/i.test(type)) {
    fail(415, 'UnsupportedMediaType', `content type ${type} is not application/json`);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    return fail(400, 'MalformedJSON', 'the request body is not valid JSON');
  }
}

/** `body` with a top-level `Password` replaced by `***`, for the request log. */
export function redact(body: unknown): unknown {
  if (typeof body === 'object' && body !== null && 'Password' in body) return { ...body, Password: '***' };
  return body;
}
