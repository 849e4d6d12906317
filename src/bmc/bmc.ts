/**
 * The BMC seam: what the controllers may ask of a baseboard management controller.
 *
 * Every method is one bounded exchange with the BMC (a few HTTP requests within a time budget). None
 * waits for a power transition to finish: a caller (a reconcile) starts an action, requeues, and reads
 * {@link BMC.powerState} on its next pass. Protocol facts quoted here come from the DMTF Redfish
 * schemas `ComputerSystem.v1_22_0`, `Resource.v1_19_0` (PowerState, ResetType) and `Manager.v1_19_0`.
 */

/** `Resource.PowerState` (Redfish). `PoweringOn`/`PoweringOff` are transitional. */
export type PowerState = 'On' | 'Off' | 'PoweringOn' | 'PoweringOff' | 'Paused';

export const POWER_STATES: readonly PowerState[] = ['On', 'Off', 'PoweringOn', 'PoweringOff', 'Paused'];

/** True while the BMC reports a power transition in progress. */
export function isTransitionalPowerState(state: PowerState): boolean {
  return state === 'PoweringOn' || state === 'PoweringOff';
}

/** `Resource.ResetType` (Redfish), the parameter of `ComputerSystem.Reset`. */
export type ResetType =
  | 'On'
  | 'ForceOff'
  | 'GracefulShutdown'
  | 'GracefulRestart'
  | 'ForceRestart'
  | 'Nmi'
  | 'ForceOn'
  | 'PushPowerButton'
  | 'PowerCycle'
  | 'Suspend'
  | 'Pause'
  | 'Resume'
  | 'FullPowerCycle';

export const RESET_TYPES: readonly ResetType[] = [
  'On',
  'ForceOff',
  'GracefulShutdown',
  'GracefulRestart',
  'ForceRestart',
  'Nmi',
  'ForceOn',
  'PushPowerButton',
  'PowerCycle',
  'Suspend',
  'Pause',
  'Resume',
  'FullPowerCycle',
];

/** `ComputerSystem.BootSource` (Redfish), values of `Boot.BootSourceOverrideTarget`. */
export type BootSourceOverrideTarget =
  | 'None'
  | 'Pxe'
  | 'Floppy'
  | 'Cd'
  | 'Usb'
  | 'Hdd'
  | 'BiosSetup'
  | 'Utilities'
  | 'Diags'
  | 'UefiShell'
  | 'UefiTarget'
  | 'SDCard'
  | 'UefiHttp'
  | 'RemoteDrive'
  | 'UefiBootNext'
  | 'Recovery';

export const BOOT_SOURCE_OVERRIDE_TARGETS: readonly BootSourceOverrideTarget[] = [
  'None',
  'Pxe',
  'Floppy',
  'Cd',
  'Usb',
  'Hdd',
  'BiosSetup',
  'Utilities',
  'Diags',
  'UefiShell',
  'UefiTarget',
  'SDCard',
  'UefiHttp',
  'RemoteDrive',
  'UefiBootNext',
  'Recovery',
];

/**
 * `ComputerSystem.BootSourceOverrideEnabled` (Redfish). `Once` is reset to `Disabled` by the service
 * after the next boot used the override; `Continuous` applies to every boot until changed.
 */
export type BootSourceOverrideEnabled = 'Disabled' | 'Once' | 'Continuous';

export const BOOT_SOURCE_OVERRIDE_ENABLED: readonly BootSourceOverrideEnabled[] = [
  'Disabled',
  'Once',
  'Continuous',
];

/** `ComputerSystem.BootSourceOverrideMode` (Redfish). */
export type BootSourceOverrideMode = 'Legacy' | 'UEFI';

export const BOOT_SOURCE_OVERRIDE_MODES: readonly BootSourceOverrideMode[] = ['Legacy', 'UEFI'];

/** A member of a Redfish collection. */
export interface ResourceRef {
  /** Last path segment of the URI, e.g. `437XR1138R2`. */
  id: string;
  /** Absolute Redfish URI (`@odata.id`), e.g. `/redfish/v1/Systems/437XR1138R2`. */
  uri: string;
}

/**
 * A current value as the service reports it: one of the DMTF enum values, or a vendor's own (Supermicro
 * lists `UsbCd`, other firmware reports `UsbKey`, `Reset`, ...). Values we *send* stay typed to the
 * DMTF enums; values we *read* must not make a call fail (issue 16, "tolerant reading").
 */
export type Reported<T extends string> = T | (string & {});

/** The `Boot` object of a ComputerSystem; a property the service does not report is `undefined`. */
export interface BootSettings {
  target: Reported<BootSourceOverrideTarget> | undefined;
  enabled: Reported<BootSourceOverrideEnabled> | undefined;
  /** `undefined` on older services that do not expose the property (and reject PATCHes that set it). */
  mode: Reported<BootSourceOverrideMode> | undefined;
  /**
   * `BootSourceOverrideTarget@Redfish.AllowableValues`, restricted to DMTF values (only those are ever
   * sent); `undefined` when not advertised.
   */
  allowedTargets: BootSourceOverrideTarget[] | undefined;
  /** `Boot.HttpBootUri`; `null` when the service has the property without a value, `undefined` when it lacks it. */
  httpBootUri?: string | null;
}

/** What {@link BMC.getSystem} reads from a ComputerSystem resource. */
export interface ComputerSystemInfo {
  id: string;
  uri: string;
  /** SMBIOS UUID, canonical lower-case 8-4-4-4-12. */
  uuid: string;
  serialNumber: string | undefined;
  manufacturer: string | undefined;
  model: string | undefined;
  /** `PowerState` as reported (possibly a vendor value); `undefined` when absent or not a string. */
  powerState: Reported<PowerState> | undefined;
  boot: BootSettings;
  /** `MemorySummary.TotalSystemMemoryGiB` (GiB). */
  memoryGiB: number | undefined;
  /** `ProcessorSummary.Count` (sockets). */
  processorCount: number | undefined;
}

/**
 * One member of a ComputerSystem's `EthernetInterfaces` collection (Redfish
 * `EthernetInterface.v1_12_0`): a NIC of the host as the BMC reports it, independently of anything the
 * host itself says (issue 28: the machine's identity on the boot network).
 */
export interface EthernetInterfaceInfo {
  /** Redfish `Id` (vendor-specific: `NIC.Slot.5-1` on iDRAC, `1` on iLO, the MAC on the DMTF mockup). */
  id: string;
  /** `MACAddress` (else `PermanentMACAddress`), canonical lower-case `aa:bb:cc:dd:ee:ff`. */
  macAddress: string;
  /** `LinkStatus` as reported (`LinkUp`, `LinkDown`, `NoLink`); `undefined` when absent (iLO, iDRAC). */
  linkStatus: string | undefined;
  /** `InterfaceEnabled`; `undefined` when absent. */
  enabled: boolean | undefined;
}

/** Most NIC members read per system: a bound on the requests of one discovery read. */
export const MAX_ETHERNET_INTERFACES = 32;

/** What {@link BMC.getManager} reads from a Manager resource. */
export interface ManagerInfo {
  id: string;
  uri: string;
  /** Canonical lower-case UUID, `undefined` when the manager does not report one. */
  uuid: string | undefined;
  managerType: string | undefined;
  manufacturer: string | undefined;
  model: string | undefined;
  firmwareVersion: string | undefined;
}

/** Desired boot override; `mode` is left as it is when omitted. */
export interface BootOverride {
  target: BootSourceOverrideTarget;
  enabled: BootSourceOverrideEnabled;
  mode?: BootSourceOverrideMode;
  /** With target `UefiHttp`: `Boot.HttpBootUri` (ComputerSystem v1_9_0+), the URI the firmware fetches. */
  httpBootUri?: string;
}

/** Outcome of a power action. The action is started, never awaited: check {@link BMC.powerState} later. */
export interface PowerActionResult {
  /** The power state read just before deciding. */
  observed: PowerState;
  /** The ResetType posted, or `undefined` when nothing was sent. */
  sent: ResetType | undefined;
  /**
   * Why nothing was sent: the system is already in (`already`) or moving to (`in-progress`) the wanted
   * state. `undefined` when an action was sent.
   */
  skipped: 'already' | 'in-progress' | undefined;
}

/** Outcome of {@link BMC.setBootOverride}. */
export interface BootOverrideResult {
  /** False when the system already had the wanted override and no PATCH was sent. */
  changed: boolean;
  /** URI that received the PATCH (the resource itself or its `@Redfish.Settings` SettingsObject). */
  patchedUri: string | undefined;
  /** The `Boot` properties sent. */
  sentFields: Partial<
    Record<
      'BootSourceOverrideTarget' | 'BootSourceOverrideEnabled' | 'BootSourceOverrideMode' | 'HttpBootUri',
      string
    >
  >;
  /** Requested properties the service cannot take (e.g. `mode` on a service without the property). */
  ignored: Array<'mode'>;
}

/**
 * A virtual media device as {@link BMC.insertMedia} found it (Redfish `VirtualMedia.v1_6_0`): the first
 * member of the vendor's VirtualMediaCollection whose `MediaTypes` hold `CD` or `DVD`.
 */
export interface VirtualMediaDevice {
  /** `@odata.id`, e.g. `/redfish/v1/Managers/1/VirtualMedia/2` (HPE) or `/redfish/v1/Systems/System.Embedded.1/VirtualMedia/1` (Dell). */
  uri: string;
  /** `Inserted`. */
  inserted: boolean;
  /** `Image`; `undefined` when null or empty. */
  image: string | undefined;
  /** `WriteProtected`; `undefined` when not reported. */
  writeProtected: boolean | undefined;
}

/** Outcome of {@link BMC.insertMedia} / {@link BMC.ejectMedia}. */
export interface MediaResult {
  device: VirtualMediaDevice;
  /** An `EjectMedia` was posted (media was present). */
  ejected: boolean;
  /** An `InsertMedia` was posted (false: the same image was already inserted, or eject only). */
  inserted: boolean;
}

/**
 * How the connection to a BMC is protected, for status and logs: plain HTTP; TLS with the certificate
 * verified against the system trust store or against a configured CA bundle; or TLS with verification
 * turned off (`--bmc-insecure-tls`).
 */
export type TransportSecurity =
  | 'http'
  | 'tls-verified-system-ca'
  | 'tls-verified-ca-bundle'
  | 'tls-unverified';

const TRANSPORT_TEXT: Record<TransportSecurity, string> = {
  http: 'plain HTTP, no TLS',
  'tls-verified-system-ca': 'TLS, certificate verified against the system trust store',
  'tls-verified-ca-bundle': 'TLS, certificate verified against the configured CA bundle',
  'tls-unverified': 'TLS without certificate verification (--bmc-insecure-tls)',
};

/** One line for conditions and logs, e.g. `TLS, certificate verified against the configured CA bundle`. */
export function describeTransportSecurity(t: TransportSecurity | undefined): string {
  return t === undefined ? 'transport unknown' : TRANSPORT_TEXT[t];
}

/**
 * The AccountService's policy (DMTF AccountService.v1_15_0); a property the BMC does not report is
 * absent. Lengths in characters, times in seconds.
 */
export interface AccountServiceInfo {
  /** `Accounts` link (ManagerAccountCollection). */
  accountsUri: string;
  minPasswordLength?: number;
  maxPasswordLength?: number;
  /** `AccountLockoutThreshold`: failed logins that lock an account; 0 never locks. */
  lockoutThreshold?: number;
  lockoutDurationSeconds?: number;
  lockoutCounterResetAfterSeconds?: number;
}

/** A local account (DMTF ManagerAccount.v1_12_0); the password is never readable. */
export interface ManagerAccountInfo {
  id: string;
  uri: string;
  userName: string;
  roleId?: string;
  enabled?: boolean;
  locked?: boolean;
  /** The password has expired: the account may do nothing but change it. */
  passwordChangeRequired?: boolean;
  /** `PasswordExpiration`, RFC 3339, when the BMC reports one. */
  passwordExpiration?: string;
  etag?: string;
}

/** A new account (POST to `Accounts`; UserName, Password and RoleId are required on create). */
export interface NewAccount {
  userName: string;
  password: string;
  roleId: string;
  enabled: boolean;
}

/** Properties to PATCH on an account; absent ones are not sent. */
export interface AccountWrite {
  password?: string;
  roleId?: string;
  enabled?: boolean;
  /** Only `false` (unlock) is writable (ManagerAccount `Locked@Redfish.AllowableValues`). */
  locked?: false;
}

/** Per-call controls. */
export interface CallOptions {
  /** Aborts the call (all its requests and backoff sleeps). */
  signal?: AbortSignal;
  /** Total budget of this call in ms (all requests, retries and backoff); overrides the client default. */
  budgetMs?: number;
}

export interface GracefulShutdownOptions extends CallOptions {
  /** Send `ForceOff` when the system offers no graceful reset type. Default false: throw instead. */
  fallbackToForceOff?: boolean;
}

export interface RestartOptions extends CallOptions {
  /** `GracefulRestart` (OS shuts down first) instead of `ForceRestart`. Default false. */
  graceful?: boolean;
  /** With `graceful`, send `ForceRestart` when the system offers no graceful restart. Default false. */
  fallbackToForce?: boolean;
}

/**
 * A BMC managing one or more ComputerSystems, addressed by their Redfish URI (the upstream
 * `Server.spec.systemURI`). Errors: `RedfishHttpError`, `RedfishTransportError`,
 * `RedfishBudgetExceededError`, `RedfishAuthError`, `RedfishParseError`, `ResetTypeNotSupportedError`,
 * `BootTargetNotSupportedError` (all in `./errors.js` / `./parse.js`).
 */
export interface BMC {
  /** How the connection is protected (see {@link TransportSecurity}); `undefined` for non-network BMCs. */
  readonly transportSecurity?: TransportSecurity;
  /** Members of `/redfish/v1/Systems`. */
  listSystems(opts?: CallOptions): Promise<ResourceRef[]>;
  /** Members of `/redfish/v1/Managers`. */
  listManagers(opts?: CallOptions): Promise<ResourceRef[]>;
  /** Reads a ComputerSystem. Throws `RedfishParseError` (field `UUID`) for a system without a valid UUID. */
  getSystem(systemUri: string, opts?: CallOptions): Promise<ComputerSystemInfo>;
  /** The system's canonical UUID; throws `RedfishParseError` (field `UUID`) when missing or malformed. */
  systemUUID(systemUri: string, opts?: CallOptions): Promise<string>;
  /**
   * The system's NICs (`ComputerSystem.EthernetInterfaces`, one GET per member, at most
   * {@link MAX_ETHERNET_INTERFACES}): `[]` when the system has no such link. Members without a valid
   * MAC are skipped; a MAC reported twice (a VLAN interface on its parent NIC, DMTF mockup) once.
   */
  ethernetInterfaces(systemUri: string, opts?: CallOptions): Promise<EthernetInterfaceInfo[]>;
  /** Reads a Manager. */
  getManager(managerUri: string, opts?: CallOptions): Promise<ManagerInfo>;
  /** One read of `PowerState`; never waits for a transition. Works for systems without a UUID. */
  powerState(systemUri: string, opts?: CallOptions): Promise<PowerState>;
  /** Starts powering on (`On`, else `ForceOn`, else `PushPowerButton`, as the system allows). */
  powerOn(systemUri: string, opts?: CallOptions): Promise<PowerActionResult>;
  /** Asks the OS to shut down (ACPI). Whether it does is for the caller to check later. */
  gracefulShutdown(systemUri: string, opts?: GracefulShutdownOptions): Promise<PowerActionResult>;
  /** Cuts power at once. */
  forceOff(systemUri: string, opts?: CallOptions): Promise<PowerActionResult>;
  /** Restarts a running system; powers on a system that is off. */
  restart(systemUri: string, opts?: RestartOptions): Promise<PowerActionResult>;
  /** Posts one `ComputerSystem.Reset` with exactly `resetType`, if the system allows it. */
  reset(systemUri: string, resetType: ResetType, opts?: CallOptions): Promise<PowerActionResult>;
  /**
   * `Manager.Reset` (Redfish `Manager.v1_19_0`, action target from the Manager's `Actions`) with
   * `resetType` (`GracefulRestart` unless given). Restarts the BMC, not the host. Throws
   * `ResetTypeNotSupportedError` when the Manager advertises no Reset action.
   */
  resetManager(managerUri: string, resetType?: ResetType, opts?: CallOptions): Promise<void>;
  /** Sets the boot override; sends only changed properties, nothing when nothing changes. */
  setBootOverride(systemUri: string, override: BootOverride, opts?: CallOptions): Promise<BootOverrideResult>;
  /**
   * Inserts `image` (an http(s) URL the BMC fetches itself) into the system's virtual CD, write-protected:
   * finds the device (vendor order in `vendor.ts`), posts `VirtualMedia.EjectMedia` first when other media
   * is present, then `VirtualMedia.InsertMedia`; nothing when `image` is already inserted. A BMC that
   * cannot fetch the image commonly refuses the insert (`RedfishHttpError` 4xx/5xx). Throws
   * `VirtualMediaNotSupportedError` when the system has no CD-capable virtual media device.
   * BMCs without virtual media support in this project leave it undefined.
   */
  insertMedia?(systemUri: string, image: string, opts?: CallOptions): Promise<MediaResult>;
  /** Ejects whatever the system's virtual CD holds (`VirtualMedia.EjectMedia`); nothing when empty. Errors as {@link BMC.insertMedia}. */
  ejectMedia?(systemUri: string, opts?: CallOptions): Promise<MediaResult>;
  /** `/redfish/v1/AccountService`. BMCs without account support in this project leave these undefined. */
  getAccountService?(opts?: CallOptions): Promise<AccountServiceInfo>;
  /** Every named account of the `Accounts` collection (one GET per member, bounded). */
  listAccounts?(opts?: CallOptions): Promise<ManagerAccountInfo[]>;
  /** One account by URI; `RedfishHttpError` 404 when gone, 403 `PasswordChangeRequired` is the BMC's. */
  getAccount?(uri: string, opts?: CallOptions): Promise<ManagerAccountInfo>;
  /** POST a new account; never repeated when it may have been applied (look it up by name first). */
  createAccount?(account: NewAccount, opts?: CallOptions): Promise<ManagerAccountInfo>;
  /** PATCH password, role, enabled or unlock; 400 when the BMC's policy refuses the password. */
  updateAccount?(uri: string, write: AccountWrite, opts?: CallOptions): Promise<void>;
  /** DELETE the account; already gone counts as done. */
  deleteAccount?(uri: string, opts?: CallOptions): Promise<void>;
  /** Ends the session (if any) and closes connections. Idempotent. */
  close(): Promise<void>;
}
