/**
 * How the virtual BMC's Redfish service presents itself and behaves on writes: the legitimate
 * variations between real implementations (not faults), so the client's handling of each can be
 * exercised. A profile is either the built-in model ({@link DEFAULT_PROFILE}) or a captured vendor tree
 * (`profile-tree.ts`) plus that vendor's write behaviour ({@link VENDOR_PROFILES}).
 *
 * Vendor behaviours and their sources:
 * - HPE iLO 5 answers a Boot PATCH while the host is in POST with 400 and MessageId
 *   `iLO.2.x.UnableToModifyDuringSystemPOST` ("After the computer system is either fully booted or
 *   powered off, retry the operation", HPE iLO message registry), for tens of seconds after a reset.
 * - Dell iDRAC queues a BIOS configuration job for every PATCH carrying `BootSourceOverrideMode`, even
 *   an unchanged one (issue 16); Ironic avoids re-sending unchanged boot properties (story 2007355).
 * - Supermicro (and AMI MegaRAC) firmware wants `BootSourceOverrideTarget` and
 *   `BootSourceOverrideEnabled` together (Ironic `_set_boot_device`, story 2008547); X10-class boards
 *   (ComputerSystem v1_3_0) do not report `BootSourceOverrideMode` and reject PATCHes carrying it.
 */

import { existsSync } from 'node:fs';
import { RESET_TYPES, type ResetType } from '../bmc/bmc.js';
import { type ProfileFacts, treeFromFacts } from './profile-facts.js';
import { loadProfileTree, type ProfileTree } from './profile-tree.js';
import { DELL } from './profiles/dell.js';
import { DMTF } from './profiles/dmtf.js';
import { HPE } from './profiles/hpe.js';
import { SUPERMICRO } from './profiles/supermicro.js';
import { type BootOverrideState, type EtagFormat, SUPPORTED_BOOT_TARGETS } from './system.js';

export interface ServiceProfile {
  /** `ResetType@Redfish.AllowableValues` of every system. */
  resetTypes: ResetType[];
  /**
   * How `resetTypes` are advertised: inline (`ResetType@Redfish.AllowableValues`), through an ActionInfo
   * resource (`@Redfish.ActionInfo`), or not at all (other types are still rejected with 400).
   */
  resetTypesAdvertised: 'inline' | 'action-info' | 'none';
  /** Offer session login (SessionService). When false the service answers 404 there (basic auth only). */
  sessions: boolean;
  /**
   * Systems advertise `@Redfish.Settings` with a SettingsObject; Boot changes are accepted only there
   * (when they take effect: {@link ServiceProfile.settingsApplyTime}), a PATCH of the system itself gets 405.
   */
  settingsObject: boolean;
  /** `Immediate`: a SettingsObject PATCH applies at once; `OnReset`: when the next reset takes effect. */
  settingsApplyTime: 'Immediate' | 'OnReset';
  /** Answer `428 Precondition Required` to a PATCH without `If-Match`. */
  requireIfMatch: boolean;
  /** Expose ETags (`ETag` header). If-Match is evaluated either way; `*` always matches. */
  etags: boolean;
  /** Also put `@odata.etag` into the system body (Dell's captured system has the header only). */
  etagInBody: boolean;
  etagFormat: EtagFormat;
  /** Systems report no `UUID` (a real failure mode, boot-flow case C01). */
  omitSystemUUID: boolean;
  /** Systems have no `EthernetInterfaces` (link absent, collection 404): a BMC that reports no NIC (issue 28). */
  omitEthernetInterfaces: boolean;
  /** Case of the reported system UUID (HPE and Supermicro report upper case, Dell lower case). */
  uuidCase: 'lower' | 'upper';
  /** Report `Boot.BootSourceOverrideMode`; older firmware does not, and rejects PATCHes that set it. */
  reportBootMode: boolean;
  /** `BootSourceOverrideTarget@Redfish.AllowableValues`, also what a PATCH may set. */
  bootTargets: string[];
  /**
   * Report `Boot.HttpBootUri` (ComputerSystem v1_9_0+) when `bootTargets` offers `UefiHttp`. False: a
   * BMC that allows `UefiHttp` but cannot be told what to fetch (older firmware), which a client
   * must refuse to HTTP-boot rather than retry.
   */
  reportHttpBootUri: boolean;
  /** Boot override of every system at start; may hold a vendor value (e.g. target `UsbKey`). */
  initialBoot: BootOverrideState;
  /** Refuse (400 `PropertyMissing`) a Boot PATCH carrying only one of Target and Enabled. */
  bootTargetWithEnabled: boolean;
  /** Ms a started host stays in POST, refusing Boot PATCHes with the HPE MessageId. 0: never. */
  postWindowMs: number;
  /** Queue a BIOS job (counted) for every PATCH carrying `BootSourceOverrideMode`. */
  biosJobOnModePatch: boolean;
  /**
   * Ms between an accepted `ComputerSystem.Reset` (204) and its effect on `PowerState`: real BMCs answer
   * first and switch the host a moment later. The fault knob `powerTransitionMs` can make it longer.
   */
  resetDelayMs: number;
  /** Idle session lifetime in seconds (`SessionService.SessionTimeout`). */
  sessionTimeoutSeconds: number;
  /**
   * Systems have a virtual CD (Redfish VirtualMedia, `InsertMedia`/`EjectMedia`) when their host
   * implements it: with the built-in documents at `Systems/{id}/VirtualMedia/CD1`; with a captured tree
   * where the tree has its CD/DVD devices (under the system, or under a Manager: then the first system's).
   */
  virtualMedia: boolean;
  /** Refuse (400 `ActionParameterNotSupported`) InsertMedia carrying `Inserted` or `WriteProtected` (Supermicro, per sushy). */
  insertMediaRejectsFlags: boolean;
  /** Captured tree served as the resource model; `undefined`: the built-in documents (`resources.ts`). */
  tree: ProfileTree | undefined;
}

export const DEFAULT_PROFILE: Readonly<ServiceProfile> = {
  resetTypes: [
    'On',
    'ForceOff',
    'GracefulShutdown',
    'GracefulRestart',
    'ForceRestart',
    'PushPowerButton',
    'PowerCycle',
    'Nmi',
  ],
  resetTypesAdvertised: 'inline',
  sessions: true,
  settingsObject: false,
  settingsApplyTime: 'Immediate',
  requireIfMatch: false,
  etags: true,
  etagInBody: true,
  etagFormat: 'counter',
  omitSystemUUID: false,
  omitEthernetInterfaces: false,
  uuidCase: 'upper',
  reportBootMode: true,
  bootTargets: [...SUPPORTED_BOOT_TARGETS],
  reportHttpBootUri: true,
  initialBoot: { target: 'None', enabled: 'Disabled', mode: 'UEFI' },
  bootTargetWithEnabled: false,
  postWindowMs: 0,
  biosJobOnModePatch: false,
  resetDelayMs: 0,
  sessionTimeoutSeconds: 1800,
  virtualMedia: true,
  insertMediaRejectsFlags: false,
  tree: undefined,
};

export type VendorProfileName = 'dmtf' | 'dell' | 'hpe' | 'supermicro' | 'supermicro-x10';

/**
 * Named profiles: the facts of a captured tree (`facts`, read from the folder `tree` under the mockups
 * directory) and the vendor's write behaviour.
 */
export const VENDOR_PROFILES: Readonly<
  Record<VendorProfileName, { tree: string; facts: ProfileFacts; behaviour: Partial<ServiceProfile> }>
> = {
  dmtf: { tree: 'dmtf-public-rackmount1', facts: DMTF, behaviour: { uuidCase: 'lower', resetDelayMs: 300 } },
  dell: {
    tree: 'libredfish-dell',
    facts: DELL,
    behaviour: {
      uuidCase: 'lower',
      etagFormat: 'numeric',
      etagInBody: false,
      biosJobOnModePatch: true,
      resetDelayMs: 300,
    },
  },
  hpe: {
    tree: 'libredfish-hpe',
    facts: HPE,
    behaviour: { uuidCase: 'upper', etagFormat: 'weak-hex', postWindowMs: 4_000, resetDelayMs: 300 },
  },
  supermicro: {
    tree: 'libredfish-supermicro',
    facts: SUPERMICRO,
    behaviour: {
      uuidCase: 'upper',
      etagFormat: 'md5',
      bootTargetWithEnabled: true,
      insertMediaRejectsFlags: true,
      resetDelayMs: 300,
    },
  },
  'supermicro-x10': {
    tree: 'libredfish-supermicro',
    facts: SUPERMICRO,
    behaviour: {
      uuidCase: 'upper',
      etagFormat: 'md5',
      bootTargetWithEnabled: true,
      reportBootMode: false,
      resetDelayMs: 300,
    },
  },
};

/**
 * The profile of a vendor name (`dell`, `hpe`, `supermicro`, `supermicro-x10`, `dmtf`: from the project's
 * own data, in any clone) or of a captured tree folder (served as captured, generic write behaviour).
 * Throws an `Error` for an unknown name that is no folder, or a folder that holds no captured tree.
 */
export function resolveProfile(nameOrDir: string): Partial<ServiceProfile> {
  const named = Object.hasOwn(VENDOR_PROFILES, nameOrDir)
    ? VENDOR_PROFILES[nameOrDir as VendorProfileName]
    : undefined;
  if (named) {
    const tree = treeFromFacts(named.facts, `profile:${nameOrDir}`);
    return { ...profileFromTree(tree), ...named.behaviour, tree };
  }
  if (!existsSync(nameOrDir)) {
    throw new Error(
      `unknown BMC profile ${nameOrDir}: not one of ${Object.keys(VENDOR_PROFILES).join(', ')} nor a folder`,
    );
  }
  const tree = loadProfileTree(nameOrDir);
  return { ...profileFromTree(tree), tree };
}

/** What a captured tree says about the service: reset types and how advertised, boot targets, initial Boot. */
export function profileFromTree(tree: ProfileTree): Partial<ServiceProfile> {
  const sys = tree.get(tree.systemUri) ?? {};
  const actions = (sys['Actions'] as Record<string, unknown> | undefined) ?? {};
  const reset = (actions['#ComputerSystem.Reset'] as Record<string, unknown> | undefined) ?? {};
  const knownResets = (v: unknown): ResetType[] =>
    Array.isArray(v) ? v.filter((x): x is ResetType => (RESET_TYPES as readonly unknown[]).includes(x)) : [];
  let resetTypes = knownResets(reset['ResetType@Redfish.AllowableValues']);
  let advertised: ServiceProfile['resetTypesAdvertised'] = resetTypes.length > 0 ? 'inline' : 'none';
  const infoUri = reset['@Redfish.ActionInfo'];
  if (typeof infoUri === 'string') {
    const params = tree.get(infoUri)?.['Parameters'];
    const p = Array.isArray(params)
      ? (params.find((x) => (x as Record<string, unknown>)?.['Name'] === 'ResetType') as
          | Record<string, unknown>
          | undefined)
      : undefined;
    resetTypes = knownResets(p?.['AllowableValues']);
    advertised = 'action-info';
  }
  const boot = (sys['Boot'] as Record<string, unknown> | undefined) ?? {};
  const targets = boot['BootSourceOverrideTarget@Redfish.AllowableValues'];
  const str = (v: unknown, d: string) => (typeof v === 'string' ? v : d);
  return {
    ...(resetTypes.length > 0 ? { resetTypes, resetTypesAdvertised: advertised } : {}),
    ...(Array.isArray(targets) ? { bootTargets: targets.filter((t) => typeof t === 'string') } : {}),
    reportBootMode: typeof boot['BootSourceOverrideMode'] === 'string',
    initialBoot: {
      target: str(boot['BootSourceOverrideTarget'], 'None'),
      enabled: str(boot['BootSourceOverrideEnabled'], 'Disabled'),
      mode: str(boot['BootSourceOverrideMode'], 'UEFI'),
    },
  };
}
