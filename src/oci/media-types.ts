/**
 * Media types of boot images (ironcore boot-operator `serverbootconfiguration_pxe_controller.go`,
 * `imageproxyserver.go`) and of OCI / Docker manifests (image-spec v1.1 `media-types.md`, Docker
 * image manifest v2 schema 2).
 */

export const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const DOCKER_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json';
export const DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json';
export const MANIFEST_ACCEPT = [OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST];

/** Boot layers an image can carry. */
export type BootLayer = 'kernel' | 'initrd' | 'squashfs' | 'uki';
export const BOOT_LAYERS: readonly BootLayer[] = ['kernel', 'initrd', 'squashfs', 'uki'];

/** Layer media type → boot layer (current ironcore types, then gardenlinux's legacy ones). */
export const LAYER_MEDIA_TYPES: Record<string, BootLayer> = {
  'application/vnd.ironcore.image.kernel': 'kernel',
  'application/vnd.ironcore.image.initramfs': 'initrd',
  'application/vnd.ironcore.image.squashfs': 'squashfs',
  'application/vnd.ironcore.image.uki': 'uki',
  'application/io.gardenlinux.kernel': 'kernel',
  'application/io.gardenlinux.initrd': 'initrd',
  'application/io.gardenlinux.squashfs': 'squashfs',
};

/** Media types naming each layer, for messages ("has no kernel layer (a or b)"). */
export function mediaTypesOf(layer: BootLayer): string[] {
  return Object.entries(LAYER_MEDIA_TYPES)
    .filter(([, l]) => l === layer)
    .map(([t]) => t);
}

/** gardenlinux index entries: annotation `cname` starting with this, plus annotation `architecture`. */
export const CNAME_PREFIX_METAL_PXE = 'metal_pxe';
