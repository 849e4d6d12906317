/**
 * Object and resource-type shapes shared by the runtime: the minimal `metadata` every Kubernetes
 * object carries (Kubernetes API conventions, "Objects" / `metav1.ObjectMeta`), and the REST
 * coordinates (group, version, plural, scope) a client needs to build URLs.
 */

/** `metav1.OwnerReference`. At most one reference per object may have `controller: true`. */
export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

/** Any Kubernetes object: typed metadata, everything else left to the caller's own types. */
export interface KObject {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name?: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    generation?: number;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    finalizers?: string[];
    ownerReferences?: OwnerReference[];
    deletionTimestamp?: string;
    creationTimestamp?: string;
    generateName?: string;
  };
  [k: string]: unknown;
}

/** REST coordinates of a kind. `group` is '' for the core ("legacy") group served under `/api/v1`. */
export interface ResourceType {
  group: string;
  version: string;
  kind: string;
  plural: string;
  namespaced: boolean;
}

const METAL = 'metal.ironcore.dev';
const metal = (kind: string, plural: string, namespaced: boolean): ResourceType => ({
  group: METAL,
  version: 'v1alpha1',
  kind,
  plural,
  namespaced,
});
const core = (kind: string, plural: string, namespaced: boolean): ResourceType => ({
  group: '',
  version: 'v1',
  kind,
  plural,
  namespaced,
});

/** Every kind the operator reads or writes; scopes match `config/crd/*.yaml` and the core API. */
export const Resources = {
  Server: metal('Server', 'servers', false),
  ServerClaim: metal('ServerClaim', 'serverclaims', true),
  ServerBootConfiguration: metal('ServerBootConfiguration', 'serverbootconfigurations', true),
  BMC: metal('BMC', 'bmcs', false),
  BMCSecret: metal('BMCSecret', 'bmcsecrets', false),
  BMCUser: metal('BMCUser', 'bmcusers', false),
  Endpoint: metal('Endpoint', 'endpoints', false),
  ServerReadinessRule: metal('ServerReadinessRule', 'serverreadinessrules', false),
  Secret: core('Secret', 'secrets', true),
  ConfigMap: core('ConfigMap', 'configmaps', true),
  Event: core('Event', 'events', true),
  Namespace: core('Namespace', 'namespaces', false),
  Lease: { group: 'coordination.k8s.io', version: 'v1', kind: 'Lease', plural: 'leases', namespaced: true },
} as const satisfies Record<string, ResourceType>;

/** `group/version`, or just `version` for the core group (the `apiVersion` field's format). */
export function apiVersionOf(rt: ResourceType): string {
  return rt.group === '' ? rt.version : `${rt.group}/${rt.version}`;
}

/** The cache and work-queue key: `namespace/name` for namespaced objects, `name` otherwise. */
export function objectKey(o: { metadata: { name?: string; namespace?: string } }): string {
  const { name = '', namespace } = o.metadata;
  return namespace ? `${namespace}/${name}` : name;
}

/** Inverse of {@link objectKey}. Names cannot contain '/', so the first '/' separates the parts. */
export function parseObjectKey(key: string): { name: string; namespace?: string } {
  const i = key.indexOf('/');
  return i < 0 ? { name: key } : { namespace: key.slice(0, i), name: key.slice(i + 1) };
}

/**
 * URL path of a collection, an object or one of its subresources, following the API conventions'
 * layout: `/api/v1` (core) or `/apis/{group}/{version}`, then `namespaces/{ns}` for namespaced kinds.
 * A namespaced kind without `namespace` addresses the all-namespaces collection (list and watch only).
 */
export function resourcePath(
  rt: ResourceType,
  namespace?: string,
  name?: string,
  subresource?: string,
): string {
  let p = rt.group === '' ? `/api/${rt.version}` : `/apis/${rt.group}/${rt.version}`;
  if (rt.namespaced && namespace) p += `/namespaces/${encodeURIComponent(namespace)}`;
  p += `/${rt.plural}`;
  if (name !== undefined) p += `/${encodeURIComponent(name)}`;
  if (subresource) p += `/${subresource}`;
  return p;
}

/** A core/v1 Secret as this project reads it (`data` values are base64, per the Kubernetes API). */
export interface SecretObject extends KObject {
  data?: Record<string, string>;
  type?: string;
}
