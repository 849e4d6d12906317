/**
 * Chooses QEMU's accelerator (`kvm` or `tcg`) by evidence, not by the device node.
 *
 * A `/dev/kvm` that exists and is read-write does not prove that guests run: on some hosts (nested
 * virtualisation without the CPU features, a sandbox that forwards the device) QEMU starts with
 * `-accel kvm` and the guest never gets far — on this project's CI machines a real-mode boot
 * sector still runs (slowly) under KVM while a Linux kernel prints nothing in 25 s. So `auto`
 * direct-boots the project's own test kernel and initramfs under KVM with `console=ttyS0` and
 * waits for the initramfs's first line ({@link PROBE_MARKER}): only a guest that reached user
 * space proves KVM. No marker within the timeout → TCG. The verdict is cached per machine in
 * `${METAL_CACHE:-~/.cache/metal-operator-ts}/accel/`, keyed by host kernel release, QEMU version,
 * KVM device and probe kernel, so the probe costs seconds once.
 *
 * Environment (read when the caller passes nothing): `METAL_QEMU_ACCEL=auto|kvm|tcg` forces a
 * choice; `METAL_KVM_DEVICE` replaces `/dev/kvm` (a path that does not exist simulates a machine
 * without KVM).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  accessSync,
  existsSync,
  constants as fsConstants,
  mkdirSync,
  readFileSync,
  renameSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export type Accel = 'kvm' | 'tcg';
export type AccelChoice = 'auto' | Accel;

/** What was chosen and why; `reason` is one sentence for logs and progress lines. */
export interface AccelVerdict {
  accel: Accel;
  reason: string;
  /** True when the verdict came from the per-machine cache instead of a probe run now. */
  cached: boolean;
  /** Wall time of the probe boot in ms, when one ran now. */
  probeMs?: number;
}

export interface AccelProbeOptions {
  /**
   * The guest to boot: the test image's kernel and initramfs (hack/build-vm-artefacts.sh). Without
   * them `auto` cannot prove KVM and chooses TCG.
   */
  guest?: ProbeGuest;
  /** QEMU binary (default `qemu-system-x86_64` from PATH). */
  qemuBinary?: string;
  /** KVM device node (default `$METAL_KVM_DEVICE`, else `/dev/kvm`). */
  kvmDevice?: string;
  /** Cache folder (default `${METAL_CACHE:-~/.cache/metal-operator-ts}/accel`). */
  cacheDir?: string;
  /** How long the probe guest may take to print its marker, in ms (default 15000; TCG needs ~5 s). */
  timeoutMs?: number;
}

export const ACCEL_ENV = 'METAL_QEMU_ACCEL';
export const KVM_DEVICE_ENV = 'METAL_KVM_DEVICE';
/** Kernel and initramfs of the probe guest. */
export interface ProbeGuest {
  kernel: string;
  initrd: string;
}

/** The first line the test initramfs's /init (hack/vm/init) prints once user space runs. */
export const PROBE_MARKER = 'metal: init started';

/**
 * Reads `METAL_QEMU_ACCEL`.
 * @throws Error when it is set to anything but auto, kvm or tcg.
 */
export function accelFromEnv(env: NodeJS.ProcessEnv = process.env): AccelChoice {
  const v = env[ACCEL_ENV]?.trim();
  if (!v) return 'auto';
  if (v === 'auto' || v === 'kvm' || v === 'tcg') return v;
  throw new Error(`${ACCEL_ENV} must be auto, kvm or tcg, got ${JSON.stringify(v)}`);
}

const memo = new Map<string, Promise<AccelVerdict>>();

/**
 * Resolves `choice` to the accelerator to use. `kvm` and `tcg` are returned as given (reason
 * "requested"); `auto` is TCG when the KVM device is not read-write, else the cached or freshly
 * probed verdict. Concurrent calls with the same options share one probe. Never throws: a probe
 * that cannot run at all yields TCG with the reason (and is not cached).
 */
export function chooseAccel(choice: AccelChoice, options: AccelProbeOptions = {}): Promise<AccelVerdict> {
  if (choice !== 'auto')
    return Promise.resolve({ accel: choice, reason: `${choice} requested`, cached: false });
  const device = options.kvmDevice ?? process.env[KVM_DEVICE_ENV] ?? '/dev/kvm';
  try {
    accessSync(device, fsConstants.R_OK | fsConstants.W_OK);
  } catch {
    return Promise.resolve({ accel: 'tcg', reason: `${device} is absent or not read-write`, cached: false });
  }
  if (!options.guest) {
    return Promise.resolve({ accel: 'tcg', reason: 'no probe kernel given, KVM not proven', cached: false });
  }
  const key = JSON.stringify([
    options.qemuBinary,
    device,
    options.cacheDir,
    options.timeoutMs,
    options.guest,
  ]);
  let p = memo.get(key);
  if (!p) {
    p = probeWithCache(device, options.guest, options);
    memo.set(key, p);
  }
  return p;
}

async function probeWithCache(
  device: string,
  guest: ProbeGuest,
  options: AccelProbeOptions,
): Promise<AccelVerdict> {
  const binary = options.qemuBinary ?? 'qemu-system-x86_64';
  const version = await qemuVersion(binary);
  if (version === undefined) {
    return { accel: 'tcg', reason: `${binary} --version failed; KVM not probed`, cached: false };
  }
  const dir =
    options.cacheDir ??
    path.join(process.env.METAL_CACHE ?? path.join(os.homedir(), '.cache', 'metal-operator-ts'), 'accel');
  let kernelId = guest.kernel;
  try {
    const st = statSync(guest.kernel);
    kernelId = `${guest.kernel}:${st.size}:${st.mtimeMs}`;
  } catch {
    // A missing kernel fails the probe below, and that verdict is not cached.
  }
  const id = createHash('sha256')
    .update(JSON.stringify([os.release(), version, device, binary, kernelId]))
    .digest('hex');
  const file = path.join(dir, `${id.slice(0, 16)}.json`);
  try {
    const stored = JSON.parse(readFileSync(file, 'utf8')) as { accel?: unknown; reason?: unknown };
    if ((stored.accel === 'kvm' || stored.accel === 'tcg') && typeof stored.reason === 'string') {
      return { accel: stored.accel, reason: `${stored.reason} (cached)`, cached: true };
    }
  } catch {
    // No verdict yet, or an unreadable one: probe.
  }
  const result = await probeGuest(binary, 'kvm', guest, options.timeoutMs ?? 15_000);
  const verdict: AccelVerdict = {
    accel: result.ok ? 'kvm' : 'tcg',
    reason: result.ok
      ? `KVM probe guest printed its marker in ${result.ms} ms`
      : `KVM probe guest showed no sign of life (${result.detail}) on kernel ${os.release()}, ${version}`,
    cached: false,
    probeMs: result.ms,
  };
  if (!result.ran) return verdict;
  try {
    mkdirSync(dir, { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(
      tmp,
      `${JSON.stringify({ accel: verdict.accel, reason: verdict.reason, at: new Date() })}\n`,
    );
    renameSync(tmp, file);
  } catch {
    // A read-only cache only costs another probe next time.
  }
  return verdict;
}

function qemuVersion(binary: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const proc = spawn(binary, ['--version'], { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', (c: string) => {
      out += c;
    });
    proc.once('error', () => {
      clearTimeout(timer);
      resolve(undefined);
    });
    proc.once('close', (code) => {
      clearTimeout(timer);
      resolve(code === 0 ? (out.split('\n')[0]?.trim() ?? '') : undefined);
    });
  });
}

/** Outcome of one probe boot: whether the marker appeared, after how many ms, and what happened. */
export interface ProbeResult {
  ok: boolean;
  /** False when QEMU could not be started or the guest files are missing: nothing was learnt about KVM. */
  ran: boolean;
  ms: number;
  detail: string;
}

/**
 * Direct-boots `guest` with `-accel <accel>` (plus `-cpu host` for KVM), no NIC, the serial port on
 * stdout; resolves when {@link PROBE_MARKER} appears, QEMU exits, or `timeoutMs` passes (QEMU is
 * then killed). Never rejects.
 */
export function probeGuest(
  binary: string,
  accel: Accel,
  guest: ProbeGuest,
  timeoutMs: number,
): Promise<ProbeResult> {
  for (const f of [guest.kernel, guest.initrd]) {
    if (!existsSync(f)) return Promise.resolve({ ok: false, ran: false, ms: 0, detail: `${f} is missing` });
  }
  const args = [
    '-nodefaults',
    '-no-user-config',
    '-machine',
    'q35',
    '-accel',
    accel,
    ...(accel === 'kvm' ? ['-cpu', 'host'] : []),
    '-m',
    '256',
    '-display',
    'none',
    '-nic',
    'none',
    '-no-reboot',
    '-serial',
    'stdio',
    '-kernel',
    guest.kernel,
    '-initrd',
    guest.initrd,
    '-append',
    'console=ttyS0 quiet panic=-1',
  ];
  const t0 = Date.now();
  return new Promise<ProbeResult>((resolve) => {
    // setpriv's parent-death signal: a probe must not outlive a test runner killed mid-probe.
    const proc = existsSync('/usr/bin/setpriv')
      ? spawn('/usr/bin/setpriv', ['--pdeathsig', 'KILL', '--', binary, ...args], {
          stdio: ['ignore', 'pipe', 'pipe'],
        })
      : spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    let done = false;
    const finish = (r: Omit<ProbeResult, 'ms' | 'ran'>, ran = true) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      proc.kill('SIGKILL');
      resolve({ ...r, ran, ms: Date.now() - t0 });
    };
    const timer = setTimeout(
      () => finish({ ok: false, detail: `no marker on the serial port within ${timeoutMs} ms` }),
      timeoutMs,
    );
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', (c: string) => {
      out += c;
      if (out.includes(PROBE_MARKER)) finish({ ok: true, detail: 'marker seen' });
      if (out.length > 65_536) out = out.slice(-1024);
    });
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (c: string) => {
      if (err.length < 4096) err += c;
    });
    proc.once('error', (e) => finish({ ok: false, detail: `QEMU did not start: ${e.message}` }, false));
    proc.once('close', (code, signal) => {
      const first = err.trim().split('\n')[0] ?? '';
      finish({
        ok: false,
        detail: `QEMU exited (code ${code}, signal ${signal})${first ? `: ${first}` : ''}`,
      });
    });
  });
}
