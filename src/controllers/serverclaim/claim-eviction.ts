/**
 * A bound claim released by an `Evict` taint it does not tolerate (server/taints.ts states the rule,
 * as a Kubernetes `NoExecute` taint evicts a pod): the Server powered off (asked; an unreachable BMC
 * does not stop the release: the Server controller keeps an Available Server off), its claim
 * reference, power and boot configuration cleared, the claim's SBC deleted, the claim `Unbound`
 * with `Bound=False` / `Booted=False` reason `Evicted` naming the taint (through the claim's one
 * status writer), and a Warning `Evicted` on the claim and on the Server. API errors propagate.
 */
import type pino from 'pino';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import { ConditionType } from '../../api/vocabulary.js';
import type { Result } from '../../runtime/controller.js';
import { Resources } from '../../runtime/resource.js';
import { EVICTED_REASON, taintText } from '../server/taints.js';
import type { ServerClaimControllerOptions } from './claim-context.js';
import type { ClaimStatusWriter } from './claim-status.js';

type Taint = NonNullable<Server['spec']['taints']>[number];

/** Releases `claim` from `server` because of `taint`; resolves the next reconcile's result. */
export async function evictClaim(
  o: ServerClaimControllerOptions,
  status: ClaimStatusWriter,
  x: { claim: ServerClaim; server: Server; taint: Taint; log: pino.Logger },
): Promise<Result> {
  const { claim, server, taint } = x;
  const serverName = server.metadata.name ?? '';
  const name = claim.metadata.name ?? '';
  const namespace = claim.metadata.namespace ?? '';
  const why = `evicted from Server ${serverName}: taint ${taintText(taint)} not tolerated`;
  const p = await o.power.ensure(server, 'Off');
  const ref = server.spec.bootConfigurationRef;
  const mine = ref?.name === name && ref?.namespace === namespace;
  // The claim's status first: its write is guarded by the resourceVersion, and a 409 from a stale
  // cache must come before the Server is let go, so the retry finds the binding and evicts again.
  await status.save(claim, {
    phase: 'Unbound',
    boot: null,
    conditions: [ConditionType.Bound, ConditionType.Booted].map((type) => ({
      type,
      status: 'False' as const,
      reason: EVICTED_REASON,
      message: why,
    })),
  });
  await o.client.mergePatch(Resources.Server, serverName, undefined, {
    spec: { serverClaimRef: null, power: null, ...(mine ? { bootConfigurationRef: null } : {}) },
  });
  await o.bootConfigs.delete(name, namespace);
  x.log.warn({ server: serverName, taint: taintText(taint), poweredOff: p.reached }, 'claim evicted');
  o.events.record(Resources.ServerClaim, claim, 'Warning', EVICTED_REASON, why);
  o.events.record(
    Resources.Server,
    server,
    'Warning',
    EVICTED_REASON,
    `claim ${namespace}/${name} evicted: taint ${taintText(taint)} not tolerated`,
  );
  return { requeueAfterMs: 1_000 };
}
