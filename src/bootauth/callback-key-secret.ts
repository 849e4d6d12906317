/**
 * Where the callback key lives: one core/v1 Secret (default `metal-callback-key` in the manager
 * namespace, data key `key`: at least 32 random bytes). The manager creates it on its first start
 * ({@link ensureCallbackKey}); the standalone registry and boot server only read it
 * ({@link readCallbackKey}), with a Role in that namespace limited to this one name
 * (`resourceNames`, config/signals/*.yaml): neither may read any other Secret by list or watch.
 *
 * The key is read once per process start. Rotating it (delete the Secret, restart the manager,
 * then the signal servers) makes every issued token `invalid`: hosts in mid-boot are answered 401
 * and their attempts run into the boot deadline and are retried with tokens of the new key.
 */
import type { Logger } from 'pino';
import { ApiError, type KubeClient } from '../runtime/client.js';
import { type KObject, Resources } from '../runtime/resource.js';
import { CallbackKey } from './callback-token.js';

/** Default name of the key Secret (in the manager namespace). */
export const CALLBACK_KEY_SECRET_NAME = 'metal-callback-key';
/** The Secret's data key holding the key bytes. */
export const CALLBACK_KEY_DATA_KEY = 'key';

export interface SecretRef {
  namespace: string;
  name: string;
}

interface KeySecret extends KObject {
  data?: Record<string, string>;
  type?: string;
}

/** Parses `namespace/name`. @throws Error naming the flag when malformed. */
export function parseSecretRef(raw: string, flag = '--callback-key-secret'): SecretRef {
  const [namespace, name, ...rest] = raw.split('/');
  if (!namespace || !name || rest.length) throw new Error(`${flag} wants namespace/name, got ${raw}`);
  return { namespace, name };
}

function keyOf(secret: KeySecret, ref: SecretRef): CallbackKey {
  const raw = secret.data?.[CALLBACK_KEY_DATA_KEY];
  if (!raw) throw new Error(`Secret ${ref.namespace}/${ref.name} has no data key ${CALLBACK_KEY_DATA_KEY}`);
  return new CallbackKey(Buffer.from(raw, 'base64'));
}

/**
 * The key from its Secret, creating the Secret with a new key when it does not exist (the
 * manager). A concurrent creator wins (409 `AlreadyExists`: its key is read). Throws `ApiError`
 * for API failures (the caller's start-up retries) and Error for a Secret without a usable key.
 */
export async function ensureCallbackKey(
  client: KubeClient,
  ref: SecretRef,
  log?: Logger,
): Promise<CallbackKey> {
  const existing = await client.get<KeySecret>(Resources.Secret, ref.name, ref.namespace);
  if (existing) return keyOf(existing, ref);
  const key = CallbackKey.generate();
  try {
    await client.create<KeySecret>(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: ref.name,
        namespace: ref.namespace,
        labels: { 'app.kubernetes.io/name': 'metal-operator', 'app.kubernetes.io/component': 'callback-key' },
      },
      type: 'Opaque',
      data: { [CALLBACK_KEY_DATA_KEY]: key.bytes().toString('base64') },
    });
    log?.info({ secret: `${ref.namespace}/${ref.name}` }, 'callback key created');
    return key;
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 409)) throw err;
    const raced = await client.get<KeySecret>(Resources.Secret, ref.name, ref.namespace);
    if (!raced) throw err;
    return keyOf(raced, ref);
  }
}

/**
 * The key from its Secret (the signal servers), waiting while it does not exist yet (the manager
 * creates it) or the API server is unreachable: backoff 1 s doubling to 15 s, for at most
 * `timeoutMs` (default 5 min). @throws Error when the time is up (the process exits and its
 * restart policy retries) or the Secret holds no usable key; `ApiError` 401/403 at once (RBAC).
 */
export async function readCallbackKey(
  client: KubeClient,
  ref: SecretRef,
  opts: { log?: Logger; timeoutMs?: number } = {},
): Promise<CallbackKey> {
  const deadline = Date.now() + (opts.timeoutMs ?? 300_000);
  let delay = 1000;
  for (;;) {
    let why: string;
    try {
      const secret = await client.get<KeySecret>(Resources.Secret, ref.name, ref.namespace);
      if (secret) return keyOf(secret, ref);
      why = 'not created yet (the manager creates it on start)';
    } catch (err) {
      if (err instanceof ApiError && (err.status === 401 || err.status === 403)) throw err;
      why = String(err);
    }
    if (Date.now() + delay > deadline)
      throw new Error(`callback key Secret ${ref.namespace}/${ref.name} not readable: ${why}`);
    opts.log?.warn({ secret: `${ref.namespace}/${ref.name}`, retryInMs: delay }, `callback key: ${why}`);
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 15_000);
  }
}
