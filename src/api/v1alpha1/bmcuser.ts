/**
 * BMCUser (deprecated upstream): a user account on a BMC, kept by src/controllers/bmcuser/bmcuser.ts (account
 * created and updated through the BMC's Redfish AccountService, generated password in a BMCSecret,
 * rotation). `status.conditions` is this project's addition (`Ready`: the account and its Secret
 * agree, or why not).
 */
import {
  AGE_COLUMN,
  Conditions,
  DateTime,
  type KindDefinition,
  LocalObjectReference,
  type ObjectMeta,
  type Static,
  Type,
} from './schema.js';

export const BMCUserSpec = Type.Object(
  {
    userName: Type.String({ description: 'Account name on the BMC.' }),
    roleID: Type.String({ description: 'Redfish role id to assign.' }),
    description: Type.Optional(Type.String({ description: 'Free-text description.' })),
    rotationPeriod: Type.Optional(
      Type.String({ description: 'How often to rotate the password (Go duration).' }),
    ),
    bmcSecretRef: Type.Optional(LocalObjectReference('BMCSecret with the credentials of this user.')),
    bmcRef: Type.Optional(LocalObjectReference('BMC the user lives on.')),
  },
  { description: 'Desired state of a BMCUser.' },
);
export const BMCUserStatus = Type.Object(
  {
    id: Type.Optional(Type.String({ description: 'Redfish account id.' })),
    effectiveBMCSecretRef: Type.Optional(LocalObjectReference('BMCSecret in use.')),
    lastRotation: Type.Optional(DateTime()),
    passwordExpiration: Type.Optional(DateTime()),
    conditions: Type.Optional(Conditions()),
  },
  { description: 'Observed state of a BMCUser.' },
);

export type BMCUser = {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec: Static<typeof BMCUserSpec>;
  status?: Static<typeof BMCUserStatus>;
};

export const BMCUserKind: KindDefinition = {
  kind: 'BMCUser',
  plural: 'bmcusers',
  singular: 'bmcuser',
  shortNames: ['bmcu'],
  scope: 'Cluster',
  description: 'BMCUser is a user account on a BMC. Deprecated upstream.',
  properties: { spec: BMCUserSpec, status: BMCUserStatus },
  printerColumns: [
    { name: 'ID', type: 'string', jsonPath: '.status.id' },
    { name: 'UserName', type: 'string', jsonPath: '.spec.userName' },
    { name: 'RoleID', type: 'string', jsonPath: '.spec.roleID' },
    { name: 'LastRotation', type: 'date', jsonPath: '.status.lastRotation' },
    { name: 'PasswordExpiration', type: 'date', jsonPath: '.status.passwordExpiration' },
    AGE_COLUMN,
  ],
  hasStatusSubresource: true,
  deprecated: true,
  deprecationWarning: 'metal.ironcore.dev/v1alpha1 BMCUser is deprecated',
};
