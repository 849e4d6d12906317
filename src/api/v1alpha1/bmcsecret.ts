/**
 * BMCSecret: credentials of a BMC (keys `username`, `password`), shaped like a core/v1 Secret
 * (top-level `data`/`stringData`, no spec) so upstream manifests apply unchanged.
 */
import { AGE_COLUMN, type KindDefinition, type ObjectMeta, Type } from './schema.js';

export type BMCSecret = {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  /** Base64-encoded values (RFC 4648 section 4). */
  data?: Record<string, string>;
  /**
   * Plain-text values. Unlike a core Secret, a custom resource stores `stringData` as given (the API
   * server merges nothing), so readers take a key from `data` first and from here otherwise.
   */
  stringData?: Record<string, string>;
  immutable?: boolean;
  type?: string;
};

export const BMCSecretKind: KindDefinition = {
  kind: 'BMCSecret',
  plural: 'bmcsecrets',
  singular: 'bmcsecret',
  shortNames: ['bmcsec'],
  scope: 'Cluster',
  description: 'BMCSecret holds the credentials (username, password) used to reach a BMC.',
  properties: {
    data: Type.Unsafe<Record<string, string>>({
      type: 'object',
      additionalProperties: { type: 'string', format: 'byte' },
      description: 'Secret values, base64-encoded (RFC 4648 section 4).',
    }),
    stringData: Type.Unsafe<Record<string, string>>({
      type: 'object',
      additionalProperties: { type: 'string' },
      description: 'Secret values in plain text; readers take a key from here when it is not in data.',
    }),
    immutable: Type.Boolean({ description: 'When true, data cannot be changed.' }),
    type: Type.String({ description: 'Type of the secret, for programmatic handling.' }),
  },
  printerColumns: [AGE_COLUMN],
  hasStatusSubresource: true,
};
