/**
 * Redfish-side state of one ComputerSystem of the virtual BMC: the boot override, the ETag version,
 * and the ResetType semantics on top of a {@link Host}. A real BMC behaves the same way: the override
 * is BMC state, consumed when the host actually starts (`Once` then reads `Disabled`, ComputerSystem
 * schema `BootSourceOverrideEnabled`), and a reset may take effect well after the action was accepted.
 */

import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import type { BootSourceOverrideTarget, ResetType } from '../bmc/bmc.js';
import type { BootDevice, Host, HostPowerState } from './host.js';

/** Boot targets the virtual systems accept. */
export const SUPPORTED_BOOT_TARGETS: readonly BootSourceOverrideTarget[] = [
  'None',
  'Pxe',
  'Hdd',
  'Cd',
  'Usb',
  'BiosSetup',
  'UefiHttp',
];

/**
 * The Boot override as the service holds it. Values are strings: a captured tree or profile may start a
 * system on a vendor value outside the DMTF enum (e.g. `UsbKey`); PATCHes are validated by the server.
 */
export interface BootOverrideState {
  target: string;
  enabled: string;
  mode: string;
  /** `Boot.HttpBootUri`: what a `UefiHttp` boot fetches; null or absent when unset. */
  httpBootUri?: string | null;
}

/** How ETags look (the formats of the captured trees). */
export type EtagFormat = 'counter' | 'numeric' | 'weak-hex' | 'md5';

export interface VirtualSystemOptions {
  /** Redfish `Id`; default: the host's UUID in lower case. */
  id?: string;
  initialBoot?: BootOverrideState;
  etagFormat?: EtagFormat;
  /** Ms a started host stays in POST (HPE iLO refuses Boot changes meanwhile). 0: no POST window. */
  postWindowMs?: number;
}

interface PendingTransition {
  type: ResetType;
  /** State to report while pending, when transitional states are reported. */
  transitional: 'PoweringOn' | 'PoweringOff';
  timer: NodeJS.Timeout;
}

export class VirtualSystem {
  readonly id: string;
  readonly uri: string;
  readonly boot: BootOverrideState;
  /** Boot properties PATCHed to the SettingsObject, applied when the next reset takes effect. */
  pendingBoot: Partial<BootOverrideState> | undefined;
  /** BIOS configuration jobs queued (Dell: every PATCH carrying `BootSourceOverrideMode`). */
  biosJobs = 0;
  /** The virtual CD (Redfish VirtualMedia `Image`, `Inserted`, `WriteProtected`); one per system. */
  media: { image: string | undefined; inserted: boolean; writeProtected: boolean } = {
    image: undefined,
    inserted: false,
    writeProtected: true,
  };
  /** Inserts and ejects accepted, for tests. */
  mediaLog: Array<{ at: number; action: 'insert' | 'eject'; image: string | undefined }> = [];
  /** Bumped on every change of the resource's writable state; the ETag is derived from it. */
  private version = 1;
  private pending: PendingTransition | undefined;
  private closed = false;
  private postUntil = 0;
  private armedPostMs = 0;
  private readonly etagFormat: EtagFormat;
  private readonly postWindowMs: number;

  constructor(
    readonly host: Host,
    private readonly log: Logger,
    opts: VirtualSystemOptions = {},
  ) {
    this.id = opts.id ?? host.identity.uuid.toLowerCase();
    this.uri = `/redfish/v1/Systems/${this.id}`;
    this.boot = { ...(opts.initialBoot ?? { target: 'None', enabled: 'Disabled', mode: 'UEFI' }) };
    this.etagFormat = opts.etagFormat ?? 'counter';
    this.postWindowMs = opts.postWindowMs ?? 0;
  }

  /** ETag of the system (and its settings object), in the profile's format. */
  get etag(): string {
    if (this.etagFormat === 'counter') return `"${this.version}"`;
    const h = createHash('md5').update(`${this.id}/${this.version}`).digest('hex');
    if (this.etagFormat === 'md5') return `"${h}"`;
    if (this.etagFormat === 'weak-hex') return `W/"${h.slice(0, 8).toUpperCase()}"`;
    return `"${118005423340 + this.version}"`;
  }

  /** Whether the host is in POST now (started less than the POST window ago, or told so). */
  inPost(now = Date.now()): boolean {
    return now < this.postUntil;
  }

  /** Puts the host into POST for `ms` from now (a fault knob; a start does it by itself). */
  enterPost(ms: number): void {
    this.postUntil = Math.max(this.postUntil, Date.now() + ms);
  }

  /** The next Boot PATCH finds the host just reset: it enters POST for `ms` at that moment (a fault knob). */
  armPostAtNextPatch(ms: number): void {
    this.armedPostMs = ms;
  }

  /** Called on a Boot PATCH: starts an armed POST window. */
  startArmedPost(): void {
    if (this.armedPostMs > 0) this.enterPost(this.armedPostMs);
    this.armedPostMs = 0;
  }

  /** Boot values as a client would next see them take effect: pending settings over current ones. */
  effectiveBoot(): BootOverrideState {
    return { ...this.boot, ...this.pendingBoot };
  }

  /** Queues Boot properties in the SettingsObject until the next reset. */
  setPendingBoot(changes: Partial<BootOverrideState>): void {
    this.pendingBoot = { ...this.pendingBoot, ...changes };
    this.version++;
  }

  /** Simulates another client changing the resource. */
  touch(): void {
    this.version++;
  }

  /** `PowerState` as the BMC reports it: the host's, or the old/transitional one while a reset is pending. */
  powerState(reportTransitional: boolean): HostPowerState {
    if (this.pending !== undefined && reportTransitional) return this.pending.transitional;
    return this.host.powerState();
  }

  /** Applies validated Boot properties. */
  setBoot(changes: Partial<BootOverrideState>): void {
    Object.assign(this.boot, changes);
    this.version++;
  }

  /**
   * Accepts a reset. With `transitionMs` 0 the host acts before this resolves; otherwise it acts after
   * `transitionMs` and this resolves at once. A second reset while one is pending replaces it, except
   * the same type, which is a no-op (clients retry requests whose answer they did not see).
   */
  async reset(type: ResetType, transitionMs: number): Promise<void> {
    if (this.pending !== undefined) {
      if (this.pending.type === type) return;
      clearTimeout(this.pending.timer);
      this.pending = undefined;
    }
    if (transitionMs <= 0) {
      await this.apply(type);
      return;
    }
    const timer = setTimeout(() => {
      this.pending = undefined;
      this.apply(type).catch((err: unknown) =>
        this.log.error({ err, system: this.id, type }, 'reset failed on host'),
      );
    }, transitionMs);
    this.pending = { type, transitional: this.transitionalFor(type), timer };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.pending !== undefined) clearTimeout(this.pending.timer);
    this.pending = undefined;
  }

  private transitionalFor(type: ResetType): 'PoweringOn' | 'PoweringOff' {
    if (type === 'ForceOff' || type === 'GracefulShutdown') return 'PoweringOff';
    if (type === 'PushPowerButton' && this.host.powerState() !== 'Off') return 'PoweringOff';
    return 'PoweringOn';
  }

  /** The reset's effect, decided by the host's state at the moment it takes effect. */
  private async apply(type: ResetType): Promise<void> {
    if (this.closed) return;
    if (this.pendingBoot !== undefined) {
      // Settings objects take effect at the next reset (Settings `@Redfish.SettingsApplyTime` OnReset).
      const pending = this.pendingBoot;
      this.pendingBoot = undefined;
      this.setBoot(pending);
    }
    const off = this.host.powerState() === 'Off';
    switch (type) {
      case 'On':
      case 'ForceOn':
        if (off) await this.host.powerOn(this.consumeBootDevice());
        return;
      case 'ForceOff':
        if (!off) await this.host.forceOff();
        return;
      case 'GracefulShutdown':
        if (!off) await this.host.gracefulShutdown();
        return;
      case 'PushPowerButton':
        if (off) await this.host.powerOn(this.consumeBootDevice());
        else await this.host.gracefulShutdown();
        return;
      case 'GracefulRestart':
      case 'ForceRestart':
        if (off) await this.host.powerOn(this.consumeBootDevice());
        else await this.host.reset(this.consumeBootDevice());
        return;
      case 'PowerCycle':
      case 'FullPowerCycle':
        if (!off) await this.host.forceOff();
        await this.host.powerOn(this.consumeBootDevice());
        return;
      default:
        // Nmi, Suspend, Pause, Resume: nothing a simulated or virtual host models.
        return;
    }
  }

  /** Resolves the override for the boot that is starting now; a `Once` override is used up by it. */
  private consumeBootDevice(): BootDevice {
    if (this.postWindowMs > 0) this.enterPost(this.postWindowMs);
    if (this.boot.enabled === 'Disabled') return 'None';
    const t = this.boot.target;
    const device: BootDevice = t === 'Pxe' || t === 'Hdd' || t === 'UefiHttp' || t === 'Cd' ? t : 'None';
    if (device === 'UefiHttp') this.host.setHttpBootUri?.(this.boot.httpBootUri ?? undefined);
    if (this.boot.enabled === 'Once') this.setBoot({ enabled: 'Disabled' });
    return device;
  }
}
