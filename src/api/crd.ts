/**
 * Builds `apiextensions.k8s.io/v1` CustomResourceDefinitions from the kind definitions of
 * `src/api/v1alpha1/`. The result is plain JSON: what `npm run generate` writes to `config/crd/`
 * and what the test harness installs.
 */
import { GROUP, type KindDefinition, VERSION } from './v1alpha1/schema.js';

export interface CustomResourceDefinition {
  apiVersion: 'apiextensions.k8s.io/v1';
  kind: 'CustomResourceDefinition';
  metadata: { name: string };
  spec: Record<string, unknown>;
}

/** JSON round trip: drops TypeBox's symbol keys and `undefined`, leaving plain OpenAPI. */
function plain<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

/** The CRD of one kind (one served + storage version, v1alpha1). */
export function buildCRD(def: KindDefinition): CustomResourceDefinition {
  const openAPIV3Schema: Record<string, unknown> = {
    description: def.description,
    type: 'object',
    properties: {
      apiVersion: {
        type: 'string',
        description: 'Versioned schema of this object (Kubernetes API conventions).',
      },
      kind: {
        type: 'string',
        description: 'REST resource this object represents (Kubernetes API conventions).',
      },
      metadata: { type: 'object' },
      ...plain(def.properties),
    },
  };
  if (def.required?.length) openAPIV3Schema.required = def.required;
  const version: Record<string, unknown> = {
    name: VERSION,
    served: true,
    storage: true,
    schema: { openAPIV3Schema },
  };
  if (def.printerColumns.length) version.additionalPrinterColumns = def.printerColumns;
  if (def.hasStatusSubresource) version.subresources = { status: {} };
  if (def.deprecated) version.deprecated = true;
  if (def.deprecationWarning) version.deprecationWarning = def.deprecationWarning;
  const names: Record<string, unknown> = {
    kind: def.kind,
    listKind: `${def.kind}List`,
    plural: def.plural,
    singular: def.singular,
  };
  if (def.shortNames?.length) names.shortNames = def.shortNames;
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${def.plural}.${GROUP}` },
    spec: { group: GROUP, names, scope: def.scope, versions: [version] },
  };
}

/** File name under `config/crd/`, as controller-gen names it (`<group>_<plural>.yaml`). */
export function crdFileName(def: KindDefinition): string {
  return `${GROUP}_${def.plural}.yaml`;
}
