/**
 * The facts the virtual BMC needs from a vendor's captured Redfish tree, kept as the project's own data
 * (`profiles/*.ts`), and the resource model built from them. A named profile (`--bmc-profile dell`) is
 * served from these facts, so it works in any clone; a folder of a captured tree is still served as
 * captured (`profile-tree.ts`).
 *
 * What the facts hold is what the Redfish client and the virtual BMC read from a tree: the service
 * root's identity (Vendor, Product, UUID, RedfishVersion), the first ComputerSystem's ids, identity
 * strings, power state, Boot override properties and their allowable values, how reset types are
 * advertised (inline, or an ActionInfo resource), its serial console, its links to single
 * sub-resources (Bios, SecureBoot, ...) and to its Manager, each Manager's identity, and the CD-capable
 * virtual media devices with where their collections live. Not kept: inventory detail (processors,
 * memory, storage, chassis, OEM blocks), which nothing here reads.
 *
 * {@link factsFromTree} derives the facts from a captured tree (the data files were written by it, and
 * test/virtualbmc/profile-data.test.ts keeps them equal to the captured trees); {@link treeFromFacts} builds the documents.
 * Both are pure; `treeFromFacts` throws nothing.
 */

import type { ProfileTree } from './profile-tree.js';
import { normalise } from './profile-tree.js';

type Json = Record<string, unknown>;

/** A resource named by the facts: its path, `@odata.type`, `Id` and `Name` as captured. */
export interface ResourceFacts {
  uri: string;
  odataType: string;
  id: string;
  name: string;
}

/** A virtual media device (`VirtualMedia` resource) of a captured collection. */
export interface MediaFacts extends ResourceFacts {
  mediaTypes: string[];
  /** `TransferProtocolType` when captured. */
  transferProtocolType?: string;
  /** The device advertises `#VirtualMedia.EjectMedia` (else clients eject with a PATCH). */
  ejectAction: boolean;
}

export interface ProfileFacts {
  /** The captured tree the facts were read from (folder under the mockups directory). */
  source: string;
  serviceRoot: {
    odataType: string;
    id: string;
    name: string;
    redfishVersion?: string;
    uuid?: string;
    vendor?: string;
    product?: string;
  };
  system: ResourceFacts & {
    manufacturer?: string;
    model?: string;
    serialNumber?: string;
    uuid?: string;
    powerState?: string;
    systemType?: string;
    biosVersion?: string;
    /** `Boot.BootSourceOverride*` (and `HttpBootUri`) as captured, allowable values included. */
    boot: Record<string, unknown>;
    /** Reset types: inline `ResetType@Redfish.AllowableValues`, or an ActionInfo resource's `AllowableValues`. */
    reset:
      | { advertised: 'inline'; allowable: string[] }
      | { advertised: 'action-info'; actionInfo: ResourceFacts; allowable: string[] }
      | { advertised: 'none' };
    /** `SerialConsole` as captured (ComputerSystem.v1_13_0+), when reported. */
    serialConsole?: Record<string, unknown>;
    /** Links to single (non-collection) sub-resources under the system that the tree has, by property. */
    subResources: Record<string, ResourceFacts>;
    /** `VirtualMedia` link of the system, when reported (may point below a Manager). */
    virtualMediaUri?: string;
    /** `Links.ManagedBy` paths. */
    managedBy: string[];
  };
  managers: Array<
    ResourceFacts & {
      managerType?: string;
      manufacturer?: string;
      model?: string;
      firmwareVersion?: string;
      uuid?: string;
      virtualMediaUri?: string;
    }
  >;
  /** Virtual media collections by path, with their CD/DVD-capable members (others are not kept). */
  virtualMedia: Record<string, { odataType: string; name: string; members: MediaFacts[] }>;
}

const SYSTEMS = '/redfish/v1/Systems';
const MANAGERS = '/redfish/v1/Managers';

/** Reads the facts of a captured tree (its first system; every Manager of the collection). */
export function factsFromTree(tree: ProfileTree, source: string): ProfileFacts {
  const root = tree.get('/redfish/v1/') ?? {};
  const sys = tree.get(tree.systemUri) ?? {};
  const links = (sys['Links'] as Json | undefined) ?? {};
  const managedBy = Array.isArray(links['ManagedBy'])
    ? (links['ManagedBy'] as unknown[]).map(linkOf).filter((x): x is string => x !== undefined)
    : [];
  const managers = managerFacts(tree);
  const sysMedia = linkOf(sys['VirtualMedia']);
  return {
    source,
    serviceRoot: {
      odataType: str(root['@odata.type']),
      id: str(root['Id']),
      name: str(root['Name']),
      ...opt('redfishVersion', root['RedfishVersion']),
      ...opt('uuid', root['UUID']),
      ...opt('vendor', root['Vendor']),
      ...opt('product', root['Product']),
    },
    system: {
      ...resource(sys, tree.systemUri),
      ...opt('manufacturer', sys['Manufacturer']),
      ...opt('model', sys['Model']),
      ...opt('serialNumber', sys['SerialNumber']),
      ...opt('uuid', sys['UUID']),
      ...opt('powerState', sys['PowerState']),
      ...opt('systemType', sys['SystemType']),
      ...opt('biosVersion', sys['BiosVersion']),
      boot: bootFacts(sys),
      reset: resetFacts(tree, sys),
      ...(typeof sys['SerialConsole'] === 'object' && sys['SerialConsole'] !== null
        ? { serialConsole: sys['SerialConsole'] as Json }
        : {}),
      subResources: subResourceFacts(tree, sys),
      ...opt('virtualMediaUri', sysMedia),
      managedBy,
    },
    managers,
    virtualMedia: mediaFacts(tree, [sysMedia, ...managers.map((m) => m.virtualMediaUri)]),
  };
}

/** `Boot.BootSourceOverride*` and `HttpBootUri` of a captured system. */
function bootFacts(sys: Json): Json {
  const boot = (sys['Boot'] as Json | undefined) ?? {};
  const out: Json = {};
  for (const [k, v] of Object.entries(boot))
    if (k.startsWith('BootSourceOverride') || k === 'HttpBootUri') out[k] = v;
  return out;
}

/** How a captured system advertises its reset types: inline, through an ActionInfo the tree has, or not. */
function resetFacts(tree: ProfileTree, sys: Json): ProfileFacts['system']['reset'] {
  const action = ((sys['Actions'] as Json | undefined)?.['#ComputerSystem.Reset'] as Json | undefined) ?? {};
  const inline = action['ResetType@Redfish.AllowableValues'];
  const infoUri = action['@Redfish.ActionInfo'];
  const info = typeof infoUri === 'string' ? tree.get(infoUri) : undefined;
  if (typeof infoUri === 'string' && info !== undefined) {
    const params = Array.isArray(info['Parameters']) ? (info['Parameters'] as Json[]) : [];
    const p = params.find((x) => x?.['Name'] === 'ResetType');
    return {
      advertised: 'action-info',
      actionInfo: resource(info, infoUri),
      allowable: strings(p?.['AllowableValues']),
    };
  }
  return Array.isArray(inline)
    ? { advertised: 'inline', allowable: strings(inline) }
    : { advertised: 'none' };
}

/** The system's links to single resources below it that the tree has (EthernetInterfaces are live). */
function subResourceFacts(tree: ProfileTree, sys: Json): Record<string, ResourceFacts> {
  const out: Record<string, ResourceFacts> = {};
  for (const [k, v] of Object.entries(sys)) {
    const uri = linkOf(v);
    if (uri === undefined || !uri.startsWith(`${tree.systemUri}/`) || k === 'EthernetInterfaces') continue;
    const body = tree.get(uri);
    if (body !== undefined && !Array.isArray(body['Members'])) out[k] = resource(body, uri);
  }
  return out;
}

function managerFacts(tree: ProfileTree): ProfileFacts['managers'] {
  return members(tree.get(MANAGERS)).flatMap((uri) => {
    const m = tree.get(uri);
    if (m === undefined) return [];
    return [
      {
        ...resource(m, uri),
        ...opt('managerType', m['ManagerType']),
        ...opt('manufacturer', m['Manufacturer']),
        ...opt('model', m['Model']),
        ...opt('firmwareVersion', m['FirmwareVersion']),
        ...opt('uuid', m['UUID']),
        ...opt('virtualMediaUri', linkOf(m['VirtualMedia'])),
      },
    ];
  });
}

/** The virtual media collections at `uris` (each once) with their CD/DVD-capable devices. */
function mediaFacts(tree: ProfileTree, uris: Array<string | undefined>): ProfileFacts['virtualMedia'] {
  const out: ProfileFacts['virtualMedia'] = {};
  for (const uri of uris) {
    if (uri === undefined || out[uri] !== undefined) continue;
    const coll = tree.get(uri);
    if (coll === undefined) continue;
    const devices: MediaFacts[] = members(coll).flatMap((d) => {
      const body = tree.get(d);
      const types = strings(body?.['MediaTypes']);
      if (body === undefined || !types.some((t) => t === 'CD' || t === 'DVD')) return [];
      const actions = (body['Actions'] as Json | undefined) ?? {};
      return [
        {
          ...resource(body, d),
          mediaTypes: types,
          ...opt('transferProtocolType', body['TransferProtocolType']),
          ejectAction: actions['#VirtualMedia.EjectMedia'] !== undefined,
        },
      ];
    });
    out[uri] = { odataType: str(coll['@odata.type']), name: str(coll['Name']), members: devices };
  }
  return out;
}

type Put = (uri: string, body: Json) => void;

/**
 * The resource model of a named profile: service root, Systems and Managers collections, the system,
 * its ActionInfo and single sub-resources, each Manager, and the virtual media collections and devices.
 * `dir` is a label (`profile:<name>`), not a folder.
 */
export function treeFromFacts(f: ProfileFacts, dir: string): ProfileTree {
  const docs = new Map<string, Json>();
  const put: Put = (uri, body) => docs.set(normalise(uri), { '@odata.id': uri, ...body });
  put('/redfish/v1/', {
    '@odata.type': f.serviceRoot.odataType,
    Id: f.serviceRoot.id,
    Name: f.serviceRoot.name,
    ...opt('RedfishVersion', f.serviceRoot.redfishVersion),
    ...opt('UUID', f.serviceRoot.uuid),
    ...opt('Vendor', f.serviceRoot.vendor),
    ...opt('Product', f.serviceRoot.product),
    Systems: { '@odata.id': SYSTEMS },
    ...(f.managers.length > 0 ? { Managers: { '@odata.id': MANAGERS } } : {}),
    SessionService: { '@odata.id': '/redfish/v1/SessionService' },
    AccountService: { '@odata.id': '/redfish/v1/AccountService' },
  });
  putSystem(f.system, put);
  putManagers(f, put);
  putMedia(f.virtualMedia, put);
  const folded = new Map<string, Json>();
  for (const [p, body] of docs) if (!folded.has(p.toLowerCase())) folded.set(p.toLowerCase(), body);
  return {
    dir,
    get: (path) => {
      const p = normalise(path);
      return docs.get(p) ?? folded.get(p.toLowerCase());
    },
    paths: () => [...docs.keys()].sort(),
    systemUri: normalise(f.system.uri),
    managerUri: f.managers[0] ? normalise(f.managers[0].uri) : undefined,
  };
}

/** `@odata.type`, `Id` and `Name` of a named resource, with `extra`. */
function doc(r: ResourceFacts, extra: Json = {}): Json {
  return { '@odata.type': r.odataType, Id: r.id, Name: r.name, ...extra };
}

/** The Systems collection, the system, its ActionInfo and its single sub-resources. */
function putSystem(s: ProfileFacts['system'], put: Put): void {
  put(
    SYSTEMS,
    collection('#ComputerSystemCollection.ComputerSystemCollection', 'Computer System Collection', [s.uri]),
  );
  const resetAction: Json = { target: `${s.uri}/Actions/ComputerSystem.Reset` };
  if (s.reset.advertised === 'inline') resetAction['ResetType@Redfish.AllowableValues'] = s.reset.allowable;
  if (s.reset.advertised === 'action-info') {
    resetAction['@Redfish.ActionInfo'] = s.reset.actionInfo.uri;
    put(
      s.reset.actionInfo.uri,
      doc(s.reset.actionInfo, {
        Parameters: [
          { Name: 'ResetType', Required: true, DataType: 'String', AllowableValues: s.reset.allowable },
        ],
      }),
    );
  }
  const subLinks: Json = {};
  for (const [prop, r] of Object.entries(s.subResources)) {
    subLinks[prop] = { '@odata.id': r.uri };
    put(r.uri, doc(r));
  }
  put(
    s.uri,
    doc(s, {
      ...opt('Manufacturer', s.manufacturer),
      ...opt('Model', s.model),
      ...opt('SerialNumber', s.serialNumber),
      ...opt('UUID', s.uuid),
      ...opt('PowerState', s.powerState),
      ...opt('SystemType', s.systemType),
      ...opt('BiosVersion', s.biosVersion),
      Boot: { ...s.boot },
      Actions: { '#ComputerSystem.Reset': resetAction },
      ...(s.serialConsole ? { SerialConsole: structuredClone(s.serialConsole) } : {}),
      ...subLinks,
      EthernetInterfaces: { '@odata.id': `${s.uri}/EthernetInterfaces` },
      ...(s.virtualMediaUri ? { VirtualMedia: { '@odata.id': s.virtualMediaUri } } : {}),
      Links: { ManagedBy: s.managedBy.map((m) => ({ '@odata.id': m })) },
    }),
  );
}

/** The Managers collection and each Manager (when the tree had any). */
function putManagers(f: ProfileFacts, put: Put): void {
  if (f.managers.length === 0) return;
  put(
    MANAGERS,
    collection(
      '#ManagerCollection.ManagerCollection',
      'Manager Collection',
      f.managers.map((m) => m.uri),
    ),
  );
  for (const m of f.managers) {
    put(
      m.uri,
      doc(m, {
        ...opt('ManagerType', m.managerType),
        ...opt('Manufacturer', m.manufacturer),
        ...opt('Model', m.model),
        ...opt('FirmwareVersion', m.firmwareVersion),
        ...opt('UUID', m.uuid),
        ...(m.virtualMediaUri ? { VirtualMedia: { '@odata.id': m.virtualMediaUri } } : {}),
        Links: { ManagerForServers: [{ '@odata.id': f.system.uri }] },
      }),
    );
  }
}

/** Virtual media collections and their devices, empty; the virtual BMC layers the live state on. */
function putMedia(media: ProfileFacts['virtualMedia'], put: Put): void {
  for (const [uri, c] of Object.entries(media)) {
    put(
      uri,
      collection(
        c.odataType,
        c.name,
        c.members.map((m) => m.uri),
      ),
    );
    for (const m of c.members) {
      const actions: Json = {
        '#VirtualMedia.InsertMedia': { target: `${m.uri}/Actions/VirtualMedia.InsertMedia` },
      };
      if (m.ejectAction)
        actions['#VirtualMedia.EjectMedia'] = { target: `${m.uri}/Actions/VirtualMedia.EjectMedia` };
      put(
        m.uri,
        doc(m, {
          MediaTypes: [...m.mediaTypes],
          ...opt('TransferProtocolType', m.transferProtocolType),
          Image: null,
          Inserted: false,
          WriteProtected: true,
          ConnectedVia: 'NotConnected',
          Actions: actions,
        }),
      );
    }
  }
}

function collection(odataType: string, name: string, uris: string[]): Json {
  return {
    '@odata.type': odataType,
    Name: name,
    Members: uris.map((u) => ({ '@odata.id': u })),
    'Members@odata.count': uris.length,
  };
}

function resource(body: Json, uri: string): ResourceFacts {
  return {
    uri: normalise(uri),
    odataType: str(body['@odata.type']),
    id: str(body['Id']),
    name: str(body['Name']),
  };
}

function members(coll: Json | undefined): string[] {
  const m = coll?.['Members'];
  return Array.isArray(m) ? m.map(linkOf).filter((x): x is string => x !== undefined) : [];
}

function linkOf(v: unknown): string | undefined {
  const id = typeof v === 'object' && v !== null ? (v as Json)['@odata.id'] : undefined;
  return typeof id === 'string' ? normalise(id) : undefined;
}

function strings(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
}

function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

/** `{ [key]: v }` when `v` is a string, else nothing (absent facts stay absent). */
function opt(key: string, v: unknown): Record<string, string> {
  return typeof v === 'string' ? { [key]: v } : {};
}
