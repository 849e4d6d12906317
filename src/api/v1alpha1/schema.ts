/**
 * Building blocks for the CRD schemas of metal.ironcore.dev/v1alpha1.
 *
 * Each kind's file builds its OpenAPI v3 schema from these with TypeBox, so one source gives the
 * TypeScript type (`Static<typeof X>`) and the structural schema that `npm run generate` writes to
 * `config/crd/`. Kubernetes structural-schema rules (apiextensions.k8s.io/v1) apply: every node has a
 * `type`, maps use `additionalProperties` (not `patternProperties`), and `anyOf` is only allowed
 * together with `x-kubernetes-int-or-string`.
 */
import Type, { type Static, type TSchema } from 'typebox';
import type { KObject } from '../../runtime/resource.js';

export type { Static, TProperties } from 'typebox';
export { Type };

/** A `type: string` node restricted to `values` (TypeBox's own Enum omits `type`, which Kubernetes requires). */
export function StringEnum<const T extends readonly string[]>(
  values: T,
  options: Record<string, unknown> = {},
) {
  return Type.Unsafe<T[number]>({ type: 'string', enum: [...values], ...options });
}

/** `format: int32` integer (Go `int32`). */
export const Int32 = (options: Record<string, unknown> = {}) => Type.Integer({ format: 'int32', ...options });
/** `format: int64` integer (Go `int64`). */
export const Int64 = (options: Record<string, unknown> = {}) => Type.Integer({ format: 'int64', ...options });
/** RFC 3339 timestamp string (Kubernetes `metav1.Time`). */
export const DateTime = (options: Record<string, unknown> = {}) =>
  Type.String({ format: 'date-time', ...options });

/** Go `map[string]string`. */
export function StringMap(options: Record<string, unknown> = {}) {
  return Type.Unsafe<Record<string, string>>({
    type: 'object',
    additionalProperties: { type: 'string' },
    ...options,
  });
}

/** Quantity pattern of `resource.Quantity` (k8s.io/apimachinery). */
const QUANTITY_PATTERN =
  '^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$';

/** `resource.Quantity`: an integer or a quantity string such as `512Mi`. */
export function Quantity(options: Record<string, unknown> = {}) {
  return Type.Unsafe<number | string>({
    anyOf: [{ type: 'integer' }, { type: 'string' }],
    pattern: QUANTITY_PATTERN,
    'x-kubernetes-int-or-string': true,
    ...options,
  });
}

/** Go duration string as `time.ParseDuration` reads it (`15m`, `1h30m`, `90s`, `500ms`). */
export const DURATION_PATTERN = '^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$';
export const Duration = (options: Record<string, unknown> = {}) =>
  Type.String({ pattern: DURATION_PATTERN, ...options });

/** Condition type name (metav1.Condition `type`: CamelCase or `foo.example.com/CamelCase`). */
export const CONDITION_TYPE_PATTERN =
  '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$';
export const ConditionType = (options: Record<string, unknown> = {}) =>
  Type.String({ maxLength: 316, pattern: CONDITION_TYPE_PATTERN, ...options });

/** `corev1.LocalObjectReference`: a name in the same namespace (or cluster scope); atomic. */
export function LocalObjectReference(description: string, options: Record<string, unknown> = {}) {
  return Type.Object(
    { name: Type.Optional(Type.String({ default: '', description: 'Name of the referent.' })) },
    { description, 'x-kubernetes-map-type': 'atomic', ...options },
  );
}

/** Name + namespace of a namespaced object. */
export function NamespacedReference(
  description: string,
  nameOptions: Record<string, unknown> = {},
  nsOptions = {},
) {
  return Type.Object(
    {
      name: Type.String({ description: 'Name of the referenced object.', ...nameOptions }),
      namespace: Type.String({ description: 'Namespace of the referenced object.', ...nsOptions }),
    },
    { description },
  );
}

/** `metav1.Condition` (Kubernetes API conventions, "Typical status properties"). */
export const Condition = Type.Object(
  {
    type: ConditionType({ description: 'Type of the condition, CamelCase.' }),
    status: StringEnum(['True', 'False', 'Unknown'] as const, { description: 'True, False or Unknown.' }),
    observedGeneration: Type.Optional(
      Int64({ minimum: 0, description: 'metadata.generation the condition was computed from.' }),
    ),
    lastTransitionTime: DateTime({
      description: 'When status last changed (not when the condition was last written).',
    }),
    reason: Type.String({
      maxLength: 1024,
      minLength: 1,
      pattern: '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$',
      description: 'CamelCase machine-readable reason for the last transition.',
    }),
    message: Type.String({ maxLength: 32768, description: 'Human-readable detail; may be empty.' }),
  },
  { description: 'One aspect of the observed state.' },
);
export type Condition = Static<typeof Condition>;

/** `status.conditions`: a map list keyed by `type`, so each writer can own its own condition types. */
export function Conditions(description = 'Latest observations of the object state, one per type.') {
  return Type.Array(Condition, {
    description,
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['type'],
  });
}

/** `metav1.LabelSelector`; atomic. */
export function LabelSelector(description: string, options: Record<string, unknown> = {}) {
  return Type.Object(
    {
      matchExpressions: Type.Optional(
        Type.Array(
          Type.Object({
            key: Type.String({ description: 'Label key the requirement applies to.' }),
            operator: Type.String({ description: 'In, NotIn, Exists or DoesNotExist.' }),
            values: Type.Optional(
              Type.Array(Type.String(), {
                description: 'Values for In/NotIn; empty for Exists/DoesNotExist.',
                'x-kubernetes-list-type': 'atomic',
              }),
            ),
          }),
          { description: 'Requirements, ANDed.', 'x-kubernetes-list-type': 'atomic' },
        ),
      ),
      matchLabels: Type.Optional(StringMap({ description: 'Exact label matches, ANDed.' })),
    },
    { description, 'x-kubernetes-map-type': 'atomic', ...options },
  );
}

/** Immutability rule as a CEL `x-kubernetes-validations` entry. */
export const immutable = (field: string) => ({ message: `${field} is immutable`, rule: 'self == oldSelf' });

/** A `metav1.ObjectMeta` as TypeScript sees it (the runtime's shape); the CRD schema leaves `metadata` to the API server. */
export type ObjectMeta = KObject['metadata'];

/** Printer column (`additionalPrinterColumns`). */
export interface PrinterColumn {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  jsonPath: string;
  priority?: number;
  description?: string;
}

/** Everything the CRD generator needs about one kind. */
export interface KindDefinition {
  kind: string;
  plural: string;
  singular: string;
  shortNames?: string[];
  scope: 'Cluster' | 'Namespaced';
  description: string;
  /** Top-level properties beside apiVersion/kind/metadata (usually spec and status). */
  properties: Record<string, TSchema>;
  /** Required top-level properties. */
  required?: string[];
  printerColumns: PrinterColumn[];
  hasStatusSubresource: boolean;
  deprecated?: boolean;
  deprecationWarning?: string;
}

export const GROUP = 'metal.ironcore.dev';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}`;
export const AGE_COLUMN: PrinterColumn = {
  name: 'Age',
  type: 'date',
  jsonPath: '.metadata.creationTimestamp',
};
