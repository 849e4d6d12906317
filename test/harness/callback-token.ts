/**
 * How a test reads the token a host would be given for an SBC's current attempt: the callback
 * key Secret the manager created in its namespace (`metal-callback-key`, data key `key`), and
 * the same derivation the servers use (src/bootauth/callback-token.ts). Returns `undefined`
 * while the Secret or the SBC's uid is not there yet (callers poll with `eventually`).
 */
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import { CALLBACK_KEY_DATA_KEY, CALLBACK_KEY_SECRET_NAME } from '../../src/bootauth/callback-key-secret.js';
import { CallbackKey } from '../../src/bootauth/callback-token.js';
import type { KubeClient } from '../../src/runtime/client.js';
import { type KObject, Resources } from '../../src/runtime/resource.js';

/** The manager's callback key (from `<namespace>/metal-callback-key`), or undefined. */
export async function managerCallbackKey(
  client: KubeClient,
  namespace: string,
): Promise<CallbackKey | undefined> {
  const s = await client.get<KObject & { data?: Record<string, string> }>(
    Resources.Secret,
    CALLBACK_KEY_SECRET_NAME,
    namespace,
  );
  const raw = s?.data?.[CALLBACK_KEY_DATA_KEY];
  return raw ? new CallbackKey(Buffer.from(raw, 'base64')) : undefined;
}

/** The token of `sbc`'s current attempt (or of `attempt`), derived with the manager's key. */
export async function callbackTokenOf(
  client: KubeClient,
  keyNamespace: string,
  sbc: ServerBootConfiguration,
  attempt = sbc.spec.bootAttempt ?? 1,
): Promise<string | undefined> {
  const key = await managerCallbackKey(client, keyNamespace);
  const uid = sbc.metadata.uid;
  return key && uid ? key.tokenFor({ uid, attempt }) : undefined;
}
