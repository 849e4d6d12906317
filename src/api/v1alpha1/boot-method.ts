/**
 * How a claimed server network-boots (README, 'A claim's boot attempts', `bootMethod`): `PXE` — the firmware
 * (BIOS or UEFI) runs iPXE, which fetches the attempt's script; `HTTPBoot` — UEFI HTTP boot of the
 * attempt's unified kernel image (UKI), the BMC override being `UefiHttp` with `Boot.HttpBootUri`;
 * `VirtualMedia` — the BMC inserts the attempt's ISO (Redfish `VirtualMedia.InsertMedia`) and boots it
 * once (override `Cd`): no DHCP and no boot network needed, the token never crosses the host's network
 * before the host has it.
 */
import { StringEnum } from './schema.js';

export const BOOT_METHODS = ['PXE', 'HTTPBoot', 'VirtualMedia'] as const;
export type BootMethod = (typeof BOOT_METHODS)[number];
export const BootMethodSchema = (description: string) => StringEnum(BOOT_METHODS, { description });

/**
 * The attempt-scoped URL of a server's UEFI HTTP boot file: `<boot server>/httpboot/{uuid}/{attempt}/uki.efi`
 * (what the BMC override's `Boot.HttpBootUri` points at; the boot server serves it).
 */
export function httpBootFileUrl(bootServerUrl: string, systemUUID: string, attempt: number): string {
  return `${bootServerUrl.replace(/\/$/, '')}/httpboot/${systemUUID.toLowerCase()}/${attempt}/uki.efi`;
}

/**
 * The attempt-scoped capability URL of a server's virtual-media ISO:
 * `<boot server>/vmedia/{uuid}/{attempt}/{capability}/boot.iso` (what the BMC's `InsertMedia` is given;
 * `capability` from src/bootauth/vmedia-capability.ts, base64url, so it needs no escaping).
 */
export function virtualMediaIsoUrl(
  bootServerUrl: string,
  systemUUID: string,
  attempt: number,
  capability: string,
): string {
  return `${bootServerUrl.replace(/\/$/, '')}/vmedia/${systemUUID.toLowerCase()}/${attempt}/${capability}/boot.iso`;
}

/**
 * Server annotation with the host's static network configuration for `VirtualMedia` boots, in the
 * Linux kernel's `ip=` syntax without the `ip=` (`<client-ip>:<server-ip>:<gw-ip>:<netmask>:<hostname>:<device>:<autoconf>[:<dns0-ip>[:<dns1-ip>]]`,
 * Documentation/admin-guide/nfs/nfsroot.rst), e.g. `10.0.0.5::10.0.0.1:255.255.255.0:node1:eth0:off`.
 * The boot server puts `ip=<value>` on the ISO's command line, so the image reaches the signal servers
 * without DHCP. Absent: the image configures its network itself.
 */
export const STATIC_IP_ANNOTATION = 'metal.ironcore.dev/boot-ip';

/** What {@link STATIC_IP_ANNOTATION} may hold: the `ip=` field characters only, at most 256 (no blanks: one argument). */
export const STATIC_IP_PATTERN = /^[0-9A-Za-z.:[\]_-]{1,256}$/;
