/**
 * ServerClaim controller: binds a Server, provisions it through a ServerBootConfiguration, and knows
 * whether the boot completed. This file is the order of concerns; each concern is a part of its own:
 * binding (claim-binding.ts), the boot (claim-attempt.ts), release on deletion (claim-release.ts),
 * the one status writer (claim-status.ts), operations (claim-operations.ts), edits (claim-edits.ts),
 * eviction by a taint (claim-eviction.ts).
 *
 * Binding (race-safe): an eligible Server (see server-selection.ts) is bound by writing
 * `Server.spec.serverClaimRef` with the resourceVersion it was chosen on; of several claims racing for
 * one Server exactly one write succeeds (the others get 409 and try the next candidate), and the CRD
 * makes the reference immutable once set. Then the claim records `spec.serverRef`.
 *
 * Provisioning: an SBC named like the claim (owned by it; image, ignition, boot policy, callback
 * Secret), referenced by `Server.spec.bootConfigurationRef`. Nothing is powered on before the SBC is
 * Ready, and not before the Server controller has marked the Server Reserved (boot-flow case C05).
 *
 * Attempts (`status.boot`, stored so a restarted manager continues): a series of at most
 * `maxAttempts` attempts, each with a fresh token (SBC `bootAttempt` bumped) and a deadline that starts
 * at power-on. An attempt completes when every condition of `bootCompletion.conditions` is True for
 * it; at the deadline the claim records which signals arrived and which are missing (condition
 * message and Event, C07) and power-cycles into the next attempt; after the last one,
 * `Booted=False, AttemptsExhausted`, a Warning Event, and no further power actions (C08) until the
 * claim's spec changes or it carries `metal.ironcore.dev/operation: retry` (consumed, fresh series).
 * The intent (`poweredOnAt`, `deadline`) is written before the BMC is asked, so a restart between
 * the two never acts twice.
 *
 * Boot policy: NetBootAlways sets a persistent network boot override (`Continuous`; `Once` where the
 * BMC refuses it) before every power-on, so a reset made at the BMC boots the image again, and a
 * power-on after `power: Off` starts a new series. NetBootOnce sets it only
 * until the claim is Booted; then the SBC's `BootCompleted` condition makes the boot server answer
 * with a local-boot script, and `Off` → `On` just powers on (C06).
 *
 * Deleting a claim powers the Server off, deletes the SBC and its Secret, and clears the Server's
 * references; the Server controller then makes it Available. The operation annotation (`ignore` on
 * the claim; a parked or ignored Server, where this controller stands down): claim-operations.ts.
 */
import type pino from 'pino';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import { BoundReason } from '../../api/vocabulary.js';
import { Controller, type Request, type Result } from '../../runtime/controller.js';
import { addFinalizer } from '../../runtime/finalizers.js';
import { Resources } from '../../runtime/resource.js';
import { evictingTaint } from '../server/taints.js';
import { ClaimAttempts } from './claim-attempt.js';
import { ClaimBinding, watchServersForClaims } from './claim-binding.js';
import { BOUND_CONDITION, type CondInput, type ServerClaimControllerOptions } from './claim-context.js';
import { evictClaim } from './claim-eviction.js';
import { claimOperation, rejectClaimOperation, serverHold } from './claim-operations.js';
import { CLAIM_FINALIZER, ClaimRelease } from './claim-release.js';
import { ClaimStatusWriter } from './claim-status.js';

export { type ClaimBootSettings, claimBootSettings, claimWording } from './claim-attempt.js';
export { SERVER_BY_CLAIM_INDEX, serverByClaimIndexer } from './claim-binding.js';
export {
  BOOT_CONFIGURATION_READY_CONDITION,
  BOOTED_CONDITION,
  BOUND_CONDITION,
  type ServerClaimControllerOptions,
} from './claim-context.js';
export { CLAIM_FINALIZER } from './claim-release.js';

/** How often an unbound claim looks again even without a Server event, ms. */
const UNBOUND_RECHECK_MS = 30_000;

/** The claim controller's reconciler: the order of concerns; each concern is a part of its own. */
class ServerClaimReconciler {
  private readonly baseLog: pino.Logger;
  private readonly status: ClaimStatusWriter;
  private readonly binding: ClaimBinding;
  private readonly release: ClaimRelease;
  private readonly attempts: ClaimAttempts;

  constructor(private readonly o: ServerClaimControllerOptions) {
    this.baseLog = o.log.child({ controller: 'serverclaim' });
    this.status = new ClaimStatusWriter(o);
    this.binding = new ClaimBinding(o, this.status);
    this.release = new ClaimRelease(o, this.status, this.binding);
    this.attempts = new ClaimAttempts(o, this.status, this.binding);
  }

  async reconcile(req: Request): Promise<Result | undefined> {
    let claim = this.o.claims.get(req.name, req.namespace);
    if (!claim) return undefined;
    let log = this.baseLog.child({ namespace: req.namespace, name: req.name });
    if (claim.metadata.deletionTimestamp) return this.release.finalize(claim, log);
    const operation = claimOperation(claim);
    if (operation?.kind === 'ignore') return undefined;
    if (operation) return void (await rejectClaimOperation(this.o, claim, operation.op, log));
    claim = await addFinalizer(this.o.client, Resources.ServerClaim, claim, CLAIM_FINALIZER);

    const server = (await this.binding.boundServer(claim)) ?? (await this.binding.bind(claim, log));
    if (!server) return { requeueAfterMs: UNBOUND_RECHECK_MS };
    if (serverHold(server)) return undefined; // parked or ignored: claim-operations.ts
    if (server.metadata.deletionTimestamp) this.release.tellDeletionHeld(claim, server, log);
    const evicting = evictingTaint(claim, server);
    if (evicting) return evictClaim(this.o, this.status, { claim, server, taint: evicting, log });
    const serverName = server.metadata.name ?? '';
    log = log.child({ server: serverName, systemUUID: server.spec.systemUUID });
    if (!claim.spec.serverRef?.name) {
      claim = await this.o.client.mergePatch<ServerClaim>(Resources.ServerClaim, req.name, req.namespace, {
        spec: { serverRef: { name: serverName } },
      });
    }
    const bound: CondInput = {
      type: BOUND_CONDITION,
      status: 'True',
      reason: BoundReason.ServerBound,
      message: `bound to Server ${serverName}`,
    };
    if (server.status?.state !== 'Reserved') {
      // The Server controller marks it Reserved first; only then may this controller drive its power.
      const hold = await this.attempts.saveUnreserved(claim, server, bound, log);
      return hold === undefined ? undefined : { requeueAfterMs: hold };
    }
    return this.attempts.provision(claim, server, bound, log);
  }
}

export function newServerClaimController(o: ServerClaimControllerOptions): Controller {
  const r = new ServerClaimReconciler(o);
  const c = new Controller('serverclaim', {
    reconcile: (req) => r.reconcile(req),
    workers: o.config.workers,
    log: o.log,
    metrics: o.metrics,
  });
  c.watches(o.claims);
  c.owns(o.sbcs, 'ServerClaim');
  watchServersForClaims(c, o.claims, o.servers);
  return c;
}
