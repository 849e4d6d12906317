/**
 * Structured JSON logging (pino). Level from `LOG_LEVEL` (default `info`). Credentials must never reach
 * a log line: the redact list below censors the usual places a token or password ends up when an
 * object (request, headers, config, Secret) is logged whole. Code should still never log them.
 */
import pino from 'pino';

/** Paths (pino redact syntax, `*` = any one key) censored in every log record. */
export const REDACT_PATHS = [
  'authorization',
  'Authorization',
  'headers.authorization',
  'headers.Authorization',
  'headers.cookie',
  '*.headers.authorization',
  '*.headers.Authorization',
  '*.headers.cookie',
  'req.headers.authorization',
  'req.headers.cookie',
  'token',
  '*.token',
  'bearerToken',
  '*.bearerToken',
  'password',
  '*.password',
  'stringData',
  '*.stringData',
  'err.config.headers',
];

export interface LoggerOptions {
  /** Overrides `LOG_LEVEL`. */
  level?: string;
  /** Where JSON lines go (default stdout); tests pass a capture stream. */
  destination?: pino.DestinationStream;
  /** Extra bindings on every record. */
  base?: Record<string, unknown>;
}

/** A root logger named `name` (the `name` field of every record). */
export function newLogger(name: string, opts: LoggerOptions = {}): pino.Logger {
  const options: pino.LoggerOptions = {
    name,
    level: opts.level ?? process.env.LOG_LEVEL ?? 'info',
    base: { pid: process.pid, ...opts.base },
    redact: { paths: REDACT_PATHS, censor: '[REDACTED]' },
    serializers: { err: pino.stdSerializers.err },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return opts.destination ? pino(options, opts.destination) : pino(options);
}
