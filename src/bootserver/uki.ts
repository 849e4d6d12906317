/**
 * Unified kernel images (UKI) for UEFI HTTP boot: one PE/EFI file holding systemd's EFI stub, the
 * kernel, the initrd and the kernel command line, so firmware that can fetch one URL boots it all.
 * Layout per the UAPI Group's UKI specification (sections `.linux`, `.initrd`, `.cmdline`, `.osrel`),
 * assembled with binutils `objcopy` from Debian's `systemd-boot-efi` stub (`linuxx64.efi.stub`,
 * systemd 252: section addresses are set explicitly, above the stub's own sections).
 *
 * The command line carries the attempt token, so a UKI is built per attempt (about a second) and
 * kept in a private folder (mode 0700) keyed by a hash of its inputs, and removed by
 * {@link UkiBuilder.close}. Bounds (security review N7):
 * - builds: at most `maxBuilds` objcopy runs at once and `maxQueued` waiting; beyond, {@link UkiBusy}
 *   (the route answers 503 + `Retry-After`), so a burst of boots cannot start unbounded builds;
 * - the folder: at most `maxEntries` files and `maxBytes` bytes, least recently used removed first,
 *   but never a file under a lease ({@link UkiBuilder.lease}: the route holds one until the response
 *   ended), so a file handed out is never deleted before it was sent; when only leased files are
 *   left and a build would exceed `maxBytes`, {@link UkiBusy} too;
 * - a file's life: {@link UkiBuilder.discard} removes the UKI of inputs that will not be served
 *   again (an attempt changed, its SBC deleted: uki-prebuild.ts) at once, or when its last lease ends.
 * Every objcopy run is counted in `metal_uki_builds_total` of `metrics` (when given) and in
 * {@link UkiBuilder.builds}, so a test or benchmark can tell a prebuilt file from one built on request.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Counter, type Registry } from 'prom-client';
import { readPeHeaders } from './pe-headers.js';

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
  /** Most bytes of UKIs kept (default 4 GiB). */
  maxBytes?: number;
  /** Concurrent objcopy runs (default 2). */
  maxBuilds?: number;
  /** Builds waiting for a slot (default 8). */
  maxQueued?: number;
  /** Where `metal_uki_builds_total` (objcopy runs started) is registered; none: {@link UkiBuilder.builds} only. */
  metrics?: Registry;
}

const buildCounters = new WeakMap<Registry, Counter>();
function buildCounter(registry: Registry | undefined): Counter | undefined {
  if (!registry) return undefined;
  let c = buildCounters.get(registry);
  if (!c) {
    c = new Counter({
      name: 'metal_uki_builds_total',
      help: 'UKI builds (objcopy runs) started, prebuilds and builds on request alike.',
      registers: [registry],
    });
    buildCounters.set(registry, c);
  }
  return c;
}

/** Thrown when no build can start now (queue full, cache full of leased files): retry later. */
export class UkiBusy extends Error {}

/** A UKI file kept from deletion until {@link UkiLease.release} (idempotent). */
export interface UkiLease {
  path: string;
  /** Bytes. */
  size: number;
  /** The file's PE headers (pe-headers.ts; empty when they cannot be told), read once when it was built. */
  peHeaders: Buffer;
  release(): void;
}

interface Entry {
  file: Promise<string>;
  /** Bytes once built (0 before). */
  bytes: number;
  /** The built file's PE headers (empty before). */
  peHeaders: Buffer;
  refs: number;
  done: boolean;
  /** Removed when built and no longer leased ({@link UkiBuilder.discard}). */
  discard?: boolean;
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
  /** Key → entry, least recently used first. */
  private readonly built = new Map<string, Entry>();
  private total = 0;
  private running = 0;
  private readonly waiting: (() => void)[] = [];
  private readonly counter: Counter | undefined;
  /** objcopy runs started since construction. */
  builds = 0;

  constructor(private readonly opts: UkiBuilderOptions = {}) {
    this.counter = buildCounter(opts.metrics);
  }

  /**
   * The UKI for `input` under a lease: built on first request (queued behind `maxBuilds` others),
   * reused for the same inputs (kernel and initrd identified by path, size and modification time),
   * and not deleted before `release()`. The caller must release it, also on errors after it resolved.
   * @throws UkiBusy when the build queue is full or the cache holds only leased files.
   * @throws Error when objcopy fails or a file is missing (the failed build is not cached).
   */
  async lease(input: UkiInput): Promise<UkiLease> {
    const key = this.key(input);
    let e = this.built.get(key);
    if (e) {
      this.built.delete(key); // most recently used last
      this.built.set(key, e);
    } else {
      const need = statSync(input.kernel).size + statSync(input.initrd).size;
      this.evict(need);
      if (this.waiting.length >= (this.opts.maxQueued ?? 8))
        throw new UkiBusy(`${this.running} UKI builds running and ${this.waiting.length} queued`);
      if (this.total + need > (this.opts.maxBytes ?? 4 * 1024 ** 3))
        throw new UkiBusy('the UKI cache is full of files being served');
      const entry: Entry = {
        file: Promise.resolve(''),
        bytes: 0,
        peHeaders: Buffer.alloc(0),
        refs: 0,
        done: false,
      };
      entry.file = this.build(input, key).then(
        (f) => {
          let bytes: number;
          try {
            bytes = statSync(f).size;
          } catch (err) {
            // The file is gone: not kept as built, so the next lease builds it again.
            if (this.built.get(key) === entry) this.built.delete(key);
            throw err;
          }
          entry.done = true;
          entry.bytes = bytes;
          entry.peHeaders = readPeHeaders(f);
          this.total += entry.bytes;
          this.evict(0);
          if (entry.discard && entry.refs === 0) this.remove(key, entry);
          return f;
        },
        (err: unknown) => {
          if (this.built.get(key) === entry) this.built.delete(key);
          throw err;
        },
      );
      this.built.set(key, entry);
      e = entry;
    }
    const entry = e;
    entry.refs++;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      entry.refs--;
      if (entry.discard && entry.refs === 0 && entry.done) this.remove(key, entry);
      this.evict(0);
    };
    try {
      const file = await entry.file;
      return { path: file, size: entry.bytes, peHeaders: entry.peHeaders, release };
    } catch (err) {
      release();
      throw err;
    }
  }

  /**
   * The path of the UKI for `input`, without a lease: it may be deleted by a later build at any time
   * (tests and tools that read it at once). Throws as {@link UkiBuilder.lease}.
   */
  async get(input: UkiInput): Promise<string> {
    const l = await this.lease(input);
    l.release();
    return l.path;
  }

  /**
   * Whether the UKI of `input` is kept: `built` (on disk), `building`, or `undefined` (not kept, or its
   * kernel or initrd is gone). Reads no file but the inputs' metadata.
   */
  state(input: UkiInput): 'built' | 'building' | undefined {
    let key: string;
    try {
      key = this.key(input);
    } catch {
      return undefined;
    }
    const e = this.built.get(key);
    return e ? (e.done ? 'built' : 'building') : undefined;
  }

  /**
   * Removes the UKI of `input` (it carries a token that is no longer served): at once when nobody
   * leases it, else when its last lease is released; a build in progress is removed when it ends
   * unleased. A later {@link lease} of the same input builds it again. Unknown inputs: nothing.
   */
  discard(input: UkiInput): void {
    let key: string;
    try {
      key = this.key(input);
    } catch {
      return; // kernel or initrd gone: the key (and so the entry) cannot be named; LRU removes it
    }
    const e = this.built.get(key);
    if (!e) return;
    e.discard = true;
    if (e.done && e.refs === 0) this.remove(key, e);
  }

  /** Bytes of UKIs kept. */
  bytes(): number {
    return this.total;
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

  /** Runs `work` in one of the `maxBuilds` slots (FIFO). */
  private async slot<T>(work: () => Promise<T>): Promise<T> {
    if (this.running >= (this.opts.maxBuilds ?? 2)) await new Promise<void>((ok) => this.waiting.push(ok));
    else this.running++;
    try {
      return await work();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }

  private build(i: UkiInput, key: string): Promise<string> {
    return this.slot(async () => {
      this.builds++;
      this.counter?.inc();
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
    });
  }

  /**
   * Removes least recently used built files nobody leases until at most `maxEntries` are kept and
   * `need` more bytes fit in `maxBytes`. Builds in progress and leased files stay.
   */
  private evict(need: number): void {
    const maxEntries = this.opts.maxEntries ?? 32;
    const maxBytes = this.opts.maxBytes ?? 4 * 1024 ** 3;
    for (const [key, e] of [...this.built]) {
      if (this.built.size <= maxEntries && this.total + need <= maxBytes) return;
      if (!e.done || e.refs > 0) continue;
      this.remove(key, e);
    }
  }

  /** Forgets a built, unleased entry and deletes its file (asynchronously). */
  private remove(key: string, e: Entry): void {
    if (this.built.get(key) !== e) return;
    this.built.delete(key);
    this.total -= e.bytes;
    void e.file.then((f) => fs.rm(f, { force: true })).catch(() => undefined);
  }
}
