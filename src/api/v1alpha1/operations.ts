/**
 * The values of the operation annotation `metal.ironcore.dev/operation` (upstream metal-operator
 * `api/v1alpha1/constants.go`: `OperationAnnotation*`, the power operations of
 * `AnnotationToRedfishMapping`, `ParkedAnnotation`) and this project's one bookkeeping annotation
 * of its own. What each one does on which kind: src/controllers/server/server-operations.ts (Server) and
 * src/controllers/serverclaim/claim-operations.ts (ServerClaim).
 */
export { OPERATION_ANNOTATION, OPERATION_RETRY } from './boot-policy.js';

/** Skip reconciling the object entirely while set (upstream `OperationAnnotationIgnore`). */
export const OPERATION_IGNORE = 'ignore';
/** Take a Server out of the claim lifecycle: graceful power-off, then state `Parked`. */
export const OPERATION_PARK = 'park';
/** Return a parked Server to `Reserved` (claim reference set) or `Available`. */
export const OPERATION_UNPARK = 'unpark';
/** Rotate a BMCUser's password (upstream `OperationAnnotationRotateCredentials`). */
export const OPERATION_ROTATE_CREDENTIALS = 'rotate-credentials';

/**
 * Durable marker that a Server is parked (upstream `ParkedAnnotation`, value `true`): the state is
 * rebuilt from it after a status loss, and only `unpark` removes it.
 */
export const PARKED_ANNOTATION = 'metal.ironcore.dev/parked';

/**
 * Not upstream: a power operation taken from the operation annotation and not yet confirmed sent
 * (value `<operation> <RFC 3339 time>`). Written in the same patch that removes the operation, before
 * the BMC is asked; removed after. Found at start-up it means the manager stopped in between: the
 * operation is reported (`OperationInterrupted`) and never sent a second time.
 */
export const OPERATION_IN_PROGRESS_ANNOTATION = 'metal.ironcore.dev/operation-in-progress';

/** Upstream's power operations (`AnnotationToRedfishMapping` keys). */
export const POWER_OPERATIONS = [
  'graceful-restart-server',
  'hard-restart-server',
  'power-cycle-server',
  'force-off-server',
  'force-on-server',
  'graceful-restart-bmc',
] as const;
export type PowerOperation = (typeof POWER_OPERATIONS)[number];

export function isPowerOperation(op: string | undefined): op is PowerOperation {
  return (POWER_OPERATIONS as readonly string[]).includes(op ?? '');
}
