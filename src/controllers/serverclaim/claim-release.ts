/**
 * Releasing a deleted claim: the Server is released only once the BMC reports it Off (or the
 * force-release annotation says to go on without it, told as Warnings), so the next tenant never
 * gets a machine the previous OS still runs on; while it waits, `Released=False` says why. A parked
 * or ignored Server holds the release. Then the SBC and the claim's finalizer go.
 */
import type pino from 'pino';
import { FORCE_RELEASE_ANNOTATION } from '../../api/v1alpha1/boot-policy.js';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import { ConditionType, EventReason, ReleaseReason } from '../../api/vocabulary.js';
import { findCondition } from '../../runtime/conditions.js';
import type { Result } from '../../runtime/controller.js';
import { hasFinalizer, removeFinalizer } from '../../runtime/finalizers.js';
import { Resources } from '../../runtime/resource.js';
import { type PowerProgress, powerRetry } from '../bmc-actions/power.js';
import { formatDuration } from '../common/duration.js';
import type { ClaimBinding } from './claim-binding.js';
import type { ServerClaimControllerOptions } from './claim-context.js';
import { serverHold } from './claim-operations.js';
import type { ClaimStatusWriter } from './claim-status.js';

export const CLAIM_FINALIZER = 'metal.ironcore.dev/serverclaim';

/** The claim's release on deletion, and a held deletion of its Server. */
export class ClaimRelease {
  /** How long a deleted claim waits for its Server to be observed Off before saying so loudly, ms. */
  private readonly releaseTimeoutMs: number;
  /** `claim uid/server uid` of held Server deletions told on the claim. */
  private readonly deletionHeld = new Set<string>();

  constructor(
    private readonly o: ServerClaimControllerOptions,
    private readonly status: ClaimStatusWriter,
    private readonly binding: ClaimBinding,
  ) {
    this.releaseTimeoutMs = Math.max(o.config.powerActionResendMs * 2, 60_000);
  }

  /**
   * Deletion: the Server is released only once the BMC reports it Off, so the next tenant never gets
   * a machine the previous OS still runs on. While it waits, the claim's `Released` condition says why.
   */
  async finalize(claim: ServerClaim, log: pino.Logger): Promise<Result | undefined> {
    if (!hasFinalizer(claim, CLAIM_FINALIZER)) return undefined;
    const server = await this.binding.boundServer(claim);
    const hold = server && serverHold(server);
    if (server && hold) return this.holdRelease(claim, hold, log);
    if (server) {
      const p = await this.o.power.ensure(server, 'Off');
      const forced = !p.reached && claim.metadata.annotations?.[FORCE_RELEASE_ANNOTATION] === 'true';
      if (!p.reached && !forced) return this.waitForOff(claim, server, p, log);
      if (forced) this.tellForcedRelease(claim, server, p, log);
      const ref = server.spec.bootConfigurationRef;
      const mine = ref?.name === claim.metadata.name && ref?.namespace === claim.metadata.namespace;
      await this.o.client.mergePatch(Resources.Server, server.metadata.name ?? '', undefined, {
        spec: { serverClaimRef: null, power: null, ...(mine ? { bootConfigurationRef: null } : {}) },
      });
      log.info({ server: server.metadata.name }, 'released');
      this.o.events.record(
        Resources.ServerClaim,
        claim,
        'Normal',
        EventReason.Released,
        `Server ${server.metadata.name} released`,
      );
    }
    await this.o.bootConfigs.delete(claim.metadata.name ?? '', claim.metadata.namespace ?? '');
    await removeFinalizer(this.o.client, Resources.ServerClaim, claim, CLAIM_FINALIZER);
    return undefined;
  }

  /**
   * A release without power Off observed, asked for by {@link FORCE_RELEASE_ANNOTATION}: recorded as
   * a Warning Event on the claim and on the Server (which outlives the claim), and at warn.
   */
  private tellForcedRelease(claim: ServerClaim, server: Server, p: PowerProgress, log: pino.Logger): void {
    const why = p.pending ?? `PowerState ${p.state}`;
    const risk = `the BMC never confirmed power Off (${why}): the machine may still run the previous tenant's OS until the BMC powers it off`;
    const claimName = `${claim.metadata.namespace}/${claim.metadata.name}`;
    log.warn(
      { server: server.metadata.name, pending: p.pending },
      'released without power off (force-release)',
    );
    this.o.events.record(
      Resources.ServerClaim,
      claim,
      'Warning',
      EventReason.ForcedRelease,
      `Server ${server.metadata.name} released by ${FORCE_RELEASE_ANNOTATION}; ${risk}`,
    );
    this.o.events.record(
      Resources.Server,
      server,
      'Warning',
      EventReason.ForcedRelease,
      `released by ServerClaim ${claimName} with ${FORCE_RELEASE_ANNOTATION}; ${risk}`,
    );
  }

  /** A deleted claim whose Server is parked or ignored: nothing is powered; `Released=False` says why. */
  private async holdRelease(
    claim: ServerClaim,
    hold: { reason: string; message: string },
    log: pino.Logger,
  ): Promise<Result> {
    const prior = findCondition(claim.status?.conditions, ConditionType.Released);
    await this.status.save(claim, {
      conditions: [{ type: ConditionType.Released, status: 'False', ...hold }],
    });
    if (prior?.reason !== hold.reason) {
      log.warn(hold, 'release held');
      this.o.events.record(Resources.ServerClaim, claim, 'Warning', EventReason.ReleaseHeld, hold.message);
    }
    return { requeueAfterMs: 30_000 };
  }

  private async waitForOff(
    claim: ServerClaim,
    server: Server,
    p: PowerProgress,
    log: pino.Logger,
  ): Promise<Result> {
    const waited = Date.now() - Date.parse(claim.metadata.deletionTimestamp ?? '');
    const late = Number.isFinite(waited) && waited > this.releaseTimeoutMs;
    const reason = late ? ReleaseReason.PowerOffTimedOut : ReleaseReason.WaitingForPowerOff;
    const message = `Server ${server.metadata.name} is released once the BMC reports it Off (${p.pending ?? `PowerState ${p.state}`})${late ? `; still not Off after ${formatDuration(waited)}; to release without it: metalctl release --force (annotation ${FORCE_RELEASE_ANNOTATION}=true)` : ''}`;
    const prior = findCondition(claim.status?.conditions, ConditionType.Released);
    await this.status.save(claim, {
      conditions: [{ type: ConditionType.Released, status: 'False', reason, message }],
    });
    if (prior?.reason !== reason) {
      log.warn({ pending: p.pending }, 'waiting for power off before releasing the server');
      this.o.events.record(
        Resources.ServerClaim,
        claim,
        late ? 'Warning' : 'Normal',
        EventReason.WaitingForPowerOff,
        message,
      );
    }
    return powerRetry(p);
  }

  /**
   * The bound Server was deleted: its finalizer holds it until this claim releases it, and the claim
   * goes on as before (no re-discovery, no power action). Told once per process on the claim too,
   * as a Warning (the tenant reads the claim, not the Server).
   */
  tellDeletionHeld(claim: ServerClaim, server: Server, log: pino.Logger): void {
    const key = `${claim.metadata.uid}/${server.metadata.uid}`;
    if (this.deletionHeld.has(key)) return;
    if (this.deletionHeld.size >= 10_000) this.deletionHeld.clear();
    this.deletionHeld.add(key);
    log.warn({ server: server.metadata.name }, 'bound server deleted; held until this claim releases it');
    this.o.events.record(
      Resources.ServerClaim,
      claim,
      'Warning',
      EventReason.ServerDeletionHeld,
      `Server ${server.metadata.name} was deleted; its deletion waits until this claim is deleted, and the machine keeps running`,
    );
  }
}
