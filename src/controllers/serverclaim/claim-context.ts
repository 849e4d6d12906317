/**
 * What every part of the ServerClaim controller shares: its options, the claim's condition types,
 * the shapes of `status.boot` and of a condition to set.
 * Vocabulary only: no I/O.
 */
import type pino from 'pino';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import { ConditionType } from '../../api/vocabulary.js';
import type { BootImages } from '../../oci/boot-images.js';
import type { KubeClient } from '../../runtime/client.js';
import type { Condition } from '../../runtime/conditions.js';
import type { EventRecorder } from '../../runtime/events.js';
import type { Informer } from '../../runtime/informer.js';
import type { RuntimeMetrics } from '../../runtime/metrics.js';
import type { PowerActions } from '../bmc-actions/power.js';
import type { BootConfigurations } from '../common/boot-configuration.js';
import type { ControllerConfig } from '../common/config.js';
import type { BootMetrics } from '../common/metrics.js';

export const BOUND_CONDITION = ConditionType.Bound;

export const BOOT_CONFIGURATION_READY_CONDITION = ConditionType.BootConfigurationReady;

export const BOOTED_CONDITION = ConditionType.Booted;

export type Boot = NonNullable<NonNullable<ServerClaim['status']>['boot']>;

export type CondInput = Omit<Condition, 'lastTransitionTime' | 'observedGeneration'> & {
  observedGeneration?: number;
};

export interface ServerClaimControllerOptions {
  client: KubeClient;
  claims: Informer<ServerClaim>;
  servers: Informer<Server>;
  sbcs: Informer<ServerBootConfiguration>;
  bootConfigs: BootConfigurations;
  power: PowerActions;
  events: EventRecorder;
  log: pino.Logger;
  metrics?: RuntimeMetrics;
  bootMetrics: BootMetrics;
  config: ControllerConfig;
  /** OCI resolution: an image edit that resolves to the booted manifest does not re-provision. */
  images?: BootImages;
}
