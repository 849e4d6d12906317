/**
 * OCI boot images as the ServerBootConfiguration controller and the boot server use them: the
 * registry client, the resolver (manifests cached by digest), and the pull secret of an SBC.
 *
 * Pull secret (a `kubernetes.io/dockerconfigjson` Secret in the SBC's namespace), first found of:
 * annotation `metal.ironcore.dev/image-pull-secret: <name>` on the SBC, the same annotation on the
 * ServerClaim that controls the SBC, the manager flag `--image-pull-secret <namespace/name>`. The
 * flag's Secret is a cross-tenant grant (security review N17): it serves every SBC in every
 * namespace that names none, so it should only read images every tenant may boot (README).
 * The Secret's name (never its content) is recorded in `status.image.pullSecret` for operators to
 * read; nobody takes a Secret reference from status (security review N5: SBC status is writable by
 * more than the controller): the boot server derives the pull secret again ({@link BootImages.credentialsOf}).
 */
import type { SBCImageStatus, ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { BootConfigurationReason } from '../api/vocabulary.js';
import type { KubeClient } from '../runtime/client.js';
import { controllerOf } from '../runtime/ownerrefs.js';
import { type KObject, Resources } from '../runtime/resource.js';
import { credentialsFor, type RegistryCredentials } from './docker-config.js';
import { ImageResolver } from './image-resolver.js';
import type { BootLayer } from './media-types.js';
import type { ImageReference } from './reference.js';
import { RegistryClient, RegistryError } from './registry-client.js';
import type { RegistryPolicy } from './registry-policy.js';

export const PULL_SECRET_ANNOTATION = 'metal.ironcore.dev/image-pull-secret';

type SecretLike = KObject & { data?: Record<string, string> };

export interface BootImagesOptions {
  client: KubeClient;
  policy: RegistryPolicy;
  /** `--image-pull-secret`: `{namespace, name}`. */
  defaultPullSecret?: { namespace: string; name: string };
}

export class BootImages {
  readonly registry: RegistryClient;
  readonly resolver: ImageResolver;

  constructor(private readonly o: BootImagesOptions) {
    this.registry = new RegistryClient(o.policy);
    this.resolver = new ImageResolver(this.registry);
  }

  get policy(): RegistryPolicy {
    return this.o.policy;
  }

  /** `namespace/name` of the pull secret for `sbc` (see the file comment), or undefined. */
  async pullSecretOf(sbc: ServerBootConfiguration): Promise<string | undefined> {
    const ns = sbc.metadata.namespace ?? '';
    const own = sbc.metadata.annotations?.[PULL_SECRET_ANNOTATION];
    if (own) return `${ns}/${own}`;
    const owner = controllerOf(sbc);
    if (owner?.kind === 'ServerClaim') {
      const claim = await this.o.client.get<KObject>(Resources.ServerClaim, owner.name, ns);
      const viaClaim = claim?.metadata.annotations?.[PULL_SECRET_ANNOTATION];
      if (viaClaim) return `${ns}/${viaClaim}`;
    }
    const d = this.o.defaultPullSecret;
    return d ? `${d.namespace}/${d.name}` : undefined;
  }

  /**
   * Credentials of pull secret `ref` (`namespace/name`) for `image`'s registry; undefined when
   * there is no secret or it has none for that registry. Throws `RegistryError`
   * `PullSecretNotFound` / `PullSecretInvalid`.
   */
  async credentials(
    ref: string | undefined,
    image: ImageReference,
  ): Promise<RegistryCredentials | undefined> {
    if (!ref) return undefined;
    const [namespace, name] = ref.split('/');
    const secret = await this.o.client.get<SecretLike>(Resources.Secret, name ?? '', namespace);
    if (!secret)
      throw new RegistryError(
        BootConfigurationReason.PullSecretNotFound,
        `image pull secret ${ref} does not exist`,
      );
    try {
      return credentialsFor(secret.data, image.domain);
    } catch (err) {
      throw new RegistryError(
        BootConfigurationReason.PullSecretInvalid,
        `image pull secret ${ref}: ${(err as Error).message}`,
      );
    }
  }

  /**
   * Credentials of `sbc`'s own pull secret ({@link BootImages.pullSecretOf}) for `image`'s
   * registry; throws as {@link BootImages.credentials}. What the boot server pulls blobs with.
   */
  async credentialsOf(
    sbc: ServerBootConfiguration,
    image: ImageReference,
  ): Promise<RegistryCredentials | undefined> {
    return this.credentials(await this.pullSecretOf(sbc), image);
  }

  /**
   * The OCI descriptor `size` in bytes of layer `layer` of an SBC's resolved image (`img`), from the
   * platform manifest `img.manifest` (else `img.digest`) as the resolver reads it: cached by digest,
   * its access confirmed for `credentials` (one authenticated HEAD, remembered), verified against
   * its digest, so the size is as authentic as the layer digest. What the blob cache downloads are
   * held to (security review N10). Throws `RegistryError` as the resolver, and `ImageLayerMissing`
   * when that manifest has no such layer with `img[layer]`'s digest or no size for it.
   */
  async layerSize(
    img: SBCImageStatus,
    ref: ImageReference,
    layer: BootLayer,
    credentials: RegistryCredentials | undefined,
  ): Promise<number> {
    const manifest = img.manifest ?? img.digest;
    const r = await this.resolver.resolve({ ...ref, digest: manifest }, credentials);
    const size = r.layers[layer] === img[layer] ? r.sizes[layer] : undefined;
    if (size === undefined)
      throw new RegistryError(
        BootConfigurationReason.ImageLayerMissing,
        `image ${img.reference}: manifest ${manifest} has no ${layer} layer ${img[layer]} with a size`,
      );
    return size;
  }

  close(): Promise<void> {
    return this.registry.close();
  }
}
