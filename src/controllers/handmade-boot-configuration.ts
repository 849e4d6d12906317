/**
 * Hand-made ServerBootConfigurations: SBCs created by a person or another controller, as upstream
 * users do (`serverRef`, `image`, `ignitionSecretRef`; no `callbackSecretRef`, no `bootAttempt`).
 * Claim and discovery SBCs always carry `callbackSecretRef` from their first write, so "no
 * `callbackSecretRef`" identifies a hand-made one.
 *
 * Such an SBC gets what a claim-made one has, so the boot server can render its script and the
 * callbacks can be authenticated: a callback Secret `<name>-callback` (owned by the SBC, label
 * `metal.ironcore.dev/callback=true`, the attempt's token for `spec.bootAttempt`, default 1), then
 * `spec.callbackSecretRef` pointing at it (resourceVersion-guarded), then `status.attemptGeneration`.
 * The condition `CallbackConfigured` says what was done (reason `TokenIssued`), or why not (reason
 * `CallbackSecretConflict`: a Secret of that name exists and is not this SBC's).
 */
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { CallbackConfiguredReason, ConditionType } from '../api/vocabulary.js';
import {
  decodeCallbackSecret,
  encodeCallbackSecret,
  initialCallbackData,
} from '../bootauth/callback-token.js';
import type { SecretObject } from '../bootsignals/boot-target.js';
import { CALLBACK_SECRET_LABEL } from '../bootsignals/signal-stack.js';
import type { KubeClient } from '../runtime/client.js';
import { controllerOwnerReference, isControlledBy } from '../runtime/ownerrefs.js';
import { Resources } from '../runtime/resource.js';
import { callbackSecretName } from './boot-configuration.js';
import { applyOwnedCondition } from './owned-conditions.js';

/** SBC condition written for hand-made SBCs: how their callbacks are authenticated. */
export const CALLBACK_CONFIGURED_CONDITION = ConditionType.CallbackConfigured;
export { CallbackConfiguredReason };

/** True for an SBC nobody gave a callback Secret (see the file comment). */
export function isHandMade(sbc: ServerBootConfiguration): boolean {
  return !sbc.spec.callbackSecretRef?.name;
}

/**
 * Issues the callback Secret of a hand-made SBC and references it (idempotent: a Secret this SBC
 * already controls is reused). Returns false when it could not (condition says why; nothing is
 * referenced). API errors propagate; a 409 from a stale SBC is retried by the controller.
 * `labels` are added to the Secret (the operator's scope labels).
 */
export async function issueCallbackSecret(
  client: KubeClient,
  sbc: ServerBootConfiguration,
  labels: Record<string, string>,
): Promise<boolean> {
  const name = callbackSecretName(sbc.metadata.name ?? '');
  const namespace = sbc.metadata.namespace;
  const attempt = sbc.spec.bootAttempt ?? 1;
  const existing = await client.get<SecretObject>(Resources.Secret, name, namespace);
  if (existing && !isControlledBy(existing, sbc)) {
    await applyOwnedCondition(client, Resources.ServerBootConfiguration, sbc, {
      type: CALLBACK_CONFIGURED_CONDITION,
      status: 'False',
      reason: CallbackConfiguredReason.CallbackSecretConflict,
      message: `Secret ${name} exists and is not controlled by this ServerBootConfiguration; set spec.callbackSecretRef or delete it`,
    });
    return false;
  }
  const data = decodeCallbackSecret(existing?.data);
  if (!existing || !data || data.attempt !== attempt) {
    const body: SecretObject = {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name,
        namespace,
        labels: { ...labels, [CALLBACK_SECRET_LABEL]: 'true' },
        ownerReferences: [controllerOwnerReference(sbc, Resources.ServerBootConfiguration)],
        ...(existing ? { resourceVersion: existing.metadata.resourceVersion } : {}),
      },
      type: 'Opaque',
      data: encodeCallbackSecret(initialCallbackData(attempt)),
    };
    if (existing) await client.update(Resources.Secret, body);
    else await client.create(Resources.Secret, body);
  }
  const updated = await client.mergePatch<ServerBootConfiguration>(
    Resources.ServerBootConfiguration,
    sbc.metadata.name ?? '',
    namespace,
    { metadata: { resourceVersion: sbc.metadata.resourceVersion }, spec: { callbackSecretRef: { name } } },
  );
  await client.mergePatch(
    Resources.ServerBootConfiguration,
    sbc.metadata.name ?? '',
    namespace,
    { status: { attemptGeneration: updated.metadata.generation } },
    { subresource: 'status' },
  );
  await applyOwnedCondition(client, Resources.ServerBootConfiguration, updated, {
    type: CALLBACK_CONFIGURED_CONDITION,
    status: 'True',
    reason: CallbackConfiguredReason.TokenIssued,
    message: `no callbackSecretRef (hand-made): callback Secret ${name} with the token of attempt ${attempt} created by the ServerBootConfiguration controller; the boot server renders it into the script and ignition`,
  });
  return true;
}
