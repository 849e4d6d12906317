/**
 * The Server condition `Booted`: a copy of the bound claim's `Booted` condition (status and reason;
 * the message, prefixed with the claim's name, as of the last change of either), so the outcome of the last boot attempt of a Server's
 * tenant is readable on the Server — by a ServerReadinessRule (readiness-rules.ts) or `kubectl
 * wait`. Written only while the claim is bound to that Server (`spec.serverClaimRef` names it); after
 * a release it stays as the last claim left it (the last attempt's outcome), until the next claim's
 * first write. Not written before the Server is Reserved: the Server controller's Reserved write
 * sets `Booted=False Booting` for a claim that boots, and this copy follows the claim from there.
 * Not upstream (upstream Servers have no boot conditions).
 */
import type pino from 'pino';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import { ConditionType } from '../../api/vocabulary.js';
import type { KubeClient } from '../../runtime/client.js';
import { findCondition } from '../../runtime/conditions.js';
import { Controller, type Request, type Result } from '../../runtime/controller.js';
import type { Informer } from '../../runtime/informer.js';
import type { RuntimeMetrics } from '../../runtime/metrics.js';
import { Resources } from '../../runtime/resource.js';
import { applyOwnedCondition } from '../common/owned-conditions.js';

export interface ServerBootConditionOptions {
  client: KubeClient;
  servers: Informer<Server>;
  claims: Informer<ServerClaim>;
  log: pino.Logger;
  metrics?: RuntimeMetrics;
}

/** The Server condition mirroring `claim`'s Booted, or undefined (no Booted yet). Pure. */
export function mirroredBooted(claim: ServerClaim) {
  const c = findCondition(claim.status?.conditions, ConditionType.Booted);
  if (!c) return undefined;
  return {
    type: ConditionType.Booted,
    status: c.status,
    reason: c.reason,
    message: `ServerClaim ${claim.metadata.namespace}/${claim.metadata.name}: ${c.message}`,
  };
}

export function newServerBootConditionController(o: ServerBootConditionOptions): Controller {
  const c = new Controller('server-boot-condition', {
    reconcile: (req) => reconcile(o, req),
    log: o.log,
    metrics: o.metrics,
  });
  c.watches(o.claims);
  // Reserved (below): the Server's own change brings the claim's condition over.
  c.watches(o.servers, (server) => {
    const ref = server.spec?.serverClaimRef;
    return ref ? [{ name: ref.name, namespace: ref.namespace }] : [];
  });
  return c;
}

async function reconcile(o: ServerBootConditionOptions, req: Request): Promise<Result | undefined> {
  const claim = o.claims.get(req.name, req.namespace);
  const serverName = claim?.spec.serverRef?.name;
  if (!claim || !serverName) return undefined;
  const server = o.servers.get(serverName);
  const ref = server?.spec.serverClaimRef;
  if (!server || ref?.name !== claim.metadata.name || ref?.namespace !== claim.metadata.namespace)
    return undefined;
  const cond = mirroredBooted(claim);
  if (!cond) return undefined;
  // Bound, not Reserved yet: the Server controller's Reserved write carries `Booted` (Booting) in
  // the same request (server.ts setBooting); a copy now would be a second write racing it.
  if (server.status?.state === 'Available') return undefined;
  const stored = findCondition(server.status?.conditions, cond.type);
  // Written on a change of status or reason only: the claim's message changes on every retry of a
  // refused BMC call ("retrying in …"), and each Server write wakes the claim controller at once,
  // which would defeat its backoff (issue 30's bound). The message is the one of that change.
  if (stored?.status === cond.status && stored.reason === cond.reason) return undefined;
  await applyOwnedCondition(o.client, Resources.Server, server, cond);
  return undefined;
}
