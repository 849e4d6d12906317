/**
 * Resolves an OCI image reference to what a server boots, as ironcore's boot-operator does
 * (`internal/oci/manifest.go`): the reference's manifest; for an image index (OCI index or Docker
 * manifest list), first an entry whose annotation `cname` starts with `metal_pxe` and whose
 * annotation `architecture` is the wanted one (gardenlinux indexes), else the first entry whose
 * `platform.architecture` is; then the boot layers by media type (`media-types.ts`) and, beyond
 * upstream, the image config's `commandLine` (a string) to prepend to the kernel command line.
 *
 * A tag is resolved on every call (one manifest GET); everything addressed by digest (manifests,
 * config blobs) is cached in memory by digest, so a digest reference costs no registry call after
 * the first. Manifests are verified against their digest. Errors are `RegistryError`s
 * (`registry-client.ts`) or `ImageError`s with reasons `ImageArchitectureNotFound`,
 * `ImageLayerMissing`, `ImageManifestInvalid`.
 */
import { createHash } from 'node:crypto';
import { BootConfigurationReason } from '../api/vocabulary.js';
import type { RegistryCredentials } from './docker-config.js';
import {
  BOOT_LAYERS,
  type BootLayer,
  CNAME_PREFIX_METAL_PXE,
  DOCKER_LIST,
  LAYER_MEDIA_TYPES,
  MANIFEST_ACCEPT,
  OCI_INDEX,
} from './media-types.js';
import { formatReference, type ImageReference } from './reference.js';
import { type RegistryClient, RegistryError, readLimitedBytes } from './registry-client.js';

/** Reasons of image failures (src/api/vocabulary.ts). */
export const ImageReason = {
  ImageArchitectureNotFound: BootConfigurationReason.ImageArchitectureNotFound,
  ImageLayerMissing: BootConfigurationReason.ImageLayerMissing,
  ImageManifestInvalid: BootConfigurationReason.ImageManifestInvalid,
} as const;

export class ImageError extends RegistryError {}

interface Descriptor {
  mediaType?: string;
  digest: string;
  size?: number;
  annotations?: Record<string, string>;
  platform?: { architecture?: string; os?: string; variant?: string };
}
interface ManifestDoc {
  mediaType?: string;
  manifests?: Descriptor[];
  config?: Descriptor;
  layers?: Descriptor[];
}

export interface ResolvedImage {
  /** The reference as normalised (`domain/repository:tag` or `…@digest`). */
  reference: string;
  /** Digest the reference resolved to (the index's, for an index). */
  digest: string;
  /** Digest of the platform manifest whose layers are booted. */
  manifest: string;
  /** Layer digests by role. */
  layers: Partial<Record<BootLayer, string>>;
  /** Layer sizes in bytes by role, as the manifest states them. */
  sizes: Partial<Record<BootLayer, number>>;
  /** The image config's `commandLine`, when it has one. */
  commandLine?: string;
}

const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
const MAX_CONFIG_BYTES = 1024 * 1024;
const CACHE_ENTRIES = 512;

function sha256(b: Buffer): string {
  return `sha256:${createHash('sha256').update(b).digest('hex')}`;
}

export class ImageResolver {
  private readonly byDigest = new Map<string, { mediaType: string; doc: ManifestDoc }>();
  private readonly configs = new Map<string, string | undefined>();

  constructor(private readonly registry: RegistryClient) {}

  /** See the file comment. `credentials` come from the pull secret, if any. */
  async resolve(ref: ImageReference, credentials?: RegistryCredentials): Promise<ResolvedImage> {
    const arch = this.registry.policy.architecture;
    const top = await this.manifest(ref, ref.digest ?? ref.tag ?? 'latest', credentials);
    let chosen = top;
    if (isIndex(top.mediaType, top.doc)) {
      const entries = top.doc.manifests ?? [];
      const pick =
        entries.find(
          (m) =>
            m.annotations?.cname?.startsWith(CNAME_PREFIX_METAL_PXE) && m.annotations.architecture === arch,
        ) ?? entries.find((m) => m.platform?.architecture === arch);
      if (!pick) {
        const have = [
          ...new Set(
            entries.map((m) => m.platform?.architecture ?? m.annotations?.architecture).filter(Boolean),
          ),
        ];
        throw new ImageError(
          ImageReason.ImageArchitectureNotFound,
          `image ${formatReference(ref)} (index ${top.digest}) has no manifest for architecture ${arch} (it has: ${have.join(', ') || 'none'})`,
        );
      }
      chosen = await this.manifest(ref, pick.digest, credentials);
      if (isIndex(chosen.mediaType, chosen.doc))
        throw new ImageError(
          ImageReason.ImageManifestInvalid,
          `image ${formatReference(ref)}: nested image indexes are not supported`,
        );
    }
    const layers: ResolvedImage['layers'] = {};
    const sizes: ResolvedImage['sizes'] = {};
    for (const l of chosen.doc.layers ?? []) {
      const role = LAYER_MEDIA_TYPES[l.mediaType ?? ''];
      if (role && !layers[role] && typeof l.digest === 'string') {
        layers[role] = l.digest;
        if (typeof l.size === 'number') sizes[role] = l.size;
      }
    }
    const commandLine = await this.commandLine(ref, chosen.doc.config, credentials);
    return {
      reference: formatReference(ref),
      digest: top.digest,
      manifest: chosen.digest,
      layers,
      sizes,
      ...(commandLine ? { commandLine } : {}),
    };
  }

  private async manifest(
    ref: ImageReference,
    tagOrDigest: string,
    credentials: RegistryCredentials | undefined,
  ): Promise<{ digest: string; mediaType: string; doc: ManifestDoc }> {
    const byDigest = tagOrDigest.includes(':');
    const hit = byDigest ? this.byDigest.get(tagOrDigest) : undefined;
    if (hit) return { digest: tagOrDigest, ...hit };
    const res = await this.registry.get(ref, `/manifests/${tagOrDigest}`, {
      accept: MANIFEST_ACCEPT,
      credentials,
    });
    const body = await readLimitedBytes(res.body, MAX_MANIFEST_BYTES);
    const computed = sha256(body);
    const stated = res.headers['docker-content-digest'];
    const expected = byDigest
      ? tagOrDigest
      : typeof stated === 'string' && stated.startsWith('sha256:')
        ? stated
        : computed;
    if (expected !== computed) {
      throw new ImageError(
        ImageReason.ImageManifestInvalid,
        `manifest ${formatReference(ref)} (${tagOrDigest}): content digest ${computed} is not ${expected}`,
      );
    }
    let doc: ManifestDoc;
    try {
      doc = JSON.parse(body.toString('utf8'));
    } catch {
      throw new ImageError(
        ImageReason.ImageManifestInvalid,
        `manifest ${formatReference(ref)} (${tagOrDigest}) is not JSON`,
      );
    }
    const ct = res.headers['content-type'];
    const mediaType = doc.mediaType ?? (typeof ct === 'string' ? ct.split(';')[0]!.trim() : '');
    if (this.byDigest.size >= CACHE_ENTRIES) this.byDigest.delete(this.byDigest.keys().next().value!);
    this.byDigest.set(computed, { mediaType, doc });
    return { digest: computed, mediaType, doc };
  }

  private async commandLine(
    ref: ImageReference,
    config: Descriptor | undefined,
    credentials: RegistryCredentials | undefined,
  ): Promise<string | undefined> {
    if (!config?.digest || (config.size ?? 0) > MAX_CONFIG_BYTES) return undefined;
    if (this.configs.has(config.digest)) return this.configs.get(config.digest);
    let value: string | undefined;
    try {
      const res = await this.registry.get(ref, `/blobs/${config.digest}`, { credentials });
      const body = await readLimitedBytes(res.body, MAX_CONFIG_BYTES);
      if (sha256(body) !== config.digest)
        throw new ImageError(
          ImageReason.ImageManifestInvalid,
          `image config ${config.digest} does not match its digest`,
        );
      const doc = JSON.parse(body.toString('utf8')) as { commandLine?: unknown };
      value = typeof doc.commandLine === 'string' ? doc.commandLine : undefined;
    } catch (err) {
      if (err instanceof RegistryError && err.transient) throw err;
      if (err instanceof ImageError) throw err;
      value = undefined; // a config that is not JSON (e.g. the empty descriptor's `{}`) has no commandLine
    }
    if (this.configs.size >= CACHE_ENTRIES) this.configs.delete(this.configs.keys().next().value!);
    this.configs.set(config.digest, value);
    return value;
  }
}

function isIndex(mediaType: string, doc: ManifestDoc): boolean {
  return (
    mediaType === OCI_INDEX || mediaType === DOCKER_LIST || (!doc.layers && Array.isArray(doc.manifests))
  );
}

/**
 * `ImageLayerMissing` unless the resolution has kernel + initrd, which every boot method boots: for
 * HTTPBoot (and VirtualMedia, whose ISO holds it) the boot server builds each attempt's UKI from them (bootserver/uki.ts), because the
 * attempt's token must sit in the UKI's embedded command line, which a prebuilt `uki` layer fixes.
 */
export function requireLayers(r: ResolvedImage, method: 'PXE' | 'HTTPBoot' | 'VirtualMedia'): void {
  const need: BootLayer[] = ['kernel', 'initrd'];
  const missing = need.filter((l) => !r.layers[l]);
  if (missing.length) {
    const have = BOOT_LAYERS.filter((l) => r.layers[l]);
    throw new ImageError(
      ImageReason.ImageLayerMissing,
      `image ${r.reference} (manifest ${r.manifest}) has no ${missing.join(' and ')} layer for ${method} (it has: ${have.join(', ') || 'no boot layers'})`,
    );
  }
}
