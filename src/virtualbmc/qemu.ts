/**
 * The `qemu` back end of the virtual BMC: every {@link Host} is a `qemu-system-x86_64` VM whose
 * firmware network-boots from the boot server: SeaBIOS + Debian's iPXE option ROM for virtio-net
 * (`bios`, default), or OVMF (Debian `ovmf`, per-VM variable store) + iPXE's UEFI driver ROM
 * (`uefi`).
 *
 * Per VM: q35 machine, TCG (KVM only when a probe boot proved it runs guests), memory and CPU count from the
 * identity, SMBIOS types 1 and 2 from the identity (UUID in upper case, as BMCs print it), one
 * virtio-net NIC on QEMU user networking whose DHCP boot file is `<boot server>/ipxe` (or on a tap
 * device of the test network, whose DHCP server says the same), one sparse
 * virtio-blk disk without an OS, the serial console on a Unix socket (QEMU `-chardev socket`, server,
 * no wait) whose output QEMU also appends to the serial log (chardev `logfile`, `logappend`: the log
 * gets every byte whether or not a console client is attached), and a QMP socket for power control. From inside the VM the host's loopback is 10.0.2.2, so loopback boot server URLs
 * are rewritten to that address for the guest.
 *
 * Boot devices map to firmware boot order (`-boot strict=on`, `bootindex`):
 * - `Pxe`: NIC first, then disk.
 * - `Hdd`: disk only; the NIC carries no option ROM, so no network fetch can happen.
 * - `None`: the machine's own order: disk first, then network (option `noneBoot`).
 * - `UefiHttp` (UEFI only): NIC first without the iPXE ROM, so OVMF's HTTP boot client runs; BIOS
 *   VMs have no HTTP boot and boot as `Hdd`.
 * - `Cd`: the virtual CD (an IDE CD-ROM on q35's AHCI, present in every VM, empty until
 *   {@link QemuHost.insertMedia}) first, then disk; the NIC carries no option ROM. OVMF follows the
 *   `bootindex` order (fw_cfg `bootorder`) and boots the ISO's El Torito EFI entry. Inserting or
 *   ejecting while the VM runs changes the medium through QMP (`blockdev-change-medium`, `eject`);
 *   the image itself is fetched by this process in Range reads (media.ts), as a BMC streams it.
 * The order is fixed for the lifetime of a QEMU process: a guest-initiated reboot boots from
 * the same device again; {@link QemuHost.reset} with another device restarts the process.
 */

import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { accessSync, constants as fsConstants, mkdtempSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import {
  type AccelChoice,
  type AccelVerdict,
  accelFromEnv,
  chooseAccel,
  type ProbeGuest,
} from './accel-probe.js';
import type { BootDevice, Host, HostIdentity, HostPowerState } from './host.js';
import { fetchImage } from './media.js';
import { QmpClient, type QmpEvent } from './qmp.js';

/** Debian's (package ipxe-qemu) iPXE ROM for virtio-net; it matches only the modern device ID 1af4:1041. */
export const DEFAULT_IPXE_ROM = '/usr/lib/ipxe/qemu/pxe-virtio.rom';
/** Debian's (package ipxe-qemu) iPXE as a UEFI driver for virtio-net: under OVMF it is the NIC's network boot option. */
export const DEFAULT_IPXE_EFI_ROM = '/usr/lib/ipxe/qemu/efi-virtio.rom';
/** Debian's (package ovmf) UEFI firmware code, 4 MiB flash layout, without Secure Boot keys enrolled. */
export const DEFAULT_OVMF_CODE = '/usr/share/OVMF/OVMF_CODE_4M.fd';
/** Debian's (package ovmf) empty UEFI variable store matching {@link DEFAULT_OVMF_CODE}; every VM gets its own copy. */
export const DEFAULT_OVMF_VARS = '/usr/share/OVMF/OVMF_VARS_4M.fd';

/** `bios`: SeaBIOS + iPXE option ROM. `uefi`: OVMF + iPXE's UEFI driver ROM (or OVMF's own HTTP boot). */
export type Firmware = 'bios' | 'uefi';

/**
 * The VM's NIC backend. `user`: QEMU user networking (slirp) with its built-in DHCP, whose boot
 * file is `<boot server>/ipxe`. `tap`: an existing tap device (created by the test network,
 * src/localstack/test-network.ts) on a bridge with a real DHCP server; QEMU then runs inside
 * `netns` (the namespace holding the tap) when given.
 */
export type QemuNetwork = { mode: 'user' } | { mode: 'tap'; ifname: string; netns?: string };
export const DEFAULT_QEMU_BINARY = 'qemu-system-x86_64';
/** The host as seen from a guest on QEMU user networking (slirp). */
export const GUEST_HOST_ADDRESS = '10.0.2.2';

export interface QemuHostOptions {
  /**
   * Base URL of the boot server as this process reaches it, e.g. `http://127.0.0.1:8082` (or a
   * function returning it, read at every power-on). The VM's DHCP boot file is `<url>/ipxe`;
   * loopback hosts become {@link GUEST_HOST_ADDRESS}.
   */
  bootServerUrl: string | (() => string);
  /** Default {@link DEFAULT_QEMU_BINARY} (looked up in PATH). */
  qemuBinary?: string;
  /** Default {@link DEFAULT_IPXE_ROM}. */
  ipxeRom?: string;
  /** Default `bios`. */
  firmware?: Firmware;
  /** UEFI only: NIC option ROM, default {@link DEFAULT_IPXE_EFI_ROM}. */
  ipxeEfiRom?: string;
  /** UEFI only: firmware code and the variable-store template (defaults {@link DEFAULT_OVMF_CODE}, {@link DEFAULT_OVMF_VARS}). */
  ovmfCode?: string;
  ovmfVars?: string;
  /** Default `{mode: 'user'}`. */
  network?: QemuNetwork;
  /**
   * Called with the Redfish `Boot.HttpBootUri` before every `UefiHttp` boot (undefined when none is
   * set): the test network offers it to this VM's MAC over DHCP, as firmware told the URI by its
   * BMC would use it. Without it a `UefiHttp` boot uses whatever DHCP offers.
   */
  onHttpBootUri?: (uri: string | undefined) => void;
  /**
   * `auto` (default: `$METAL_QEMU_ACCEL`, else auto) uses KVM only after a probe boot proved that
   * KVM guests run on this machine (see accel-probe.ts), else TCG.
   */
  accel?: AccelChoice;
  /** For `auto`: the kernel + initramfs the KVM probe boots (without it `auto` means TCG). */
  probeGuest?: ProbeGuest;
  /** Size of the sparse, empty disk in bytes (default 8 GiB; it takes no space until written). */
  diskBytes?: number;
  /** Boot order for `None`: `disk-then-network` (default, like a server whose BIOS lists the NIC after the disk) or `disk`. */
  noneBoot?: 'disk-then-network' | 'disk';
  /** Folder for the disk image, serial log and QMP socket. Default: a new temporary folder, removed by close(); a given folder is left in place. */
  workDir?: string;
  /** How long QEMU may take to open its QMP socket after spawn, in ms (default 15000). */
  startTimeoutMs?: number;
  /** How long forceOff waits after SIGTERM before SIGKILL, in ms (default 5000). */
  stopTimeoutMs?: number;
  /** SeaBIOS retries booting this many ms after every boot device failed (default 30000; -1 never). */
  rebootTimeoutMs?: number;
  /** Appended to the QEMU command line (debugging). */
  extraArgs?: string[];
}

/** How the last QEMU process of a host ended. */
export interface QemuExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Whether this module asked for it (forceOff, reset, close) rather than the guest powering off or QEMU failing. */
  requested: boolean;
  /** Last lines QEMU wrote to stderr. */
  stderr: string;
  at: Date;
}

interface Run {
  proc: ChildProcess;
  device: BootDevice;
  startedAt: number;
  /** Size of the serial log when this process started: what the guest wrote comes after it. */
  serialOffset: number;
  phase: 'starting' | 'on' | 'stopping';
  qmp?: QmpClient;
  exited: Promise<QemuExit>;
  stopRequested: boolean;
  stderr: string[];
}

const STDERR_LINES = 40;
const SETPRIV = ['/usr/bin/setpriv', '/bin/setpriv'].find((p) => {
  try {
    accessSync(p, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
});
const live = new Set<ChildProcess>();
let exitHookInstalled = false;

/** Kills every VM that is still running when this Node.js process exits, so none outlive it. */
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const proc of live) proc.kill('SIGKILL');
  });
}

/**
 * Rewrites a URL that points at this machine's loopback so that a guest on QEMU user networking
 * reaches the same server: `http://127.0.0.1:8082/x` → `http://10.0.2.2:8082/x`. Other URLs are
 * returned unchanged (without a trailing slash).
 * @throws TypeError when `url` is not a URL.
 */
export function guestUrl(url: string): string {
  const u = new URL(url);
  if (['127.0.0.1', 'localhost', '[::1]', '::1', '0.0.0.0', '[::]'].includes(u.hostname)) {
    u.hostname = GUEST_HOST_ADDRESS;
  }
  return u.toString().replace(/\/$/, '');
}

/**
 * Checks that the QEMU back end can run here: the QEMU binary and the iPXE ROM.
 * @returns the problems found, empty when everything is in place.
 */
export function qemuPrerequisiteProblems(
  options: Pick<
    QemuHostOptions,
    'qemuBinary' | 'ipxeRom' | 'firmware' | 'ipxeEfiRom' | 'ovmfCode' | 'ovmfVars'
  > = {},
): string[] {
  const problems: string[] = [];
  const binary = options.qemuBinary ?? DEFAULT_QEMU_BINARY;
  const probe = spawnSync(binary, ['--version'], { encoding: 'utf8', timeout: 10_000 });
  if (probe.error || probe.status !== 0) {
    problems.push(`${binary} is not runnable (${probe.error?.message ?? `exit ${probe.status}`})`);
  }
  const files: [string, string][] =
    options.firmware === 'uefi'
      ? [
          ['iPXE UEFI ROM', options.ipxeEfiRom ?? DEFAULT_IPXE_EFI_ROM],
          ['OVMF code', options.ovmfCode ?? DEFAULT_OVMF_CODE],
          ['OVMF variables', options.ovmfVars ?? DEFAULT_OVMF_VARS],
        ]
      : [['iPXE ROM', options.ipxeRom ?? DEFAULT_IPXE_ROM]];
  for (const [what, file] of files) {
    try {
      accessSync(file, fsConstants.R_OK);
    } catch {
      problems.push(`${what} ${file} is missing`);
    }
  }
  return problems;
}

/**
 * Throws when {@link qemuPrerequisiteProblems} finds anything, naming the script that fixes it.
 * @throws Error listing the missing pieces.
 */
export function assertQemuPrerequisites(options: Parameters<typeof qemuPrerequisiteProblems>[0] = {}): void {
  const problems = qemuPrerequisiteProblems(options);
  if (problems.length > 0) {
    throw new Error(
      `QEMU back end not usable: ${problems.join('; ')}. Run hack/install-packages.sh (as root) first.`,
    );
  }
}

/**
 * A deterministic identity for test VM number `index` (0-based): UUID
 * `5e1f0000-0000-4000-8000-<index as 12 hex digits>`, MAC `52:54:00:<index as 3 bytes>` (QEMU's
 * OUI), 512 MiB, 1 CPU. `overrides` replaces any field.
 */
export function qemuHostIdentity(index: number, overrides: Partial<HostIdentity> = {}): HostIdentity {
  if (!Number.isInteger(index) || index < 0 || index > 0xffffff) {
    throw new RangeError(`index must be an integer in [0, ${0xffffff}], got ${index}`);
  }
  const hex = index.toString(16).padStart(12, '0');
  const b = index.toString(16).padStart(6, '0');
  return {
    uuid: `5e1f0000-0000-4000-8000-${hex}`,
    serialNumber: `QVM${index.toString().padStart(5, '0')}`,
    macAddress: `52:54:00:${b.slice(0, 2)}:${b.slice(2, 4)}:${b.slice(4, 6)}`,
    manufacturer: 'Metal Virtual',
    model: 'QEMU q35 netboot',
    memoryMiB: 512,
    cpus: 1,
    ...overrides,
  };
}

/**
 * The boot-related device properties for booting from `device`: the NIC's option ROM and boot
 * indexes of NIC, disk and CD (`bootindex=1` boots first). Pure.
 */
function bootOrder(
  device: BootDevice,
  uefi: boolean,
  noneBoot: NonNullable<QemuHostOptions['noneBoot']>,
  rom: string,
): { nic: string[]; disk: string[]; cd: string[] } {
  const nic: string[] = [];
  const disk: string[] = [];
  const cd: string[] = [];
  if (device === 'Cd') {
    // Virtual media: CD first, then disk; no NIC option ROM, so nothing network-boots.
    nic.push('romfile=');
    cd.push('bootindex=1');
    disk.push('bootindex=2');
  } else if (device === 'Pxe') {
    nic.push(`romfile=${rom}`, 'bootindex=1');
    disk.push('bootindex=2');
  } else if (device === 'UefiHttp' && uefi) {
    // OVMF's own virtio-net driver and HTTP boot client (its PXE clients are off): the NIC's
    // only boot option is UEFI HTTP boot.
    nic.push('romfile=', 'bootindex=1');
    disk.push('bootindex=2');
  } else if (device === 'Hdd' || device === 'UefiHttp' || noneBoot === 'disk') {
    // Without its option ROM the NIC is invisible to the firmware as a boot device.
    nic.push('romfile=');
    disk.push('bootindex=1');
  } else {
    nic.push(`romfile=${rom}`, 'bootindex=2');
    disk.push('bootindex=1');
  }
  return { nic, disk, cd };
}

/** QEMU option values escape commas by doubling them. */
function optValue(value: string): string {
  return value.replaceAll(',', ',,');
}

/**
 * A {@link Host} backed by a QEMU process. Power state follows the process: no process is `Off`,
 * `PoweringOn` until QEMU answers on QMP, `On` while it runs, `PoweringOff` while it is being
 * stopped or after the guest asked for power-off. Operations run one at a time in call order.
 */
export class QemuHost implements Host {
  readonly identity: HostIdentity;
  /** Folder holding disk, serial log and QMP socket. */
  readonly workDir: string;
  /** The VM's serial console (kernel and `metal:` lines of the test image), appended across power cycles. */
  readonly serialLogPath: string;
  /** The raw disk image of the VM (sparse file). */
  readonly diskPath: string;
  private readonly qmpPath: string;
  /** The serial port's Unix socket (beside the QMP socket), which {@link openSerial} connects to. */
  private readonly serialSocketPath: string;
  private readonly ownsWorkDir: boolean;
  private run: Run | undefined;
  private chain: Promise<unknown> = Promise.resolve();
  private closing: Promise<void> | undefined;
  private prerequisitesChecked = false;
  private exitInfo: QemuExit | undefined;
  private accelVerdict: AccelVerdict | undefined;
  private lastArgs: string[] | undefined;
  private httpBootUri: string | undefined;
  /** The ISO in the virtual CD (a file in the work folder), if any. */
  private mediaPath: string | undefined;
  private mediaSeq = 0;

  /**
   * Creates the host powered off. Creates the work folder synchronously; starts nothing.
   * @throws Error when the identity's UUID or MAC is malformed.
   */
  constructor(
    identity: HostIdentity,
    private readonly options: QemuHostOptions,
  ) {
    if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(identity.uuid)) {
      throw new Error(`identity.uuid is not a UUID: ${identity.uuid}`);
    }
    if (!/^([0-9a-f]{2}:){5}[0-9a-f]{2}$/i.test(identity.macAddress)) {
      throw new Error(`identity.macAddress is not a MAC address: ${identity.macAddress}`);
    }
    this.identity = {
      ...identity,
      uuid: identity.uuid.toLowerCase(),
      macAddress: identity.macAddress.toLowerCase(),
    };
    this.ownsWorkDir = options.workDir === undefined;
    this.workDir = options.workDir ?? mkdtempSyncShort(`metal-qemu-${this.identity.uuid.slice(0, 8)}-`);
    this.serialLogPath = path.join(this.workDir, 'serial.log');
    this.diskPath = path.join(this.workDir, 'disk.raw');
    // Unix socket paths are limited to 107 bytes; a long workDir gets its socket elsewhere.
    const sock = path.join(this.workDir, 'qmp.sock');
    this.qmpPath = sock.length < 100 ? sock : path.join(mkdtempSyncShort('metal-qmp-'), 'qmp.sock');
    this.serialSocketPath = path.join(path.dirname(this.qmpPath), 'serial.sock');
  }

  /** PID of the running QEMU process, if any. */
  get pid(): number | undefined {
    return this.run?.proc.pid;
  }

  /** Boot device of the running QEMU process, if any. */
  get bootDevice(): BootDevice | undefined {
    return this.run?.device;
  }

  /** The accelerator chosen at the first power-on and why (undefined before it). */
  get accelerator(): AccelVerdict | undefined {
    return this.accelVerdict;
  }

  /**
   * What to show when the VM shows no sign of life: accelerator and reason, the QEMU command line
   * of the last start, and the last `lines` lines of the serial console.
   */
  async diagnosis(lines = 20): Promise<string> {
    const binary = this.options.qemuBinary ?? DEFAULT_QEMU_BINARY;
    let console = '';
    try {
      console = (await fs.readFile(this.serialLogPath, 'utf8')).split('\n').slice(-lines).join('\n');
    } catch {
      console = '(no serial log)';
    }
    const accel = this.accelVerdict
      ? `${this.accelVerdict.accel} (${this.accelVerdict.reason})`
      : 'not chosen yet';
    return [
      `VM ${this.identity.uuid}: accel ${accel}, power ${this.powerState()}`,
      `QEMU command line: ${[binary, ...(this.lastArgs ?? [])].join(' ')}`,
      `serial console (last ${lines} lines of ${this.serialLogPath}):`,
      console.trim() === '' ? '(empty)' : console,
    ].join('\n');
  }

  /**
   * For the running VM: how long it has been on (ms), the device it boots from, and how many bytes
   * the guest wrote to its serial console since this QEMU process started (0 = no sign of life yet).
   * Undefined when the VM is off.
   */
  async signsOfLife(): Promise<{ onForMs: number; device: BootDevice; consoleBytes: number } | undefined> {
    const run = this.run;
    if (!run) return undefined;
    let written = '';
    try {
      const handle = await fs.open(this.serialLogPath, 'r');
      try {
        const size = (await handle.stat()).size;
        const len = Math.min(Math.max(0, size - run.serialOffset), 1 << 20);
        const buf = Buffer.alloc(len);
        await handle.read(buf, 0, len, run.serialOffset);
        written = buf.toString('latin1');
      } finally {
        await handle.close();
      }
    } catch {
      // No log yet: nothing written.
    }
    // The virtual BMC's own separator lines (resets) are not the guest's.
    const guest = written.replace(/\n--- virtual BMC: [^\n]*---\n/g, '').trim();
    return { onForMs: Date.now() - run.startedAt, device: run.device, consoleBytes: guest.length };
  }

  /** How the last QEMU process ended (undefined until one did). */
  get lastExit(): QemuExit | undefined {
    return this.exitInfo;
  }

  powerState(): HostPowerState {
    switch (this.run?.phase) {
      case undefined:
        return 'Off';
      case 'starting':
        return 'PoweringOn';
      case 'on':
        return 'On';
      case 'stopping':
        return 'PoweringOff';
    }
  }

  /**
   * Starts QEMU booting from `device`; a running VM is left alone. Resolves once QEMU answers on
   * QMP (the guest firmware is then running), not when an OS is up.
   * @throws Error when QEMU is missing, exits during start-up or does not open QMP in time.
   */
  powerOn(device: BootDevice): Promise<void> {
    return this.serialize(async () => {
      // A guest that just powered itself off is still exiting; wait for it rather than ignore the request.
      if (this.run?.phase === 'stopping') await this.stop();
      if (this.run) return;
      await this.start(device);
    });
  }

  /** Presses the ACPI power button (QMP `system_powerdown`). The test image powers off on it; QEMU then exits. No-op when off. */
  gracefulShutdown(): Promise<void> {
    return this.serialize(async () => {
      const run = this.run;
      if (!run?.qmp || run.phase !== 'on') return;
      await run.qmp.execute('system_powerdown');
    });
  }

  /** Stops QEMU: SIGTERM (QEMU quits without involving the guest), SIGKILL after `stopTimeoutMs`. Resolves when the process is gone. */
  forceOff(): Promise<void> {
    return this.serialize(() => this.stop());
  }

  /**
   * Hard reset booting from `device`: QMP `system_reset` when the running VM already boots from
   * `device`, otherwise a restart of QEMU with the new boot order. A powered-off host is started.
   */
  reset(device: BootDevice): Promise<void> {
    return this.serialize(async () => {
      const run = this.run;
      if (run?.qmp && run.phase === 'on' && run.device === device) {
        this.mark(`reset, boot ${device}`);
        await run.qmp.execute('system_reset');
        return;
      }
      if (run) await this.stop();
      await this.start(device);
    });
  }

  setHttpBootUri(uri: string | undefined): void {
    this.httpBootUri = uri;
  }

  /** The ISO file in the virtual CD (undefined: empty). */
  get insertedMedia(): string | undefined {
    return this.mediaPath;
  }

  /**
   * Fetches `image` (Range reads, at most 1 GiB) into the work folder and puts it into the virtual CD,
   * through QMP when the VM runs.
   * @throws MediaFetchError when the image cannot be read (the BMC refuses the insert).
   */
  async insertMedia(image: string): Promise<void> {
    const data = await fetchImage(image);
    await fs.mkdir(this.workDir, { recursive: true });
    const file = path.join(this.workDir, `vmedia-${++this.mediaSeq}.iso`);
    await fs.writeFile(file, data);
    await this.serialize(async () => {
      const old = this.mediaPath;
      this.mediaPath = file;
      const run = this.run;
      if (run?.qmp && run.phase === 'on')
        await run.qmp.execute('blockdev-change-medium', {
          id: 'cd0',
          filename: file,
          format: 'raw',
          'read-only-mode': 'read-only',
        });
      if (old && old !== file) await fs.rm(old, { force: true });
    });
  }

  /** Empties the virtual CD (QMP `eject` when the VM runs) and removes the ISO file. */
  async ejectMedia(): Promise<void> {
    await this.serialize(async () => {
      const old = this.mediaPath;
      this.mediaPath = undefined;
      const run = this.run;
      if (run?.qmp && run.phase === 'on') await run.qmp.execute('eject', { id: 'cd0', force: true });
      if (old) await fs.rm(old, { force: true });
    });
  }

  /**
   * Connects to the running VM's serial port (its chardev Unix socket): the bytes the guest writes to
   * ttyS0 and what it reads. The serial log keeps getting the output meanwhile (chardev `logfile`).
   * The stream ends when the QEMU process exits (power off, reset to another boot device).
   * @throws Error when no QEMU process runs (the VM is off) or its socket refuses the connection.
   */
  async openSerial(): Promise<Duplex> {
    if (!this.run || this.run.phase === 'stopping') {
      throw new Error('the VM is powered off: its console opens while it runs');
    }
    const sock = net.connect(this.serialSocketPath);
    await new Promise<void>((resolve, reject) => {
      sock.once('connect', () => {
        sock.off('error', reject);
        resolve();
      });
      sock.once('error', reject);
    });
    return sock;
  }

  /** Kills QEMU (SIGKILL), closes QMP and, when this host created it, removes the work folder. Idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      await this.kill();
      await this.chain.catch(() => undefined);
      // A start that was past its closing check when close() began has spawned by now.
      await this.kill();
      if (this.ownsWorkDir) await fs.rm(this.workDir, { recursive: true, force: true });
      if (path.dirname(this.qmpPath) !== this.workDir) {
        await fs.rm(path.dirname(this.qmpPath), { recursive: true, force: true });
      }
    })();
    return this.closing;
  }

  /** The QEMU command line (without the binary) used to boot from `device`; exposed for diagnostics. */
  qemuArgs(device: BootDevice): string[] {
    const id = this.identity;
    const accel = this.accelVerdict?.accel ?? (this.options.accel === 'kvm' ? 'kvm' : 'tcg');
    const bootUrl = `${guestUrl(this.bootServerUrl())}/ipxe`;
    const uefi = this.options.firmware === 'uefi';
    const rom = uefi
      ? (this.options.ipxeEfiRom ?? DEFAULT_IPXE_EFI_ROM)
      : (this.options.ipxeRom ?? DEFAULT_IPXE_ROM);
    const order = bootOrder(device, uefi, this.options.noneBoot ?? 'disk-then-network', rom);
    const nic = ['virtio-net-pci', 'netdev=n0', `mac=${id.macAddress}`, 'disable-legacy=on', ...order.nic];
    const disk = [
      'virtio-blk-pci',
      'drive=d0',
      `serial=${optValue(`D${id.serialNumber}`.slice(0, 20))}`,
      ...order.disk,
    ];
    const cd = ['ide-cd', 'bus=ide.0', 'drive=cdrive', 'id=cd0', ...order.cd];
    const smbios = [
      'type=1',
      `manufacturer=${optValue(id.manufacturer)}`,
      `product=${optValue(id.model)}`,
      `serial=${optValue(id.serialNumber)}`,
    ];
    return [
      '-nodefaults',
      '-no-user-config',
      '-name',
      `metal-${id.uuid}`,
      '-machine',
      'q35',
      '-accel',
      accel,
      ...(accel === 'kvm' ? ['-cpu', 'host'] : []),
      '-m',
      String(id.memoryMiB),
      '-smp',
      String(id.cpus),
      '-uuid',
      id.uuid.toUpperCase(),
      '-smbios',
      smbios.join(','),
      '-smbios',
      `type=2,manufacturer=${optValue(id.manufacturer)},product=${optValue(id.model)}`,
      '-display',
      'none',
      '-chardev',
      `socket,id=serial0,path=${optValue(this.serialSocketPath)},server=on,wait=off,logfile=${optValue(this.serialLogPath)},logappend=on`,
      '-serial',
      'chardev:serial0',
      ...(uefi ? this.uefiArgs() : []),
      '-netdev',
      this.netdevArg(bootUrl),
      '-device',
      nic.join(','),
      '-drive',
      `if=none,id=d0,format=raw,file=${optValue(this.diskPath)}`,
      '-device',
      disk.join(','),
      '-drive',
      `if=none,id=cdrive,media=cdrom,readonly=on${this.mediaPath ? `,format=raw,file=${optValue(this.mediaPath)}` : ''}`,
      '-device',
      cd.join(','),
      '-boot',
      `strict=on,menu=off,reboot-timeout=${this.options.rebootTimeoutMs ?? 30_000}`,
      '-qmp',
      `unix:${optValue(this.qmpPath)},server=on,wait=off`,
      ...(this.options.extraArgs ?? []),
    ];
  }

  /** The guest's UEFI variable store (a copy of the template, kept across power cycles like NVRAM). */
  get ovmfVarsPath(): string {
    return path.join(this.workDir, 'OVMF_VARS.fd');
  }

  /**
   * OVMF as two pflash drives (read-only code, per-VM variables). OVMF's own PXE clients are
   * switched off through its fw_cfg knobs (`opt/org.tianocore/IPv{4,6}PXESupport`, edk2
   * OvmfPkg): the NIC's network boot is then iPXE's, as with SeaBIOS, and a NIC without the iPXE
   * ROM offers no PXE boot at all.
   */
  private uefiArgs(): string[] {
    return [
      '-drive',
      `if=pflash,format=raw,unit=0,readonly=on,file=${optValue(this.options.ovmfCode ?? DEFAULT_OVMF_CODE)}`,
      '-drive',
      `if=pflash,format=raw,unit=1,file=${optValue(this.ovmfVarsPath)}`,
      '-fw_cfg',
      'name=opt/org.tianocore/IPv4PXESupport,string=n',
      '-fw_cfg',
      'name=opt/org.tianocore/IPv6PXESupport,string=n',
    ];
  }

  private netdevArg(bootUrl: string): string {
    const net = this.options.network ?? { mode: 'user' };
    if (net.mode === 'tap') return `tap,id=n0,ifname=${optValue(net.ifname)},script=no,downscript=no`;
    return `user,id=n0,bootfile=${optValue(bootUrl)}`;
  }

  private bootServerUrl(): string {
    const u = this.options.bootServerUrl;
    return typeof u === 'function' ? u() : u;
  }

  private serialize<T>(fn: () => Promise<T>): Promise<T> {
    if (this.closing) return Promise.reject(new Error(`host ${this.identity.uuid} is closed`));
    const result = this.chain.then(fn, fn);
    this.chain = result.catch(() => undefined);
    return result;
  }

  private mark(what: string): void {
    // Separates power cycles in the serial log; QEMU appends to the same file.
    void fs
      .appendFile(this.serialLogPath, `\n--- virtual BMC: ${what} at ${new Date().toISOString()} ---\n`)
      .catch(() => undefined);
  }

  private async start(device: BootDevice): Promise<void> {
    if (!this.prerequisitesChecked) {
      assertQemuPrerequisites(this.options);
      this.prerequisitesChecked = true;
    }
    await this.prepareFiles();
    this.accelVerdict ??= await chooseAccel(this.options.accel ?? accelFromEnv(), {
      ...(this.options.qemuBinary ? { qemuBinary: this.options.qemuBinary } : {}),
      ...(this.options.probeGuest ? { guest: this.options.probeGuest } : {}),
    });
    if (device === 'UefiHttp') this.options.onHttpBootUri?.(this.httpBootUri);
    const args = this.qemuArgs(device);
    this.lastArgs = args;
    await fs.appendFile(
      this.serialLogPath,
      `\n--- virtual BMC: power on, boot ${device}, accel ${this.accelVerdict.accel} at ${new Date().toISOString()} ---\n`,
    );

    const serialOffset = (await fs.stat(this.serialLogPath)).size;
    if (this.closing) throw new Error(`host ${this.identity.uuid} is closed`);
    const { run, aborter } = this.spawnRun(device, args, serialOffset);
    await this.connectQmp(run, aborter);
    if (this.run === run) run.phase = 'on';
  }

  /** The disk (sparse, created once), the UEFI variable store (copied once), no stale sockets. */
  private async prepareFiles(): Promise<void> {
    await fs.mkdir(this.workDir, { recursive: true });
    const handle = await fs.open(this.diskPath, 'a');
    try {
      const size = (await handle.stat()).size;
      if (size === 0) await handle.truncate(this.options.diskBytes ?? 8 * 1024 ** 3);
    } finally {
      await handle.close();
    }
    if (this.options.firmware === 'uefi') {
      // Like NVRAM: created empty once, then kept, so boot entries OVMF writes survive power cycles.
      await fs
        .copyFile(this.options.ovmfVars ?? DEFAULT_OVMF_VARS, this.ovmfVarsPath, fsConstants.COPYFILE_EXCL)
        .catch((err: NodeJS.ErrnoException) => {
          if (err.code !== 'EEXIST') throw err;
        });
    }
    await fs.rm(this.qmpPath, { force: true });
    await fs.rm(this.serialSocketPath, { force: true });
  }

  /**
   * Spawns QEMU with `args` and makes it {@link run}: its stderr kept (last lines), its end
   * recorded in {@link exitInfo}; `aborter` is aborted when the process ends.
   */
  private spawnRun(
    device: BootDevice,
    args: string[],
    serialOffset: number,
  ): { run: Run; aborter: AbortController } {
    installExitHook();
    const binary = this.options.qemuBinary ?? DEFAULT_QEMU_BINARY;
    // A tap device is found by name in the opener's network namespace: QEMU runs inside the
    // test network's namespace (`ip netns exec` execs in place, same pid).
    const net = this.options.network;
    const command = net?.mode === 'tap' && net.netns ? ['ip', 'netns', 'exec', net.netns, binary] : [binary];
    // The exit hook does not run when Node.js dies from a signal; the kernel's parent-death
    // signal (util-linux setpriv execs QEMU in place, same pid) covers that case.
    const proc = SETPRIV
      ? spawn(SETPRIV, ['--pdeathsig', 'KILL', '--', ...command, ...args], {
          stdio: ['ignore', 'ignore', 'pipe'],
        })
      : spawn(command[0]!, [...command.slice(1), ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    live.add(proc);
    const stderr: string[] = [];
    proc.stderr?.setEncoding('utf8');
    proc.stderr?.on('data', (chunk: string) => {
      stderr.push(...chunk.split('\n').filter((l) => l.trim() !== ''));
      if (stderr.length > STDERR_LINES) stderr.splice(0, stderr.length - STDERR_LINES);
    });
    let resolveExit: (info: QemuExit) => void = () => undefined;
    const run: Run = {
      proc,
      device,
      startedAt: Date.now(),
      serialOffset,
      phase: 'starting',
      exited: new Promise<QemuExit>((resolve) => {
        resolveExit = resolve;
      }),
      stopRequested: false,
      stderr,
    };
    const aborter = new AbortController();
    let finished = false;
    const finish = (code: number | null, signal: NodeJS.Signals | null) => {
      if (finished) return;
      finished = true;
      live.delete(proc);
      aborter.abort();
      run.qmp?.close();
      const info: QemuExit = {
        code,
        signal,
        requested: run.stopRequested,
        stderr: stderr.join('\n'),
        at: new Date(),
      };
      this.exitInfo = info;
      if (this.run === run) this.run = undefined;
      resolveExit(info);
    };
    // 'close' rather than 'exit': it comes after stderr is drained, so start-up errors are complete.
    proc.once('close', finish);
    proc.once('error', (err) => {
      stderr.push(err.message);
      finish(null, null);
    });
    this.run = run;
    return { run, aborter };
  }

  /** Connects QMP to the starting `run`; on failure the process is gone and the error says why. */
  private async connectQmp(run: Run, aborter: AbortController): Promise<void> {
    const { proc } = run;
    try {
      run.qmp = await QmpClient.connect(this.qmpPath, {
        timeoutMs: this.options.startTimeoutMs ?? 15_000,
        signal: aborter.signal,
        onEvent: (e) => this.onQmpEvent(run, e),
      });
    } catch (err) {
      if (aborter.signal.aborted) {
        const info = await run.exited;
        throw new Error(
          `QEMU for ${this.identity.uuid} exited during start-up (code ${info.code}, signal ${info.signal}): ${info.stderr || 'no output'}`,
        );
      }
      run.stopRequested = true;
      proc.kill('SIGKILL');
      await withTimeout(run.exited, 5000);
      throw new Error(`QEMU for ${this.identity.uuid} did not open QMP: ${(err as Error).message}`);
    }
  }

  private async kill(): Promise<void> {
    const run = this.run;
    if (!run) return;
    run.stopRequested = true;
    run.phase = 'stopping';
    run.proc.kill('SIGKILL');
    await withTimeout(run.exited, 10_000);
    run.qmp?.close();
  }

  private onQmpEvent(run: Run, event: QmpEvent): void {
    // The guest powered off (ACPI S5): QEMU is about to exit on its own.
    if (event.event === 'SHUTDOWN' && run.phase === 'on') run.phase = 'stopping';
  }

  private async stop(): Promise<void> {
    const run = this.run;
    if (!run) return;
    run.stopRequested = true;
    run.phase = 'stopping';
    run.proc.kill('SIGTERM');
    if (!(await withTimeout(run.exited, this.options.stopTimeoutMs ?? 5000))) {
      run.proc.kill('SIGKILL');
      if (!(await withTimeout(run.exited, 10_000))) {
        throw new Error(`QEMU for ${this.identity.uuid} (pid ${run.proc.pid}) did not exit after SIGKILL`);
      }
    }
  }
}

/** Resolves with the value of `p`, or undefined when `ms` passes first. */
async function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

function mkdtempSyncShort(prefix: string): string {
  // Under os.tmpdir() (normally /tmp) so that the QMP socket path stays short.
  return mkdtempSync(path.join(os.tmpdir(), prefix));
}
