/** BMC: a baseboard management controller reached over Redfish; one Server per ComputerSystem. */
import {
  AGE_COLUMN,
  Conditions,
  DateTime,
  Int32,
  immutable,
  type KindDefinition,
  LocalObjectReference,
  type ObjectMeta,
  type Static,
  StringEnum,
  Type,
} from './schema.js';

export const Protocol = Type.Object(
  {
    name: Type.String({ description: 'Protocol name, e.g. Redfish, RedfishLocal, RedfishKube.' }),
    port: Int32({ description: 'TCP port.' }),
    scheme: Type.Optional(Type.String({ description: 'URL scheme: http or https.' })),
  },
  { description: 'How to talk to the BMC.' },
);
export type Protocol = Static<typeof Protocol>;

export const InlineEndpoint = Type.Object(
  {
    ip: Type.Optional(Type.String({ description: 'IP address of the BMC.' })),
    macAddress: Type.Optional(Type.String({ description: 'MAC address of the BMC.' })),
  },
  { description: 'Network access of the BMC, inline.', 'x-kubernetes-validations': [immutable('access')] },
);

export const BMCSpec = Type.Object(
  {
    access: Type.Optional(InlineEndpoint),
    endpointRef: Type.Optional(
      LocalObjectReference('Endpoint holding the BMC network access (deprecated; use access).', {
        'x-kubernetes-validations': [immutable('endpointRef')],
      }),
    ),
    bmcSecretRef: LocalObjectReference('BMCSecret with the credentials of the BMC.'),
    bmcUUID: Type.Optional(Type.String({ description: 'UUID of the BMC (Redfish Manager UUID).' })),
    hostname: Type.Optional(Type.String({ description: 'Hostname of the BMC.' })),
    protocol: Protocol,
    consoleProtocol: Type.Optional(
      Type.Object(
        {
          name: StringEnum(['IPMI', 'SSH', 'SSHLenovo'] as const, { description: 'Console protocol.' }),
          port: Int32({ description: 'Console port.' }),
        },
        { description: 'Console access to the BMC.' },
      ),
    ),
  },
  {
    description: 'Desired state of a BMC.',
    'x-kubernetes-validations': [
      {
        message: 'exactly one of access or endpointRef needs to be set',
        rule: 'has(self.access) != has(self.endpointRef)',
      },
    ],
  },
);

export const BMCStatus = Type.Object(
  {
    macAddress: Type.Optional(
      Type.String({
        pattern: '^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})$',
        description: 'MAC address of the BMC.',
      }),
    ),
    ip: Type.Optional(Type.String({ description: 'IP address of the BMC.' })),
    manufacturer: Type.Optional(Type.String({ description: 'Manufacturer (Redfish Manager.Manufacturer).' })),
    model: Type.Optional(Type.String({ description: 'Model (Redfish Manager.Model).' })),
    sku: Type.Optional(Type.String({ description: 'Stock keeping unit.' })),
    serialNumber: Type.Optional(Type.String({ description: 'Serial number.' })),
    firmwareVersion: Type.Optional(
      Type.String({ description: 'Firmware version (Redfish Manager.FirmwareVersion).' }),
    ),
    state: Type.Optional(Type.String({ default: 'Pending', description: 'Enabled, Error or Pending.' })),
    powerState: Type.Optional(
      Type.String({ description: 'Power state of the BMC (Redfish Manager.PowerState).' }),
    ),
    lastResetTime: Type.Optional(DateTime({ description: 'When the BMC was last reset.' })),
    eventsSubscriptionLink: Type.Optional(
      Type.String({ description: 'Redfish event subscription of the BMC.' }),
    ),
    metricsReportSubscriptionLink: Type.Optional(
      Type.String({ description: 'Redfish metrics report subscription of the BMC.' }),
    ),
    conditions: Type.Optional(Conditions()),
  },
  { description: 'Observed state of a BMC.' },
);

export type BMC = {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec: Static<typeof BMCSpec>;
  status?: Static<typeof BMCStatus>;
};

export const BMCKind: KindDefinition = {
  kind: 'BMC',
  plural: 'bmcs',
  singular: 'bmc',
  scope: 'Cluster',
  description: 'BMC is a baseboard management controller reached over Redfish.',
  properties: { spec: BMCSpec, status: BMCStatus },
  printerColumns: [
    { name: 'MACAddress', type: 'string', jsonPath: '.status.macAddress' },
    { name: 'IP', type: 'string', jsonPath: '.status.ip' },
    { name: 'Model', type: 'string', jsonPath: '.status.model' },
    { name: 'SKU', type: 'string', jsonPath: '.status.sku', priority: 100 },
    { name: 'SerialNumber', type: 'string', jsonPath: '.status.serialNumber', priority: 100 },
    { name: 'FirmwareVersion', type: 'string', jsonPath: '.status.firmwareVersion', priority: 100 },
    { name: 'State', type: 'string', jsonPath: '.status.state' },
    { name: 'PowerState', type: 'string', jsonPath: '.status.powerState' },
    AGE_COLUMN,
  ],
  hasStatusSubresource: true,
};
