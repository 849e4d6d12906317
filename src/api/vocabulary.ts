/**
 * The vocabulary of boot attempts, defined once (docs/ARCHITECTURE.md, 'A boot attempt'): boot signal names, condition
 * types, every condition reason and Event reason the operator writes, and the one rule that says
 * whether a signal counts for the current attempt. Controllers, the boot server, the registry and
 * metalctl import from here; a new reason is added here, never as a literal at its use.
 *
 * Reasons are CamelCase (Kubernetes API conventions, `metav1.Condition.reason`); the names of
 * upstream metal-operator's conditions and reasons are kept where upstream has them.
 */
import { type Condition, findCondition } from '../runtime/conditions.js';

/** Condition types set on a ServerBootConfiguration by the boot server and the registry: the boot signals. */
export const BootSignal = {
  /** The boot server rendered and served this attempt's iPXE script. */
  IPXEScriptFetched: 'IPXEScriptFetched',
  /** The boot server rendered and served this attempt's ignition. */
  IgnitionDataFetched: 'IgnitionDataFetched',
  /** The boot server served this attempt's UEFI HTTP boot file (the UKI) to the server's own address. */
  HTTPBootFileFetched: 'HTTPBootFileFetched',
  /** The booted OS posted /bootstate with this attempt's token. */
  BootStateReceived: 'BootStateReceived',
  /** The boot server served this attempt's virtual-media ISO to the BMC (capability URL; `bootMethod: VirtualMedia`). */
  VirtualMediaFetched: 'VirtualMediaFetched',
  /** The probe agent posted /register for this attempt (discovery only). */
  RegistrationReceived: 'RegistrationReceived',
} as const;
export type BootSignal = (typeof BootSignal)[keyof typeof BootSignal];

/** Every boot signal, in the order a boot produces them. */
export const BOOT_SIGNALS: readonly BootSignal[] = [
  BootSignal.IPXEScriptFetched,
  BootSignal.HTTPBootFileFetched,
  BootSignal.VirtualMediaFetched,
  BootSignal.IgnitionDataFetched,
  BootSignal.RegistrationReceived,
  BootSignal.BootStateReceived,
];
/** The signals of an OS boot (claims), in order. */
export const OS_BOOT_SIGNALS: readonly BootSignal[] = [
  BootSignal.IPXEScriptFetched,
  BootSignal.IgnitionDataFetched,
  BootSignal.BootStateReceived,
];
/** The signals of an OS boot over UEFI HTTP boot (`bootMethod: HTTPBoot`), in order. */
export const HTTP_BOOT_SIGNALS: readonly BootSignal[] = [
  BootSignal.HTTPBootFileFetched,
  BootSignal.IgnitionDataFetched,
  BootSignal.BootStateReceived,
];
/** The signals of an OS boot from virtual media (`bootMethod: VirtualMedia`), in order. */
export const VIRTUAL_MEDIA_BOOT_SIGNALS: readonly BootSignal[] = [
  BootSignal.VirtualMediaFetched,
  BootSignal.IgnitionDataFetched,
  BootSignal.BootStateReceived,
];
/** The signals of a discovery boot, in order. */
export const DISCOVERY_SIGNALS: readonly BootSignal[] = [
  BootSignal.IPXEScriptFetched,
  BootSignal.RegistrationReceived,
];
/** Signals that prove the firmware took the network boot of this attempt (the netboot deadline). */
export const NETBOOT_SIGNALS: readonly BootSignal[] = [
  BootSignal.IPXEScriptFetched,
  BootSignal.HTTPBootFileFetched,
  BootSignal.VirtualMediaFetched,
];

/**
 * Prefix of custom completion signals: `bootCompletion.conditions` accepts the {@link BootSignal}s
 * and types `External<Name>` (e.g. `ExternalHealthCheckPassed`) that an external writer sets on the
 * SBC with `observedGeneration` = the SBC's generation it saw (server-side apply, own field manager).
 */
export const EXTERNAL_SIGNAL_PREFIX = 'External';

/**
 * The boot signals a claim's attempt can produce, so the ones `bootCompletion.conditions` and
 * `--boot-completion-conditions` accept: every boot signal but `RegistrationReceived`, which only a
 * discovery attempt's token may post (the registry answers a claim token 403 `NotDiscovery`).
 */
export const CLAIM_COMPLETION_SIGNALS: readonly BootSignal[] = BOOT_SIGNALS.filter(
  (s) => s !== BootSignal.RegistrationReceived,
);
/** Why `RegistrationReceived` is refused as a claim's completion signal (messages). */
export const REGISTRATION_NOT_FOR_CLAIMS =
  'RegistrationReceived never arrives for a claim: only the discovery probe may /register';

/** True when `type` may be named in `bootCompletion.conditions` (a claim can receive it). */
export function isCompletionSignal(type: string): boolean {
  return (
    (CLAIM_COMPLETION_SIGNALS as string[]).includes(type) ||
    new RegExp(`^${EXTERNAL_SIGNAL_PREFIX}[A-Z][A-Za-z0-9]*$`).test(type)
  );
}

/** Reasons of the boot signal conditions (written by the boot server and the registry). */
export const SignalReason = {
  ScriptServed: 'ScriptServed',
  IgnitionServed: 'IgnitionServed',
  /** The UEFI HTTP boot file (UKI) of the attempt was served (`HTTPBootFileFetched`). */
  BootFileServed: 'BootFileServed',
  /** The virtual-media ISO of the attempt was served to the BMC (`VirtualMediaFetched`). */
  MediaServed: 'MediaServed',
  Registered: 'Registered',
  Booted: 'Booted',
  BootFailed: 'BootFailed',
  /** Accepted without a token (`--callback-auth=optional`). */
  Unauthenticated: 'Unauthenticated',
} as const;

/** Condition types, by the kind that carries them. */
export const ConditionType = {
  // ServerClaim
  Bound: 'Bound',
  BootConfigurationReady: 'BootConfigurationReady',
  Booted: 'Booted',
  /** Claim being deleted: its Server is released only once it is observed Off. */
  Released: 'Released',
  // Server
  Discovered: 'Discovered',
  /** The cleanup boot after the last release erased the disks (src/controllers/server/cleanup.ts). */
  Cleaned: 'Cleaned',
  PowerActionPending: 'PowerActionPending',
  /**
   * What identifies this machine on the boot network (issue 28): the NICs its BMC reports, and the
   * last registration refused for reporting others. Reasons: {@link MachineIdentityReason}.
   */
  MachineIdentity: 'MachineIdentity',
  // ServerBootConfiguration (besides the boot signals)
  Ready: 'Ready',
  /** Set by the claim controller when a NetBootOnce claim completed; read by the boot server. */
  BootCompleted: 'BootCompleted',
  /**
   * The last boot-file fetch of the current attempt the boot server refused: who (client address,
   * and its MAC where known), why (reason {@link FetchRefusedReason}), when. True while it counts for
   * the current attempt; never carries a token. Written by the boot server, rate-limited.
   */
  FetchRefused: 'FetchRefused',
  // BMC
  SystemsDiscovered: 'SystemsDiscovered',
  // BMC and Server: a system UUID another Server owns (controllers/common/system-ownership.ts)
  DuplicateSystemUUID: 'DuplicateSystemUUID',
} as const;

/** Reasons of the Server's `MachineIdentity` condition. */
export const MachineIdentityReason = {
  /** True: the BMC reports NICs; registrations and boot-file clients are checked against their MACs. */
  BMCReportedNICs: 'BMCReportedNICs',
  /** False: the BMC reports no NIC: registrations are accepted unchecked, boot files go by today's rule. */
  NoBMCNICs: 'NoBMCNICs',
  /** False: a `/register` reported a NIC with an address whose MAC the BMC does not report (409, nothing stored). */
  RegistrationMACMismatch: 'RegistrationMACMismatch',
} as const;

/** Reasons of the SBC's `FetchRefused` condition (the 403 reasons of the boot server). */
export const FetchRefusedReason = {
  /** The client address is another server's, or not this server's where its addresses are known. */
  UnknownClient: 'UnknownClient',
  /** The attempt's file was already served to another client address (the first-address pin). */
  ScriptPinned: 'ScriptPinned',
  /** The address source maps the client address to a MAC this server's BMC does not report. */
  MACMismatch: 'MACMismatch',
} as const;

/** Reasons of the `DuplicateSystemUUID` condition (BMC and Server). */
export const DuplicateReason = {
  DuplicateSystemUUID: 'DuplicateSystemUUID',
  SystemUUIDsUnique: 'SystemUUIDsUnique',
} as const;

/** Why a claim lost its Server, and how an unclaimed Server enters and leaves Maintenance (controllers/server/taints.ts). */
export const TaintReason = {
  /** Claim `Bound`/`Booted` reason and Event reason: an untolerated `Evict` taint released it. */
  Evicted: 'Evicted',
  MaintenanceStarted: 'MaintenanceStarted',
  MaintenanceEnded: 'MaintenanceEnded',
} as const;

/** Reasons of the claim's `Bound` condition. */
export const BoundReason = {
  ServerBound: 'ServerBound',
  NoServerAvailable: 'NoServerAvailable',
  ServerNotAvailable: 'ServerNotAvailable',
  ServerNotFound: 'ServerNotFound',
  /** Neither `serverRef` nor `serverSelector` under `--require-server-selection`. */
  ServerSelectionRequired: 'ServerSelectionRequired',
} as const;

/** Reasons of the claim's `Booted` condition (and of the discovery `Discovered` condition where shared). */
export const BootedReason = {
  Booting: 'Booting',
  TimedOut: 'TimedOut',
  /** No fetch of the attempt arrived by `netbootTimeout`: the firmware ignored the override. */
  NetbootNotObserved: 'NetbootNotObserved',
  AttemptsExhausted: 'AttemptsExhausted',
  BootCompleted: 'BootCompleted',
  /** The claim had no boot bookkeeping but its server was found booted: adopted, not re-provisioned. */
  Adopted: 'Adopted',
  /** `spec.power` is neither On nor Off: nothing is powered. */
  InvalidPower: 'InvalidPower',
  /**
   * Terminal: the BMC cannot boot the claim's way (boot target not offered, no `Boot.HttpBootUri` for
   * HTTPBoot). No power action, no attempt used; a spec change or `operation=retry` starts again.
   */
  BootMethodUnsupported: 'BootMethodUnsupported',
  /** Terminal: the BMC refused the power-on for good (a non-transient 4xx, no usable ResetType). As above. */
  BootRefused: 'BootRefused',
  /** `spec.power: Off` before the claim booted: nothing boots until On (not "Booting"). */
  PoweredOff: 'PoweredOff',
} as const;

/** Reasons of the claim's `Released` condition while it is deleted. */
export const ReleaseReason = {
  WaitingForPowerOff: 'WaitingForPowerOff',
  PowerOffTimedOut: 'PowerOffTimedOut',
  /** The Server is parked (`metal.ironcore.dev/parked`): released after `unpark`. */
  ServerParked: 'ServerParked',
  /** The Server carries `metal.ironcore.dev/operation: ignore`: released once it is removed. */
  ServerIgnored: 'ServerIgnored',
} as const;

/** Reasons of the claim's `BootConfigurationReady` condition and of the SBC's `Ready` condition. */
export const BootConfigurationReason = {
  Ready: 'Ready',
  Pending: 'Pending',
  ImageNotSet: 'ImageNotSet',
  ImageNotFound: 'ImageNotFound',
  ImageFileMissing: 'ImageFileMissing',
  IgnitionSecretNotFound: 'IgnitionSecretNotFound',
  IgnitionMissing: 'IgnitionMissing',
  /** The official Butane translator rejected the config (its report is the message). */
  InvalidButane: 'InvalidButane',
  /** The official Ignition validator rejected what would be served (its report is the message). */
  InvalidIgnition: 'InvalidIgnition',
  /** hack/ignition-tools could not run (missing, timed out): an installation fault, rechecked. */
  IgnitionToolsUnavailable: 'IgnitionToolsUnavailable',
  // OCI images (src/oci/, src/controllers/serverbootconfiguration/boot-image-resolution.ts)
  InvalidImageReference: 'InvalidImageReference',
  RegistryNotAllowed: 'RegistryNotAllowed',
  RegistryUnavailable: 'RegistryUnavailable',
  RegistryUnauthorized: 'RegistryUnauthorized',
  RegistryError: 'RegistryError',
  PullSecretNotFound: 'PullSecretNotFound',
  PullSecretInvalid: 'PullSecretInvalid',
  ImageArchitectureNotFound: 'ImageArchitectureNotFound',
  ImageLayerMissing: 'ImageLayerMissing',
  ImageManifestInvalid: 'ImageManifestInvalid',
} as const;

/** Reasons of the SBC's `BootCompleted` condition. */
export const BootCompletedReason = { ClaimBooted: 'ClaimBooted', Provisioning: 'Provisioning' } as const;

/** Reasons of the Server's `Discovered` condition. */
export const DiscoveredReason = {
  WaitingForBootConfiguration: 'WaitingForBootConfiguration',
  Discovering: 'Discovering',
  DiscoveryTimedOut: 'DiscoveryTimedOut',
  NetbootNotObserved: 'NetbootNotObserved',
  DiscoveryAttemptsExhausted: 'DiscoveryAttemptsExhausted',
  Registered: 'Registered',
} as const;

/**
 * Reasons of the Server's `Cleaned` condition (the cleanup boot on release, src/controllers/server/cleanup.ts;
 * metal3's automated cleaning, MAAS's erase on release). False while the Server must not be bound.
 */
export const CleanedReason = {
  /** Released; the cleanup attempt is under way. */
  Cleaning: 'Cleaning',
  WaitingForBootConfiguration: 'WaitingForBootConfiguration',
  CleanupTimedOut: 'CleanupTimedOut',
  NetbootNotObserved: 'NetbootNotObserved',
  /** Every cleanup attempt timed out: state Error, not claimable until retried. */
  CleanupAttemptsExhausted: 'CleanupAttemptsExhausted',
  /** `automatedCleaningMode: metadata`, but the manager has no `--cleanup-image`: stays Cleaning. */
  CleanupImageNotConfigured: 'CleanupImageNotConfigured',
  /** The cleanup image reported completion (True). */
  CleanupCompleted: 'CleanupCompleted',
  /** Released without a cleanup boot (disabled): the disks are as the last tenant left them. */
  CleanupDisabled: 'CleanupDisabled',
} as const;

/** Reasons of the Server's `PowerActionPending` condition (besides the BMC failure reasons). */
export const PowerReason = {
  WaitingForPowerOn: 'WaitingForPowerOn',
  WaitingForPowerOff: 'WaitingForPowerOff',
  WaitingForTransition: 'WaitingForTransition',
  NoActionPending: 'NoActionPending',
} as const;

/** Why a BMC call failed: condition and Event reasons (see `classifyBmcFailure`). */
export const BmcFailureReason = {
  BMCUnavailable: 'BMCUnavailable',
  /** A transient refusal (e.g. HPE's POST window, `bmc/vendor.ts` TRANSIENT_MESSAGES): pending, no Warning. */
  BMCBusy: 'BMCBusy',
  BMCTimeout: 'BMCTimeout',
  BMCAuthenticationFailed: 'BMCAuthenticationFailed',
  BMCRejected: 'BMCRejected',
  BMCUnsupported: 'BMCUnsupported',
  BMCInvalidResponse: 'BMCInvalidResponse',
  BMCError: 'BMCError',
  /** The BMC's TLS certificate failed verification (`--bmc-insecure-tls=false`). */
  BMCCertificateRejected: 'BMCCertificateRejected',
  /** The BMC refused `VirtualMedia.InsertMedia` of the attempt's ISO (commonly: it could not fetch it). */
  VirtualMediaInsertRefused: 'VirtualMediaInsertRefused',
  // The BMC cannot be addressed because of how it is described.
  NoSystemURI: 'NoSystemURI',
  BMCNotFound: 'BMCNotFound',
  NoBMC: 'NoBMC',
  EndpointNotFound: 'EndpointNotFound',
  EndpointHasNoIP: 'EndpointHasNoIP',
  NoAddress: 'NoAddress',
  BMCSecretNotSet: 'BMCSecretNotSet',
  BMCSecretNotFound: 'BMCSecretNotFound',
  BMCSecretIncomplete: 'BMCSecretIncomplete',
} as const;

/** Reasons of the BMC's `Ready` and `SystemsDiscovered` conditions (besides the BMC failure reasons). */
export const BmcReason = {
  Reachable: 'Reachable',
  AllSystemsHaveUUID: 'AllSystemsHaveUUID',
  SystemUUIDMissing: 'SystemUUIDMissing',
  /** More systems than `--bmc-max-systems`: Servers only for the first ones (issue 15, S14). */
  SystemLimitExceeded: 'SystemLimitExceeded',
} as const;

/** Event reasons (`core/v1` Event `.reason`), by the object they are recorded on. */
export const EventReason = {
  // ServerClaim
  Bound: 'Bound',
  Released: 'Released',
  BootSeriesStarted: 'BootSeriesStarted',
  BootAttemptStarted: 'BootAttemptStarted',
  BootCompleted: 'BootCompleted',
  BootTimedOut: 'BootTimedOut',
  NetbootNotObserved: 'NetbootNotObserved',
  AttemptsExhausted: 'AttemptsExhausted',
  /** A claim's series ended because the BMC refused it for good (see BootedReason.BootMethodUnsupported). */
  BootMethodUnsupported: 'BootMethodUnsupported',
  BootRefused: 'BootRefused',
  Adopted: 'Adopted',
  WaitingForPowerOff: 'WaitingForPowerOff',
  /** A deleted claim's Server is parked or ignored: the release waits (claim-operations.ts). */
  ReleaseHeld: 'ReleaseHeld',
  // Server
  DiscoveryRetry: 'DiscoveryRetry',
  DiscoveryTimedOut: 'DiscoveryTimedOut',
  DiscoveryAttemptsExhausted: 'DiscoveryAttemptsExhausted',
  Discovered: 'Discovered',
  CleanupStarted: 'CleanupStarted',
  CleanupTimedOut: 'CleanupTimedOut',
  CleanupAttemptsExhausted: 'CleanupAttemptsExhausted',
  CleanupCompleted: 'CleanupCompleted',
  CleanupRetry: 'CleanupRetry',
  PowerOn: 'PowerOn',
  PowerOff: 'PowerOff',
  BootStarted: 'BootStarted',
  RegistrationChanged: 'RegistrationChanged',
  /** A `/register` reported NIC MACs the BMC does not report: refused 409, nothing stored (Warning). */
  RegistrationRefused: 'RegistrationRefused',
  /** Boot-file fetches of the current attempt were refused (Warning; on the claim, else the Server). */
  FetchRefused: 'FetchRefused',
  /** A boot callback for this Server's UUID was refused 409: several Servers carry it. */
  AmbiguousServer: 'AmbiguousServer',
  /** A request matched the Server through its byte-swapped system UUID (SMBIOS >= 2.6 byte order). */
  SystemUUIDByteSwapped: 'SystemUUIDByteSwapped',
  // Server: the operation annotation (server-operations.ts; upstream's reasons where it has them)
  /** `park` done: powered off, state Parked, marker annotation set (upstream `Parked`). */
  Parked: 'Parked',
  /** `park` on a Server in a state other than Available/Reserved: kept until it is (upstream). */
  ParkDeferred: 'ParkDeferred',
  /** `unpark`: the marker is removed (upstream). */
  Unparking: 'Unparking',
  /** A parked Server back in Reserved or Available (upstream). */
  Resumed: 'Resumed',
  /** An operation other than `unpark` on a parked Server, removed unapplied (upstream). */
  ParkedOperationDropped: 'ParkedOperationDropped',
  /** An operation value nobody implements, removed unapplied (upstream). */
  UnsupportedOperation: 'UnsupportedOperation',
  /** A power operation sent to the BMC (the message names the Redfish ResetType). */
  PowerOperation: 'PowerOperation',
  /** An operation removed unapplied: a boot attempt owns the power, or the state would undo it at once. */
  OperationRefused: 'OperationRefused',
  /** The manager stopped between taking a power operation and confirming it sent: not repeated. */
  OperationInterrupted: 'OperationInterrupted',
  /** The BMC refused or failed a power operation (the message says why); not repeated. */
  OperationFailed: 'OperationFailed',
  /** `spec.power` set on a Server (deprecated upstream, which clears it too): removed unapplied (Warning). */
  DeprecatedPowerCleared: 'DeprecatedPowerCleared',
  // BMC
  ServerCreated: 'ServerCreated',
  SystemUUIDMissing: 'SystemUUIDMissing',
  SystemLimitExceeded: 'SystemLimitExceeded',
  DuplicateSystemUUID: 'DuplicateSystemUUID',
  // ServerBootConfiguration
  BootConfigurationReady: 'BootConfigurationReady',
  /** The OCI image of an attempt was resolved to a digest (the message names attempt and digest). */
  ImageResolved: 'ImageResolved',
  StaleCallback: 'StaleCallback',
  /** Server and claim: the Server's deletion waits until its claim releases it (finalizer). */
  ServerDeletionHeld: 'ServerDeletionHeld',
  /** Claim and Server: released by `metal.ironcore.dev/force-release` without power Off observed. */
  ForcedRelease: 'ForcedRelease',
} as const;

/** What {@link countsForCurrentAttempt} reads of an SBC. */
export interface AttemptSource {
  metadata: { generation?: number };
  status?: { attemptGeneration?: number; conditions?: Condition[] };
}

/**
 * The generation at which the SBC's current attempt began: `status.attemptGeneration`, or
 * `metadata.generation` while the manager has not stamped it yet (a brand-new SBC).
 */
export function attemptGenerationOf(sbc: AttemptSource): number {
  return sbc.status?.attemptGeneration ?? sbc.metadata.generation ?? 0;
}

/**
 * THE rule (docs/ARCHITECTURE.md, 'A boot attempt'): condition `type` of `sbc` counts for the current attempt when it is True
 * and its `observedGeneration` is at least the attempt's generation. A condition without
 * `observedGeneration` never counts.
 */
export function countsForCurrentAttempt(sbc: AttemptSource, type: string): boolean {
  const c = findCondition(sbc.status?.conditions, type);
  return (
    !!c &&
    c.status === 'True' &&
    c.observedGeneration !== undefined &&
    c.observedGeneration >= attemptGenerationOf(sbc)
  );
}

/** The condition `type` of `sbc` when it counts for the current attempt (for its time and message). */
export function currentAttemptCondition(sbc: AttemptSource, type: string): Condition | undefined {
  return countsForCurrentAttempt(sbc, type) ? findCondition(sbc.status?.conditions, type) : undefined;
}
