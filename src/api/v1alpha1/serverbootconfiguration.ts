/**
 * ServerBootConfiguration (SBC): what one server boots in the current attempt.
 *
 * Additions to upstream (README, 'A claim's boot attempts'): `spec.bootAttempt` (bumped for every attempt, which
 * bumps `metadata.generation`), `spec.bootPolicy`, `spec.bootMethod` and `status.attemptGeneration`.
 * The attempt's callback token is derived from `metadata.uid` and `spec.bootAttempt`
 * (src/bootauth/callback-token.ts), so the SBC names no Secret for it. A condition counts for the current attempt only when its
 * `observedGeneration` >= `status.attemptGeneration` (Kubernetes API conventions, observedGeneration).
 */
import { BootMethodSchema } from './boot-method.js';
import { BootPolicySchema } from './boot-policy.js';
import {
  AGE_COLUMN,
  Conditions,
  Int64,
  type KindDefinition,
  LocalObjectReference,
  type ObjectMeta,
  type Static,
  Type,
} from './schema.js';

export const SBC_STATES = ['Pending', 'Ready', 'Error'] as const;
export type SBCState = (typeof SBC_STATES)[number];

export const ServerBootConfigurationSpec = Type.Object(
  {
    serverRef: LocalObjectReference('Server this configuration boots.'),
    image: Type.Optional(
      Type.String({ description: 'Boot image: an image catalog name or an OCI image reference.' }),
    ),
    ignitionSecretRef: Type.Optional(
      LocalObjectReference('Secret holding the ignition (keys ignition, format).'),
    ),
    bootAttempt: Type.Optional(
      Type.Integer({ minimum: 1, description: 'Current boot attempt, starting at 1.' }),
    ),
    bootPolicy: Type.Optional(BootPolicySchema('Copied from the claim; read by the boot server.')),
    bootMethod: Type.Optional(
      BootMethodSchema(
        'Copied from the claim; PXE when unset. HTTPBoot: the boot server serves a UKI; VirtualMedia: an ISO the BMC inserts.',
      ),
    ),
  },
  { description: 'Desired state of a ServerBootConfiguration.' },
);

/** The OCI image of the current attempt, resolved once per attempt (docs/ARCHITECTURE.md, 'A boot attempt'). */
export const SBCImageStatus = Type.Object(
  {
    reference: Type.String({ description: 'spec.image as normalised (domain/repository:tag or @digest).' }),
    digest: Type.String({ description: 'Digest the reference resolved to for this attempt.' }),
    manifest: Type.Optional(Type.String({ description: 'Digest of the platform manifest booted.' })),
    kernel: Type.Optional(Type.String({ description: 'Digest of the kernel layer.' })),
    initrd: Type.Optional(Type.String({ description: 'Digest of the initramfs layer.' })),
    squashfs: Type.Optional(Type.String({ description: 'Digest of the squashfs layer.' })),
    uki: Type.Optional(Type.String({ description: 'Digest of the unified kernel image layer.' })),
    commandLine: Type.Optional(Type.String({ description: "The image config's commandLine." })),
    bootAttempt: Type.Optional(
      Type.Integer({ minimum: 1, description: 'spec.bootAttempt this was resolved for.' }),
    ),
    pullSecret: Type.Optional(
      Type.String({ description: 'namespace/name of the docker-config Secret used to pull, if any.' }),
    ),
  },
  { description: 'OCI image resolved for the current attempt.' },
);

export const ServerBootConfigurationStatus = Type.Object(
  {
    // No enum: upstream leaves state a free string, and a tighter schema would reject its objects.
    state: Type.Optional(Type.Unsafe<SBCState>({ type: 'string', description: 'Pending, Ready or Error.' })),
    attemptGeneration: Type.Optional(
      Int64({ minimum: 0, description: 'metadata.generation at which the current attempt began.' }),
    ),
    image: Type.Optional(SBCImageStatus),
    conditions: Type.Optional(
      Conditions('IPXEScriptFetched, IgnitionDataFetched, BootStateReceived, and readiness.'),
    ),
  },
  { description: 'Observed state of a ServerBootConfiguration.' },
);

export type ServerBootConfigurationSpec = Static<typeof ServerBootConfigurationSpec>;
export type ServerBootConfigurationStatus = Static<typeof ServerBootConfigurationStatus>;
export type SBCImageStatus = Static<typeof SBCImageStatus>;
export type ServerBootConfiguration = {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec: ServerBootConfigurationSpec;
  status?: ServerBootConfigurationStatus;
};

export const ServerBootConfigurationKind: KindDefinition = {
  kind: 'ServerBootConfiguration',
  plural: 'serverbootconfigurations',
  singular: 'serverbootconfiguration',
  shortNames: ['sbc'],
  scope: 'Namespaced',
  description: 'ServerBootConfiguration is what one server boots in the current attempt.',
  properties: { spec: ServerBootConfigurationSpec, status: ServerBootConfigurationStatus },
  printerColumns: [
    { name: 'ServerRef', type: 'string', jsonPath: '.spec.serverRef.name' },
    { name: 'Image', type: 'string', jsonPath: '.spec.image' },
    { name: 'IgnitionRef', type: 'string', jsonPath: '.spec.ignitionSecretRef.name' },
    { name: 'State', type: 'string', jsonPath: '.status.state' },
    AGE_COLUMN,
    { name: 'Attempt', type: 'integer', jsonPath: '.spec.bootAttempt', priority: 1 },
  ],
  hasStatusSubresource: true,
};
