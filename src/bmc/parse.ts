/**
 * Typed parsing of Redfish JSON. Every function takes the parsed body and the resource URI it came
 * from, and throws {@link RedfishParseError} naming that resource and the offending field, so a bad
 * BMC answer ends up as a readable condition on the Server instead of a `TypeError` in a reconcile.
 *
 * Unknown extra properties are ignored (Redfish services add OEM data freely); entries of
 * `@Redfish.AllowableValues` lists that this code does not know are dropped, because only membership
 * of values we send matters.
 */

import { canonicalSystemUUID } from '../api/system-uuid.js';
import {
  BOOT_SOURCE_OVERRIDE_TARGETS,
  type BootSettings,
  type BootSourceOverrideTarget,
  type ComputerSystemInfo,
  type EthernetInterfaceInfo,
  type ManagerInfo,
  POWER_STATES,
  type PowerState,
  RESET_TYPES,
  type ResetType,
  type ResourceRef,
} from './bmc.js';
import { BmcError, type RedfishErrorInfo } from './errors.js';

/** A Redfish resource lacks a required property or carries one of the wrong type or value. */
export class RedfishParseError extends BmcError {
  override name = 'RedfishParseError';
  constructor(
    /** URI of the resource, e.g. `/redfish/v1/Systems/1`. */
    readonly resource: string,
    /** Dotted property path, e.g. `UUID` or `Boot.BootSourceOverrideTarget`. */
    readonly field: string,
    readonly problem: 'missing' | 'invalid',
    readonly value?: unknown,
  ) {
    super(
      problem === 'missing'
        ? `Redfish resource ${resource}: required property ${field} is missing`
        : `Redfish resource ${resource}: property ${field} has an invalid value ${preview(value)}`,
    );
  }
}

/**
 * A request would go to another origin than the BMC's: a link from a Redfish body or header
 * (`@odata.id`, action `target`, `@Redfish.ActionInfo`, `Location`) that is not a path on the same
 * service. Nothing is sent; the credentials stay with their origin.
 */
export class ForeignLinkError extends RedfishParseError {
  override name = 'ForeignLinkError';
  constructor(
    readonly method: string,
    path: string,
  ) {
    super(path.slice(0, 200), '(link)', 'invalid', `${method} to a link outside the BMC`);
  }
}

type Json = Record<string, unknown>;

/** The ComputerSystem.Reset action as advertised by a system (Redfish `ComputerSystem.Actions`). */
export interface ResetActionInfo {
  /** `target` URI to POST `{"ResetType": …}` to. */
  target: string;
  /** Inline `ResetType@Redfish.AllowableValues`; `undefined` when not advertised inline. */
  allowed: ResetType[] | undefined;
  /** `@Redfish.ActionInfo` URI listing the allowable values instead (used by some vendors). */
  actionInfoUri: string | undefined;
}

/** The parts of a ComputerSystem the Redfish BMC implementation needs beyond {@link ComputerSystemInfo}. */
export interface ComputerSystemResource {
  info: ComputerSystemInfo;
  reset: ResetActionInfo | undefined;
  /** `@Redfish.Settings.SettingsObject` URI: PATCHes go there when present (Redfish spec §9.8 "Settings"). */
  settingsUri: string | undefined;
  /** `@odata.etag` from the body (the `ETag` header takes precedence when both exist). */
  odataEtag: string | undefined;
}

/** Service root `/redfish/v1/` (ServiceRoot schema). */
export interface ServiceRootInfo {
  redfishVersion: string | undefined;
  uuid: string | undefined;
  /** `Vendor` (ServiceRoot v1_5+), e.g. `Dell`, `HPE`, `Lenovo`, `Supermicro`. */
  vendor: string | undefined;
  product: string | undefined;
  systemsUri: string | undefined;
  managersUri: string | undefined;
  /** `Links.Sessions`, where sessions are created. */
  sessionsUri: string | undefined;
}

/** A Session resource (Session schema). */
export interface SessionInfo {
  id: string;
  userName: string | undefined;
  uri: string;
}

export function asObject(body: unknown, resource: string, field = '(body)'): Json {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new RedfishParseError(resource, field, body === undefined ? 'missing' : 'invalid', body);
  }
  return body as Json;
}

/** Parses a resource collection (`Members[].@odata.id`). */
export function parseCollection(body: unknown, resource: string): ResourceRef[] {
  const obj = asObject(body, resource);
  const members = obj['Members'];
  if (members === undefined) throw new RedfishParseError(resource, 'Members', 'missing');
  if (!Array.isArray(members)) throw new RedfishParseError(resource, 'Members', 'invalid', members);
  return members.map((m, i) => {
    const uri = odataId(m, resource, `Members[${i}]`, true);
    return { id: lastSegment(uri), uri };
  });
}

/**
 * Parses a ComputerSystem. Throws for a missing/malformed `UUID`; a `PowerState` or `Boot` value
 * outside the DMTF enums is reported as is (vendors add their own), never an error.
 */
export function parseComputerSystem(body: unknown, resource: string): ComputerSystemResource {
  const obj = asObject(body, resource);
  const uri = optString(obj, '@odata.id', resource) ?? resource;
  const info: ComputerSystemInfo = {
    id: optString(obj, 'Id', resource) ?? lastSegment(uri),
    uri,
    uuid: parseSystemUUID(obj, resource),
    serialNumber: optString(obj, 'SerialNumber', resource),
    manufacturer: optString(obj, 'Manufacturer', resource),
    model: optString(obj, 'Model', resource),
    powerState: reportedString(obj['PowerState']),
    boot: parseBoot(obj['Boot'], resource),
    memoryGiB: optNumber(
      optObject(obj, 'MemorySummary', resource),
      'TotalSystemMemoryGiB',
      resource,
      'MemorySummary.',
    ),
    processorCount: optNumber(
      optObject(obj, 'ProcessorSummary', resource),
      'Count',
      resource,
      'ProcessorSummary.',
    ),
  };
  return {
    info,
    reset: parseResetAction(obj, resource),
    settingsUri: parseSettingsUri(obj, resource),
    odataEtag: optString(obj, '@odata.etag', resource),
  };
}

/** `UUID` of a ComputerSystem in canonical form; {@link RedfishParseError} when absent or not a UUID. */
export function parseSystemUUID(body: unknown, resource: string): string {
  const obj = asObject(body, resource);
  const raw = obj['UUID'];
  if (raw === undefined || raw === null || raw === '')
    throw new RedfishParseError(resource, 'UUID', 'missing');
  const uuid = canonicalSystemUUID(raw);
  if (uuid === undefined) throw new RedfishParseError(resource, 'UUID', 'invalid', raw);
  return uuid;
}

/**
 * `PowerState` of a ComputerSystem or Manager, for power control: a value outside `Resource.PowerState`
 * is a {@link RedfishParseError}, because no power decision can be made on it.
 */
export function parsePowerState(body: unknown, resource: string): PowerState {
  const obj = asObject(body, resource);
  const raw = obj['PowerState'];
  if (raw === undefined || raw === null) throw new RedfishParseError(resource, 'PowerState', 'missing');
  if (!isOneOf(raw, POWER_STATES)) throw new RedfishParseError(resource, 'PowerState', 'invalid', raw);
  return raw;
}

/**
 * The `Boot` object; an absent object yields all-`undefined` settings. Current values are taken as
 * reported (vendor values included); a non-string value counts as not reported.
 */
export function parseBoot(raw: unknown, resource: string): BootSettings {
  if (raw === undefined || raw === null) {
    return { target: undefined, enabled: undefined, mode: undefined, allowedTargets: undefined };
  }
  const boot = asObject(raw, resource, 'Boot');
  return {
    target: reportedString(boot['BootSourceOverrideTarget']),
    enabled: reportedString(boot['BootSourceOverrideEnabled']),
    mode: reportedString(boot['BootSourceOverrideMode']),
    allowedTargets: allowableValues<BootSourceOverrideTarget>(
      boot,
      'BootSourceOverrideTarget@Redfish.AllowableValues',
      BOOT_SOURCE_OVERRIDE_TARGETS,
      resource,
      'Boot.',
    ),
    ...('HttpBootUri' in boot
      ? { httpBootUri: typeof boot['HttpBootUri'] === 'string' ? boot['HttpBootUri'] : null }
      : {}),
  };
}

/** `Actions.#ComputerSystem.Reset`; `undefined` when the system advertises no reset action. */
export function parseResetAction(body: unknown, resource: string): ResetActionInfo | undefined {
  const obj = asObject(body, resource);
  const actions = optObject(obj, 'Actions', resource);
  if (actions === undefined) return undefined;
  const raw = actions['#ComputerSystem.Reset'];
  if (raw === undefined) return undefined;
  const field = 'Actions.#ComputerSystem.Reset';
  const action = asObject(raw, resource, field);
  const target = action['target'];
  if (target === undefined) throw new RedfishParseError(resource, `${field}.target`, 'missing');
  if (!isServicePath(target)) throw new RedfishParseError(resource, `${field}.target`, 'invalid', target);
  const actionInfo = action['@Redfish.ActionInfo'];
  if (actionInfo !== undefined && actionInfo !== null && !isServicePath(actionInfo)) {
    throw new RedfishParseError(resource, `${field}.@Redfish.ActionInfo`, 'invalid', actionInfo);
  }
  return {
    target,
    allowed: allowableValues(action, 'ResetType@Redfish.AllowableValues', RESET_TYPES, resource, `${field}.`),
    actionInfoUri: actionInfo ?? undefined,
  };
}

/** ActionInfo resource: `Parameters[Name=ResetType].AllowableValues` (ActionInfo schema). */
export function parseResetActionInfo(body: unknown, resource: string): ResetType[] {
  const obj = asObject(body, resource);
  const params = obj['Parameters'];
  if (!Array.isArray(params))
    throw new RedfishParseError(resource, 'Parameters', params ? 'invalid' : 'missing');
  const param = params.find(
    (p) => typeof p === 'object' && p !== null && (p as Json)['Name'] === 'ResetType',
  );
  if (param === undefined) throw new RedfishParseError(resource, 'Parameters[ResetType]', 'missing');
  const allowed = allowableValues(
    param as Json,
    'AllowableValues',
    RESET_TYPES,
    resource,
    'Parameters[ResetType].',
  );
  if (allowed === undefined)
    throw new RedfishParseError(resource, 'Parameters[ResetType].AllowableValues', 'missing');
  return allowed;
}

/** `@Redfish.Settings.SettingsObject.@odata.id`, when the resource defers changes to a settings object. */
export function parseSettingsUri(body: unknown, resource: string): string | undefined {
  const obj = asObject(body, resource);
  const settings = optObject(obj, '@Redfish.Settings', resource);
  if (settings === undefined) return undefined;
  const so = settings['SettingsObject'];
  if (so === undefined) return undefined;
  return odataId(so, resource, '@Redfish.Settings.SettingsObject', true);
}

/** Parses a Manager. A present but malformed `UUID` is an error; a missing one is `undefined`. */
export function parseManager(body: unknown, resource: string): ManagerInfo {
  const obj = asObject(body, resource);
  const uri = optString(obj, '@odata.id', resource) ?? resource;
  const rawUuid = obj['UUID'];
  let uuid: string | undefined;
  if (rawUuid !== undefined && rawUuid !== null && rawUuid !== '') {
    uuid = canonicalSystemUUID(rawUuid);
    if (uuid === undefined) throw new RedfishParseError(resource, 'UUID', 'invalid', rawUuid);
  }
  return {
    id: optString(obj, 'Id', resource) ?? lastSegment(uri),
    uri,
    uuid,
    managerType: optString(obj, 'ManagerType', resource),
    manufacturer: optString(obj, 'Manufacturer', resource),
    model: optString(obj, 'Model', resource),
    firmwareVersion: optString(obj, 'FirmwareVersion', resource),
  };
}

/** Parses the service root. */
export function parseServiceRoot(body: unknown, resource: string): ServiceRootInfo {
  const obj = asObject(body, resource);
  const links = optObject(obj, 'Links', resource);
  const rawUuid = optString(obj, 'UUID', resource);
  return {
    redfishVersion: optString(obj, 'RedfishVersion', resource),
    uuid: rawUuid === undefined ? undefined : canonicalSystemUUID(rawUuid),
    vendor: optString(obj, 'Vendor', resource),
    product: optString(obj, 'Product', resource),
    systemsUri: obj['Systems'] === undefined ? undefined : odataId(obj['Systems'], resource, 'Systems', true),
    managersUri:
      obj['Managers'] === undefined ? undefined : odataId(obj['Managers'], resource, 'Managers', true),
    sessionsUri:
      links?.['Sessions'] === undefined
        ? undefined
        : odataId(links['Sessions'], resource, 'Links.Sessions', true),
  };
}

/** Parses a Session resource (as returned by GET or by the POST that created it). */
export function parseSession(body: unknown, resource: string): SessionInfo {
  const obj = asObject(body, resource);
  const id = optString(obj, 'Id', resource);
  if (id === undefined) throw new RedfishParseError(resource, 'Id', 'missing');
  const uri = obj['@odata.id'];
  if (uri !== undefined && uri !== null && !isServicePath(uri)) {
    throw new RedfishParseError(resource, '@odata.id', 'invalid', uri);
  }
  return { id, userName: optString(obj, 'UserName', resource), uri: uri ?? resource };
}

/** Extracts the Redfish error object (Redfish spec "Error responses"); tolerant of non-Redfish bodies. */
export function parseRedfishError(body: unknown): RedfishErrorInfo {
  const info: RedfishErrorInfo = { code: undefined, message: undefined, messageIds: [] };
  if (typeof body !== 'object' || body === null) return info;
  const error = (body as Json)['error'];
  if (typeof error !== 'object' || error === null) return info;
  const e = error as Json;
  if (typeof e['code'] === 'string') info.code = e['code'];
  if (typeof e['message'] === 'string') info.message = e['message'];
  const ext = e['@Message.ExtendedInfo'];
  if (Array.isArray(ext)) {
    for (const m of ext) {
      // HPE iLO 4 spells it `MessageID`.
      const id =
        typeof m === 'object' && m !== null
          ? ((m as Json)['MessageId'] ?? (m as Json)['MessageID'])
          : undefined;
      if (typeof id === 'string') info.messageIds.push(id);
    }
  }
  return info;
}

/**
 * `EthernetInterfaces.@odata.id` of a ComputerSystem (ComputerSystem.v1_22_0), `undefined` when the
 * system has no such link. A link to another origin is {@link RedfishParseError}.
 */
export function parseEthernetInterfacesUri(body: unknown, resource: string): string | undefined {
  const link = asObject(body, resource)['EthernetInterfaces'];
  if (link === undefined || link === null) return undefined;
  return odataId(link, resource, 'EthernetInterfaces', false);
}

/**
 * One EthernetInterface (EthernetInterface.v1_12_0): `MACAddress`, falling back to
 * `PermanentMACAddress` (some services fill only one); `undefined` when neither is a MAC (a member
 * without address, e.g. a disabled port, says nothing about the machine). Not a `Json` object: throws.
 */
export function parseEthernetInterface(body: unknown, resource: string): EthernetInterfaceInfo | undefined {
  const obj = asObject(body, resource);
  const macAddress = canonicalMac(obj['MACAddress']) ?? canonicalMac(obj['PermanentMACAddress']);
  if (!macAddress || macAddress === '00:00:00:00:00:00') return undefined;
  const enabled = obj['InterfaceEnabled'];
  return {
    id: reportedString(obj['Id']) ?? lastSegment(resource),
    macAddress,
    linkStatus: reportedString(obj['LinkStatus']),
    enabled: typeof enabled === 'boolean' ? enabled : undefined,
  };
}

/** Canonical MAC (`aa:bb:cc:dd:ee:ff`) or `undefined`. */
export function canonicalMac(raw: unknown): string | undefined {
  if (typeof raw !== 'string') return undefined;
  const hex = raw.toLowerCase().replace(/[-:.]/g, '');
  if (!/^[0-9a-f]{12}$/.test(hex)) return undefined;
  return hex.match(/../g)!.join(':');
}

function odataId(raw: unknown, resource: string, field: string, required: boolean): string {
  const obj = typeof raw === 'object' && raw !== null ? (raw as Json) : undefined;
  const id = obj?.['@odata.id'];
  if (isServicePath(id)) return id;
  throw new RedfishParseError(
    resource,
    `${field}.@odata.id`,
    id === undefined && required ? 'missing' : 'invalid',
    id,
  );
}

/** Origin used only to test where a link resolves; `.invalid` is reserved (RFC 2606 §2). */
const PROBE_ORIGIN = 'http://service.invalid';

/**
 * Whether `v` is a link to a resource of the same service: an absolute path (`/redfish/v1/...`), as
 * Redfish (DSP0266) uses for `@odata.id`, action `target`s and `@Redfish.ActionInfo`. Network-path references (`//host/x`),
 * backslashes (`/\host/x`, which WHATWG URL parsing turns into `//host/x`) and control characters
 * (tabs and newlines are dropped by URL parsing, so `/\t/host` would become `//host`) are refused:
 * following such a link would send the BMC's credentials to another origin.
 */
export function isServicePath(v: unknown): v is string {
  if (typeof v !== 'string' || !v.startsWith('/') || v.startsWith('//')) return false;
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
  if (v.includes('\\') || /[\u0000-\u001f\u007f]/.test(v)) return false;
  try {
    return new URL(v, PROBE_ORIGIN).origin === PROBE_ORIGIN;
  } catch {
    return false;
  }
}

function optString(obj: Json, key: string, resource: string, prefix = ''): string | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw new RedfishParseError(resource, prefix + key, 'invalid', v);
  return v;
}

function optNumber(obj: Json | undefined, key: string, resource: string, prefix = ''): number | undefined {
  const v = obj?.[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v))
    throw new RedfishParseError(resource, prefix + key, 'invalid', v);
  return v;
}

function optObject(obj: Json, key: string, resource: string): Json | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  return asObject(v, resource, key);
}

/** A reported enum-like value: any non-empty string, else `undefined`. */
function reportedString(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

function allowableValues<T extends string>(
  obj: Json,
  key: string,
  values: readonly T[],
  resource: string,
  prefix: string,
): T[] | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw new RedfishParseError(resource, prefix + key, 'invalid', v);
  return v.filter((x): x is T => isOneOf(x, values));
}

function isOneOf<T extends string>(v: unknown, values: readonly T[]): v is T {
  return typeof v === 'string' && (values as readonly string[]).includes(v);
}

function lastSegment(uri: string): string {
  const parts = uri.split('/').filter((p) => p !== '');
  return parts[parts.length - 1] ?? uri;
}

function preview(value: unknown): string {
  const s = JSON.stringify(value) ?? String(value);
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}
