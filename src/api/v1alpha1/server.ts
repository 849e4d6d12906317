/**
 * Server: one bare-metal machine (a Redfish ComputerSystem), cluster scoped.
 *
 * Additions to upstream (all optional): `status.registration` (a record of the probe agent's
 * registration: when, from where, its digest and attempt; the whole payload, persisted so it
 * survives restarts where upstream keeps it in memory, is in a ConfigMap the record names) and `status.discovery`
 * (the discovery attempt and its deadline, so bounded discovery survives manager restarts),
 * `spec.automatedCleaningMode` (metal3's BareMetalHost field and values: `metadata` | `disabled`),
 * the state `Cleaning` and `status.cleanup` (the cleanup boot run on release, bookkept like
 * discovery; src/controllers/server/cleanup.ts).
 */

import { Protocol } from './bmc.js';
import {
  AGE_COLUMN,
  Conditions,
  DateTime,
  Int32,
  type KindDefinition,
  LocalObjectReference,
  NamespacedReference,
  type ObjectMeta,
  Quantity,
  type Static,
  StringEnum,
  type TProperties,
  Type,
} from './schema.js';

/** Upstream server states (metal-operator `ServerState`), and `Cleaning`. */
export const SERVER_STATES = [
  'Initial',
  'Discovery',
  'Available',
  'Reserved',
  'Error',
  'Maintenance',
  // Upstream: out of the claim lifecycle for day-2 work (operation `park`, server-operations.ts).
  'Parked',
  // Not upstream: the cleanup boot after a release (src/controllers/server/cleanup.ts).
  'Cleaning',
] as const;
export type ServerState = (typeof SERVER_STATES)[number];

/** Values of `spec.automatedCleaningMode`, metal3's (`metadata`: erase, `disabled`: skip). */
export const AUTOMATED_CLEANING_MODES = ['metadata', 'disabled'] as const;
export type AutomatedCleaningMode = (typeof AUTOMATED_CLEANING_MODES)[number];

const Taint = Type.Object(
  {
    key: Type.String({ minLength: 1, description: 'Taint key.' }),
    value: Type.Optional(Type.String({ description: 'Taint value.' })),
    effect: Type.Optional(
      StringEnum(['NoBind', 'Evict'] as const, {
        default: 'NoBind',
        description: 'Effect on claims that do not tolerate it.',
      }),
    ),
  },
  { description: 'Restricts which ServerClaims may bind the server.' },
);

export const ServerSpec = Type.Object(
  {
    systemUUID: Type.String({
      description: 'SMBIOS system UUID, lower-case 8-4-4-4-12 when written by this operator.',
    }),
    systemURI: Type.Optional(Type.String({ description: 'Redfish URI of the ComputerSystem.' })),
    bmcRef: Type.Optional(LocalObjectReference('BMC managing this server.')),
    bmc: Type.Optional(
      Type.Object(
        {
          address: Type.String({ description: 'Address of the BMC.' }),
          bmcSecretRef: LocalObjectReference('BMCSecret with the credentials of the BMC.'),
          protocol: Protocol,
        },
        { description: 'Inline BMC access, for servers without a BMC object.' },
      ),
    ),
    power: Type.Optional(Type.String({ description: 'Desired power state (On, Off). Deprecated upstream.' })),
    indicatorLED: Type.Optional(Type.String({ description: 'Desired indicator LED state.' })),
    serverClaimRef: Type.Optional(
      NamespacedReference(
        'ServerClaim that holds this server.',
        { maxLength: 253, 'x-kubernetes-validations': [{ rule: 'self == oldSelf' }] },
        { maxLength: 63, 'x-kubernetes-validations': [{ rule: 'self == oldSelf' }] },
      ),
    ),
    bootConfigurationRef: Type.Optional(NamespacedReference('ServerBootConfiguration currently applied.')),
    bootOrder: Type.Optional(
      Type.Array(
        Type.Object({
          name: Type.String({ description: 'Name of the boot device.' }),
          priority: Type.Integer({ description: 'Priority of the device.' }),
          device: Type.String({ description: 'Device to boot from.' }),
        }),
        { description: 'Boot order of the server.' },
      ),
    ),
    reclaimPolicy: Type.Optional(
      StringEnum(['Recycle', 'Retain'] as const, {
        default: 'Recycle',
        description:
          'Recycle: Available right after release; Retain: Released until serverClaimRef is removed.',
      }),
    ),
    automatedCleaningMode: Type.Optional(
      StringEnum(AUTOMATED_CLEANING_MODES, {
        description:
          "Cleanup boot on release (metal3's BareMetalHost field): metadata = boot the manager's --cleanup-image after every release and become Available only once it reported completion (refused while no cleanup image is configured); disabled = Available right after release, disks as the last tenant left them. Unset: metadata when the manager has a --cleanup-image, else disabled.",
      }),
    ),
    taints: Type.Optional(Type.Array(Taint, { description: 'Taints restricting which claims may bind.' })),
    unclaimable: Type.Optional(
      Type.Boolean({ default: false, description: 'When true, no new claim binds this server.' }),
    ),
  },
  { description: 'Desired state of a Server.' },
);

const NetworkInterface = Type.Object({
  name: Type.String({ description: 'Interface name.' }),
  macAddress: Type.String({ description: 'MAC address.' }),
  ip: Type.Optional(Type.String({ description: 'Deprecated upstream; use ips.' })),
  ips: Type.Optional(Type.Array(Type.String({ format: 'ip' }), { description: 'IPv4 and IPv6 addresses.' })),
  carrierStatus: Type.Optional(Type.String({ description: 'Carrier status.' })),
  neighbors: Type.Optional(
    Type.Array(
      Type.Object({
        macAddress: Type.Optional(Type.String()),
        portDescription: Type.Optional(Type.String()),
        portID: Type.Optional(Type.String()),
        systemDescription: Type.Optional(Type.String()),
        systemName: Type.Optional(Type.String()),
      }),
      { description: 'LLDP neighbors.' },
    ),
  ),
});

const Processor = Type.Object({
  id: Type.String({ description: 'Processor id.' }),
  type: Type.Optional(Type.String()),
  architecture: Type.Optional(Type.String()),
  instructionSet: Type.Optional(Type.String()),
  manufacturer: Type.Optional(Type.String()),
  model: Type.Optional(Type.String()),
  maxSpeedMHz: Type.Optional(Int32({ description: 'Maximum speed in MHz.' })),
  totalCores: Type.Optional(Int32()),
  totalThreads: Type.Optional(Int32()),
});

const Storage = Type.Object({
  name: Type.Optional(Type.String()),
  state: Type.Optional(Type.String()),
  drives: Type.Optional(
    Type.Array(
      Type.Object({
        name: Type.Optional(Type.String()),
        mediaType: Type.Optional(Type.String()),
        type: Type.Optional(Type.String()),
        capacity: Type.Optional(Quantity({ description: 'Size in bytes.' })),
        vendor: Type.Optional(Type.String()),
        model: Type.Optional(Type.String()),
        state: Type.Optional(Type.String()),
      }),
    ),
  ),
  volumes: Type.Optional(
    Type.Array(
      Type.Object({
        name: Type.Optional(Type.String()),
        capacity: Type.Optional(Quantity({ description: 'Size in bytes.' })),
        state: Type.Optional(Type.String()),
        raidType: Type.Optional(Type.String()),
        volumeUsage: Type.Optional(Type.String()),
      }),
    ),
  ),
});

/**
 * The bookkeeping of a Server-side boot series (`status.discovery`, `status.cleanup`): one shape for
 * both flows (controllers/server/server-boot-flow.ts writes them), `extra` for what a flow adds.
 * Kubernetes API conventions: timestamps as RFC 3339 strings.
 */
function bootProgress<P extends TProperties>(noun: string, word: string, extra: P, description: string) {
  return Type.Object(
    {
      attempt: Type.Integer({ minimum: 0, description: `${noun} attempt number, starting at 1.` }),
      attemptStartedAt: Type.Optional(DateTime()),
      poweredOnAt: Type.Optional(DateTime({ description: 'When the current attempt was powered on.' })),
      netbootDeadline: Type.Optional(
        DateTime({ description: 'When the current attempt must have fetched its script.' }),
      ),
      deadline: Type.Optional(DateTime({ description: `When the current ${word} attempt times out.` })),
      ...extra,
      lastFailure: Type.Optional(
        Type.String({
          maxLength: 2048,
          description:
            'How the previous attempt ended, in words (arrived and missing signals), while this one runs.',
        }),
      ),
      phase: Type.Optional(
        Type.String({ description: 'Phase of the attempt (see ServerClaim status.boot.phase).' }),
      ),
    },
    { description },
  );
}

export const ServerStatus = Type.Object(
  {
    manufacturer: Type.Optional(
      Type.String({ description: 'Manufacturer (Redfish ComputerSystem.Manufacturer).' }),
    ),
    model: Type.Optional(Type.String({ description: 'Model (Redfish ComputerSystem.Model).' })),
    sku: Type.Optional(Type.String()),
    serialNumber: Type.Optional(Type.String()),
    biosVersion: Type.Optional(Type.String()),
    powerState: Type.Optional(Type.String({ description: 'Observed power state (Redfish PowerState).' })),
    indicatorLED: Type.Optional(Type.String()),
    state: Type.Optional(
      Type.String({
        // With the status default below, a Server no controller has written yet reads Initial (kubectl's
        // STATE column too) at no request's cost; upstream writes it in an extra first reconcile step.
        default: 'Initial',
        description:
          'Initial, Discovery, Available, Reserved, Cleaning, Error, Maintenance or Parked; Initial until the Server controller moves it.',
      }),
    ),
    totalSystemMemory: Type.Optional(Quantity({ description: 'Memory in bytes.' })),
    networkInterfaces: Type.Optional(Type.Array(NetworkInterface)),
    bmcNetworkInterfaces: Type.Optional(
      Type.Array(
        Type.Object({
          name: Type.String({ maxLength: 128, description: 'Redfish EthernetInterface Id.' }),
          macAddress: Type.String({
            maxLength: 17,
            description: 'MAC address, lower-case aa:bb:cc:dd:ee:ff.',
          }),
          carrierStatus: Type.Optional(
            Type.String({ maxLength: 32, description: 'Redfish LinkStatus (LinkUp, LinkDown, NoLink).' }),
          ),
        }),
        {
          maxItems: 32,
          description:
            "The system's NICs as its BMC reports them (Redfish ComputerSystem EthernetInterfaces), read at the start of discovery; items shaped like networkInterfaces. A registration reporting a NIC with an address whose MAC is not among them is refused, and boot files are identified by these MACs. Empty: the BMC reports none (condition MachineIdentity says what that means).",
        },
      ),
    ),
    processors: Type.Optional(Type.Array(Processor)),
    storages: Type.Optional(Type.Array(Storage)),
    conditions: Type.Optional(Conditions()),
    registration: Type.Optional(
      Type.Object(
        {
          receivedAt: DateTime({ description: 'When the registry stored this payload.' }),
          clientAddress: Type.Optional(
            Type.String({
              maxLength: 64,
              description:
                'The source address the registry saw the registration come from. When it is not one of the addresses the payload reports, a NAT sits between host and signal servers and the boot server does not identify the host by those addresses (it pins boot files to their first client instead).',
            }),
          ),
          digest: Type.Optional(
            Type.String({
              maxLength: 64,
              description:
                "Hex sha256 of the payload's canonical JSON: a repeated identical registration is answered 200 changed=false.",
            }),
          ),
          attempt: Type.Optional(
            Int32({
              description: 'The discovery attempt (its SBC spec.bootAttempt) whose probe registered.',
            }),
          ),
          authenticated: Type.Optional(
            Type.Boolean({
              description: 'False for a registration without a token (--callback-auth=optional).',
            }),
          ),
          bootConfigurationUID: Type.Optional(
            Type.String({
              maxLength: 64,
              description:
                "uid of that attempt's ServerBootConfiguration (a record of an earlier discovery never counts for a new one).",
            }),
          ),
          payload: Type.Optional(
            Type.Object(
              {
                namespace: Type.String({ maxLength: 63 }),
                name: Type.String({ maxLength: 253 }),
              },
              {
                description:
                  'The ConfigMap holding the whole payload (key registration.json), owned by this Server.',
              },
            ),
          ),
          hardware: Type.Optional(
            Type.Object(
              {
                networkInterfaces: Type.Optional(Type.Array(NetworkInterface, { maxItems: 64 })),
                processors: Type.Optional(Type.Array(Processor, { maxItems: 16 })),
                totalSystemMemory: Type.Optional(Quantity()),
                storages: Type.Optional(Type.Array(Storage, { maxItems: 64 })),
                sku: Type.Optional(Type.String()),
                biosVersion: Type.Optional(Type.String()),
              },
              {
                description:
                  "The payload's hardware in upstream's status shape (processors per socket; lists capped), until discovery completes and copies it into the status fields of the same names.",
              },
            ),
          ),
          data: Type.Optional(
            Type.Unsafe<Record<string, unknown>>({
              type: 'object',
              'x-kubernetes-preserve-unknown-fields': true,
              description:
                'Deprecated: the whole payload, as releases before the payload ConfigMap stored it; never written now.',
            }),
          ),
        },
        {
          description: 'Last registration of the probe agent, written by the registry before it answers 201.',
        },
      ),
    ),
    smbiosUUIDAlias: Type.Optional(
      Type.String({
        maxLength: 36,
        description:
          'The system UUID as the host itself reports it, when that is spec.systemUUID with fields 1-3 byte-reversed (SMBIOS 2.6 and later store them little-endian). Set by the registry or boot server when a request matched through that alias (also a Warning Event SystemUUIDByteSwapped); lower-case 8-4-4-4-12.',
      }),
    ),
    discovery: Type.Optional(bootProgress('Discovery', 'discovery', {}, 'Progress of bounded discovery.')),
    cleanup: Type.Optional(
      bootProgress(
        'Cleanup',
        'cleanup',
        {
          completedAt: Type.Optional(
            DateTime({ description: 'When the cleanup image reported completion.' }),
          ),
          image: Type.Optional(Type.String({ description: 'The cleanup image booted.' })),
        },
        'Progress of the cleanup boot after the last release (state Cleaning); kept once done, replaced at the next release.',
      ),
    ),
  },
  // default {}: the API server applies defaults only inside objects that exist, so status itself is
  // defaulted for state's default to show on a Server whose status was never written.
  { description: 'Observed state of a Server.', default: {} },
);

export type ServerSpec = Static<typeof ServerSpec>;
export type ServerStatus = Static<typeof ServerStatus>;
export type Server = {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec: ServerSpec;
  status?: ServerStatus;
};

export const ServerKind: KindDefinition = {
  kind: 'Server',
  plural: 'servers',
  singular: 'server',
  shortNames: ['srv'],
  scope: 'Cluster',
  description: 'Server is one bare-metal machine, a Redfish ComputerSystem.',
  properties: { spec: ServerSpec, status: ServerStatus },
  printerColumns: [
    { name: 'SystemUUID', type: 'string', jsonPath: '.spec.systemUUID' },
    { name: 'Manufacturer', type: 'string', jsonPath: '.status.manufacturer' },
    { name: 'Model', type: 'string', jsonPath: '.status.model' },
    { name: 'Memory', type: 'string', jsonPath: '.status.totalSystemMemory' },
    { name: 'SKU', type: 'string', jsonPath: '.status.sku', priority: 100 },
    { name: 'SerialNumber', type: 'string', jsonPath: '.status.serialNumber', priority: 100 },
    { name: 'PowerState', type: 'string', jsonPath: '.status.powerState' },
    { name: 'IndicatorLED', type: 'string', jsonPath: '.status.indicatorLED', priority: 100 },
    { name: 'State', type: 'string', jsonPath: '.status.state' },
    { name: 'Unclaimable', type: 'boolean', jsonPath: '.spec.unclaimable', priority: 100 },
    AGE_COLUMN,
  ],
  hasStatusSubresource: true,
};
