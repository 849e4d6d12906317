/**
 * "Is this attempt's power-on recorded?" — the gate in front of an attempt's iPXE script (security
 * review S3). Firmware cannot authenticate, so the script (and the attempt token in it) must not be
 * handed out before the operator decided to power the server on for this very attempt: before that
 * moment, anyone who polls `/ipxe/{uuid}` (UUIDs travel in DHCP option 97) would get the token first.
 *
 * The controllers write the intent before they ask the BMC (restart safety): `poweredOnAt` in the
 * attempt bookkeeping of the SBC's controller owner, whose `attempt` is the SBC's `spec.bootAttempt`
 * (one numbering, docs/ARCHITECTURE.md, 'A boot attempt'). The intent of the SBC's current attempt is recorded when
 * - owner Server (discovery): `status.discovery.poweredOnAt` is set and `status.discovery.attempt`
 *   equals `spec.bootAttempt`; the same of `status.cleanup` for the cleanup boot after a release
 *   (SBC label `metal.ironcore.dev/boot-purpose: cleanup`);
 * - owner ServerClaim: the same of `status.boot`.
 * A hand-made SBC (upstream's shape: no controller owner of these kinds) is not gated: this operator
 * never powers its server on, so there is no intent to wait for; the script pin still applies.
 *
 * The owner is read from the API (a cache may lag the intent by the time the host fetches; the
 * Server's cached copy is used when it already shows the intent, and so is the claim's when the
 * boot server is given a claims cache); concurrent fetches for one SBC
 * share one read ({@link SingleFlight} without pacing: a remembered "not yet" could refuse the host
 * that fetches right after its power-on). Reads are budgeted per owner (security review N4:
 * {@link OWNER_READS}, a burst of 5 then one per second; beyond it `AwaitingPowerOn` without a
 * read), so a flood of fetches costs the API server about one read per owner per second; a host
 * that waits the `Retry-After` it is told never meets the bound. Refusals do not spend the
 * per-address 401 budget, because hosts behind one address (NAT, a relay, simulated hosts) must not
 * lock each other out of their scripts.
 */
import { BOOT_PURPOSE_CLEANUP, BOOT_PURPOSE_LABEL } from '../api/v1alpha1/boot-policy.js';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import type { KubeClient } from '../runtime/client.js';
import type { Informer } from '../runtime/informer.js';
import { type KObject, Resources } from '../runtime/resource.js';
import { AuthFailureLimit } from './auth-failure-limit.js';
import { apiFailure } from './boot-target.js';
import { HttpError } from './http-error.js';
import { SingleFlight } from './single-flight.js';

/** Seconds a host is told to wait when the power-on of its attempt is not recorded (yet). */
export const AWAITING_POWER_ON_RETRY_SECONDS = 5;

function controllerOwner(sbc: ServerBootConfiguration) {
  return sbc.metadata.ownerReferences?.find((r) => r.controller);
}

/** True when the SBC is a Server's cleanup boot (label {@link BOOT_PURPOSE_LABEL}). */
export function isCleanupAttempt(sbc: ServerBootConfiguration): boolean {
  return sbc.metadata.labels?.[BOOT_PURPOSE_LABEL] === BOOT_PURPOSE_CLEANUP;
}

/** The owner's bookkeeping of its current attempt (`status.discovery` / `status.cleanup` of a Server, `status.boot` of a claim). */
function attemptBook(
  kind: string,
  owner: KObject,
  sbc: ServerBootConfiguration,
): { attempt?: number; poweredOnAt?: string } | undefined {
  if (kind === 'Server')
    return isCleanupAttempt(sbc) ? (owner as Server).status?.cleanup : (owner as Server).status?.discovery;
  if (kind === 'ServerClaim') return (owner as ServerClaim).status?.boot;
  return undefined;
}

/** True when `owner` (the SBC's controller owner, fresh or cached) records the power-on of the SBC's current attempt. */
export function intentRecorded(sbc: ServerBootConfiguration, owner: KObject | undefined): boolean {
  const ref = controllerOwner(sbc);
  if (!ref || !owner || owner.metadata.uid !== ref.uid) return false;
  const book = attemptBook(ref.kind, owner, sbc);
  return !!book?.poweredOnAt && book.attempt === (sbc.spec.bootAttempt ?? 1);
}

/** True when the SBC's controller owner is a Server and it is no cleanup boot: a discovery attempt. */
export function isDiscoveryAttempt(sbc: ServerBootConfiguration): boolean {
  return controllerOwner(sbc)?.kind === 'Server' && !isCleanupAttempt(sbc);
}

/** Live owner reads per owner (security review N4): a burst of 5, then one per second. */
export const OWNER_READS = { burst: 5, perSecond: 1 } as const;

function awaitingPowerOn(): HttpError {
  return new HttpError(
    503,
    'AwaitingPowerOn',
    'the power-on of this boot attempt is not recorded; the script is served only after it',
    AWAITING_POWER_ON_RETRY_SECONDS,
  );
}

export class PowerIntentGate {
  private readonly flights = new SingleFlight<KObject | undefined>(0);
  /** Per-owner read budget: beyond it the answer is `AwaitingPowerOn` without a read. */
  private readonly budget = new AuthFailureLimit(OWNER_READS);

  constructor(
    private readonly client: KubeClient,
    /** Cached claims: one that shows the intent already is not read again. */
    private readonly claims?: Informer<ServerClaim>,
  ) {}

  /**
   * Resolves when the power-on of `sbc`'s current attempt is recorded, or at once for a hand-made
   * SBC (see the file comment). Throws `HttpError` 503
   * `AwaitingPowerOn` (with `Retry-After`) when it is not, 503 `APIUnavailable` when the owner
   * cannot be read.
   */
  async require(sbc: ServerBootConfiguration, cachedServer: Server | undefined): Promise<void> {
    if (intentRecorded(sbc, cachedServer)) return;
    const ref = controllerOwner(sbc);
    if (ref?.kind !== 'Server' && ref?.kind !== 'ServerClaim') return;
    if (ref.kind === 'ServerClaim' && intentRecorded(sbc, this.claims?.get(ref.name, sbc.metadata.namespace)))
      return;
    const rt = ref.kind === 'Server' ? Resources.Server : Resources.ServerClaim;
    const ns = ref.kind === 'Server' ? undefined : sbc.metadata.namespace;
    const key = `${ref.kind}/${ns ?? ''}/${ref.name}`;
    if (this.budget.retryAfterSeconds(key) > 0) throw awaitingPowerOn();
    const read = await this.flights.do(key, async () => {
      this.budget.fail(key); // spends one read of the owner's budget
      try {
        return await this.client.get<KObject>(rt, ref.name, ns);
      } catch (err) {
        apiFailure(err, `reading the ${ref.kind} of the boot configuration`);
      }
    });
    if (intentRecorded(sbc, read.value)) return;
    throw awaitingPowerOn();
  }
}
