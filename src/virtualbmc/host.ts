/**
 * The seam between the virtual BMC's Redfish service and the machine it manages.
 *
 * The Redfish layer (virtual-bmc server) owns Redfish semantics: the ComputerSystem resource,
 * ResetType mapping, the boot override (a `Once` override is consumed by the next boot) and fault
 * knobs. A {@link Host} owns only the machine: a simulated host (`sim` back end) or a QEMU VM
 * (`qemu` back end).
 */

import type { Duplex } from 'node:stream';

/** Redfish `PowerState` values (Redfish schema `Resource.PowerState`). */
export type HostPowerState = 'On' | 'Off' | 'PoweringOn' | 'PoweringOff';

/**
 * Where the host boots from on its next start, already resolved by the Redfish layer from
 * `Boot.BootSourceOverrideTarget` + `BootSourceOverrideEnabled` (`Pxe` = network boot via iPXE,
 * `Hdd` = local disk, `None` = the host's own boot order, which for our hosts is disk first,
 * `UefiHttp` = UEFI HTTP boot of the URI last given to {@link Host.setHttpBootUri}, `Cd` = the
 * virtual CD, holding the image last given to {@link Host.insertMedia}; an empty drive boots the disk).
 */
export type BootDevice = 'Pxe' | 'Hdd' | 'None' | 'UefiHttp' | 'Cd';

/** Static identity of a host, stable across restarts of the virtual BMC. */
export interface HostIdentity {
  /** SMBIOS system UUID, lower-case 8-4-4-4-12. */
  uuid: string;
  serialNumber: string;
  /** MAC address of the first NIC, lower-case colon-separated. */
  macAddress: string;
  manufacturer: string;
  model: string;
  /** Memory size in MiB. */
  memoryMiB: number;
  cpus: number;
}

export interface Host {
  readonly identity: HostIdentity;
  /** Current power state; transitional states are reported while a transition is in progress. */
  powerState(): HostPowerState;
  /** Starts the host booting from `device`. Resolves once the start was initiated, not when the OS is up. */
  powerOn(device: BootDevice): Promise<void>;
  /** ACPI power button: the OS may shut down in its own time. */
  gracefulShutdown(): Promise<void>;
  /** Cuts power immediately. */
  forceOff(): Promise<void>;
  /** Hard reset of a running host, booting from `device`. */
  reset(device: BootDevice): Promise<void>;
  /**
   * Redfish `Boot.HttpBootUri`: what a `UefiHttp` boot fetches (undefined: the URI DHCP offers).
   * Hosts without UEFI HTTP boot do not implement it.
   */
  setHttpBootUri?(uri: string | undefined): void;
  /**
   * Redfish `VirtualMedia.InsertMedia`: the BMC takes the image at `image` (an http(s) URL) into the
   * host's virtual CD. Resolves once the image was found readable (as BMCs check at insert time).
   * @throws MediaFetchError (media.ts) when it cannot be read: the insert is refused.
   * Hosts without virtual media do not implement it.
   */
  insertMedia?(image: string): Promise<void>;
  /** Redfish `VirtualMedia.EjectMedia`: empties the virtual CD. */
  ejectMedia?(): Promise<void>;
  /**
   * Opens the host's serial port for the BMC's console (see console.ts): a duplex stream of the raw
   * bytes the guest reads and writes. Serves one caller at a time (the console enforces it).
   * @throws Error with the reason when the port cannot be opened now (a VM that is off).
   * Hosts without a serial console do not implement it.
   */
  openSerial?(): Promise<Duplex>;
  /** Releases every resource (processes, timers, files). Idempotent. */
  close(): Promise<void>;
}
