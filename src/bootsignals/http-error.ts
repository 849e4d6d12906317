/**
 * Errors that carry the HTTP answer of the registry and the boot server (docs/ARCHITECTURE.md, 'Failure handling in one place each',
 * "Bad input"): 400 malformed, 401 missing/wrong token, 403 script pinned to another client,
 * 404 unknown server, 409 stale or ambiguous, 413 body over 1 MiB, 415 wrong content type,
 * 503 + `Retry-After` when the API server cannot be reached. Never 500 for input.
 */
export class HttpError extends Error {
  constructor(
    /** HTTP status to answer. */
    readonly status: number,
    /** CamelCase machine-readable reason, also the `reason` label of the rejection metric. */
    readonly reason: string,
    message: string,
    /** Seconds for the `Retry-After` header (503 only). */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

/** Seconds a client is told to wait when the API server is unreachable. */
export const RETRY_AFTER_SECONDS = 2;

export const badRequest = (reason: string, message: string) => new HttpError(400, reason, message);
export const unavailable = (message: string, retryAfterSeconds = RETRY_AFTER_SECONDS) =>
  new HttpError(503, 'APIUnavailable', message, retryAfterSeconds);
