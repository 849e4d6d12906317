/**
 * Start-up check of the folders a process writes to (the blob cache, `$TMPDIR` for UKI and ISO
 * builds). In a container with `readOnlyRootFilesystem: true` a folder without a writable volume
 * fails only at the first write; this check fails at start instead, with the flag or variable to
 * change, so a Deployment that cannot work never reports Ready.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Thrown by {@link assertWritableDir}; `message` names the folder, the setting and the cause. */
export class NotWritableError extends Error {
  constructor(
    readonly dir: string,
    readonly setting: string,
    cause: unknown,
  ) {
    const why = (cause as NodeJS.ErrnoException)?.code ?? String(cause);
    super(
      `${setting}: ${dir} is not writable (${why}); mount a writable volume there (e.g. an emptyDir with a sizeLimit) or point ${setting} at one`,
    );
    this.name = 'NotWritableError';
  }
}

/**
 * Creates `dir` (recursively) and writes and removes a probe file in it. `setting` is what the
 * operator changes, e.g. `--image-cache-dir` or `TMPDIR`. Throws {@link NotWritableError}.
 */
export function assertWritableDir(dir: string, setting: string): void {
  const probe = join(dir, `.write-probe-${process.pid}`);
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(probe, '');
    rmSync(probe, { force: true });
  } catch (err) {
    throw new NotWritableError(dir, setting, err);
  }
}
