/**
 * Flags of OCI image resolution and Ignition tooling, shared by the manager and the standalone boot
 * server, and the objects they configure:
 *
 * | flag | default | meaning |
 * |---|---|---|
 * | `--architecture` | `amd64` | platform picked from an image index |
 * | `--allowed-registries` | `ghcr.io` (upstream's default) | registry hosts images may come from; all others refused |
 * | `--insecure-registries` | none | registry hosts spoken to over plain HTTP |
 * | `--image-pull-secret` | none | `namespace/name` of a docker-config Secret used when the SBC/claim names none |
 * | `--image-cache-dir` | `$TMPDIR/metal-operator-blobs` | on-disk blob cache of the boot server |
 * | `--image-cache-size` | `10240` | MiB of verified blobs kept (least recently used evicted) |
 * | `--max-layer-size` | `4096` | MiB of the largest image layer downloaded (larger: `LayerTooLarge`, N10) |
 * | `--image-transfer-memory` | `32` | MiB of send buffers all layer transfers share (src/oci/send-buffers.ts; one transfer holds at most 512 KiB) |
 * | `--ignition-tools` | see src/ignition/ignition-tools.ts | path of the hack/ignition-tools binary |
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Command, CommanderError, InvalidArgumentError } from 'commander';
import type pino from 'pino';
import { IgnitionTools } from '../ignition/ignition-tools.js';
import { IgnitionRenderer } from '../ignition/served-ignition.js';
import { BlobCache } from '../oci/blob-cache.js';
import { BootImages } from '../oci/boot-images.js';
import {
  DEFAULT_ALLOWED_REGISTRIES,
  DEFAULT_ARCHITECTURE,
  newRegistryPolicy,
  registryList,
} from '../oci/registry-policy.js';
import { SEND_BUFFERS_MAX_BYTES } from '../oci/send-buffers.js';
import type { KubeClient } from '../runtime/client.js';
import { assertWritableDir } from './writable-dir.js';

export interface ImageFlags {
  architecture: string;
  allowedRegistries: string[];
  insecureRegistries: string[];
  imagePullSecret?: string;
  imageCacheDir: string;
  imageCacheSize: number;
  /** MiB (`--max-layer-size`). */
  maxLayerSize: number;
  /** MiB (`--image-transfer-memory`). */
  imageTransferMemory: number;
  ignitionTools?: string;
}

const MIB = (v: string): number => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${v} is not a positive integer (MiB)`);
  return n;
};

/** Adds the flags above to `cmd`. */
export function addImageOptions(cmd: Command): Command {
  return cmd
    .option(
      '--architecture <arch>',
      'OCI platform architecture picked from image indexes',
      DEFAULT_ARCHITECTURE,
    )
    .option(
      '--allowed-registries <hosts>',
      'comma-separated registry hosts images may come from',
      registryList,
      [...DEFAULT_ALLOWED_REGISTRIES],
    )
    .option(
      '--insecure-registries <hosts>',
      'comma-separated registry hosts spoken to over plain HTTP',
      registryList,
      [],
    )
    .option(
      '--image-pull-secret <ns/name>',
      'docker-config Secret for registries when the SBC or claim names none',
    )
    .option(
      '--image-cache-dir <dir>',
      'on-disk blob cache of the boot server',
      join(tmpdir(), 'metal-operator-blobs'),
    )
    .option('--image-cache-size <MiB>', 'MiB of blobs the cache keeps', MIB, 10240)
    .option('--max-layer-size <MiB>', 'MiB of the largest image layer downloaded', MIB, 4096)
    .option(
      '--image-transfer-memory <MiB>',
      'MiB of send buffers all image layer transfers share (one transfer holds at most 512 KiB; more transfers wait for a buffer)',
      MIB,
      SEND_BUFFERS_MAX_BYTES / (1024 * 1024),
    )
    .option('--ignition-tools <path>', 'hack/ignition-tools binary (Butane translator, Ignition validator)');
}

/** The flag values of `addImageOptions` from `cmd.opts()`. */
export function imageFlagsOf(o: Record<string, unknown>): ImageFlags {
  const pull = o.imagePullSecret as string | undefined;
  if (pull && !/^[a-z0-9][-a-z0-9.]*\/[a-z0-9][-a-z0-9.]*$/.test(pull))
    throw new CommanderError(
      1,
      'manager.invalidPullSecret',
      `--image-pull-secret wants namespace/name, got ${pull}`,
    );
  return {
    architecture: o.architecture as string,
    allowedRegistries: o.allowedRegistries as string[],
    insecureRegistries: o.insecureRegistries as string[],
    imagePullSecret: pull,
    imageCacheDir: o.imageCacheDir as string,
    imageCacheSize: o.imageCacheSize as number,
    maxLayerSize: (o.maxLayerSize as number | undefined) ?? 4096,
    imageTransferMemory:
      (o.imageTransferMemory as number | undefined) ?? SEND_BUFFERS_MAX_BYTES / (1024 * 1024),
    ignitionTools: o.ignitionTools as string | undefined,
  };
}

export interface ImageServices {
  images: BootImages;
  cache: BlobCache;
  ignition: IgnitionRenderer;
  close(): Promise<void>;
}

/**
 * Builds the registry client, resolver, blob cache (initialised) and Ignition renderer of `f`.
 * Throws `NotWritableError` when `--image-cache-dir` or `$TMPDIR` cannot be written.
 */
export async function imageServices(
  f: ImageFlags,
  client: KubeClient,
  log: pino.Logger,
): Promise<ImageServices> {
  const [namespace, name] = f.imagePullSecret?.split('/') ?? [];
  const images = new BootImages({
    client,
    policy: newRegistryPolicy({
      allowed: f.allowedRegistries,
      insecure: f.insecureRegistries,
      architecture: f.architecture,
    }),
    defaultPullSecret: namespace && name ? { namespace, name } : undefined,
  });
  // Before anything starts: a read-only root file system fails here, naming the flag (not at the
  // first blob of the first boot).
  assertWritableDir(f.imageCacheDir, '--image-cache-dir');
  assertWritableDir(tmpdir(), 'TMPDIR');
  const cache = new BlobCache({
    dir: f.imageCacheDir,
    maxBytes: f.imageCacheSize * 1024 * 1024,
    maxBlobBytes: Math.min(f.maxLayerSize, f.imageCacheSize) * 1024 * 1024,
    sendBufferBytes: f.imageTransferMemory * 1024 * 1024,
    registry: images.registry,
    log: log.child({ component: 'blob-cache' }),
  });
  await cache.init();
  const ignition = new IgnitionRenderer(new IgnitionTools(f.ignitionTools));
  return { images, cache, ignition, close: () => images.close() };
}
