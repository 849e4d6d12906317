/**
 * Unified kernel images (UKI) for UEFI HTTP boot: one PE/EFI file holding systemd's EFI stub, the
 * kernel, the initrd and the kernel command line, so firmware that can fetch one URL boots it all.
 * Layout per the UAPI Group's UKI specification (sections `.linux`, `.initrd`, `.cmdline`, `.osrel`),
 * assembled with binutils `objcopy` from Debian's `systemd-boot-efi` stub (`linuxx64.efi.stub`,
 * systemd 252: section addresses are set explicitly, above the stub's own sections).
 *
 * The command line carries the attempt token, so a UKI is built per attempt (about a second) and
 * kept in a private folder (mode 0700) keyed by a hash of its inputs; the folder holds at most
 * `maxEntries` files, oldest removed first, and is removed by {@link UkiBuilder.close}.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Debian `systemd-boot-efi`. */
export const DEFAULT_EFI_STUB = '/usr/lib/systemd/boot/efi/linuxx64.efi.stub';
/** Debian `binutils`. */
export const DEFAULT_OBJCOPY = 'objcopy';

export interface UkiInput {
  /** Path of the kernel (bzImage with EFI stub). */
  kernel: string;
  /** Path of the initrd. */
  initrd: string;
  /** Kernel command line, embedded in `.cmdline`. */
  cmdline: string;
}

export interface UkiBuilderOptions {
  stub?: string;
  objcopy?: string;
  /** Most UKIs kept (default 32). */
  maxEntries?: number;
}

const MiB = 1024 * 1024;
const alignUp = (n: number, to: number) => Math.ceil(n / to) * to;

/**
 * The `objcopy` arguments that turn `stub` into a UKI at `out`. Addresses: `.osrel` 0x20000 and
 * `.cmdline` 0x30000 above the stub (it ends below 0x20000), `.linux` at 32 MiB, `.initrd` at the
 * next MiB boundary after the kernel but not below 48 MiB (the addresses of systemd's own examples).
 * @throws RangeError when the stub's sections reach 0x20000 (another stub build).
 */
export function ukiObjcopyArgs(
  files: { stub: string; kernel: string; initrd: string; cmdline: string; osrel: string; out: string },
  kernelBytes: number,
): string[] {
  const linux = 32 * MiB;
  const initrd = Math.max(48 * MiB, alignUp(linux + kernelBytes, MiB));
  const hex = (n: number) => `0x${n.toString(16)}`;
  return [
    '--add-section',
    `.osrel=${files.osrel}`,
    '--change-section-vma',
    `.osrel=${hex(0x20000)}`,
    '--add-section',
    `.cmdline=${files.cmdline}`,
    '--change-section-vma',
    `.cmdline=${hex(0x30000)}`,
    '--add-section',
    `.linux=${files.kernel}`,
    '--change-section-vma',
    `.linux=${hex(linux)}`,
    '--add-section',
    `.initrd=${files.initrd}`,
    '--change-section-vma',
    `.initrd=${hex(initrd)}`,
    files.stub,
    files.out,
  ];
}

export class UkiBuilder {
  private readonly dir = mkdtempSync(path.join(os.tmpdir(), 'metal-uki-'));
  private readonly built = new Map<string, Promise<string>>();

  constructor(private readonly opts: UkiBuilderOptions = {}) {}

  /**
   * The UKI for `input`, built on first request and reused for the same inputs (kernel and initrd
   * identified by path, size and modification time).
   * @returns its path.
   * @throws Error when objcopy fails or a file is missing (the failed build is not cached).
   */
  get(input: UkiInput): Promise<string> {
    const key = this.key(input);
    let p = this.built.get(key);
    if (!p) {
      p = this.build(input, key);
      p.catch(() => this.built.delete(key));
      this.built.set(key, p);
      this.evict();
    }
    return p;
  }

  /** Removes every UKI built. */
  close(): void {
    this.built.clear();
    rmSync(this.dir, { recursive: true, force: true });
  }

  private key(i: UkiInput): string {
    const id = (f: string) => {
      const st = statSync(f);
      return `${f}:${st.size}:${st.mtimeMs}`;
    };
    return createHash('sha256')
      .update(`${id(i.kernel)}\n${id(i.initrd)}\n${i.cmdline}`)
      .digest('hex')
      .slice(0, 32);
  }

  private async build(i: UkiInput, key: string): Promise<string> {
    const out = path.join(this.dir, `${key}.efi`);
    const cmdline = path.join(this.dir, `${key}.cmdline`);
    const osrel = path.join(this.dir, 'os-release');
    await fs.writeFile(cmdline, i.cmdline, { mode: 0o600 });
    await fs.writeFile(osrel, 'ID=metal\nNAME="metal-operator boot image"\n');
    const kernelBytes = (await fs.stat(i.kernel)).size;
    const args = ukiObjcopyArgs(
      { stub: this.opts.stub ?? DEFAULT_EFI_STUB, kernel: i.kernel, initrd: i.initrd, cmdline, osrel, out },
      kernelBytes,
    );
    try {
      await run(this.opts.objcopy ?? DEFAULT_OBJCOPY, args, { timeout: 60_000 });
    } finally {
      await fs.rm(cmdline, { force: true });
    }
    return out;
  }

  private evict(): void {
    const max = this.opts.maxEntries ?? 32;
    while (this.built.size > max) {
      const [oldest, p] = this.built.entries().next().value as [string, Promise<string>];
      this.built.delete(oldest);
      void p.then((f) => fs.rm(f, { force: true })).catch(() => undefined);
    }
  }
}
