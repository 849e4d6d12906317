/** Endpoint (deprecated upstream): the MAC and IP of a BMC, referenced by `BMC.spec.endpointRef`. */
import { AGE_COLUMN, type KindDefinition, type ObjectMeta, type Static, Type } from './schema.js';

export const EndpointSpec = Type.Object(
  {
    ip: Type.Optional(Type.String({ description: 'IP address of the endpoint.' })),
    macAddress: Type.Optional(Type.String({ description: 'MAC address of the endpoint.' })),
  },
  { description: 'Network identity of a BMC.' },
);
export const EndpointStatus = Type.Object({}, { description: 'Observed state of an Endpoint (none yet).' });

export type Endpoint = {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec?: Static<typeof EndpointSpec>;
  status?: Static<typeof EndpointStatus>;
};

export const EndpointKind: KindDefinition = {
  kind: 'Endpoint',
  plural: 'endpoints',
  singular: 'endpoint',
  shortNames: ['mep'],
  scope: 'Cluster',
  description: 'Endpoint holds the network identity of a BMC. Deprecated: use BMC.spec.access.',
  properties: { spec: EndpointSpec, status: EndpointStatus },
  printerColumns: [
    { name: 'MACAddress', type: 'string', jsonPath: '.spec.macAddress' },
    { name: 'IP', type: 'string', jsonPath: '.spec.ip' },
    AGE_COLUMN,
  ],
  hasStatusSubresource: true,
  deprecated: true,
  deprecationWarning:
    'metal.ironcore.dev/v1alpha1 Endpoints are deprecated; specify the network access inline via BMC.spec.access (an InlineEndpoint with macAddress and ip) instead',
};
