/**
 * Owner references (Kubernetes API conventions, "Garbage collection"): a dependent names its owners;
 * at most one owner reference has `controller: true`, and only that controller manages the object.
 * Owners must be in the dependent's namespace, or cluster scoped; the garbage collector deletes
 * dependents whose owners are gone.
 */
import { apiVersionOf, type KObject, type OwnerReference, type ResourceType } from './resource.js';

/**
 * A controller reference to `owner` with `blockOwnerDeletion` (foreground deletion of the owner waits
 * for the dependent), as controller-runtime's `SetControllerReference` builds it. Throws when `owner`
 * has no name or uid (it must have been read from or created in the API server).
 */
export function controllerOwnerReference(owner: KObject, rt: ResourceType): OwnerReference {
  const { name, uid } = owner.metadata;
  if (!name || !uid) throw new Error(`owner ${rt.kind} needs metadata.name and metadata.uid`);
  return {
    apiVersion: apiVersionOf(rt),
    kind: rt.kind,
    name,
    uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

/** The owner reference with `controller: true`, if any. */
export function controllerOf(obj: KObject): OwnerReference | undefined {
  return obj.metadata.ownerReferences?.find((r) => r.controller === true);
}

/** True when `obj`'s controller reference points at `owner` (compared by uid, which names never reuse). */
export function isControlledBy(obj: KObject, owner: KObject): boolean {
  const ref = controllerOf(obj);
  return !!ref && !!owner.metadata.uid && ref.uid === owner.metadata.uid;
}

/**
 * Returns `obj`'s ownerReferences with a controller reference to `owner` set (replacing a reference to
 * the same uid). Throws when another object already controls `obj`, like controller-runtime's
 * `AlreadyOwnedError`: two controllers fighting over one object is a bug to surface, not to hide.
 */
export function withControllerReference(obj: KObject, owner: KObject, rt: ResourceType): OwnerReference[] {
  const ref = controllerOwnerReference(owner, rt);
  const current = controllerOf(obj);
  if (current && current.uid !== ref.uid) {
    throw new Error(`${obj.metadata.name} is already controlled by ${current.kind} ${current.name}`);
  }
  return [...(obj.metadata.ownerReferences ?? []).filter((r) => r.uid !== ref.uid), ref];
}
