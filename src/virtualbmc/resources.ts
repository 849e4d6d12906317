/**
 * JSON documents of the virtual BMC's Redfish service. Shapes follow the DMTF schemas named in each
 * `@odata.type` (ServiceRoot.v1_16_1, ComputerSystem.v1_22_0, EthernetInterface.v1_12_0,
 * Manager.v1_19_0, SessionService.v1_1_8, Session.v1_7_1, ActionInfo.v1_4_0) and the DMTF
 * public-rackmount1 mockup; only properties the project reads or a client commonly expects are present.
 */

import type { ServiceProfile } from './profile.js';
import type { ProfileTree } from './profile-tree.js';
import type { VirtualSystem } from './system.js';

type Json = Record<string, unknown>;

export const ROOT_URI = '/redfish/v1/';
export const SYSTEMS_URI = '/redfish/v1/Systems';
export const MANAGERS_URI = '/redfish/v1/Managers';
export const MANAGER_ID = 'BMC';
export const MANAGER_URI = `${MANAGERS_URI}/${MANAGER_ID}`;
export const SESSION_SERVICE_URI = '/redfish/v1/SessionService';
export const SESSIONS_URI = `${SESSION_SERVICE_URI}/Sessions`;

const link = (uri: string): Json => ({ '@odata.id': uri });

export function serviceRoot(serviceUuid: string, profile: ServiceProfile): Json {
  return {
    '@odata.type': '#ServiceRoot.v1_16_1.ServiceRoot',
    '@odata.id': ROOT_URI,
    Id: 'RootService',
    Name: 'Root Service',
    RedfishVersion: '1.15.0',
    UUID: serviceUuid,
    Vendor: 'metal-operator virtual BMC',
    Product: 'virtual-bmc',
    Systems: link(SYSTEMS_URI),
    Managers: link(MANAGERS_URI),
    AccountService: link('/redfish/v1/AccountService'),
    ...(profile.sessions
      ? { SessionService: link(SESSION_SERVICE_URI), Links: { Sessions: link(SESSIONS_URI) } }
      : { Links: {} }),
  };
}

export function collection(type: string, name: string, uri: string, members: string[]): Json {
  return {
    '@odata.type': `#${type}.${type}`,
    '@odata.id': uri,
    Name: name,
    'Members@odata.count': members.length,
    Members: members.map(link),
  };
}

/** Whether systems have `Boot.HttpBootUri`: `UefiHttp` is offered and the profile reports the property. */
function offersHttpBootUri(profile: ServiceProfile): boolean {
  return profile.bootTargets.includes('UefiHttp') && profile.reportHttpBootUri !== false;
}

/**
 * The ComputerSystem document. `serialConsole`: the SSH console's port and this system's entry command
 * (console.ts), reported as `SerialConsole` (ComputerSystem.v1_13_0+ `HostSerialConsole`: one session,
 * SSH shared with the manager's CLI, where `ConsoleEntryCommand` is what to run after logging in).
 */
export function computerSystem(
  sys: VirtualSystem,
  profile: ServiceProfile,
  powerState: string,
  serialConsole?: { port: number; command: string },
): Json {
  if (profile.tree !== undefined) return treeComputerSystem(profile.tree, sys, profile, powerState);
  const id = sys.host.identity;
  const boot: Json = {
    BootSourceOverrideEnabled: sys.boot.enabled,
    BootSourceOverrideTarget: sys.boot.target,
    'BootSourceOverrideTarget@Redfish.AllowableValues': profile.bootTargets,
    ...(offersHttpBootUri(profile) ? { HttpBootUri: sys.boot.httpBootUri ?? null } : {}),
  };
  if (profile.reportBootMode) boot['BootSourceOverrideMode'] = sys.boot.mode;
  const reset: Json = { target: `${sys.uri}/Actions/ComputerSystem.Reset` };
  if (profile.resetTypesAdvertised === 'action-info')
    reset['@Redfish.ActionInfo'] = `${sys.uri}/ResetActionInfo`;
  if (profile.resetTypesAdvertised === 'inline')
    reset['ResetType@Redfish.AllowableValues'] = profile.resetTypes;
  return {
    '@odata.type': '#ComputerSystem.v1_22_0.ComputerSystem',
    '@odata.id': sys.uri,
    ...(profile.etags && profile.etagInBody ? { '@odata.etag': sys.etag } : {}),
    Id: sys.id,
    Name: `Virtual system ${id.serialNumber}`,
    SystemType: 'Physical',
    Manufacturer: id.manufacturer,
    Model: id.model,
    SerialNumber: id.serialNumber,
    // BMCs commonly report the SMBIOS UUID in upper case (boot-flow case C01).
    ...(profile.omitSystemUUID ? {} : { UUID: reportedUuid(sys, profile) }),
    PowerState: powerState,
    Status: { State: 'Enabled', Health: 'OK' },
    Boot: boot,
    MemorySummary: { TotalSystemMemoryGiB: id.memoryMiB / 1024 },
    ProcessorSummary: { Count: 1, CoreCount: id.cpus, LogicalProcessorCount: id.cpus },
    ...(profile.omitEthernetInterfaces ? {} : { EthernetInterfaces: link(`${sys.uri}/EthernetInterfaces`) }),
    ...(profile.virtualMedia && sys.host.insertMedia
      ? { VirtualMedia: link(`${sys.uri}/VirtualMedia`) }
      : {}),
    ...(serialConsole
      ? {
          SerialConsole: {
            MaxConcurrentSessions: 1,
            SSH: {
              ServiceEnabled: true,
              Port: serialConsole.port,
              SharedWithManagerCLI: true,
              ConsoleEntryCommand: serialConsole.command,
            },
            IPMI: { ServiceEnabled: false },
            Telnet: { ServiceEnabled: false },
          },
        }
      : {}),
    Links: { ManagedBy: [link(MANAGER_URI)] },
    Actions: { '#ComputerSystem.Reset': reset },
    ...(profile.settingsObject
      ? { '@Redfish.Settings': { SettingsObject: link(`${sys.uri}/Settings`) } }
      : {}),
  };
}

function reportedUuid(sys: VirtualSystem, profile: ServiceProfile): string {
  const uuid = sys.host.identity.uuid;
  return profile.uuidCase === 'upper' ? uuid.toUpperCase() : uuid.toLowerCase();
}

/**
 * A live system in the shape of the captured tree's ComputerSystem: the captured body with its links
 * moved to this system's URI, and identity, power and boot state taken from the live system.
 */
export function treeComputerSystem(
  tree: ProfileTree,
  sys: VirtualSystem,
  profile: ServiceProfile,
  powerState: string,
): Json {
  const body = treeResource(tree, tree.systemUri, sys.uri) ?? {};
  const boot = { ...((body['Boot'] as Json | undefined) ?? {}) };
  boot['BootSourceOverrideTarget'] = sys.boot.target;
  boot['BootSourceOverrideEnabled'] = sys.boot.enabled;
  if (profile.reportBootMode) boot['BootSourceOverrideMode'] = sys.boot.mode;
  else delete boot['BootSourceOverrideMode'];
  boot['BootSourceOverrideTarget@Redfish.AllowableValues'] = profile.bootTargets;
  if (offersHttpBootUri(profile)) boot['HttpBootUri'] = sys.boot.httpBootUri ?? null;
  else delete boot['HttpBootUri'];
  const out: Json = {
    ...body,
    '@odata.id': sys.uri,
    Id: sys.id,
    SerialNumber: sys.host.identity.serialNumber,
    PowerState: powerState,
    Boot: boot,
    EthernetInterfaces: link(`${sys.uri}/EthernetInterfaces`),
  };
  if (profile.omitEthernetInterfaces) delete out['EthernetInterfaces'];
  if (profile.omitSystemUUID) delete out['UUID'];
  else out['UUID'] = reportedUuid(sys, profile);
  if (profile.etags && profile.etagInBody) out['@odata.etag'] = sys.etag;
  else delete out['@odata.etag'];
  if (profile.settingsObject) out['@Redfish.Settings'] = { SettingsObject: link(`${sys.uri}/Settings`) };
  return out;
}

/**
 * A captured resource with every link below `fromUri` (the captured system) moved below `toUri`, or
 * `undefined` when the tree has no resource at `path`.
 */
export function treeResource(tree: ProfileTree, path: string, toUri: string): Json | undefined {
  const body = tree.get(path);
  if (body === undefined) return undefined;
  if (toUri === tree.systemUri) return structuredClone(body);
  const from = tree.systemUri.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const text = JSON.stringify(body).replace(new RegExp(`"${from}(?=["/#])`, 'g'), `"${toUri}`);
  return JSON.parse(text) as Json;
}

/** The pending-settings resource of a system (only Boot is settable): pending values over current ones. */
export function systemSettings(sys: VirtualSystem, profile: ServiceProfile): Json {
  const effective = sys.effectiveBoot();
  const boot: Json = {
    BootSourceOverrideEnabled: effective.enabled,
    BootSourceOverrideTarget: effective.target,
  };
  if (profile.reportBootMode) boot['BootSourceOverrideMode'] = effective.mode;
  if (offersHttpBootUri(profile)) boot['HttpBootUri'] = effective.httpBootUri ?? null;
  return {
    '@odata.type': '#ComputerSystem.v1_22_0.ComputerSystem',
    '@odata.id': `${sys.uri}/Settings`,
    ...(profile.etags && profile.etagInBody ? { '@odata.etag': sys.etag } : {}),
    Id: 'Settings',
    Name: 'Pending settings',
    Boot: boot,
  };
}

export function resetActionInfo(sys: VirtualSystem, profile: ServiceProfile): Json {
  return {
    '@odata.type': '#ActionInfo.v1_4_0.ActionInfo',
    '@odata.id': `${sys.uri}/ResetActionInfo`,
    Id: 'ResetActionInfo',
    Name: 'Reset Action Info',
    Parameters: [
      { Name: 'ResetType', Required: true, DataType: 'String', AllowableValues: profile.resetTypes },
    ],
  };
}

/** Id of the system's single NIC: its MAC without separators, upper case (as in the DMTF mockup). */
export function nicId(sys: VirtualSystem): string {
  return sys.host.identity.macAddress.replace(/:/g, '').toUpperCase();
}

export function ethernetInterface(sys: VirtualSystem): Json {
  const mac = sys.host.identity.macAddress.toUpperCase();
  return {
    '@odata.type': '#EthernetInterface.v1_12_0.EthernetInterface',
    '@odata.id': `${sys.uri}/EthernetInterfaces/${nicId(sys)}`,
    Id: nicId(sys),
    Name: 'Ethernet Interface',
    Status: { State: 'Enabled', Health: 'OK' },
    EthernetInterfaceType: 'Physical',
    LinkStatus: 'LinkUp',
    PermanentMACAddress: mac,
    MACAddress: mac,
    SpeedMbps: 1000,
  };
}

/** The Manager document; `serialConsole`: the SSH console runs (Manager `SerialConsole`: one session, SSH). */
export function manager(serviceUuid: string, systems: VirtualSystem[], serialConsole = false): Json {
  return {
    '@odata.type': '#Manager.v1_19_0.Manager',
    '@odata.id': MANAGER_URI,
    Id: MANAGER_ID,
    Name: 'Manager',
    ManagerType: 'BMC',
    Manufacturer: 'metal-operator',
    Model: 'virtual-bmc',
    FirmwareVersion: '1.0.0',
    ServiceEntryPointUUID: serviceUuid,
    UUID: serviceUuid,
    PowerState: 'On',
    Status: { State: 'Enabled', Health: 'OK' },
    ...(serialConsole
      ? { SerialConsole: { ServiceEnabled: true, MaxConcurrentSessions: 1, ConnectTypesSupported: ['SSH'] } }
      : {}),
    Links: { ManagerForServers: systems.map((s) => link(s.uri)) },
    Actions: {
      '#Manager.Reset': {
        target: `${MANAGER_URI}/Actions/Manager.Reset`,
        'ResetType@Redfish.AllowableValues': ['GracefulRestart', 'ForceRestart'],
      },
    },
  };
}

/** Id of the built-in documents' virtual CD of every system (as in the DMTF public-rackmount1 mockup). */
export const VIRTUAL_CD_ID = 'CD1';

/**
 * A system's virtual CD (VirtualMedia.v1_6_0): the built-in document, or `captured` (a tree's device)
 * with the live `Image`, `Inserted`, `WriteProtected` and `ConnectedVia` of the system. Actions point at
 * `uri`, so POSTs reach the live device.
 */
export function virtualMedia(sys: VirtualSystem, uri: string, captured?: Json): Json {
  const m = sys.media;
  const base: Json = captured
    ? structuredClone(captured)
    : {
        '@odata.type': '#VirtualMedia.v1_6_0.VirtualMedia',
        Id: VIRTUAL_CD_ID,
        Name: 'Virtual CD',
        MediaTypes: ['CD', 'DVD'],
        TransferProtocolType: 'HTTP',
      };
  const actions = { ...((base['Actions'] as Json | undefined) ?? {}) };
  actions['#VirtualMedia.InsertMedia'] = {
    ...((actions['#VirtualMedia.InsertMedia'] as Json | undefined) ?? {}),
    target: `${uri}/Actions/VirtualMedia.InsertMedia`,
  };
  if (!captured || actions['#VirtualMedia.EjectMedia'] !== undefined)
    actions['#VirtualMedia.EjectMedia'] = { target: `${uri}/Actions/VirtualMedia.EjectMedia` };
  return {
    ...base,
    '@odata.id': uri,
    Image: m.image ?? null,
    ImageName: m.image ? (m.image.split('/').pop() ?? null) : null,
    Inserted: m.inserted,
    WriteProtected: m.writeProtected,
    ConnectedVia: m.inserted ? 'URI' : 'NotConnected',
    Actions: actions,
  };
}

export function sessionService(profile: ServiceProfile): Json {
  return {
    '@odata.type': '#SessionService.v1_1_8.SessionService',
    '@odata.id': SESSION_SERVICE_URI,
    Id: 'SessionService',
    Name: 'Session Service',
    ServiceEnabled: true,
    SessionTimeout: profile.sessionTimeoutSeconds,
    Sessions: link(SESSIONS_URI),
  };
}

export function session(id: string, userName: string): Json {
  return {
    '@odata.type': '#Session.v1_7_1.Session',
    '@odata.id': `${SESSIONS_URI}/${id}`,
    Id: id,
    Name: 'User Session',
    UserName: userName,
  };
}

/**
 * Redfish error body (Redfish spec "Error responses") with one message: a Base registry key, or a full
 * MessageId of another registry (e.g. `iLO.2.26.UnableToModifyDuringSystemPOST`).
 */
export function redfishError(messageId: string, message: string): Json {
  const id = messageId.includes('.') ? messageId : `Base.1.18.${messageId}`;
  return {
    error: {
      code: id,
      message,
      '@Message.ExtendedInfo': [
        { '@odata.type': '#Message.v1_1_2.Message', MessageId: id, Message: message, Severity: 'Warning' },
      ],
    },
  };
}
