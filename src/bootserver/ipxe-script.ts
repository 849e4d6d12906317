/**
 * iPXE scripts served by the boot server (iPXE scripting reference: `#!ipxe`, `chain`, `kernel`,
 * `initrd`, `boot`, `exit`; `${uuid}` expands to the SMBIOS UUID as iPXE reads it).
 *
 * Kernel command-line keys read by the agents (the busybox initramfs in `hack/vm/` and the simulated
 * host in `src/virtualbmc/sim.ts`): `metal.mode` (probe|os), `metal.uuid`, `metal.registry` (registry
 * base URL), `metal.token` (the attempt's callback token), `ignition.config.url`; for an image
 * with a squashfs layer also gardenlinux's `gl.ovl`, `gl.url`, `gl.live` (see {@link liveRootArgs}).
 */
import { HttpError } from '../bootsignals/http-error.js';
import type { ImageEntry } from '../oci/image-catalog.js';

/** Longest image command line served, in bytes (as the resolver's bound for OCI images, N6/N12). */
export const MAX_IMAGE_CMDLINE_BYTES = 1024;
/** The keys this operator sets; an image command line must not set them again. */
const OWN_KEYS = [
  'metal.mode',
  'metal.uuid',
  'metal.attempt',
  'metal.registry',
  'metal.token',
  'ignition.config.url',
];

/**
 * The image's command line as served (security review N12): it comes from the catalog or from
 * `status.image.commandLine`, which more than the controller may write, and is pasted into an iPXE
 * `kernel` line, so control characters (a newline would end that line), more than
 * {@link MAX_IMAGE_CMDLINE_BYTES} bytes, and any of this operator's own keys are refused:
 * `HttpError` 409 `InvalidCommandLine` (nothing is served).
 */
export function checkedImageCmdline(cmdline: string): string {
  const refuse = (why: string) => {
    throw new HttpError(409, 'InvalidCommandLine', `the image's kernel command line ${why}`);
  };
  if (Buffer.byteLength(cmdline) > MAX_IMAGE_CMDLINE_BYTES)
    refuse(`is longer than ${MAX_IMAGE_CMDLINE_BYTES} bytes`);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
  if (/[\u0000-\u001f\u007f]/.test(cmdline)) refuse('contains control characters');
  for (const arg of cmdline.split(' '))
    if (OWN_KEYS.some((k) => arg === k || arg.startsWith(`${k}=`)))
      refuse(`sets ${arg.split('=')[0]}, which the operator sets`);
  return cmdline;
}

/** Default script for `GET /ipxe`: chains to the UUID-specific script. */
export function chainScript(bootServerUrl: string): string {
  return ['#!ipxe', `chain --autofree ${bootServerUrl}/ipxe/\${uuid}`, ''].join('\n');
}

/**
 * Script that boots from the next local device: iPXE's `exit` returns to the firmware, which
 * continues with the next entry of its boot order (NetBootOnce after completion).
 */
export function localBootScript(reason: string): string {
  return [
    '#!ipxe',
    `echo metal: ${reason.replace(/[^\w .:/-]/g, '')}; booting from local disk`,
    'exit',
    '',
  ].join('\n');
}

export interface AttemptScriptInput {
  image: ImageEntry;
  uuid: string;
  attempt: number;
  token: string;
  bootServerUrl: string;
  registryUrl: string;
}

/** URL of an image file: the catalog's own http(s) URL, or the boot server's `/images/{name}/{file}`. */
export function imageFileUrl(bootServerUrl: string, image: ImageEntry, file: 'kernel' | 'initrd'): string {
  const src = image[file];
  if (/^https?:\/\//.test(src)) return src;
  // Keep '/' readable: firmware decodes %2F anyway, and the route takes the name up to the last segment.
  return `${bootServerUrl}/images/${image.name.split('/').map(encodeURIComponent).join('/')}/${file}`;
}

/**
 * The attempt's kernel command line (without the iPXE `initrd=` argument): the agent keys and the
 * ignition URL carrying the attempt token first, then the image's own arguments (checked by
 * {@link checkedImageCmdline}; first so that nothing in them, such as an iPXE `#`, can drop the
 * token, N12) and the live-root arguments. Shared by the iPXE script and the UKI of UEFI HTTP boot.
 * @throws HttpError 409 `InvalidCommandLine` (see {@link checkedImageCmdline}).
 */
export function attemptKernelArgs(i: AttemptScriptInput): string[] {
  const ignitionUrl = `${i.bootServerUrl}/ignition/${i.uuid}?token=${encodeURIComponent(i.token)}`;
  return [
    `metal.mode=${i.image.mode}`,
    `metal.uuid=${i.uuid}`,
    `metal.attempt=${i.attempt}`,
    `metal.registry=${i.registryUrl}`,
    `metal.token=${i.token}`,
    `ignition.config.url=${ignitionUrl}`,
    checkedImageCmdline(i.image.cmdline ?? ''),
    ...(i.image.squashfs ? liveRootArgs(i.image.squashfs) : []),
  ].filter(Boolean);
}

/**
 * Kernel arguments that boot a squashfs root fetched over HTTP with a tmpfs overlay, as upstream
 * boot-operator's iPXE template (`templates/ipxe-script.tpl`) passes them to gardenlinux's initramfs:
 * `gl.ovl=/:tmpfs gl.url=<squashfs URL> gl.live=1`.
 */
export function liveRootArgs(squashfsUrl: string): string[] {
  return ['gl.ovl=/:tmpfs', `gl.url=${squashfsUrl}`, 'gl.live=1'];
}

/** The attempt's script: kernel + initrd + a command line carrying the attempt token. */
export function attemptScript(i: AttemptScriptInput): string {
  // iPXE under UEFI hands the initrd to the kernel's EFI stub by this name.
  const args = ['initrd=initrd.img', ...attemptKernelArgs(i)];
  return [
    '#!ipxe',
    `echo metal: ${i.image.name} attempt ${i.attempt}`,
    `kernel ${imageFileUrl(i.bootServerUrl, i.image, 'kernel')} ${args.join(' ')}`,
    `initrd --name initrd.img ${imageFileUrl(i.bootServerUrl, i.image, 'initrd')}`,
    'boot',
    '',
  ].join('\n');
}
