/**
 * Binding a claim to a Server (race-safe): an eligible Server (common/server-selection.ts) is bound
 * by writing `Server.spec.serverClaimRef` with the resourceVersion it was chosen on; of several
 * claims racing for one Server exactly one write succeeds (the others get 409, or 422 from the CRD's
 * immutability rule, and try the next candidate). No candidate: phase Unbound with
 * `Bound=False` saying why, and a Warning once per change of the explanation (as the scheduler's
 * FailedScheduling). Other API errors propagate.
 *
 * Wake-ups: a Server event reconciles only the claims it concerns, its own and those it may let
 * bind, found through an index of the waiting claims (`watchServersForClaims`), so a fleet of
 * claims that name their Servers costs the manager linear, not quadratic, work. Claims that select
 * are still woken by every available Server's change: any of them may fit.
 */
import type pino from 'pino';
import { OPERATION_ANNOTATION, OPERATION_RETRY } from '../../api/v1alpha1/boot-policy.js';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import { EventReason } from '../../api/vocabulary.js';
import { SERVER_UUID_INDEX, serverUUIDIndexer } from '../../inventory/server-index.js';
import { ApiError } from '../../runtime/client.js';
import { findCondition } from '../../runtime/conditions.js';
import type { Controller, Request } from '../../runtime/controller.js';
import type { Informer } from '../../runtime/informer.js';
import { isControlledBy } from '../../runtime/ownerrefs.js';
import { Resources } from '../../runtime/resource.js';
import { servedAnything } from '../common/boot-configuration.js';
import type { ControllerConfig } from '../common/config.js';
import { candidates, selectionRefusal, unboundExplanation } from '../common/server-selection.js';
import { CLAIMED_SERVER_FINALIZER } from '../server/server.js';
import { BOUND_CONDITION, type ServerClaimControllerOptions } from './claim-context.js';
import type { ClaimStatusWriter } from './claim-status.js';

/** Informer index of Servers by the claim (`namespace/name`) in `spec.serverClaimRef`. */
export const SERVER_BY_CLAIM_INDEX = 'serverClaim';

export const serverByClaimIndexer = (s: Server): string[] => {
  const r = s.spec?.serverClaimRef;
  return r ? [`${r.namespace}/${r.name}`] : [];
};

/**
 * Informer index of the claims still waiting for a Server (not Bound, not being deleted): under the
 * name their `spec.serverRef` gives, else under {@link WAITING_FOR_ANY_SERVER}.
 */
export const WAITING_CLAIMS_INDEX = 'waitingFor';

/** The index value of waiting claims that select rather than name a Server (no Server name has `*`). */
const WAITING_FOR_ANY_SERVER = '*';

const waitingClaimIndexer = (c: ServerClaim): string[] => {
  if (c.status?.phase === 'Bound' || c.metadata.deletionTimestamp) return [];
  return [c.spec?.serverRef?.name || WAITING_FOR_ANY_SERVER];
};

/** The names of the other cached Servers with `server`'s system UUID (the ownership rule's group). */
function uuidPeerNames(servers: Informer<Server>, server: Server): string[] {
  const [uuid] = serverUUIDIndexer(server);
  if (!uuid) return [];
  return servers
    .byIndex(SERVER_UUID_INDEX, uuid)
    .map((s) => s.metadata.name ?? '')
    .filter((n) => n !== server.metadata.name);
}

/** The waiting claims filed under any of `names` (Server names, or {@link WAITING_FOR_ANY_SERVER}). */
function waitingUnder(claims: Informer<ServerClaim>, names: string[]): ServerClaim[] {
  return names.flatMap((n) => claims.byIndex(WAITING_CLAIMS_INDEX, n));
}

/**
 * Makes `controller` reconcile the claims a Server event concerns. A Server's version names the
 * claim it is bound to, or, when available and unbound (new, or its labels or taints changed), the
 * claims it may let bind: those naming it or a Server with its system UUID (the ownership rule
 * decides between those, common/system-ownership.ts) and those selecting. Why not every waiting
 * claim: a fleet of claims that each name their Server would wake all the others on each change.
 * The version an update replaced names only the claim it was bound to (it lost the Server) and the
 * claims waiting for the Servers that shared its system UUID (the UUID changed: one of them may own
 * it now); what it offered is offered no more, so it wakes no other waiting claim. Adds
 * {@link WAITING_CLAIMS_INDEX} to `claims` and the system-UUID index to `servers`.
 */
export function watchServersForClaims(
  controller: Controller,
  claims: Informer<ServerClaim>,
  servers: Informer<Server>,
): void {
  claims.addIndexers({ [WAITING_CLAIMS_INDEX]: waitingClaimIndexer });
  servers.addIndexers({ [SERVER_UUID_INDEX]: serverUUIDIndexer });
  const requests = (cs: ServerClaim[]): Request[] =>
    cs.map((c) => ({ name: c.metadata.name ?? '', namespace: c.metadata.namespace }));
  const boundClaim = (server: Server): Request[] => {
    const r = server.spec?.serverClaimRef;
    return r ? [{ name: r.name, namespace: r.namespace }] : [];
  };
  const map = (server: Server): Request[] => {
    if (server.spec?.serverClaimRef) return boundClaim(server);
    if (server.status?.state !== 'Available' || server.spec?.unclaimable) return [];
    const names = [server.metadata.name ?? '', ...uuidPeerNames(servers, server), WAITING_FOR_ANY_SERVER];
    return requests(waitingUnder(claims, names));
  };
  const mapOld = (old: Server): Request[] => [
    ...boundClaim(old),
    ...requests(waitingUnder(claims, uuidPeerNames(servers, old))),
  ];
  controller.watches(servers, map, { mapOld });
}

/** The claim's binding: finding its Server, binding one. */
export class ClaimBinding {
  private readonly cfg: ControllerConfig;

  /**
   * Claims bound in this process whose binding the Server cache may not show yet (claim key → Server
   * name). Without it, a reconcile running before the cache caught up could bind a second Server.
   */
  private readonly recentBinds = new Map<string, string>();

  constructor(
    private readonly o: ServerClaimControllerOptions,
    private readonly status: ClaimStatusWriter,
  ) {
    this.cfg = o.config;
  }

  /** The Server bound to `claim`: from the index, else from the informer (its own-write view shows a binding made right now), else read fresh. */
  async boundServer(claim: ServerClaim): Promise<Server | undefined> {
    const key = `${claim.metadata.namespace}/${claim.metadata.name}`;
    const [indexed] = this.o.servers.byIndex(SERVER_BY_CLAIM_INDEX, key);
    if (indexed) {
      this.recentBinds.delete(key);
      return indexed;
    }
    const ref = this.recentBinds.get(key) ?? claim.spec.serverRef?.name;
    if (!ref) return undefined;
    // The informer's get() has this process's own binding write even while the watch lags it (and
    // bindings of an earlier leader came with the first list): only a Server it lacks is read.
    const known = this.o.servers.get(ref);
    if (known) {
      const k = known.spec.serverClaimRef;
      if (k && `${k.namespace}/${k.name}` === key) return known;
      this.recentBinds.delete(key);
      return undefined;
    }
    const fresh = await this.o.client.get<Server>(Resources.Server, ref);
    const r = fresh?.spec.serverClaimRef;
    if (r && `${r.namespace}/${r.name}` === key) return fresh;
    this.recentBinds.delete(key);
    return undefined;
  }

  /**
   * The Servers selection reads: for a claim naming its Server, that Server and every cached Server
   * with its system UUID (the ownership rule compares them), found through the UUID index; else
   * every cached Server. Why: a fleet of claims with `serverRef` would otherwise scan the whole
   * cache once per claim (quadratic in the fleet).
   */
  private selectionPool(claim: ServerClaim): Server[] {
    const want = claim.spec.serverRef?.name;
    if (!want) return this.o.servers.list();
    const named = this.o.servers.get(want);
    if (!named) return [];
    const [uuid] = serverUUIDIndexer(named);
    const same = uuid ? this.o.servers.byIndex(SERVER_UUID_INDEX, uuid) : [];
    return [named, ...same.filter((s) => s.metadata.name !== want)];
  }

  async bind(claim: ServerClaim, log: pino.Logger): Promise<Server | undefined> {
    const refused = selectionRefusal(claim, this.cfg.requireServerSelection);
    if (refused) {
      await this.status.save(claim, {
        phase: 'Unbound',
        conditions: [{ type: BOUND_CONDITION, status: 'False', ...refused }],
      });
      return undefined;
    }
    const pool = this.selectionPool(claim);
    const list = candidates(claim, pool);
    for (const s of list) {
      try {
        // One write: the binding (guarded by the resourceVersion the Server was chosen on) and the
        // desired state the claim wants of it (its SBC's name, power). Desired state only: nothing
        // acts on it before the Server controller has marked the Server Reserved.
        const bound = await this.o.client.mergePatch<Server>(
          Resources.Server,
          s.metadata.name ?? '',
          undefined,
          {
            metadata: {
              resourceVersion: s.metadata.resourceVersion,
              // Held while claimed (server.ts): guarded by the resourceVersion, as the list is replaced.
              finalizers: [
                ...(s.metadata.finalizers ?? []).filter((f) => f !== CLAIMED_SERVER_FINALIZER),
                CLAIMED_SERVER_FINALIZER,
              ],
            },
            spec: {
              serverClaimRef: { name: claim.metadata.name, namespace: claim.metadata.namespace },
              ...desiredServerSpec(claim),
            },
          },
        );
        this.recentBinds.set(`${claim.metadata.namespace}/${claim.metadata.name}`, s.metadata.name ?? '');
        log.info({ server: s.metadata.name, systemUUID: s.spec.systemUUID }, 'bound');
        // A fresh claim's opening attempt is told, with the binding, by the Event that ends it;
        // any other claim gets its Bound Event now.
        if (!this.isFresh(claim))
          this.o.events.record(
            Resources.ServerClaim,
            claim,
            'Normal',
            EventReason.Bound,
            `bound Server ${s.metadata.name}`,
          );
        return bound;
      } catch (err) {
        // 409: someone else bound it first (or it changed); 422: the CRD refused a second claim reference.
        if (err instanceof ApiError && (err.status === 409 || err.status === 422)) continue;
        throw err;
      }
    }
    const { reason, message } = unboundExplanation(claim, pool, list.length);
    const before = findCondition(claim.status?.conditions, BOUND_CONDITION);
    await this.status.save(claim, {
      phase: 'Unbound',
      conditions: [{ type: BOUND_CONDITION, status: 'False', reason, message }],
    });
    // Once per change of the explanation, as the scheduler's FailedScheduling.
    if (before?.message !== message)
      this.o.events.record(Resources.ServerClaim, claim, 'Warning', reason, message);
    return undefined;
  }

  /**
   * A claim about to begin its first series (power On, no bookkeeping, no retry asked, and no SBC of
   * its name but its own one that served nothing yet): its binding is stored with the series, and
   * told by the Event that ends its first attempt.
   */
  isFresh(claim: ServerClaim): boolean {
    const sbc = this.o.sbcs.get(claim.metadata.name ?? '', claim.metadata.namespace);
    return (
      claim.spec.power === 'On' &&
      !claim.status?.boot &&
      claim.metadata.annotations?.[OPERATION_ANNOTATION] !== OPERATION_RETRY &&
      (!sbc || (isControlledBy(sbc, claim) && !servedAnything(sbc)))
    );
  }
}

/**
 * The Server spec fields a claim owns besides `serverClaimRef`. Not `spec.power`: upstream deprecated
 * it (its Server controller clears it, as server.ts does); the claim's own `spec.power` decides.
 */
export function desiredServerSpec(claim: ServerClaim): Pick<Server['spec'], 'bootConfigurationRef'> {
  return {
    bootConfigurationRef: { name: claim.metadata.name ?? '', namespace: claim.metadata.namespace ?? '' },
  };
}
