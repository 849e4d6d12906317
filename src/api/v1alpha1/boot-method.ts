/**
 * How a claimed server network-boots (DESIGN.md section 3, `bootMethod`): `PXE` — the firmware
 * (BIOS or UEFI) runs iPXE, which fetches the attempt's script; `HTTPBoot` — UEFI HTTP boot of the
 * attempt's unified kernel image (UKI), the BMC override being `UefiHttp` with `Boot.HttpBootUri`.
 */
import { StringEnum } from './schema.js';

export const BOOT_METHODS = ['PXE', 'HTTPBoot'] as const;
export type BootMethod = (typeof BOOT_METHODS)[number];
export const BootMethodSchema = (description: string) => StringEnum(BOOT_METHODS, { description });

/**
 * The attempt-scoped URL of a server's UEFI HTTP boot file: `<boot server>/httpboot/{uuid}/{attempt}/uki.efi`
 * (what the BMC override's `Boot.HttpBootUri` points at; the boot server serves it).
 */
export function httpBootFileUrl(bootServerUrl: string, systemUUID: string, attempt: number): string {
  return `${bootServerUrl.replace(/\/$/, '')}/httpboot/${systemUUID.toLowerCase()}/${attempt}/uki.efi`;
}
