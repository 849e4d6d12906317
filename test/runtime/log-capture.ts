/** A pino logger whose JSON records land in an array, for asserting on what was logged. */
import type pino from 'pino';
import { newLogger } from '../../src/runtime/logger.js';

export interface LogRecord {
  level: number;
  msg: string;
  err?: { message?: string; type?: string };
  [k: string]: unknown;
}

export function captureLogger(name: string, level = 'debug'): { log: pino.Logger; records: LogRecord[] } {
  const records: LogRecord[] = [];
  const log = newLogger(name, {
    level,
    destination: {
      write(line: string) {
        records.push(JSON.parse(line) as LogRecord);
      },
    },
  });
  return { log, records };
}
