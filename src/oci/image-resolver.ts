/**
 * Resolves an OCI image reference to what a server boots, as ironcore's boot-operator does
 * (`internal/oci/manifest.go`): the reference's manifest; for an image index (OCI index or Docker
 * manifest list), first an entry whose annotation `cname` starts with `metal_pxe` and whose
 * annotation `architecture` is the wanted one (gardenlinux indexes), else the first entry whose
 * `platform.architecture` is; then the boot layers by media type (`media-types.ts`) and, beyond
 * upstream, the image config's `commandLine` (a string) to prepend to the kernel command line.
 *
 * A tag is resolved on every call (one manifest GET); everything addressed by digest (manifests,
 * config blobs) is cached in memory by (registry, repository, digest), and a hit is served only
 * after the registry confirmed that this reference with these credentials may read that digest
 * (`RegistryClient.confirm`: an authenticated HEAD, its yes remembered for a bounded time), so one
 * tenant's private manifest never answers another's reference to it (security review N3).
 * Concurrent resolutions of one digest (50 servers booting one image) share one GET: the others wait
 * for it, then take the cached result as a hit (confirmed for their own credentials).
 * Manifests are verified against their digest. Errors are `RegistryError`s
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

/**
 * Bounds (security review N6: every tenant names images, so every tenant fills these caches). A boot
 * image's manifest or index is a few KiB (a gardenlinux index of all flavours ~40 KiB); its config
 * holds `commandLine`. Larger answers are refused as `ImageManifestInvalid` (a config larger than
 * its bound: no `commandLine`, as before).
 */
export const MAX_MANIFEST_BYTES = 256 * 1024;
export const MAX_CONFIG_BYTES = 256 * 1024;
/**
 * Longest image `commandLine` in bytes: x86's `COMMAND_LINE_SIZE` is 2048 and the attempt's own
 * arguments (token, URLs) must still fit. Longer, or with control characters (a newline would end
 * the iPXE `kernel` line, N12): `ImageManifestInvalid`.
 */
export const MAX_COMMAND_LINE_BYTES = 1024;
/**
 * Memory of both digest caches together, estimated as 2 bytes per character of the kept JSON: only
 * the fields resolution reads are kept (see {@link slim}), so one entry is ~1 KiB, not its manifest.
 */
export const CACHE_BYTES = 4 * 1024 * 1024;

function sha256(b: Buffer): string {
  return `sha256:${createHash('sha256').update(b).digest('hex')}`;
}

/** A map bounded by the estimated bytes of its entries; oldest inserted out first. */
class ByteBoundedMap<V> {
  private readonly entries = new Map<string, { value: V; bytes: number }>();
  private total = 0;
  constructor(private readonly max: number) {}
  has(k: string): boolean {
    return this.entries.has(k);
  }
  get(k: string): V | undefined {
    return this.entries.get(k)?.value;
  }
  set(k: string, value: V): void {
    const bytes = 2 * (k.length + (JSON.stringify(value ?? null)?.length ?? 0)) + 64;
    this.delete(k);
    while (this.total + bytes > this.max && this.entries.size) this.delete(this.entries.keys().next().value!);
    if (bytes > this.max) return;
    this.entries.set(k, { value, bytes });
    this.total += bytes;
  }
  delete(k: string): void {
    const e = this.entries.get(k);
    if (!e) return;
    this.entries.delete(k);
    this.total -= e.bytes;
  }
  get bytes(): number {
    return this.total;
  }
}

const DIGEST = /^sha256:[a-f0-9]{64}$/;
const short = (v: unknown, max: number) => (typeof v === 'string' && v.length <= max ? v : undefined);

/**
 * What resolution reads of a manifest or index, and nothing else (N6): index entries' digest,
 * `cname` / `architecture` annotations and platform architecture; the config descriptor; the first
 * layer of each boot media type. Entries with a malformed digest are dropped.
 */
function slim(doc: ManifestDoc): ManifestDoc {
  const out: ManifestDoc = {};
  const mt = short(doc.mediaType, 256);
  if (mt) out.mediaType = mt;
  if (Array.isArray(doc.manifests)) {
    out.manifests = doc.manifests
      .filter((m) => DIGEST.test(m?.digest ?? ''))
      .map((m) => {
        const cname = short(m.annotations?.cname, 256);
        const architecture = short(m.annotations?.architecture, 64);
        const platformArch = short(m.platform?.architecture, 64);
        return {
          digest: m.digest,
          ...(cname || architecture
            ? { annotations: { ...(cname ? { cname } : {}), ...(architecture ? { architecture } : {}) } }
            : {}),
          ...(platformArch ? { platform: { architecture: platformArch } } : {}),
        };
      });
  }
  if (doc.config && DIGEST.test(doc.config.digest ?? ''))
    out.config = {
      digest: doc.config.digest,
      ...(typeof doc.config.size === 'number' ? { size: doc.config.size } : {}),
    };
  if (Array.isArray(doc.layers)) {
    const seen = new Set<string>();
    out.layers = [];
    for (const l of doc.layers) {
      const role = LAYER_MEDIA_TYPES[l?.mediaType ?? ''];
      if (!role || seen.has(role) || !DIGEST.test(l.digest ?? '')) continue;
      seen.add(role);
      out.layers.push({
        mediaType: l.mediaType,
        digest: l.digest,
        ...(typeof l.size === 'number' ? { size: l.size } : {}),
      });
    }
  }
  return out;
}

/** Throws `ImageManifestInvalid` for a `commandLine` beyond the bound or with control characters. */
function checkCommandLine(digest: string, v: string): string {
  if (Buffer.byteLength(v) > MAX_COMMAND_LINE_BYTES)
    throw new ImageError(
      ImageReason.ImageManifestInvalid,
      `image config ${digest}: commandLine is longer than ${MAX_COMMAND_LINE_BYTES} bytes`,
    );
  // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
  if (/[\u0000-\u001f\u007f]/.test(v))
    throw new ImageError(
      ImageReason.ImageManifestInvalid,
      `image config ${digest}: commandLine contains control characters`,
    );
  return v;
}

export class ImageResolver {
  private readonly byDigest = new ByteBoundedMap<{ mediaType: string; doc: ManifestDoc }>(CACHE_BYTES / 2);
  private readonly configs = new ByteBoundedMap<string | undefined>(CACHE_BYTES / 2);
  /** GETs by digest in flight, by cache key: a second resolution waits for the first (file comment). */
  private readonly fetching = new Map<string, Promise<unknown>>();

  /** Estimated bytes held by the digest caches (bounded by {@link CACHE_BYTES}). */
  cachedBytes(): number {
    return this.byDigest.bytes + this.configs.bytes;
  }

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
    const key = cacheKey(ref, tagOrDigest);
    if (byDigest && !this.byDigest.has(key)) await this.fetching.get(key)?.catch(() => undefined);
    const hit = byDigest ? this.byDigest.get(key) : undefined;
    if (hit) {
      await this.registry.confirm(ref, 'manifests', tagOrDigest, credentials, MANIFEST_ACCEPT);
      return { digest: tagOrDigest, ...hit };
    }
    if (!byDigest) return this.fetchManifest(ref, tagOrDigest, credentials);
    return this.singleFlight(key, () => this.fetchManifest(ref, tagOrDigest, credentials));
  }

  /** Runs `fetch` as the GET in flight for `key` (see {@link ImageResolver.fetching}). */
  private singleFlight<T>(key: string, fetch: () => Promise<T>): Promise<T> {
    const p = fetch().finally(() => {
      if (this.fetching.get(key) === p) this.fetching.delete(key);
    });
    this.fetching.set(key, p);
    return p;
  }

  private async fetchManifest(
    ref: ImageReference,
    tagOrDigest: string,
    credentials: RegistryCredentials | undefined,
  ): Promise<{ digest: string; mediaType: string; doc: ManifestDoc }> {
    const byDigest = tagOrDigest.includes(':');
    const res = await this.registry.get(ref, `/manifests/${tagOrDigest}`, {
      accept: MANIFEST_ACCEPT,
      credentials,
    });
    const body = await readLimitedBytes(res.body, MAX_MANIFEST_BYTES).catch((err: Error) => {
      throw new ImageError(
        ImageReason.ImageManifestInvalid,
        `manifest ${formatReference(ref)} (${tagOrDigest}): ${err.message}`,
      );
    });
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
      const parsed = JSON.parse(body.toString('utf8'));
      if (!parsed || typeof parsed !== 'object') throw new Error('not an object');
      doc = slim(parsed as ManifestDoc);
    } catch {
      throw new ImageError(
        ImageReason.ImageManifestInvalid,
        `manifest ${formatReference(ref)} (${tagOrDigest}) is not JSON`,
      );
    }
    const ct = res.headers['content-type'];
    const mediaType = doc.mediaType ?? (typeof ct === 'string' ? ct.split(';')[0]!.trim() : '');
    this.byDigest.set(cacheKey(ref, computed), { mediaType, doc });
    return { digest: computed, mediaType, doc };
  }

  private async commandLine(
    ref: ImageReference,
    config: Descriptor | undefined,
    credentials: RegistryCredentials | undefined,
  ): Promise<string | undefined> {
    if (!config?.digest || (config.size ?? 0) > MAX_CONFIG_BYTES) return undefined;
    const key = cacheKey(ref, config.digest);
    const flight = `config ${key}`; // the fetching map holds manifests too
    if (!this.configs.has(key)) await this.fetching.get(flight)?.catch(() => undefined);
    if (this.configs.has(key)) {
      await this.registry.confirm(ref, 'blobs', config.digest, credentials);
      return this.configs.get(key);
    }
    return this.singleFlight(flight, () => this.fetchCommandLine(ref, config.digest, credentials));
  }

  private async fetchCommandLine(
    ref: ImageReference,
    digest: string,
    credentials: RegistryCredentials | undefined,
  ): Promise<string | undefined> {
    const key = cacheKey(ref, digest);
    let value: string | undefined;
    try {
      const res = await this.registry.get(ref, `/blobs/${digest}`, { credentials });
      const body = await readLimitedBytes(res.body, MAX_CONFIG_BYTES);
      if (sha256(body) !== digest)
        throw new ImageError(
          ImageReason.ImageManifestInvalid,
          `image config ${digest} does not match its digest`,
        );
      const doc = JSON.parse(body.toString('utf8')) as { commandLine?: unknown };
      value = typeof doc.commandLine === 'string' ? checkCommandLine(digest, doc.commandLine) : undefined;
    } catch (err) {
      if (err instanceof RegistryError && err.transient) throw err;
      if (err instanceof ImageError) throw err;
      value = undefined; // a config that is not JSON (e.g. the empty descriptor's `{}`) has no commandLine
    }
    this.configs.set(key, value);
    return value;
  }
}

/** Cache key of a digest: content is shared only within one registry repository (N3). */
function cacheKey(ref: ImageReference, digest: string): string {
  return `${ref.domain}/${ref.repository}@${digest}`;
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
