/**
 * The official Butane translator and Ignition validator (github.com/coreos/ignition/v2 v2.27.0,
 * built from `hack/ignition-tools` by `hack/build-ignition-tools.sh`), run as a child process with
 * bounded input (1 MiB), output (8 MiB), time (10 s) and concurrency (2 processes).
 *
 * The program prints `{ok, config?, error?, report: [{kind, message, path?, line?, column?}]}`;
 * upstream semantics: translation warnings do not fail, errors do.
 *
 * Where the binary is: `binary` given by the caller (manager flag `--ignition-tools`), else
 * `$METAL_IGNITION_TOOLS`, else `ignition-tools` on PATH, else the build script's
 * `${METAL_CACHE:-~/.cache/metal-operator-ts}/bin/ignition-tools`.
 */
import { execFile } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';

/** One entry of the translator's or validator's report (vcontext report entry). */
export interface IgnitionReportEntry {
  kind: 'error' | 'warning' | 'info';
  message: string;
  /** JSON path of the offending field, e.g. `$.storage.files.0.path`. */
  path?: string;
  line?: number;
  column?: number;
}

export interface ToolResult {
  ok: boolean;
  /** Translated Ignition config (translate only, when ok). */
  config?: unknown;
  error?: string;
  report: IgnitionReportEntry[];
}

/** Thrown when the tool cannot be run (missing binary, timeout, crash): an installation fault. */
export class IgnitionToolsUnavailable extends Error {}

/** Largest config accepted, bytes (the boot server's body limit is 1 MiB too). */
export const MAX_CONFIG_BYTES = 1024 * 1024;
const TIMEOUT_MS = 10_000;
const MAX_OUTPUT_BYTES = 8 * 1024 * 1024;
const MAX_PROCESSES = 2;

/** The default binary path (see the file comment). */
export function defaultIgnitionToolsPath(): string {
  if (process.env.METAL_IGNITION_TOOLS) return process.env.METAL_IGNITION_TOOLS;
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const p = join(dir, 'ignition-tools');
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not in this directory
    }
  }
  const cache = process.env.METAL_CACHE ?? join(homedir(), '.cache', 'metal-operator-ts');
  return join(cache, 'bin', 'ignition-tools');
}

/** Formats a report as one line per entry: `error $.storage.files.0.path (line 5, column 13): path not absolute`. */
export function formatReport(report: readonly IgnitionReportEntry[], limit = 10): string {
  const lines = report.slice(0, limit).map((e) => {
    const at = e.line ? ` (line ${e.line}, column ${e.column ?? 0})` : '';
    return `${e.kind}${e.path ? ` ${e.path}` : ''}${at}: ${e.message}`;
  });
  if (report.length > limit) lines.push(`… ${report.length - limit} more`);
  return lines.join('; ');
}

export class IgnitionTools {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(readonly binary = defaultIgnitionToolsPath()) {}

  /** Translates Butane YAML (any variant/version the module registers) into Ignition JSON. */
  translate(butane: string): Promise<ToolResult> {
    return this.run('translate', butane);
  }

  /** Validates Ignition JSON (spec 3.x) with the module's parser and validator. */
  validate(ignition: string): Promise<ToolResult> {
    return this.run('validate', ignition);
  }

  private async run(command: 'translate' | 'validate', input: string): Promise<ToolResult> {
    if (Buffer.byteLength(input) > MAX_CONFIG_BYTES) {
      return {
        ok: false,
        error: `config is larger than ${MAX_CONFIG_BYTES} bytes`,
        report: [{ kind: 'error', message: `config is larger than ${MAX_CONFIG_BYTES} bytes` }],
      };
    }
    if (this.running >= MAX_PROCESSES) await new Promise<void>((ok) => this.waiting.push(ok));
    this.running++;
    try {
      return await this.spawn(command, input);
    } finally {
      this.running--;
      this.waiting.shift()?.();
    }
  }

  private spawn(command: string, input: string): Promise<ToolResult> {
    return new Promise((ok, fail) => {
      const child = execFile(
        this.binary,
        [command],
        { timeout: TIMEOUT_MS, maxBuffer: MAX_OUTPUT_BYTES, env: {} },
        (err, stdout, stderr) => {
          if (err) {
            return fail(
              new IgnitionToolsUnavailable(
                `${this.binary} ${command}: ${(err as NodeJS.ErrnoException).code ?? err.message} ${String(stderr).slice(0, 300)}`.trim(),
              ),
            );
          }
          try {
            const res = JSON.parse(stdout) as ToolResult;
            if (typeof res.ok !== 'boolean' || !Array.isArray(res.report)) throw new Error('shape');
            ok(res);
          } catch {
            fail(new IgnitionToolsUnavailable(`${this.binary} ${command}: unreadable output`));
          }
        },
      );
      child.stdin?.on('error', () => {}); // EPIPE when the child died early: the callback reports it
      child.stdin?.end(input);
    });
  }
}
