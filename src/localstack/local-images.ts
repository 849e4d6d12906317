/**
 * The local stack's OCI registry: Debian's docker-registry on loopback (oci-registry.ts), holding the
 * VM boot artefacts (hack/build-vm-artefacts.sh: Debian's cloud kernel + the busybox initramfs) as
 * boot images with the ironcore media types and an image config whose `commandLine` the boot
 * server prepends:
 *
 * - `<host>/metal/os:latest`, the example claim's image;
 * - `<host>/os-image:latest`, upstream's sample ServerClaim (`image: os-image:latest`) with only its
 *   image host rewritten;
 * - `<host>/metal/cleanup:latest`, the cleanup image (same layers, `metal.erase=metadata` in its
 *   `commandLine`: it erases the disks before it reports), for `--cleanup-image`;
 * - `<host>/metal/probe:latest`, the discovery image (same layers; booted as the probe because a
 *   discovery SBC names it), for `--probe-image` where no image file is readable (a manager in a pod).
 *
 * The image catalog stays as the plain-file alternative (`metal/os:latest` etc., vm-artefacts.ts).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pushBootImage } from '../oci/push.js';
import { OciRegistry } from './oci-registry.js';
import { CLEANUP_CMDLINE } from './vm-artefacts.js';

export const LOCAL_OS_REPOSITORY = 'metal/os';
export const UPSTREAM_SAMPLE_REPOSITORY = 'os-image';
export const LOCAL_CLEANUP_REPOSITORY = 'metal/cleanup';
/**
 * The discovery image as an OCI image (the in-cluster stack has no image files a pod can read). Its
 * command line names no `metal.*` key (the boot server refuses those in an image, N12): the boot
 * server boots a Server's discovery SBC as the probe itself (`metal.mode=probe`).
 */
export const LOCAL_PROBE_REPOSITORY = 'metal/probe';

export interface LocalImages {
  registry: OciRegistry;
  /** `127.0.0.1:<port>/metal/os:latest` */
  osImage: string;
  /** `127.0.0.1:<port>/os-image:latest` */
  sampleImage: string;
  /** `127.0.0.1:<port>/metal/cleanup:latest` */
  cleanupImage: string;
  /** `127.0.0.1:<port>/metal/probe:latest` */
  probeImage: string;
  /** Manager flags that allow the registry (plain HTTP on loopback). */
  managerArgs: string[];
}

/**
 * Starts the registry in `dir` and pushes the artefacts of `artefacts` (see the file comment).
 * `address`: where it listens (default 127.0.0.1; the in-cluster stack's pods need the node's).
 */
export async function startLocalImages(
  dir: string,
  artefacts: string,
  commandLine: string,
  address?: string,
): Promise<LocalImages> {
  const registry = await new OciRegistry({ dir, ...(address ? { address } : {}) }).start();
  try {
    const image = {
      layers: [
        {
          mediaType: 'application/vnd.ironcore.image.kernel',
          data: readFileSync(join(artefacts, 'vmlinuz')),
        },
        {
          mediaType: 'application/vnd.ironcore.image.initramfs',
          data: readFileSync(join(artefacts, 'initramfs.cpio.gz')),
        },
      ],
      commandLine,
    };
    for (const repository of [LOCAL_OS_REPOSITORY, UPSTREAM_SAMPLE_REPOSITORY])
      await pushBootImage({ registryUrl: registry.url, repository }, image, 'latest');
    await pushBootImage(
      { registryUrl: registry.url, repository: LOCAL_CLEANUP_REPOSITORY },
      { ...image, commandLine: `${commandLine}${CLEANUP_CMDLINE}` },
      'latest',
    );
    await pushBootImage({ registryUrl: registry.url, repository: LOCAL_PROBE_REPOSITORY }, image, 'latest');
    return {
      registry,
      osImage: `${registry.host}/${LOCAL_OS_REPOSITORY}:latest`,
      sampleImage: `${registry.host}/${UPSTREAM_SAMPLE_REPOSITORY}:latest`,
      cleanupImage: `${registry.host}/${LOCAL_CLEANUP_REPOSITORY}:latest`,
      probeImage: `${registry.host}/${LOCAL_PROBE_REPOSITORY}:latest`,
      managerArgs: [
        `--allowed-registries=${registry.host}`,
        `--insecure-registries=${registry.host}`,
        `--image-cache-dir=${join(dir, '..', 'blob-cache')}`,
      ],
    };
  } catch (err) {
    await registry.stop();
    throw err;
  }
}
