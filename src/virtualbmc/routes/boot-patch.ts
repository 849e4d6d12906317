/**
 * The Boot object of a ComputerSystem PATCH (ComputerSystem.v1_22_0 `Boot`), as the profile allows
 * it: {@link parseBootPatch} validates the body (400 `PropertyNotWritable` for another property,
 * `PropertyValueTypeError`, `PropertyUnknown`, `PropertyValueNotInList`, `PropertyValueFormatError`);
 * {@link hpePostError} is the body HPE iLO refuses a change during POST with. Pure, apart from throwing.
 */
import { BOOT_SOURCE_OVERRIDE_ENABLED, BOOT_SOURCE_OVERRIDE_MODES } from '../../bmc/bmc.js';
import type { ServiceProfile } from '../profile.js';
import type { BootOverrideState } from '../system.js';
import { fail } from './reply.js';

const BOOT_PROPERTIES = [
  'BootSourceOverrideTarget',
  'BootSourceOverrideEnabled',
  'BootSourceOverrideMode',
  'HttpBootUri',
] as const;

/** The Redfish property name of each field of {@link BootOverrideState}. */
export const BOOT_PROPERTY_OF: Record<keyof BootOverrideState, (typeof BOOT_PROPERTIES)[number]> = {
  target: 'BootSourceOverrideTarget',
  enabled: 'BootSourceOverrideEnabled',
  mode: 'BootSourceOverrideMode',
  httpBootUri: 'HttpBootUri',
};

/** Validates a PATCH body for the Boot object (ComputerSystem.v1_22_0 `Boot`). */
export function parseBootPatch(
  body: Record<string, unknown>,
  profile: ServiceProfile,
): Partial<BootOverrideState> {
  for (const key of Object.keys(body)) {
    if (key !== 'Boot' && !key.startsWith('@'))
      fail(400, 'PropertyNotWritable', `property ${key} is read-only`);
  }
  const boot = body['Boot'];
  if (typeof boot !== 'object' || boot === null || Array.isArray(boot)) {
    return fail(400, 'PropertyValueTypeError', 'Boot must be an object');
  }
  const changes: Partial<BootOverrideState> = {};
  for (const [key, value] of Object.entries(boot)) {
    if (
      !(BOOT_PROPERTIES as readonly string[]).includes(key) ||
      (key === 'BootSourceOverrideMode' && !profile.reportBootMode)
    ) {
      fail(400, 'PropertyUnknown', `property Boot/${key} is not supported`);
    }
    if (key === 'BootSourceOverrideTarget') {
      if (typeof value !== 'string' || !profile.bootTargets.includes(value))
        fail(400, 'PropertyValueNotInList', `Boot/${key} ${String(value)}`);
      changes.target = value as string;
    } else if (key === 'HttpBootUri') {
      if (!profile.bootTargets.includes('UefiHttp') || profile.reportHttpBootUri === false)
        fail(400, 'PropertyUnknown', `property Boot/${key} is not supported`);
      if (value !== null && (typeof value !== 'string' || !/^https?:\/\/\S+$/.test(value)))
        fail(400, 'PropertyValueFormatError', `Boot/${key} must be an http(s) URI or null`);
      changes.httpBootUri = value as string | null;
    } else if (key === 'BootSourceOverrideEnabled') {
      if (!(BOOT_SOURCE_OVERRIDE_ENABLED as readonly unknown[]).includes(value))
        fail(400, 'PropertyValueNotInList', `Boot/${key} ${String(value)}`);
      changes.enabled = value as string;
    } else {
      if (!(BOOT_SOURCE_OVERRIDE_MODES as readonly unknown[]).includes(value))
        fail(400, 'PropertyValueNotInList', `Boot/${key} ${String(value)}`);
      changes.mode = value as string;
    }
  }
  return changes;
}

/** The error body HPE iLO 5 sends for a Boot change during POST (captured shape: `error.@Message.ExtendedInfo`). */
export function hpePostError(keys: string[]): Record<string, unknown> {
  return {
    error: {
      code: 'iLO.0.10.ExtendedInfo',
      message: 'See @Message.ExtendedInfo for more information.',
      '@Message.ExtendedInfo': [
        {
          MessageArgs: keys.map((k) => BOOT_PROPERTY_OF[k as keyof BootOverrideState] ?? k),
          MessageId: 'iLO.2.26.UnableToModifyDuringSystemPOST',
        },
      ],
    },
  };
}
