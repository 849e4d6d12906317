/**
 * The operation annotation `metal.ironcore.dev/operation` on a Server, as upstream metal-operator's
 * Server controller handles it (`handleAnnotationOperations`), run before the state machine:
 *
 * - `ignore`: nothing at all while it is set (not even power); the claim controller stands down too.
 * - `park` on an Available or Reserved Server: graceful shutdown (ForceOff after
 *   {@link PARK_GRACE_MS}), then the marker `metal.ironcore.dev/parked: "true"` and state `Parked`;
 *   in any other state the request stays and a Warning `ParkDeferred` says why. A parked Server is
 *   left alone: no state machine, no power healing, its claim controller stands down (the claim stays
 *   Bound); the state is rebuilt from the marker after a status loss.
 * - `unpark`: removes the marker; the next pass resumes to `Reserved` (claim reference set) or
 *   `Available` (Event `Resumed`).
 * - The power operations (upstream `AnnotationToRedfishMapping`): `graceful-restart-server`
 *   GracefulRestart, `hard-restart-server` ForceRestart, `power-cycle-server` PowerCycle,
 *   `force-off-server` ForceOff, `force-on-server` ForceOn (`ComputerSystem.Reset`; where the BMC
 *   does not allow that ResetType, the same-effect one it allows: ForceOn→On, ForceRestart⇄PowerCycle), and
 *   `graceful-restart-bmc`: `Manager.Reset` GracefulRestart of the Server's BMC (upstream sends a
 *   system GracefulRestart for it on a Server; deliberately not: the name says BMC).
 *   Refused (Warning `OperationRefused`, removed) while a boot attempt owns the power — Initial,
 *   Discovery, Cleaning, or a claim whose attempt is not over — and where the state machine would
 *   undo it at once: on/restart of an Available Server (kept Off), force-off of a claim that wants
 *   On, on/restart of a claim that wants Off. Upstream applies them in every state.
 * - On a parked Server every operation but `unpark` is removed unapplied (Warning
 *   `ParkedOperationDropped`), as upstream; unknown values anywhere: Warning `UnsupportedOperation`,
 *   removed.
 * - `retry` is the state machine's (Error, Discovery: server.ts); elsewhere refused.
 *
 * Exactly once: a power operation is taken by one patch (guarded by the resourceVersion, so a stale
 * cache cannot take it twice) that removes it and writes `metal.ironcore.dev/operation-in-progress`;
 * then the BMC is asked; then the marker is removed. A marker found that this process did not write
 * means the manager stopped in between: Warning `OperationInterrupted`, never sent again (whether
 * the BMC got it is unknown; PowerState says).
 */
import type pino from 'pino';
import {
  isPowerOperation,
  OPERATION_ANNOTATION,
  OPERATION_IGNORE,
  OPERATION_IN_PROGRESS_ANNOTATION,
  OPERATION_PARK,
  OPERATION_RETRY,
  OPERATION_UNPARK,
  PARKED_ANNOTATION,
  type PowerOperation,
} from '../../api/v1alpha1/operations.js';
import type { Server, ServerState } from '../../api/v1alpha1/server.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import { EventReason } from '../../api/vocabulary.js';
import type { BMC, PowerActionResult, PowerState, ResetType } from '../../bmc/bmc.js';
import { ResetTypeNotSupportedError } from '../../bmc/errors.js';
import type { KubeClient } from '../../runtime/client.js';
import type { Result } from '../../runtime/controller.js';
import type { EventRecorder } from '../../runtime/events.js';
import { Resources } from '../../runtime/resource.js';
import { type BmcConnections, classifyBmcFailure } from '../bmc-actions/bmc-connections.js';
import type { PowerActions } from '../bmc-actions/power.js';
import { AttemptPhase } from '../boot-attempt/index.js';

/** How long `park` waits for a graceful shutdown before it cuts the power (ForceOff), ms. */
export const PARK_GRACE_MS = 60_000;

/** The ResetType each system power operation sends (upstream `AnnotationToRedfishMapping`). */
export const RESET_OF: Record<Exclude<PowerOperation, 'graceful-restart-bmc'>, ResetType> = {
  'graceful-restart-server': 'GracefulRestart',
  'hard-restart-server': 'ForceRestart',
  'power-cycle-server': 'PowerCycle',
  'force-off-server': 'ForceOff',
  'force-on-server': 'ForceOn',
};

/**
 * Same-effect ResetTypes for a service that does not allow the one asked (many BMCs list `On` but not
 * `ForceOn`); the Event names the ResetType actually sent. Upstream sends only the mapped one.
 */
const ALTERNATIVE: Partial<Record<ResetType, ResetType>> = {
  ForceOn: 'On',
  ForceRestart: 'PowerCycle',
  PowerCycle: 'ForceRestart',
};

async function resetWithAlternative(
  bmc: BMC,
  systemUri: string,
  type: ResetType,
): Promise<PowerActionResult> {
  try {
    return await bmc.reset(systemUri, type);
  } catch (err) {
    const alt = ALTERNATIVE[type];
    if (!(err instanceof ResetTypeNotSupportedError) || !alt || !err.allowed.includes(alt)) throw err;
    return bmc.reset(systemUri, alt);
  }
}

/** What a claim says about who owns a Reserved Server's power (read only for a power operation). */
export interface ClaimPower {
  name: string;
  /** The claim's `spec.power`. */
  wants: 'On' | 'Off' | string | undefined;
  /** An attempt of its boot series is under way (its phase), or undefined. */
  attemptPhase: string | undefined;
}

export interface OperationFacts {
  op: string | undefined;
  parked: boolean;
  /** `metal.ironcore.dev/operation-in-progress` not written by this process (see the module comment). */
  interrupted: string | undefined;
  state: ServerState;
  claimed: boolean;
  /** For a power operation on a claimed Server: its claim (undefined: not read or gone). */
  claim?: ClaimPower;
}

export type OperationDecision =
  | { kind: 'none' }
  | { kind: 'ignore' }
  | { kind: 'interrupted'; what: string }
  | { kind: 'unpark'; parked: boolean }
  | { kind: 'resume'; to: 'Reserved' | 'Available' }
  | { kind: 'stay-parked'; drop?: string }
  | { kind: 'park' }
  | { kind: 'park-deferred' }
  | { kind: 'power'; op: PowerOperation }
  | { kind: 'refuse'; op: string; why: string }
  | { kind: 'unsupported'; op: string };

const PARKABLE: readonly ServerState[] = ['Available', 'Reserved'];
const ATTEMPT_STATES: readonly ServerState[] = ['Initial', 'Discovery', 'Cleaning'];
const ATTEMPT_OVER: readonly string[] = [
  AttemptPhase.Completed,
  AttemptPhase.Exhausted,
  AttemptPhase.PoweredOff,
];
const TURNS_ON: readonly string[] = [
  'graceful-restart-server',
  'hard-restart-server',
  'power-cycle-server',
  'force-on-server',
];

/** Whether the operation is a power operation that needs the claim's facts to decide. Pure. */
export function needsClaim(f: Omit<OperationFacts, 'claim'>): boolean {
  return (
    !f.parked &&
    f.claimed &&
    f.state === 'Reserved' &&
    isPowerOperation(f.op) &&
    f.op !== 'graceful-restart-bmc'
  );
}

/** What the operation annotation asks of the Server now (see the module comment). Pure. */
export function decideOperation(f: OperationFacts): OperationDecision {
  const op = f.op;
  if (op === OPERATION_IGNORE) return { kind: 'ignore' };
  if (f.interrupted) return { kind: 'interrupted', what: f.interrupted };
  if (op === OPERATION_UNPARK) return { kind: 'unpark', parked: f.parked };
  if (f.parked) {
    if (op === undefined || op === OPERATION_PARK) return { kind: 'stay-parked' };
    if (isPowerOperation(op) || op === OPERATION_RETRY) return { kind: 'stay-parked', drop: op };
    return { kind: 'unsupported', op };
  }
  if (f.state === 'Parked') return { kind: 'resume', to: f.claimed ? 'Reserved' : 'Available' };
  if (op === undefined) return { kind: 'none' };
  if (op === OPERATION_PARK) return PARKABLE.includes(f.state) ? { kind: 'park' } : { kind: 'park-deferred' };
  if (op === OPERATION_RETRY) {
    if (f.state === 'Error' || f.state === 'Discovery') return { kind: 'none' }; // server.ts retries
    const hint = f.claimed ? '; to boot the claim again annotate the ServerClaim (metalctl retry CLAIM)' : '';
    return {
      kind: 'refuse',
      op,
      why: `retry restarts discovery or cleanup of a Server in Error; in state ${f.state} there is nothing to retry${hint}`,
    };
  }
  if (!isPowerOperation(op)) return { kind: 'unsupported', op };
  if (op === 'graceful-restart-bmc') return { kind: 'power', op };
  const why = powerRefusal(op, f);
  return why ? { kind: 'refuse', op, why } : { kind: 'power', op };
}

function powerRefusal(op: PowerOperation, f: OperationFacts): string | undefined {
  if (ATTEMPT_STATES.includes(f.state))
    return `a ${f.state === 'Cleaning' ? 'cleanup' : 'discovery'} boot attempt owns the power (state ${f.state})`;
  if (f.state === 'Available' && op !== 'force-off-server')
    return 'an Available Server is kept Off (it would be powered off again at once); park it first to power it by hand';
  if (f.state === 'Reserved' && f.claim) {
    const c = f.claim;
    if (c.attemptPhase && !ATTEMPT_OVER.includes(c.attemptPhase))
      return `a boot attempt of ServerClaim ${c.name} owns the power (phase ${c.attemptPhase})`;
    if (op === 'force-off-server' && c.wants === 'On')
      return `ServerClaim ${c.name} has spec.power On and would power it on again; set the claim's spec.power to Off, or park the Server`;
    if (TURNS_ON.includes(op) && c.wants === 'Off')
      return `ServerClaim ${c.name} has spec.power Off and would power it off again`;
  }
  return undefined;
}

/** The claim facts of {@link ClaimPower} (a claim still provisioning: no series yet, power On, is busy). */
export function claimPower(claim: ServerClaim): ClaimPower {
  const book = claim.status?.boot;
  const phase = book?.phase ?? (claim.spec.power === 'On' ? AttemptPhase.WaitingForConfiguration : undefined);
  return {
    name: `${claim.metadata.namespace}/${claim.metadata.name}`,
    wants: claim.spec.power,
    attemptPhase: phase,
  };
}

export interface ServerOperationsOptions {
  client: KubeClient;
  power: PowerActions;
  connections: BmcConnections;
  events: EventRecorder;
  /** The state write of server.ts (guarded by the stored state). */
  patchStatus(s: Server, status: Record<string, unknown>): Promise<Server>;
}

/** Carries out {@link decideOperation}'s decisions; one instance per Server controller. */
export class ServerOperations {
  /** In-progress markers this process wrote and finished (a lagging cache may still show them). */
  private readonly finished = new Map<string, string>();
  /** When `park` sent its graceful shutdown, per Server (a restart sends it once more: harmless). */
  private readonly parkShutdownAt = new Map<string, number>();

  constructor(private readonly o: ServerOperationsOptions) {}

  /**
   * Handles the operation annotation of `server`. Returns `undefined` when the state machine runs
   * as usual, else `{ result }`, the reconcile's result (the state machine does not run). API errors
   * propagate (409 on a stale cache: the reconcile is retried); BMC failures are reported, not thrown.
   */
  async handle(
    server: Server,
    state: ServerState,
    log: pino.Logger,
  ): Promise<{ result: Result | undefined } | undefined> {
    const name = server.metadata.name ?? '';
    const ann = server.metadata.annotations ?? {};
    const marker = ann[OPERATION_IN_PROGRESS_ANNOTATION];
    if (marker && this.finished.get(name) === marker) return { result: { requeueAfterMs: 1_000 } }; // cache lag
    const base = {
      op: ann[OPERATION_ANNOTATION] || undefined,
      parked: PARKED_ANNOTATION in ann,
      interrupted: marker,
      state,
      claimed: !!server.spec.serverClaimRef,
    };
    const claim = needsClaim(base) ? await this.claimOf(server) : undefined;
    const d = decideOperation({ ...base, claim });
    if (d.kind === 'none') return undefined;
    return this.execute(server, state, d, base.op, log);
  }

  /** Carries out decision `d` (never `none`): annotations, state, power, Events. */
  private async execute(
    server: Server,
    state: ServerState,
    d: Exclude<ReturnType<typeof decideOperation>, { kind: 'none' }>,
    op: string | undefined,
    log: pino.Logger,
  ): Promise<{ result: Result | undefined } | undefined> {
    const name = server.metadata.name ?? '';
    const done = (result?: Result) => ({ result });
    const ev = (type: 'Normal' | 'Warning', reason: string, message: string) =>
      this.o.events.record(Resources.Server, server, type, reason, message);
    switch (d.kind) {
      case 'ignore':
        log.debug('operation ignore: not reconciled');
        return done();
      case 'interrupted':
        await this.patchAnnotations(server, { [OPERATION_IN_PROGRESS_ANNOTATION]: null });
        log.warn({ operation: d.what }, 'power operation interrupted by a manager restart; not repeated');
        ev(
          'Warning',
          EventReason.OperationInterrupted,
          `operation ${d.what}: the manager stopped between taking it and confirming it sent; not sent again (PowerState ${server.status?.powerState ?? 'unknown'})`,
        );
        return done();
      case 'unpark':
        await this.patchAnnotations(server, { [OPERATION_ANNOTATION]: null, [PARKED_ANNOTATION]: null });
        if (d.parked) {
          log.info('unpark requested');
          ev('Normal', EventReason.Unparking, 'Unpark requested, releasing server');
        }
        return done();
      case 'resume': {
        // What was sent before parking no longer stands for the power state (the Server was in
        // other hands): the next power decision reads the BMC afresh instead of waiting to resend.
        this.o.power.forget(name);
        await this.o.patchStatus(server, { state: d.to });
        log.info({ to: d.to }, 'resumed from Parked');
        ev('Normal', EventReason.Resumed, `Resumed Server from Parked state to ${d.to}`);
        return done();
      }
      case 'stay-parked': {
        if (d.drop) {
          await this.patchAnnotations(server, { [OPERATION_ANNOTATION]: null });
          log.info({ operation: d.drop }, 'operation dropped: server is parked');
          ev(
            'Warning',
            EventReason.ParkedOperationDropped,
            `Operation "${d.drop}" dropped because server is parked`,
          );
        } else if (op === OPERATION_PARK) {
          await this.patchAnnotations(server, { [OPERATION_ANNOTATION]: null });
        }
        if (server.status?.state !== 'Parked') await this.o.patchStatus(server, { state: 'Parked' });
        return done();
      }
      case 'park':
        return done(await this.park(server, log));
      case 'park-deferred':
        ev(
          'Warning',
          EventReason.ParkDeferred,
          `Park request deferred because server is in state "${state}"`,
        );
        return undefined; // the state machine goes on; a state change brings the next pass
      case 'power':
        return done(await this.powerOperation(server, d.op, log));
      case 'refuse':
        await this.patchAnnotations(server, { [OPERATION_ANNOTATION]: null });
        log.warn({ operation: d.op, why: d.why }, 'operation refused');
        ev('Warning', EventReason.OperationRefused, `operation ${d.op} refused: ${d.why}`);
        return undefined;
      case 'unsupported':
        await this.patchAnnotations(server, { [OPERATION_ANNOTATION]: null });
        log.warn({ operation: d.op }, 'unsupported operation annotation removed');
        ev('Warning', EventReason.UnsupportedOperation, `Unsupported operation annotation "${d.op}"`);
        return done();
    }
  }

  private async claimOf(server: Server): Promise<ClaimPower | undefined> {
    const ref = server.spec.serverClaimRef;
    if (!ref?.name || !ref.namespace) return undefined;
    const claim = await this.o.client.get<ServerClaim>(Resources.ServerClaim, ref.name, ref.namespace);
    return claim ? claimPower(claim) : undefined;
  }

  /** Annotation changes guarded by the resourceVersion the decision was made on (409 when stale). */
  private patchAnnotations(server: Server, annotations: Record<string, string | null>): Promise<Server> {
    return this.o.client.mergePatch<Server>(Resources.Server, server.metadata.name ?? '', undefined, {
      metadata: { resourceVersion: server.metadata.resourceVersion, annotations },
    });
  }

  /** Graceful shutdown, ForceOff after {@link PARK_GRACE_MS}, then the marker (state follows next pass). */
  private async park(server: Server, log: pino.Logger): Promise<Result | undefined> {
    const name = server.metadata.name ?? '';
    let state: PowerState;
    try {
      state = await this.o.power.observe(server);
    } catch (err) {
      const f = classifyBmcFailure(err);
      log.warn({ reason: f.reason, error: f.message }, 'park: cannot read the power state');
      return { requeueAfterMs: f.retryAfterMs };
    }
    if (state !== 'Off') {
      const since = this.parkShutdownAt.get(name);
      if (since !== undefined && Date.now() - since >= PARK_GRACE_MS) {
        const p = await this.o.power.ensure(server, 'Off', state);
        if (!p.reached) return { requeueAfterMs: p.requeueAfterMs ?? 2_000 };
      } else {
        if (since === undefined && state !== 'PoweringOff') {
          try {
            const h = this.o.connections.forServer(server);
            await h.bmc.gracefulShutdown(h.systemUri, { fallbackToForceOff: true });
            log.info('park: graceful shutdown sent');
          } catch (err) {
            const f = classifyBmcFailure(err);
            log.warn({ reason: f.reason, error: f.message }, 'park: graceful shutdown failed');
            return { requeueAfterMs: f.retryAfterMs };
          }
          this.parkShutdownAt.set(name, Date.now());
        }
        return { requeueAfterMs: 2_000 };
      }
    }
    this.parkShutdownAt.delete(name);
    this.o.power.forget(name);
    await this.patchAnnotations(server, { [PARKED_ANNOTATION]: 'true', [OPERATION_ANNOTATION]: null });
    log.info('parked');
    this.o.events.record(
      Resources.Server,
      server,
      'Normal',
      EventReason.Parked,
      'Parked Server, powered off',
    );
    return undefined;
  }

  /** Takes the operation (one guarded patch), asks the BMC once, removes the in-progress marker. */
  private async powerOperation(
    server: Server,
    op: PowerOperation,
    log: pino.Logger,
  ): Promise<Result | undefined> {
    const name = server.metadata.name ?? '';
    const marker = `${op} ${new Date().toISOString()}`;
    const taken = await this.patchAnnotations(server, {
      [OPERATION_ANNOTATION]: null,
      [OPERATION_IN_PROGRESS_ANNOTATION]: marker,
    });
    let words: string;
    try {
      const h = this.o.connections.forServer(server);
      if (op === 'graceful-restart-bmc') {
        const [manager] = await h.bmc.listManagers();
        if (!manager) throw new Error('the BMC lists no Manager');
        await h.bmc.resetManager(manager.uri, 'GracefulRestart');
        words = `Manager.Reset GracefulRestart sent to ${manager.uri}`;
      } else {
        const res = await resetWithAlternative(h.bmc, h.systemUri, RESET_OF[op]);
        words = `ComputerSystem.Reset ${res.sent} sent (PowerState was ${res.observed})`;
      }
    } catch (err) {
      const f = classifyBmcFailure(err);
      words = '';
      log.warn({ operation: op, reason: f.reason, error: f.message }, 'power operation failed');
      this.o.events.record(
        Resources.Server,
        server,
        'Warning',
        EventReason.OperationFailed,
        `operation ${op} failed: ${f.reason}: ${f.message}; not repeated (annotate again to retry)`,
      );
    }
    this.finished.set(name, marker);
    await this.o.client
      .mergePatch(Resources.Server, name, undefined, {
        metadata: {
          resourceVersion: taken.metadata.resourceVersion,
          annotations: { [OPERATION_IN_PROGRESS_ANNOTATION]: null },
        },
      })
      .catch(async () => {
        // Someone else wrote in between: remove it unguarded (the marker is ours either way).
        await this.o.client.mergePatch(Resources.Server, name, undefined, {
          metadata: { annotations: { [OPERATION_IN_PROGRESS_ANNOTATION]: null } },
        });
      });
    if (words) {
      log.info({ operation: op, sent: words }, 'power operation sent');
      this.o.events.record(
        Resources.Server,
        server,
        'Normal',
        EventReason.PowerOperation,
        `operation ${op}: ${words}`,
      );
    }
    return { requeueAfterMs: 2_000 };
  }
}
