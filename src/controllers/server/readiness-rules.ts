/**
 * ServerReadinessRule (upstream metal-operator `serverreadinessrule_controller.go` and
 * `serverreadinessruleserver_controller.go`): a rule taints the Servers its `serverSelector` matches
 * until every one of its `conditions` is present on the Server with the `requiredStatus`; then the
 * taint is removed.
 *
 * - `Continuous`: evaluated on every change of the Server or the rule (a Server that falls back out of
 *   the conditions is tainted again).
 * - `BootstrapOnly`: once a Server passes, the annotation
 *   `readiness.metal.ironcore.dev/bootstrap-completed-<rule>: "true"` is set and the rule is skipped
 *   for that Server from then on.
 * - The finalizer `readiness.metal.ironcore.dev/cleanup-taints` is put on every rule; a deleted rule
 *   first removes its taint from the Servers it selects.
 *
 * A taint is the same taint when key, value and effect are equal (upstream `equalTaints`). One
 * merge patch per Server for all rules, guarded by the resourceVersion (other writers —
 * `metalctl cordon`, the Evict logic — write `spec.taints` too). The conditions can be any of the
 * Server's: upstream's, and this project's boot conditions (`Discovered`, `Cleaned`, and `Booted`,
 * the bound claim's last attempt: server-boot-condition.ts). Upstream writes no status on a rule;
 * neither does this.
 */
import type pino from 'pino';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerReadinessRule } from '../../api/v1alpha1/serverreadinessrule.js';
import type { KubeClient } from '../../runtime/client.js';
import { findCondition } from '../../runtime/conditions.js';
import { Controller, type Request, type Result } from '../../runtime/controller.js';
import { addFinalizer, hasFinalizer, removeFinalizer } from '../../runtime/finalizers.js';
import type { Informer } from '../../runtime/informer.js';
import type { RuntimeMetrics } from '../../runtime/metrics.js';
import { Resources } from '../../runtime/resource.js';
import { selectorMatches } from '../common/server-selection.js';

export const READINESS_FINALIZER = 'readiness.metal.ironcore.dev/cleanup-taints';
export const BOOTSTRAP_COMPLETED_PREFIX = 'readiness.metal.ironcore.dev/bootstrap-completed-';

type Taint = NonNullable<Server['spec']['taints']>[number];
type RuleTaint = ServerReadinessRule['spec']['taint'];

/** Upstream `equalTaints`: key, value and effect (an unset effect is the default `NoBind`). */
export function sameTaint(a: Taint, b: RuleTaint): boolean {
  return (
    a.key === b.key &&
    (a.value ?? '') === (b.value ?? '') &&
    (a.effect ?? 'NoBind') === (b.effect ?? 'NoBind')
  );
}

/** Whether every condition of `rule` is on `server` with its required status. Pure. */
export function passes(server: Server, rule: ServerReadinessRule): boolean {
  return rule.spec.conditions.every(
    (c) => findCondition(server.status?.conditions, c.type)?.status === c.requiredStatus,
  );
}

/**
 * The taints and annotations `server` should carry under `rules` (deleted rules skipped), or
 * undefined when nothing changes. Pure.
 */
export function evaluate(
  server: Server,
  rules: readonly ServerReadinessRule[],
): { taints: Taint[]; annotations: Record<string, string> } | undefined {
  let taints = [...(server.spec.taints ?? [])];
  const annotations: Record<string, string> = {};
  const ann = server.metadata.annotations ?? {};
  let changed = false;
  for (const rule of rules) {
    if (rule.metadata.deletionTimestamp) continue;
    const name = rule.metadata.name ?? '';
    const bootstrap = rule.spec.enforcementMode === 'BootstrapOnly';
    if (bootstrap && `${BOOTSTRAP_COMPLETED_PREFIX}${name}` in ann) continue;
    if (!selectorMatches(rule.spec.serverSelector ?? {}, server.metadata.labels)) continue;
    const has = taints.some((t) => sameTaint(t, rule.spec.taint));
    if (passes(server, rule)) {
      if (has) {
        taints = taints.filter((t) => !sameTaint(t, rule.spec.taint));
        changed = true;
      }
      if (bootstrap) {
        annotations[`${BOOTSTRAP_COMPLETED_PREFIX}${name}`] = 'true';
        changed = true;
      }
    } else if (!has) {
      taints.push(ruleTaint(rule.spec.taint));
      changed = true;
    }
  }
  return changed ? { taints, annotations } : undefined;
}

function ruleTaint(t: RuleTaint): Taint {
  return { key: t.key, ...(t.value ? { value: t.value } : {}), effect: t.effect ?? 'NoBind' };
}

export interface ReadinessControllerOptions {
  client: KubeClient;
  servers: Informer<Server>;
  rules: Informer<ServerReadinessRule>;
  log: pino.Logger;
  metrics?: RuntimeMetrics;
  /** The operator's object selector (`--object-selector`): a deleted rule's taints are removed from these Servers only. */
  labelSelector?: string;
}

/** Two controllers: per Server (taints), per rule (finalizer, cleanup on delete). */
export function newReadinessControllers(o: ReadinessControllerOptions): Controller[] {
  const log = o.log.child({ controller: 'serverreadinessrule' });
  const perServer = new Controller('serverreadinessruleserver', {
    reconcile: (req) => reconcileServer(o, req, log),
    log: o.log,
    metrics: o.metrics,
  });
  perServer.watches(o.servers);
  perServer.watches(o.rules, (rule) =>
    o.servers
      .list()
      .filter((s) => selectorMatches(rule.spec.serverSelector ?? {}, s.metadata.labels))
      .map((s) => ({ name: s.metadata.name ?? '' })),
  );
  const perRule = new Controller('serverreadinessrule', {
    reconcile: (req) => reconcileRule(o, req, log),
    log: o.log,
    metrics: o.metrics,
  });
  perRule.watches(o.rules);
  return [perServer, perRule];
}

async function reconcileServer(
  o: ReadinessControllerOptions,
  req: Request,
  log: pino.Logger,
): Promise<Result | undefined> {
  const server = o.servers.get(req.name);
  if (!server || server.metadata.deletionTimestamp) return undefined;
  const next = evaluate(server, o.rules.list());
  if (!next) return undefined;
  await o.client.mergePatch(Resources.Server, req.name, undefined, {
    metadata: { resourceVersion: server.metadata.resourceVersion, annotations: next.annotations },
    spec: { taints: next.taints },
  });
  log.info(
    { name: req.name, systemUUID: server.spec.systemUUID, taints: next.taints.map((t) => t.key) },
    'readiness taints updated',
  );
  return undefined;
}

async function reconcileRule(
  o: ReadinessControllerOptions,
  req: Request,
  log: pino.Logger,
): Promise<Result | undefined> {
  const rule = o.rules.get(req.name);
  if (!rule) return undefined;
  if (!rule.metadata.deletionTimestamp) {
    await addFinalizer(o.client, Resources.ServerReadinessRule, rule, READINESS_FINALIZER);
    return undefined;
  }
  if (!hasFinalizer(rule, READINESS_FINALIZER)) return undefined;
  // Read the Servers from the API server, not the cache: a taint the cache does not show yet must
  // not outlive its rule.
  // Only the Servers this operator manages: another one's (its own --object-selector) are not ours to edit.
  const { items } = await o.client.list<Server>(
    Resources.Server,
    o.labelSelector ? { labelSelector: o.labelSelector } : {},
  );
  for (const s of items) {
    if (!selectorMatches(rule.spec.serverSelector ?? {}, s.metadata.labels)) continue;
    const taints = s.spec.taints ?? [];
    if (!taints.some((t) => sameTaint(t, rule.spec.taint))) continue;
    await o.client.mergePatch(Resources.Server, s.metadata.name ?? '', undefined, {
      metadata: { resourceVersion: s.metadata.resourceVersion },
      spec: { taints: taints.filter((t) => !sameTaint(t, rule.spec.taint)) },
    });
    log.info({ rule: req.name, name: s.metadata.name }, 'rule deleted: taint removed');
  }
  await removeFinalizer(o.client, Resources.ServerReadinessRule, rule, READINESS_FINALIZER);
  return undefined;
}
