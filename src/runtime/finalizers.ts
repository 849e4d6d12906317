/**
 * Finalizers (Kubernetes API conventions, "Finalizers"): while `metadata.finalizers` is non-empty, a
 * deleted object only gets a `deletionTimestamp`; its controller cleans up, then removes its finalizer.
 *
 * Writes are merge patches of the whole `metadata.finalizers` list guarded by the object's
 * `resourceVersion` (a merge patch replaces arrays, so without the guard a concurrent writer's
 * finalizer could be lost). On 409 the object is re-read and the change re-applied.
 */
import { ApiError, type KubeClient, retryOnConflict } from './client.js';
import type { KObject, ResourceType } from './resource.js';

export function hasFinalizer(obj: KObject, finalizer: string): boolean {
  return obj.metadata.finalizers?.includes(finalizer) ?? false;
}

/**
 * Ensures `finalizer` is on the object. Resolves to the updated object, or `obj` itself when nothing
 * had to change. Refuses (throws) for an object already being deleted: the API server rejects new
 * finalizers then. Other API errors propagate (404 when it vanished).
 */
export async function addFinalizer<T extends KObject>(
  client: KubeClient,
  rt: ResourceType,
  obj: T,
  finalizer: string,
): Promise<T> {
  if (hasFinalizer(obj, finalizer)) return obj;
  return edit(client, rt, obj, (cur) => {
    if (hasFinalizer(cur, finalizer)) return undefined;
    if (cur.metadata.deletionTimestamp) throw new Error(`${rt.kind} ${cur.metadata.name} is being deleted`);
    return [...(cur.metadata.finalizers ?? []), finalizer];
  });
}

/**
 * Ensures `finalizer` is not on the object. Resolves to the updated object (for an object being
 * deleted, the last finalizer's removal lets the API server delete it right after), `obj` when nothing
 * had to change, or undefined when the object no longer exists (404).
 */
export async function removeFinalizer<T extends KObject>(
  client: KubeClient,
  rt: ResourceType,
  obj: T,
  finalizer: string,
): Promise<T | undefined> {
  if (!hasFinalizer(obj, finalizer)) return obj;
  try {
    return await edit(client, rt, obj, (cur) =>
      hasFinalizer(cur, finalizer)
        ? (cur.metadata.finalizers ?? []).filter((f) => f !== finalizer)
        : undefined,
    );
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return undefined;
    throw err;
  }
}

/** Applies `change` (new finalizer list, or undefined for "nothing to do") with RV guard and re-read on 409. */
async function edit<T extends KObject>(
  client: KubeClient,
  rt: ResourceType,
  obj: T,
  change: (cur: T) => string[] | undefined,
): Promise<T> {
  const { name, namespace } = obj.metadata;
  if (!name) throw new Error('object needs metadata.name');
  let cur: T | undefined = obj;
  return retryOnConflict(async () => {
    if (!cur) {
      cur = await client.get<T>(rt, name, namespace);
      if (!cur) throw new ApiError(`${rt.kind} ${name} not found`, 404, { reason: 'NotFound' });
    }
    const next = change(cur);
    if (!next) return cur;
    const patch = {
      metadata: { resourceVersion: cur.metadata.resourceVersion, finalizers: next.length ? next : null },
    };
    try {
      return await client.mergePatch<T>(rt, name, namespace, patch);
    } catch (err) {
      if (err instanceof ApiError && err.status === 409) cur = undefined; // re-read on the next attempt
      throw err;
    }
  });
}
