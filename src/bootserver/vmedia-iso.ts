/**
 * Per-attempt ISO images for the `VirtualMedia` boot method: an ISO 9660 image whose El Torito boot
 * catalog has one UEFI entry (no emulation), an EFI system partition image (FAT) holding the attempt's
 * unified kernel image as `EFI/BOOT/BOOTX64.EFI` (the removable-media default path, UEFI 2.10
 * §3.5.1.1), so firmware booting the CD starts the kernel with the attempt's command line and initrd.
 * Tools: Debian's `mtools` (`mformat`, `mmd`, `mcopy`: the FAT image without root or loop devices) and
 * `xorriso` (`-as mkisofs`). The UKI comes from {@link UkiBuilder} (bootserver/uki.ts).
 *
 * The command line carries the attempt token, so an ISO is built once per attempt (key: the caller's
 * attempt identity plus a hash of the inputs; concurrent requests share one build) and kept in a
 * private folder (mode 0700). Bounded: at most `concurrency` builds run at once and `maxQueued`
 * wait (more: {@link IsoBusyError}); kept ISOs total at most `maxBytes` and `maxEntries` files, oldest
 * removed first; an ISO larger than `maxBytes` alone is refused ({@link IsoTooLargeError}). The folder
 * is removed by {@link VirtualMediaIsoBuilder.close}.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { UkiBuilder, UkiInput } from './uki.js';

const run = promisify(execFile);
const MiB = 1024 * 1024;
const TOOL_TIMEOUT_MS = 60_000;

export interface IsoBuilderOptions {
  /** Debian `xorriso`. */
  xorriso?: string;
  /** Folder of Debian `mtools` (`mformat`, `mmd`, `mcopy`); default: from PATH. */
  mtoolsDir?: string;
  /** Builds at once (default 2). */
  concurrency?: number;
  /** Builds waiting beyond `concurrency` (default 16); more are refused with {@link IsoBusyError}. */
  maxQueued?: number;
  /** Bytes of ISOs kept (default 4 GiB); also the largest single ISO. */
  maxBytes?: number;
  /** ISOs kept (default 32). */
  maxEntries?: number;
}

/** Too many builds are running and waiting: try again shortly (the route answers 503 + Retry-After). */
export class IsoBusyError extends Error {
  override name = 'IsoBusyError';
}

/** The ISO would exceed the byte bound alone (the route answers 409). */
export class IsoTooLargeError extends Error {
  override name = 'IsoTooLargeError';
}

export interface BuiltIso {
  path: string;
  /** Bytes. */
  size: number;
}

/**
 * The FAT image size for an EFI file of `efiBytes`: the file plus 1/32 for FAT tables and clusters and
 * 1 MiB of slack, rounded up to a MiB. Pure.
 */
export function espImageBytes(efiBytes: number): number {
  return Math.ceil((efiBytes + Math.ceil(efiBytes / 32) + MiB) / MiB) * MiB;
}

/** `xorriso -as mkisofs` arguments: one UEFI El Torito entry, the ESP image, volume id `METALBOOT`. Pure. */
export function xorrisoArgs(root: string, espName: string, out: string): string[] {
  return [
    '-as',
    'mkisofs',
    '-quiet',
    '-o',
    out,
    '-V',
    'METALBOOT',
    '-J',
    '-R',
    '-eltorito-platform',
    'efi',
    '-e',
    espName,
    '-no-emul-boot',
    root,
  ];
}

export class VirtualMediaIsoBuilder {
  private readonly dir = mkdtempSync(path.join(os.tmpdir(), 'metal-vmedia-'));
  private readonly built = new Map<string, Promise<BuiltIso>>();
  private readonly sizes = new Map<string, number>();
  private running = 0;
  private readonly waiting: Array<() => void> = [];
  private closed = false;

  constructor(
    private readonly uki: UkiBuilder,
    private readonly opts: IsoBuilderOptions = {},
  ) {}

  /**
   * The ISO of attempt `attemptKey` (e.g. `<sbc uid>/<attempt>`) for `input`, built on first request.
   * @throws IsoBusyError when the build queue is full; IsoTooLargeError; Error when a tool fails (the
   * failed build is not cached).
   */
  get(attemptKey: string, input: UkiInput): Promise<BuiltIso> {
    const key = createHash('sha256')
      .update(`${attemptKey}\n${input.kernel}\n${input.initrd}\n${input.cmdline}`)
      .digest('hex')
      .slice(0, 32);
    let p = this.built.get(key);
    if (!p) {
      if (this.running >= this.concurrency && this.waiting.length >= (this.opts.maxQueued ?? 16))
        return Promise.reject(new IsoBusyError('too many virtual-media ISO builds in progress'));
      p = this.slot(() => this.build(input, key));
      p.catch(() => {
        this.built.delete(key);
        this.sizes.delete(key);
      });
      this.built.set(key, p);
      void p.then(
        (iso) => {
          this.sizes.set(key, iso.size);
          this.evict(key);
        },
        () => undefined,
      );
    }
    return p;
  }

  /** Removes every ISO built. */
  close(): void {
    this.closed = true;
    this.built.clear();
    this.sizes.clear();
    rmSync(this.dir, { recursive: true, force: true });
  }

  private get concurrency(): number {
    return Math.max(1, this.opts.concurrency ?? 2);
  }

  private async slot<T>(f: () => Promise<T>): Promise<T> {
    if (this.running >= this.concurrency) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.running++;
    try {
      return await f();
    } finally {
      this.running--;
      this.waiting.shift()?.();
    }
  }

  private tool(name: string): string {
    return this.opts.mtoolsDir ? path.join(this.opts.mtoolsDir, name) : name;
  }

  private async build(input: UkiInput, key: string): Promise<BuiltIso> {
    if (this.closed) throw new Error('the ISO builder is closed');
    const efi = await this.uki.get(input);
    const efiBytes = (await fs.stat(efi)).size;
    const maxBytes = this.opts.maxBytes ?? 4096 * MiB;
    // The ISO holds the ESP image once, plus a few hundred KiB of ISO 9660 structures.
    if (espImageBytes(efiBytes) + MiB > maxBytes)
      throw new IsoTooLargeError(
        `the boot image (${efiBytes} bytes) exceeds the ISO bound of ${maxBytes} bytes`,
      );
    const work = await fs.mkdtemp(path.join(this.dir, `${key}-`));
    const out = path.join(this.dir, `${key}.iso`);
    try {
      const esp = path.join(work, 'esp.img');
      await fs.writeFile(esp, '');
      await fs.truncate(esp, espImageBytes(efiBytes));
      const m = { timeout: TOOL_TIMEOUT_MS, env: { ...process.env, MTOOLS_SKIP_CHECK: '1' } };
      await run(this.tool('mformat'), ['-i', esp, '-v', 'METALESP', '::'], m);
      await run(this.tool('mmd'), ['-i', esp, '::/EFI', '::/EFI/BOOT'], m);
      await run(this.tool('mcopy'), ['-i', esp, efi, '::/EFI/BOOT/BOOTX64.EFI'], m);
      await run(this.opts.xorriso ?? 'xorriso', xorrisoArgs(work, 'esp.img', out), {
        timeout: TOOL_TIMEOUT_MS,
      });
      const size = (await fs.stat(out)).size;
      return { path: out, size };
    } catch (err) {
      await fs.rm(out, { force: true });
      throw err;
    } finally {
      await fs.rm(work, { recursive: true, force: true });
    }
  }

  /** Drops the oldest ISOs beyond the bounds, never `keep` (the one just built). */
  private evict(keep: string): void {
    const maxBytes = this.opts.maxBytes ?? 4096 * MiB;
    const maxEntries = this.opts.maxEntries ?? 32;
    let total = [...this.sizes.values()].reduce((a, b) => a + b, 0);
    for (const [key, size] of [...this.sizes]) {
      if (total <= maxBytes && this.sizes.size <= maxEntries) break;
      if (key === keep) continue;
      this.sizes.delete(key);
      this.built.delete(key);
      total -= size;
      void fs.rm(path.join(this.dir, `${key}.iso`), { force: true }).catch(() => undefined);
    }
  }
}
