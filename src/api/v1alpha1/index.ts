/** metal.ironcore.dev/v1alpha1: every kind this operator serves, in CRD generation order. */
import { BMCKind } from './bmc.js';
import { BMCSecretKind } from './bmcsecret.js';
import { BMCUserKind } from './bmcuser.js';
import { EndpointKind } from './endpoint.js';
import type { KindDefinition } from './schema.js';
import { ServerKind } from './server.js';
import { ServerBootConfigurationKind } from './serverbootconfiguration.js';
import { ServerClaimKind } from './serverclaim.js';
import { ServerReadinessRuleKind } from './serverreadinessrule.js';

export type { BMC } from './bmc.js';
export type { BMCSecret } from './bmcsecret.js';
export * from './boot-policy.js';
export type { Endpoint } from './endpoint.js';
export { API_VERSION, type Condition, GROUP, type ObjectMeta, VERSION } from './schema.js';
export type { Server, ServerState } from './server.js';
export type { SBCState, ServerBootConfiguration } from './serverbootconfiguration.js';
export type { BootCompletion, ServerClaim } from './serverclaim.js';

export const KINDS: readonly KindDefinition[] = [
  EndpointKind,
  BMCSecretKind,
  BMCKind,
  ServerKind,
  ServerClaimKind,
  ServerBootConfigurationKind,
  BMCUserKind,
  ServerReadinessRuleKind,
];
