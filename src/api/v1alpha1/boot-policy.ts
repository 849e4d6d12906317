/**
 * Boot policy vocabulary shared by ServerClaim and ServerBootConfiguration
 * (README, 'A claim's boot attempts'; additions to upstream).
 */
import { StringEnum } from './schema.js';

/**
 * NetBootAlways: every power-on of the claimed server network-boots the image (upstream behaviour).
 * NetBootOnce: only provisioning attempts network-boot; once the claim is Booted the server boots from disk.
 */
export const BOOT_POLICIES = ['NetBootAlways', 'NetBootOnce'] as const;
export type BootPolicy = (typeof BOOT_POLICIES)[number];
export const BootPolicySchema = (description: string) => StringEnum(BOOT_POLICIES, { description });

/** The boot signal names live in the vocabulary (src/api/vocabulary.ts); re-exported for the schemas. */
export { BootSignal } from '../vocabulary.js';

/** Annotation that, set to `retry`, starts a fresh series of boot attempts on an exhausted claim. */
export const OPERATION_ANNOTATION = 'metal.ironcore.dev/operation';
export const OPERATION_RETRY = 'retry';

/**
 * Annotation on a ServerClaim, value `true`: its deletion releases the Server without the BMC
 * confirming power Off (a dead BMC). Recorded as a Warning Event on the claim and the Server: the
 * machine may still run the previous tenant's OS (`metalctl release --force`).
 */
export const FORCE_RELEASE_ANNOTATION = 'metal.ironcore.dev/force-release';

/** Annotation on a ServerBootConfiguration: the owner's key of the attempt `spec.bootAttempt` currently is. */
export const ATTEMPT_KEY_ANNOTATION = 'metal.ironcore.dev/attempt-key';

/**
 * Label on a ServerBootConfiguration owned by a Server: `cleanup` marks the cleanup boot after a
 * release (bookkeeping in the Server's `status.cleanup`, no registration writes); without it a
 * Server-owned SBC is a discovery boot (`status.discovery`).
 */
export const BOOT_PURPOSE_LABEL = 'metal.ironcore.dev/boot-purpose';
export const BOOT_PURPOSE_CLEANUP = 'cleanup';
