/**
 * Boot artefacts of the local test machines: runs `hack/install-packages.sh` (Debian packages, once)
 * and `hack/build-vm-artefacts.sh` (kernel + busybox initramfs, cached), and writes the image catalog
 * that names them: `metal/probe:latest` (discovery), `metal/os:latest` (a claim's OS) and
 * `metal/cleanup:latest` (the cleanup boot on release: erases the disks, then reports), the same
 * kernel and initramfs told apart by `metal.mode` and `metal.erase` (hack/vm/init).
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from './control-plane.js';

export const PROBE_IMAGE = 'metal/probe:latest';
export const OS_IMAGE = 'metal/os:latest';
/** An OS that fetches its ignition but never reports `/bootstate` (for timeout and retry tests). */
export const SILENT_OS_IMAGE = 'metal/os-silent:latest';
/** The cleanup image: erases the first and last MiB of every disk, checks, then posts `/bootstate`. */
export const CLEANUP_IMAGE = 'metal/cleanup:latest';
/** Kernel arguments that make the initramfs the cleanup image (hack/vm/init `metal.erase`). */
export const CLEANUP_CMDLINE = ' metal.erase=metadata';
/** An OS that writes {@link DISK_MARKER} to its disk (a tenant's data, for the cleanup tests). */
export const MARKER_OS_IMAGE = 'metal/os-disk-marker:latest';
export const DISK_MARKER = 'metal-tenant-data-7f3c9a';

/** Installs what is missing and returns the folder holding `vmlinuz` and `initramfs.cpio.gz`. */
export function buildVmArtefacts(): string {
  execFileSync('bash', [join(REPO_ROOT, 'hack', 'install-packages.sh')], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const out = execFileSync('bash', [join(REPO_ROOT, 'hack', 'build-vm-artefacts.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return out.trim().split('\n').pop()!;
}

/** Writes the image catalog YAML for the artefacts in `dir` to `file`; returns `file`. */
export function writeImageCatalog(dir: string, file: string): string {
  const entry = (mode: string, extra = '') =>
    [
      `    kernel: ${join(dir, 'vmlinuz')}`,
      `    initrd: ${join(dir, 'initramfs.cpio.gz')}`,
      // `quiet` keeps the kernel from echoing its command line (and the attempt token) on the console.
      `    cmdline: console=ttyS0 quiet${extra}`,
      `    mode: ${mode}`,
    ].join('\n');
  writeFileSync(
    file,
    [
      'images:',
      `  ${PROBE_IMAGE}:`,
      entry('probe'),
      `  ${OS_IMAGE}:`,
      entry('os'),
      `  ${SILENT_OS_IMAGE}:`,
      entry('os', ' metal.callback=skip'),
      `  ${CLEANUP_IMAGE}:`,
      entry('os', CLEANUP_CMDLINE),
      `  ${MARKER_OS_IMAGE}:`,
      entry('os', ` metal.disk-marker=${DISK_MARKER}`),
      '',
    ].join('\n'),
  );
  return file;
}
