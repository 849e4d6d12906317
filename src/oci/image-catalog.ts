/**
 * The image catalog: how a `spec.image` name (e.g. `metal/os:latest`) becomes a kernel, an initrd
 * and a kernel command line. OCI resolution is a later step; today the catalog is a YAML document
 * given by a file (`--image-catalog`) or a ConfigMap key, shaped as:
 *
 * ```yaml
 * images:
 *   metal/os:latest:
 *     kernel: /var/cache/metal/vmlinuz     # absolute file path (served by the boot server) or http(s) URL
 *     initrd: /var/cache/metal/initramfs.cpio.gz
 *     cmdline: console=ttyS0               # optional, prepended to the per-attempt arguments
 *     mode: os                             # os (default) or probe: the agent's behaviour (metal.mode)
 * ```
 */
import { existsSync } from 'node:fs';
import { parse } from 'yaml';

export interface ImageEntry {
  name: string;
  /** Absolute file path served by the boot server under `/images/{id}/kernel`, or an http(s) URL. */
  kernel: string;
  initrd: string;
  /**
   * URL of a squashfs root filesystem (an OCI image's squashfs layer), put on the kernel command line
   * as upstream boot-operator does (ipxe-script.ts); none for catalog entries.
   */
  squashfs?: string;
  cmdline: string;
  mode: 'os' | 'probe';
}

export type ImageResolution =
  | { ok: true; image: ImageEntry }
  | { ok: false; reason: string; message: string };

/** Most image names listed in an `ImageNotFound` message. */
const MAX_NAMES_LISTED = 20;

export class ImageCatalog {
  private constructor(
    private readonly images: Map<string, ImageEntry>,
    /** Where the catalog comes from, for messages (e.g. `file /etc/images.yaml`). */
    readonly origin = 'none configured: --image-catalog or --image-catalog-configmap',
  ) {}

  /** Parses a catalog document; throws `Error` naming the image and field that are wrong. `origin`: where it was read. */
  static parse(text: string, origin?: string): ImageCatalog {
    const doc = (parse(text) ?? {}) as { images?: Record<string, Partial<ImageEntry>> };
    const images = new Map<string, ImageEntry>();
    for (const [name, raw] of Object.entries(doc.images ?? {})) {
      for (const field of ['kernel', 'initrd'] as const) {
        if (typeof raw?.[field] !== 'string' || !raw[field])
          throw new Error(`image catalog: ${name}: ${field} missing`);
      }
      const mode = raw.mode ?? 'os';
      if (mode !== 'os' && mode !== 'probe')
        throw new Error(`image catalog: ${name}: mode must be os or probe`);
      images.set(name, {
        name,
        kernel: raw.kernel!,
        initrd: raw.initrd!,
        cmdline: typeof raw.cmdline === 'string' ? raw.cmdline : '',
        mode,
      });
    }
    return new ImageCatalog(images, origin);
  }

  static empty(origin?: string): ImageCatalog {
    return new ImageCatalog(new Map(), origin);
  }

  names(): string[] {
    return [...this.images.keys()];
  }

  /**
   * Resolves an image name. Not found → `ImageNotFound`; a local file that does not exist →
   * `ImageFileMissing` (boot-flow case C05: the SBC goes to Error with this reason).
   */
  resolve(name: string | undefined): ImageResolution {
    if (!name) return { ok: false, reason: 'ImageNotSet', message: 'spec.image is empty' };
    const image = this.images.get(name);
    if (!image) {
      const names = this.names().sort();
      const known = names.length
        ? `known images: ${names.slice(0, MAX_NAMES_LISTED).join(', ')}${names.length > MAX_NAMES_LISTED ? ` and ${names.length - MAX_NAMES_LISTED} more` : ''}`
        : 'the catalog is empty';
      return {
        ok: false,
        reason: 'ImageNotFound',
        message: `image ${name} is not in the image catalog (${this.origin}); ${known}`,
      };
    }
    for (const f of [image.kernel, image.initrd]) {
      if (f.startsWith('/') && !existsSync(f)) {
        return { ok: false, reason: 'ImageFileMissing', message: `image ${name}: file ${f} does not exist` };
      }
    }
    return { ok: true, image };
  }
}
