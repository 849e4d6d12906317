/**
 * `/ignition/{uuid}`'s body: the SBC's ignition Secret rendered by `IgnitionRenderer` (Butane
 * translated, the `/bootstate` hook merged in, validated). The Secret is the one the SBC controller
 * of this process validated for the attempt when it handed it over (first fetch, see
 * src/ignition/validated-secrets.ts), else read from the API server. Maps `IgnitionError` onto the boot
 * server's answers: 409 with the reason (`IgnitionMissing`, `InvalidButane`, `InvalidIgnition`)
 * when the config is at fault, 503 + `Retry-After` when the tools cannot run or the API is down.
 */
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { apiFailure } from '../bootsignals/boot-target.js';
import { HttpError } from '../bootsignals/http-error.js';
import type { BootstateHook } from '../ignition/bootstate-hook.js';
import { IgnitionError, type IgnitionRenderer } from '../ignition/served-ignition.js';
import { secretUse } from '../ignition/validated-secrets.js';
import type { KubeClient } from '../runtime/client.js';
import { Resources, type SecretObject } from '../runtime/resource.js';

/** Seconds the host is told to wait when the ignition tools cannot run. */
const TOOLS_RETRY_AFTER_S = 30;

/** The validated JSON text to serve for `sbc`; throws `HttpError` (see the file comment). */
export async function servedIgnition(
  client: KubeClient,
  renderer: IgnitionRenderer,
  sbc: ServerBootConfiguration,
  hook: BootstateHook | undefined,
): Promise<string> {
  const ref = sbc.spec.ignitionSecretRef?.name;
  let secret: SecretObject | undefined;
  if (ref) {
    // The version the SBC controller of this process validated for this attempt, else a fresh read.
    secret = renderer.validated.take(secretUse(sbc, ref));
    try {
      secret ??= await client.get<SecretObject>(Resources.Secret, ref, sbc.metadata.namespace);
    } catch (err) {
      apiFailure(err, 'reading the ignition Secret');
    }
    if (!secret) throw new HttpError(409, 'IgnitionSecretNotFound', `ignition Secret ${ref} does not exist`);
  }
  try {
    const stored = await renderer.stored(
      ref ? (secret?.data ?? {}) : undefined,
      `${sbc.metadata.namespace}/${ref}@${secret?.metadata.resourceVersion}`,
      ref,
    );
    return await renderer.render(stored, hook);
  } catch (err) {
    if (!(err instanceof IgnitionError)) throw err;
    if (err.retryable) throw new HttpError(503, err.reason, err.message, TOOLS_RETRY_AFTER_S);
    throw new HttpError(409, err.reason, err.message);
  }
}
