/**
 * ServerReadinessRule: taints servers whose conditions do not meet a requirement (controller:
 * src/controllers/server/readiness-rules.ts).
 */
import {
  Conditions,
  immutable,
  type KindDefinition,
  LabelSelector,
  type ObjectMeta,
  type Static,
  StringEnum,
  Type,
} from './schema.js';

export const ServerReadinessRuleSpec = Type.Object(
  {
    serverSelector: LabelSelector('Servers the rule applies to.', {
      'x-kubernetes-validations': [immutable('serverSelector')],
    }),
    conditions: Type.Array(
      Type.Object({
        type: Type.String({ minLength: 1, maxLength: 316, description: 'Server condition type.' }),
        requiredStatus: StringEnum(['True', 'False', 'Unknown'] as const, {
          description: 'Required status.',
        }),
      }),
      {
        minItems: 1,
        maxItems: 32,
        'x-kubernetes-list-type': 'map',
        'x-kubernetes-list-map-keys': ['type'],
        'x-kubernetes-validations': [immutable('conditions')],
        description: 'Server conditions that decide whether the taint is applied.',
      },
    ),
    enforcementMode: StringEnum(['BootstrapOnly', 'Continuous'] as const, {
      description: 'BootstrapOnly applies once; Continuous keeps correcting.',
      'x-kubernetes-validations': [immutable('enforcementMode')],
    }),
    taint: Type.Object(
      {
        key: Type.String({ minLength: 1, description: 'Taint key.' }),
        value: Type.Optional(Type.String({ description: 'Taint value.' })),
        effect: Type.Optional(
          StringEnum(['NoBind', 'Evict'] as const, { default: 'NoBind', description: 'Effect.' }),
        ),
      },
      {
        description: 'Taint managed on matching servers.',
        'x-kubernetes-validations': [
          { message: 'taint key length must be at most 253 characters', rule: 'self.key.size() <= 253' },
          { message: 'taint key is immutable', rule: '!has(oldSelf.key) || self.key == oldSelf.key' },
          {
            message: 'taint effect is immutable',
            rule: '!has(oldSelf.effect) || self.effect == oldSelf.effect',
          },
          { message: 'taint value is immutable', rule: '!has(oldSelf.value) || self.value == oldSelf.value' },
        ],
      },
    ),
  },
  { description: 'Desired state of a ServerReadinessRule.' },
);

export type ServerReadinessRule = {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec: Static<typeof ServerReadinessRuleSpec>;
  status?: { conditions?: Static<ReturnType<typeof Conditions>> };
};

export const ServerReadinessRuleKind: KindDefinition = {
  kind: 'ServerReadinessRule',
  plural: 'serverreadinessrules',
  singular: 'serverreadinessrule',
  scope: 'Cluster',
  description: 'ServerReadinessRule taints servers whose conditions do not meet a requirement.',
  properties: {
    spec: ServerReadinessRuleSpec,
    status: Type.Object({ conditions: Type.Optional(Conditions()) }, { description: 'Observed state.' }),
  },
  required: ['spec'],
  printerColumns: [],
  hasStatusSubresource: true,
};
