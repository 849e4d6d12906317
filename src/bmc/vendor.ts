/**
 * The one place where vendor differences live. The Redfish implementation asks
 * {@link quirksForManufacturer} for a {@link VendorQuirks} record and never tests vendor names
 * itself; adding a vendor means adding an entry here.
 *
 * Everything the standard already expresses (ResetType and boot-target allowable values, ETags,
 * `@Redfish.Settings`, `@Redfish.ActionInfo`) is handled generically; an entry only records what a
 * vendor does beyond or against the standard.
 */

import type { ResetType } from './bmc.js';

export type VendorName = 'Dell' | 'HPE' | 'Lenovo' | 'Supermicro' | 'Generic';

export interface VendorQuirks {
  readonly vendor: VendorName;
  /**
   * ResetTypes tried, in order, when `GracefulShutdown` is not allowed. Only used while the system is
   * `On`, because `PushPowerButton` on a system that is off powers it on.
   */
  readonly gracefulShutdownAlternatives: readonly ResetType[];
  /**
   * `when-changed`: send `BootSourceOverrideMode` only when it differs from the wanted mode.
   * `always-when-reported`: whenever the Boot object is PATCHed and the system reports the property,
   * send it too (the override is otherwise ignored by some firmware).
   */
  readonly bootOverrideMode: 'when-changed' | 'always-when-reported';
  /**
   * `If-Match` sent on PATCH when the resource exposes no ETag (neither header nor `@odata.etag`), for
   * firmware that answers 428 Precondition Required (RFC 6585) without one. `*` matches any current
   * representation (RFC 9110 §13.1.1). `undefined`: send no `If-Match` then.
   */
  readonly ifMatchWithoutETag: string | undefined;
}

const GENERIC: VendorQuirks = {
  vendor: 'Generic',
  gracefulShutdownAlternatives: [],
  bootOverrideMode: 'when-changed',
  ifMatchWithoutETag: undefined,
};

const ENTRIES: ReadonlyArray<{ match: RegExp; quirks: VendorQuirks }> = [
  {
    // iDRAC: the Manager resource carries no Manufacturer, so detection relies on the ComputerSystem's
    // ("Dell Inc."). Older firmware lacks GracefulRestart and rejects it with 400; that is covered
    // generically by honouring ResetType@Redfish.AllowableValues.
    match: /^dell\b/i,
    quirks: { ...GENERIC, vendor: 'Dell' },
  },
  {
    // iLO 4 does not offer GracefulShutdown; PushPowerButton on a running host is the ACPI button press.
    match: /^(hpe?|hewlett[ -]packard)\b/i,
    quirks: { ...GENERIC, vendor: 'HPE', gracefulShutdownAlternatives: ['PushPowerButton'] },
  },
  {
    // XCC (and AMI-based ThinkSystem firmware) answer 428 to a PATCH without If-Match.
    match: /^lenovo\b/i,
    quirks: { ...GENERIC, vendor: 'Lenovo', ifMatchWithoutETag: '*' },
  },
  {
    // Newer boards apply a boot override only with BootSourceOverrideMode sent explicitly; older ones
    // (ComputerSystem v1_3_0, X10 series) do not report the property and reject PATCHes carrying it.
    match: /^super\s*micro\b/i,
    quirks: { ...GENERIC, vendor: 'Supermicro', bootOverrideMode: 'always-when-reported' },
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
