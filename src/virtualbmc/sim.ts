/**
 * `sim` back end: a simulated host that does over HTTP what firmware and an OS would do, without a VM.
 *
 * Powered on with boot device `Pxe`, it
 * 1. waits `firmwareMs` (POST, DHCP), then `GET {bootServerUrl}/ipxe/{uuid}` (UUID in the configured case);
 * 2. parses the iPXE script (see `ipxe.ts` for the kernel command-line keys); a script without a kernel
 *    means local boot; the kernel and initrd themselves are not downloaded;
 * 3. fetches `ignition.config.url` when the command line names one;
 * 4. waits `kernelMs` (+ the `callbackDelayMs` fault), then, as the agent in the booted image:
 *    - `metal.mode=probe`: `POST {registry}/register` `{"systemUUID", "data"}` with
 *      `Authorization: Bearer <token>`, data in the shape of upstream metal-operator's
 *      `registry.Server` (see {@link registrationData}; with `payloadKib` grown to a large
 *      machine's size, probe-payload.ts);
 *    - `metal.mode=os`: `POST {registry}/bootstate` `{"systemUUID", "booted": true}` with
 *      `Authorization: Bearer <token>` (none with `metal.callback=skip`).
 * Every HTTP step is retried like a real agent: on 5xx, 429 and connection errors, with exponential backoff
 * (or the server's `Retry-After` when longer), for up to `retryBudgetMs` per step; any other 4xx ends the boot as failed.
 * With `Cd` (virtual media) it reads the inserted image the way the BMC would stream it (Range
 * requests, media.ts), takes the kernel command line from the image's UKI and goes on with step 3; an
 * empty drive boots the disk. It then needs no DHCP and never fetches `/ipxe`.
 * With `Hdd`/`None` it boots from disk and uses no network.
 *
 * Cost: no timers or sockets while idle; a boot in progress holds one timer or one request at a time,
 * so a thousand hosts fit in one process.
 */

import { type Duplex, PassThrough } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Logger, pino } from 'pino';
import { type Dispatcher, request } from 'undici';
import { isRetryableStatus, parseRetryAfter } from '../bmc/retry.js';
import { Backoff } from '../runtime/backoff.js';
import type { BootDevice, Host, HostIdentity, HostPowerState } from './host.js';
import { parseIpxeScript, parseKernelCommandLine } from './ipxe.js';
import { commandLineInImage, fetchImage, MediaFetchError, probeImage } from './media.js';
import { metalprobeLikePayload } from './probe-payload.js';

export interface SimHostFaults {
  /** Boot normally (script, ignition) but never post the callback. */
  neverCallBack: boolean;
  /** Extra ms between kernel start and the callback. */
  callbackDelayMs: number;
  /** The ignition fetch fails (no request reaches the boot server); the boot stops there. */
  failIgnitionFetch: boolean;
  /** Boot from disk even when the BMC hands over `Pxe`. */
  bootFromDisk: boolean;
  /** The OS ignores the ACPI power button: graceful shutdown does nothing. */
  ignoreGracefulShutdown: boolean;
  /**
   * The next N boots handed `Pxe` boot from disk instead (consumed one per boot): firmware that
   * ignores the one-time network boot override, as Dell and others sometimes do.
   */
  ignoreOverrideBoots: number;
}

export const DEFAULT_SIM_FAULTS: Readonly<SimHostFaults> = {
  neverCallBack: false,
  callbackDelayMs: 0,
  failIgnitionFetch: false,
  bootFromDisk: false,
  ignoreGracefulShutdown: false,
  ignoreOverrideBoots: 0,
};

/** Durations of the simulated boot, ms. */
export interface SimTiming {
  /** Power-on to the iPXE request. */
  firmwareMs: number;
  /** Kernel start to the agent's callback. */
  kernelMs: number;
  /** ACPI power button to power off. */
  shutdownMs: number;
  /** Timeout of one HTTP request. */
  requestTimeoutMs: number;
  /** Bounds of the backoff between retries. */
  retryInitialMs: number;
  retryMaxMs: number;
  /** Time one step (script, ignition, callback) keeps retrying before the boot counts as failed. */
  retryBudgetMs: number;
}

export const DEFAULT_SIM_TIMING: Readonly<SimTiming> = {
  firmwareMs: 20,
  kernelMs: 50,
  shutdownMs: 50,
  requestTimeoutMs: 10_000,
  retryInitialMs: 100,
  retryMaxMs: 2_000,
  retryBudgetMs: 120_000,
};

export interface SimHostOptions {
  identity: HostIdentity;
  /** Boot server base URL, e.g. `http://127.0.0.1:8082`. */
  bootServerUrl: string;
  /** Case of the UUID in `/ipxe/{uuid}`; firmware differs. Default `lower`. */
  uuidCase?: 'lower' | 'upper';
  faults?: Partial<SimHostFaults>;
  timing?: Partial<SimTiming>;
  /** Connection pool, shared by many hosts; undici's global dispatcher when omitted. */
  dispatcher?: Dispatcher;
  logger?: Logger;
  /** Post a metalprobe-like registration of about this many KiB (probe-payload.ts); 0: {@link registrationData}. */
  payloadKib?: number;
}

export type BootPhase =
  | 'firmware'
  | 'ipxe'
  | 'ignition'
  | 'kernel'
  | 'callback'
  | 'up'
  | 'failed'
  | 'aborted';

/** What happened during the most recent boot. */
export interface BootRecord {
  /** Sequence number of the boot (1 = first). */
  seq: number;
  device: BootDevice;
  phase: BootPhase;
  /** Where the OS came from: network (iPXE script with a kernel) or local disk. */
  source: 'network' | 'disk' | undefined;
  mode: 'probe' | 'os' | undefined;
  /** HTTP status of the callback, once posted. */
  callbackStatus: number | undefined;
  error: string | undefined;
}

export type BootListener = (host: SimHost, boot: BootRecord) => void;

class BootFailure extends Error {}

export class SimHost implements Host {
  readonly identity: HostIdentity;
  private readonly opts: SimHostOptions;
  private readonly timing: SimTiming;
  private faults: SimHostFaults;
  private readonly log: Logger;
  private state: HostPowerState = 'Off';
  /** Aborts the boot or shutdown in progress. */
  private activity: AbortController | undefined;
  private seq = 0;
  private last: BootRecord | undefined;
  private readonly listeners = new Set<BootListener>();
  /** URL of the image in the virtual CD, if any. */
  private media: string | undefined;
  /** Serial ports opened by the console and not yet closed. */
  private readonly serialPorts = new Set<PassThrough>();
  /** The registration payload, made at the first registration (the same every time after). */
  private payload: Record<string, unknown> | undefined;

  constructor(opts: SimHostOptions) {
    this.identity = opts.identity;
    this.opts = opts;
    this.timing = { ...DEFAULT_SIM_TIMING, ...opts.timing };
    this.faults = { ...DEFAULT_SIM_FAULTS, ...opts.faults };
    this.log = (opts.logger ?? pino({ level: 'silent' })).child({ host: opts.identity.uuid });
  }

  /** The most recent boot, or `undefined` before the first. */
  get lastBoot(): BootRecord | undefined {
    return this.last;
  }

  /** Number of boots started. */
  get bootCount(): number {
    return this.seq;
  }

  setFaults(f: Partial<SimHostFaults>): void {
    this.faults = { ...this.faults, ...f };
  }

  /** Called whenever a boot reaches `up`, `failed` or `aborted`. */
  onBootFinished(listener: BootListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  powerState(): HostPowerState {
    return this.state;
  }

  async powerOn(device: BootDevice): Promise<void> {
    if (this.state !== 'Off') return;
    this.startBoot(device);
  }

  async gracefulShutdown(): Promise<void> {
    if (this.state !== 'On' || this.faults.ignoreGracefulShutdown) return;
    this.stopActivity();
    this.state = 'PoweringOff';
    const ac = new AbortController();
    this.activity = ac;
    sleep(this.timing.shutdownMs, undefined, { signal: ac.signal }).then(
      () => {
        if (this.activity === ac) {
          this.activity = undefined;
          this.state = 'Off';
        }
      },
      () => undefined,
    );
  }

  async forceOff(): Promise<void> {
    this.stopActivity();
    this.state = 'Off';
  }

  async reset(device: BootDevice): Promise<void> {
    this.stopActivity();
    this.state = 'Off';
    this.startBoot(device);
  }

  /** The image in the virtual CD (undefined: empty). */
  get insertedMedia(): string | undefined {
    return this.media;
  }

  async insertMedia(image: string): Promise<void> {
    await probeImage(image);
    this.media = image;
  }

  async ejectMedia(): Promise<void> {
    this.media = undefined;
  }

  /**
   * The simulated serial port: a banner line, then every byte written comes back (a loopback, as a
   * terminal that echoes). Open in any power state; ended by {@link close}.
   */
  async openSerial(): Promise<Duplex> {
    const port = new PassThrough();
    this.serialPorts.add(port);
    port.on('close', () => this.serialPorts.delete(port));
    port.write(`simulated host ${this.identity.uuid}: serial console, echoes what it receives\r\n`);
    return port;
  }

  /** What this host's agent posts to `/register` (see {@link SimHostOptions.payloadKib}). */
  private registration(): Record<string, unknown> {
    this.payload ??= metalprobeLikePayload(
      registrationData(this.identity),
      this.identity,
      this.opts.payloadKib ?? 0,
    );
    return this.payload;
  }

  async close(): Promise<void> {
    for (const p of [...this.serialPorts]) p.destroy();
    this.stopActivity();
    this.state = 'Off';
    this.listeners.clear();
  }

  private stopActivity(): void {
    this.activity?.abort();
    this.activity = undefined;
  }

  private startBoot(device: BootDevice): void {
    this.state = 'On';
    const ac = new AbortController();
    this.activity = ac;
    const boot: BootRecord = {
      seq: ++this.seq,
      device,
      phase: 'firmware',
      source: undefined,
      mode: undefined,
      callbackStatus: undefined,
      error: undefined,
    };
    this.last = boot;
    this.runBoot(boot, ac.signal)
      .catch((err: unknown) => {
        if (ac.signal.aborted) {
          boot.phase = 'aborted';
        } else {
          boot.phase = 'failed';
          boot.error = err instanceof Error ? err.message : String(err);
          this.log.warn({ boot: boot.seq, error: boot.error }, 'boot failed');
        }
      })
      .finally(() => {
        if (this.activity === ac) this.activity = undefined;
        for (const l of this.listeners) l(this, boot);
      });
  }

  private async runBoot(boot: BootRecord, signal: AbortSignal): Promise<void> {
    const ignored = (boot.device === 'Pxe' || boot.device === 'Cd') && this.faults.ignoreOverrideBoots > 0;
    if (ignored) this.faults.ignoreOverrideBoots--;
    if (boot.device === 'Cd' && this.media !== undefined && !this.faults.bootFromDisk && !ignored) {
      await sleep(this.timing.firmwareMs, undefined, { signal });
      boot.phase = 'ipxe';
      let args: string[] | undefined;
      try {
        args = commandLineInImage(await fetchImage(this.media, { signal }));
      } catch (err) {
        if (err instanceof MediaFetchError) throw new BootFailure(`virtual media: ${err.message}`);
        throw err;
      }
      if (args === undefined) throw new BootFailure('virtual media holds no metal boot image');
      boot.source = 'network';
      return this.runOs(boot, parseKernelCommandLine(args), signal);
    }
    if (boot.device !== 'Pxe' || this.faults.bootFromDisk || ignored) {
      boot.source = 'disk';
      boot.phase = 'up';
      return;
    }
    await sleep(this.timing.firmwareMs, undefined, { signal });
    boot.phase = 'ipxe';
    const uuid =
      this.opts.uuidCase === 'upper' ? this.identity.uuid.toUpperCase() : this.identity.uuid.toLowerCase();
    const script = await this.http(
      'GET',
      `${this.opts.bootServerUrl.replace(/\/+$/, '')}/ipxe/${uuid}`,
      signal,
    );
    const parsed = parseIpxeScript(script.text);
    if (parsed.kernelUrl === undefined || parsed.cmdline === undefined) {
      boot.source = 'disk';
      boot.phase = 'up';
      return;
    }
    boot.source = 'network';
    return this.runOs(boot, parsed.cmdline, signal);
  }

  /** From the kernel command line on: ignition, kernel, the agent's callback. */
  private async runOs(
    boot: BootRecord,
    cmdline: ReturnType<typeof parseKernelCommandLine>,
    signal: AbortSignal,
  ): Promise<void> {
    boot.mode = cmdline.mode;
    if (cmdline.ignitionUrl !== undefined) {
      boot.phase = 'ignition';
      if (this.faults.failIgnitionFetch) throw new BootFailure('ignition config fetch failed (fault)');
      await this.http('GET', cmdline.ignitionUrl, signal);
    }
    boot.phase = 'kernel';
    await sleep(this.timing.kernelMs + this.faults.callbackDelayMs, undefined, { signal });
    if (this.faults.neverCallBack || cmdline.skipCallback) {
      boot.phase = 'up';
      return;
    }
    if (cmdline.registry === undefined) throw new BootFailure('no metal.registry on the kernel command line');
    boot.phase = 'callback';
    const systemUUID = (cmdline.uuid ?? this.identity.uuid).toLowerCase();
    const registry = cmdline.registry.replace(/\/+$/, '');
    const res =
      cmdline.mode === 'probe'
        ? await this.http('POST', `${registry}/register`, signal, {
            body: { systemUUID, data: this.registration() },
            ...(cmdline.token === undefined ? {} : { bearer: cmdline.token }),
          })
        : await this.http('POST', `${registry}/bootstate`, signal, {
            body: { systemUUID, booted: true },
            ...(cmdline.token === undefined ? {} : { bearer: cmdline.token }),
          });
    boot.callbackStatus = res.status;
    boot.phase = 'up';
  }

  /** One HTTP step with agent-style retries; 4xx throws {@link BootFailure}. */
  private async http(
    method: 'GET' | 'POST',
    url: string,
    signal: AbortSignal,
    extra: { body?: unknown; bearer?: string } = {},
  ): Promise<{ status: number; text: string }> {
    const t = this.timing;
    const started = performance.now();
    const shown = withoutQuery(url);
    const backoff = new Backoff({ initialMs: t.retryInitialMs, maxMs: t.retryMaxMs });
    for (let attempt = 1; ; attempt++) {
      let delay: number;
      let problem: string;
      try {
        const headers: Record<string, string> = { 'user-agent': 'metal-operator-sim/1' };
        if (extra.bearer !== undefined) headers['authorization'] = `Bearer ${extra.bearer}`;
        let body: string | undefined;
        if (extra.body !== undefined) {
          headers['content-type'] = 'application/json';
          body = JSON.stringify(extra.body);
        }
        const res = await request(url, {
          method,
          headers,
          body,
          signal: AbortSignal.any([signal, AbortSignal.timeout(t.requestTimeoutMs)]),
          ...(this.opts.dispatcher ? { dispatcher: this.opts.dispatcher } : {}),
        });
        const text = await res.body.text();
        if (res.statusCode < 400) return { status: res.statusCode, text };
        if (!isRetryableStatus(res.statusCode, true)) {
          throw new BootFailure(`${method} ${shown}: HTTP ${res.statusCode}`);
        }
        problem = `HTTP ${res.statusCode}`;
        // Retry-After (RFC 9110 §10.2.3) is a floor on the host's own backoff, never a shortcut: a
        // server answering `Retry-After: 0` to everything is not hammered (as redfish-client.ts).
        delay = Math.max(backoff.next(), parseRetryAfter(res.headers['retry-after']) ?? 0);
      } catch (err) {
        if (signal.aborted || err instanceof BootFailure) throw err;
        problem = err instanceof Error ? err.message : String(err);
        delay = backoff.next();
      }
      if (performance.now() - started + delay > t.retryBudgetMs) {
        throw new BootFailure(`${method} ${shown}: gave up after ${attempt} attempts (${problem})`);
      }
      this.log.debug({ method, url: shown, attempt, problem, delayMs: delay }, 'retrying');
      await sleep(delay, undefined, { signal });
    }
  }
}

/**
 * Registration data in upstream metalprobe's `RegistrationPayload.data` shape (metal-operator
 * `internal/api/registry.Server`: `systemInfo`, `cpu`, `networkInterfaces`, `storage`, `memory`,
 * `nics`), with exactly the keys the project's own probe agent (`hack/vm/init`) sends, so the registry
 * sees one shape from simulated and virtual machines alike.
 */
export function registrationData(id: HostIdentity): Record<string, unknown> {
  const ip = ipFromMac(id.macAddress);
  return {
    systemInfo: systemInfo(id),
    cpu: [
      {
        id: 0,
        totalCores: id.cpus,
        totalHardwareThreads: id.cpus,
        vendor: 'GenuineIntel',
        model: 'Simulated CPU',
        capabilities: ['fpu', 'sse2', 'avx2'],
      },
    ],
    networkInterfaces: [{ name: 'eth0', ipAddresses: [ip], macAddress: id.macAddress, carrierStatus: 'up' }],
    storage: storage(id),
    memory: memory(id),
    nics: [
      {
        name: 'eth0',
        mac: id.macAddress,
        pciAddress: '0000:00:03.0',
        speed: '1000Mb/s',
        linkModes: [],
        supportedPorts: [],
        firmwareVersion: '',
      },
    ],
  };
}

/** `systemInfo`: SMBIOS BIOS, system (type 1) and board (type 2) information. */
function systemInfo(id: HostIdentity): Record<string, unknown> {
  return {
    biosInformation: { vendor: 'SeaBIOS', version: '1.16.3', date: '04/01/2014' },
    systemInformation: {
      manufacturer: id.manufacturer,
      productName: id.model,
      version: '1.0',
      serialNumber: id.serialNumber,
      uuid: id.uuid.toLowerCase(),
      skuNumber: '',
      family: 'sim',
    },
    boardInformation: {
      manufacturer: id.manufacturer,
      product: id.model,
      version: '1.0',
      serialNumber: id.serialNumber,
      assetTag: '',
    },
  };
}

/** `storage`: the one virtio disk. */
function storage(id: HostIdentity): Record<string, unknown>[] {
  return [
    {
      path: '/dev/vda',
      name: 'vda',
      rotational: false,
      removable: false,
      readOnly: false,
      vendor: '0x1af4',
      model: 'Virtual disk',
      serial: `${id.serialNumber}-D0`,
      wwid: '',
      physicalBlockSize: 512,
      logicalBlockSize: 512,
      hWSectorSize: 512,
      sizeBytes: 64 * 1024 ** 3,
      numaNodeID: 0,
    },
  ];
}

/** `memory`: one DIMM holding all of the host's memory. */
function memory(id: HostIdentity): Record<string, unknown>[] {
  return [
    {
      size: id.memoryMiB * 1024 * 1024,
      deviceSet: '',
      deviceLocator: 'DIMM 0',
      bankLocator: '',
      memoryType: 'RAM',
      speed: '',
      vendor: 'Simulated',
      serialNumber: '',
      assetTag: '',
      partNumber: '',
      configuredMemorySpeed: '',
      minimumVoltage: '',
      maximumVoltage: '',
      configuredVoltage: '',
    },
  ];
}

/** A stable private address per host, 10.x.y.z from the MAC's last three bytes. */
function ipFromMac(mac: string): string {
  const b = mac
    .split(':')
    .slice(-3)
    .map((h) => Number.parseInt(h, 16));
  return `10.${b[0] ?? 0}.${b[1] ?? 0}.${b[2] ?? 1}`;
}

/** URL without query string: tokens travel in query parameters and must not reach logs. */
function withoutQuery(url: string): string {
  const q = url.indexOf('?');
  return q < 0 ? url : `${url.slice(0, q)}?…`;
}
