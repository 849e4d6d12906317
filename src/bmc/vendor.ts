/**
 * The one place where vendor differences live, as data. The Redfish implementation asks
 * {@link quirksForManufacturer} for a {@link VendorQuirks} record and never tests vendor names itself;
 * the transport asks {@link isTransientMessageId} whether a refusal means "try again shortly". Adding a
 * vendor means adding an entry here, with the source of the fact in a comment.
 *
 * Everything the standard already expresses (ResetType and boot-target allowable values, ETags,
 * `@Redfish.Settings`, `@Redfish.ActionInfo`) is handled generically; an entry only records what a
 * vendor does beyond or against the standard. Facts that need no entry because the generic behaviour
 * covers them:
 * - Dell iDRAC creates a BIOS configuration job when `BootSourceOverrideMode` is PATCHed, even with an
 *   unchanged value (issue 16); Ironic avoids re-sending unchanged boot properties for the same reason
 *   ("some vendors require that it not be set if currently equal to desired state", story 2007355).
 *   The generic rule sends a Boot property only when it differs from the current or pending value.
 * - Supermicro X10-class boards (ComputerSystem v1_3_0) do not report `BootSourceOverrideMode` and
 *   reject a PATCH carrying it; the generic rule leaves out properties the service does not report.
 */

import type { ResetType } from './bmc.js';

export type VendorName = 'Dell' | 'HPE' | 'Lenovo' | 'Supermicro' | 'AMI' | 'Generic';

export interface VendorQuirks {
  readonly vendor: VendorName;
  /**
   * ResetTypes tried, in order, when `GracefulShutdown` is not allowed. Only used while the system is
   * `On`, because `PushPowerButton` on a system that is off powers it on.
   */
  readonly gracefulShutdownAlternatives: readonly ResetType[];
  /**
   * Whenever `BootSourceOverrideTarget` or `BootSourceOverrideEnabled` is PATCHed, send both: the
   * firmware ignores (or rejects) an override that does not carry both.
   */
  readonly bootTargetWithEnabled: boolean;
  /**
   * `If-Match` sent on PATCH when the resource exposes no ETag (neither header nor `@odata.etag`), for
   * firmware that answers 428 Precondition Required (RFC 6585) without one. `*` matches any current
   * representation (RFC 9110 §13.1.1). `undefined`: send no `If-Match` then.
   */
  readonly ifMatchWithoutETag: string | undefined;
  /**
   * Where the virtual media collection (VirtualMediaCollection) is looked for, in order: the
   * ComputerSystem's `VirtualMedia` link (Redfish 2021.1 moved it there; DMTF mockups, newer iDRAC) or
   * the `VirtualMedia` link of the system's Manager (`Links.ManagedBy`, else the first Manager).
   */
  readonly virtualMediaLocations: ReadonlyArray<'System' | 'Manager'>;
  /**
   * Send `Inserted: true` and `WriteProtected: true` with `VirtualMedia.InsertMedia`. Both are optional
   * and default to true (VirtualMedia.v1_6_0 `InsertMedia`); some firmware rejects them.
   */
  readonly insertMediaSendsFlags: boolean;
}

const GENERIC: VendorQuirks = {
  vendor: 'Generic',
  gracefulShutdownAlternatives: [],
  bootTargetWithEnabled: false,
  ifMatchWithoutETag: undefined,
  virtualMediaLocations: ['System', 'Manager'],
  insertMediaSendsFlags: true,
};

const ENTRIES: ReadonlyArray<{ match: RegExp; quirks: VendorQuirks }> = [
  {
    // iDRAC: the Manager resource carries no Manufacturer, so detection relies on the ComputerSystem's
    // ("Dell Inc.", captured R750 tree). Older firmware lacks GracefulRestart and rejects it with 400;
    // that is covered generically by honouring ResetType@Redfish.AllowableValues.
    // Virtual media: the captured R750 tree has both Systems/System.Embedded.1/VirtualMedia (1, 2:
    // CD/DVD/USBStick) and the older Managers/iDRAC.Embedded.1/VirtualMedia (CD, RemovableDisk); the
    // System's is the current one, the generic order (System first) picks it.
    match: /^dell\b/i,
    quirks: { ...GENERIC, vendor: 'Dell' },
  },
  {
    // iLO 4 does not offer GracefulShutdown; PushPowerButton on a running host is the ACPI button press.
    // The POST window (iLO.2.x.UnableToModifyDuringSystemPOST) is in TRANSIENT_MESSAGES below.
    // Virtual media: the captured DL385 Gen10 Plus v2 system has no VirtualMedia link; Managers/1/VirtualMedia
    // holds 1 (Floppy, USBStick) and 2 (CD, DVD): the CD is slot 2, found by its MediaTypes.
    match: /^(hpe?|hewlett[ -]packard)\b/i,
    quirks: {
      ...GENERIC,
      vendor: 'HPE',
      gracefulShutdownAlternatives: ['PushPowerButton'],
      virtualMediaLocations: ['Manager'],
    },
  },
  {
    // XCC (and AMI-based ThinkSystem firmware) answer 428 to a PATCH without If-Match.
    match: /^lenovo\b/i,
    quirks: { ...GENERIC, vendor: 'Lenovo', ifMatchWithoutETag: '*' },
  },
  {
    // "Supermicro BMCs handle it in the opposite manner - the persistent setting must be set when
    // setting the boot device" (Ironic redfish management `_set_boot_device`, story 2008547).
    // Virtual media: the captured SYS-821GE-TNHR links its system's VirtualMedia to Managers/1/VirtualMedia
    // (VirtualMedia1, VirtualMedia3: CD, DVD, Floppy, USBStick). Sushy leaves `Inserted` and
    // `WriteProtected` out of InsertMedia because "some BMCs (e.g. SuperMicro X...)" reject them.
    match: /^super\s*micro\b/i,
    quirks: {
      ...GENERIC,
      vendor: 'Supermicro',
      bootTargetWithEnabled: true,
      virtualMediaLocations: ['Manager'],
      insertMediaSendsFlags: false,
    },
  },
  {
    // AMI MegaRAC firmware (ASRockRack and other white-box boards) wants Target and Enabled together,
    // as Ironic's redfish driver always sends them together.
    match: /^(ami|american megatrends|asrock\s*rack)\b/i,
    quirks: { ...GENERIC, vendor: 'AMI', bootTargetWithEnabled: true },
  },
];

/** Vendor profile for a `Manufacturer` string (ComputerSystem or ServiceRoot `Vendor`); generic when unknown. */
export function quirksForManufacturer(manufacturer: string | undefined): VendorQuirks {
  const m = manufacturer?.trim() ?? '';
  return ENTRIES.find((e) => e.match.test(m))?.quirks ?? GENERIC;
}

/** Vendor profile by name (to force one instead of detecting it). */
export function quirksForVendor(vendor: VendorName): VendorQuirks {
  return ENTRIES.find((e) => e.quirks.vendor === vendor)?.quirks ?? GENERIC;
}

/**
 * `@Message.ExtendedInfo` MessageIds (`Registry.Major.Minor.Key`, any version) meaning "the request was
 * refused for now, nothing was changed; the same request will succeed shortly". Such a refusal is
 * retried with backoff inside the call's budget, whatever its HTTP status (commonly 400 or 409), and
 * then surfaced as busy rather than rejected. Anything not listed stays a permanent rejection.
 */
export const TRANSIENT_MESSAGES: ReadonlyArray<{ registry: string; key: string; source: string }> = [
  {
    registry: 'Base',
    key: 'ServiceTemporarilyUnavailable',
    source: 'DMTF Base registry: "The service is temporarily unavailable. Retry in %1 seconds."',
  },
  {
    registry: 'Base',
    key: 'ResourceInUse',
    source:
      'DMTF Base registry: "The change to the requested resource failed because the resource is in use or in transition."',
  },
  {
    registry: 'Base',
    key: 'ServiceShuttingDown',
    source:
      'DMTF Base registry: "The operation failed because the service is shutting down"; resolution: resubmit when available',
  },
  {
    registry: 'iLO',
    key: 'UnableToModifyDuringSystemPOST',
    source:
      'HPE iLO message registry: "cannot be changed while the computer system BIOS is in POST"; resolution: "After the computer system is either fully booted or powered off, retry the operation". NVIDIA libredfish treats it as the HPE POST race.',
  },
];

/** Whether `messageId` (e.g. `iLO.2.26.UnableToModifyDuringSystemPOST`) is in {@link TRANSIENT_MESSAGES}. */
export function isTransientMessageId(messageId: string): boolean {
  const parts = messageId.split('.');
  const registry = parts[0];
  const key = parts[parts.length - 1];
  return parts.length >= 2 && TRANSIENT_MESSAGES.some((m) => m.registry === registry && m.key === key);
}
