/**
 * Typed errors of the BMC layer, so that a controller can turn each into a condition reason and a
 * requeue decision without parsing messages. Messages never contain credentials or session tokens.
 */

import type { BootSourceOverrideTarget, ResetType } from './bmc.js';
import { isTransientMessageId } from './vendor.js';

/** Base class: every error the BMC layer throws on purpose. */
export class BmcError extends Error {
  override name = 'BmcError';
}

/** Redfish error body (`error.code`, `error.@Message.ExtendedInfo[].MessageId`), see Redfish spec §9.9. */
export interface RedfishErrorInfo {
  code: string | undefined;
  message: string | undefined;
  messageIds: string[];
}

/** The BMC answered with an HTTP status ≥ 400 that was not retried (or retries ran out). */
export class RedfishHttpError extends BmcError {
  override name = 'RedfishHttpError';
  /**
   * The refusal carries a MessageId of `TRANSIENT_MESSAGES` (`vendor.ts`): the service is busy (HPE
   * POST window, `Base.*.ResourceInUse`, ...), nothing changed, the same request succeeds shortly.
   */
  readonly transient: boolean;
  constructor(
    readonly method: string,
    readonly path: string,
    readonly status: number,
    readonly info: RedfishErrorInfo,
    /** `Retry-After` of the response in ms, when it carried one. */
    readonly retryAfterMs?: number,
  ) {
    const detail = info.messageIds.length > 0 ? ` (${info.messageIds.join(', ')})` : '';
    super(`${method} ${path}: HTTP ${status}${detail}${info.message ? `: ${info.message}` : ''}`);
    this.transient = info.messageIds.some(isTransientMessageId);
  }
}

/** 401 on login or with fresh credentials: the BMC refuses the user name / password. */
export class RedfishAuthError extends RedfishHttpError {
  override name = 'RedfishAuthError';
}

/**
 * No HTTP response: connection refused/reset/closed (`connection`), the per-request timeout
 * (`timeout`), or the BMC's certificate was not accepted (`tls`, not retried: it will not change).
 */
export class RedfishTransportError extends BmcError {
  override name = 'RedfishTransportError';
  constructor(
    readonly method: string,
    readonly path: string,
    readonly kind: 'timeout' | 'connection' | 'tls',
    /**
     * False only when the request certainly never reached the BMC (connection refused); otherwise the
     * BMC may have acted on it, which matters for non-idempotent actions such as `ForceRestart`.
     */
    readonly maybeApplied: boolean,
    options?: { cause?: unknown },
  ) {
    super(`${method} ${path}: ${KIND_TEXT[kind]}${describeCause(options?.cause)}`, options);
  }
}

/** Retries stopped because the call's time budget ran out; `cause` is the last failure. */
export class RedfishBudgetExceededError extends BmcError {
  override name = 'RedfishBudgetExceededError';
  constructor(
    readonly method: string,
    readonly path: string,
    readonly attempts: number,
    /** Time spent in ms. */
    readonly elapsedMs: number,
    /** The BMC's own `Retry-After` (ms) when it asked for a longer pause than the budget left: requeue after it. */
    readonly retryAfterMs: number | undefined,
    options: { cause: unknown },
  ) {
    super(
      `${method} ${path}: gave up after ${attempts} attempt(s) in ${Math.round(elapsedMs)} ms${describeCause(options.cause)}`,
      options,
    );
  }
}

/**
 * Whether a failure means "the BMC is busy, nothing was changed, try again in a few seconds": a refusal
 * with a transient MessageId, or a call whose retries of one ran out of budget. Callers report it as a
 * pending state rather than a Warning.
 */
export function isBmcBusy(err: unknown): boolean {
  if (err instanceof RedfishBudgetExceededError) return isBmcBusy(err.cause);
  return err instanceof RedfishHttpError && err.transient;
}

/** The system does not offer any ResetType that would do what was asked. */
export class ResetTypeNotSupportedError extends BmcError {
  override name = 'ResetTypeNotSupportedError';
  constructor(
    readonly systemUri: string,
    readonly wanted: readonly ResetType[],
    readonly allowed: readonly ResetType[],
  ) {
    super(
      `${systemUri}: none of ResetType ${wanted.join('/')} is allowed (ResetType@Redfish.AllowableValues: ${allowed.join(', ') || 'none'})`,
    );
  }
}

/** The requested boot target is not in `BootSourceOverrideTarget@Redfish.AllowableValues`. */
export class BootTargetNotSupportedError extends BmcError {
  override name = 'BootTargetNotSupportedError';
  constructor(
    readonly systemUri: string,
    readonly target: BootSourceOverrideTarget,
    readonly allowed: readonly BootSourceOverrideTarget[],
  ) {
    super(`${systemUri}: boot target ${target} is not allowed (allowed: ${allowed.join(', ')})`);
  }
}

/** The system has no `Boot.HttpBootUri` (ComputerSystem v1_9_0+): it cannot be told what to fetch over UEFI HTTP boot. */
export class HttpBootUriNotSupportedError extends BmcError {
  override name = 'HttpBootUriNotSupportedError';
  constructor(readonly systemUri: string) {
    super(
      `${systemUri}: the BMC offers no Boot.HttpBootUri, so UEFI HTTP boot of a given URI cannot be set; use bootMethod PXE`,
    );
  }
}

/** The system has no virtual media device for CDs (no VirtualMedia collection, or no member with MediaTypes CD/DVD and InsertMedia). */
export class VirtualMediaNotSupportedError extends BmcError {
  override name = 'VirtualMediaNotSupportedError';
  constructor(
    readonly systemUri: string,
    readonly looked: readonly string[],
  ) {
    super(
      `${systemUri}: no virtual media device for CD/DVD with InsertMedia (looked at ${looked.join(', ') || 'no VirtualMedia collection'}); use bootMethod PXE or HTTPBoot`,
    );
  }
}

const KIND_TEXT = {
  timeout: 'request timed out',
  connection: 'connection failed',
  tls: 'TLS certificate not accepted',
} as const;

function describeCause(cause: unknown): string {
  if (cause instanceof Error) return `: ${cause.message}`;
  return '';
}
