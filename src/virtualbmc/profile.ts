/**
 * How the virtual BMC's Redfish service presents itself: the legitimate variations between real
 * implementations (not faults), so the client's handling of each can be exercised.
 */

import type { ResetType } from '../bmc/bmc.js';

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
   * (applied immediately), a PATCH of the system itself gets 405.
   */
  settingsObject: boolean;
  /** Answer `428 Precondition Required` to a PATCH without `If-Match`. */
  requireIfMatch: boolean;
  /** Expose ETags (`ETag` header, `@odata.etag`). If-Match is evaluated either way; `*` always matches. */
  etags: boolean;
  /** Systems report no `UUID` (a real failure mode, boot-flow case C01). */
  omitSystemUUID: boolean;
  /** Report `Boot.BootSourceOverrideMode`; older firmware does not, and rejects PATCHes that set it. */
  reportBootMode: boolean;
  /** Idle session lifetime in seconds (`SessionService.SessionTimeout`). */
  sessionTimeoutSeconds: number;
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
  requireIfMatch: false,
  etags: true,
  omitSystemUUID: false,
  reportBootMode: true,
  sessionTimeoutSeconds: 1800,
};
