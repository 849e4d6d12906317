/**
 * Which Servers a ServerClaim may bind: pure functions over the claim and Server specs.
 *
 * A Server is eligible when it is `Available`, has no `serverClaimRef` (or already names this
 * claim), is not `unclaimable`, does not carry a system UUID another Server owns, and every taint is tolerated by the claim; by reference it must be
 * the named Server, by selector its labels must match (`metav1.LabelSelector` semantics: all
 * `matchLabels` and all `matchExpressions` ANDed). With neither reference nor selector every eligible
 * Server fits (upstream's "any Available server"), unless the manager requires an explicit selection
 * (`--require-server-selection`, see {@link selectionRefusal}).
 */
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerClaim } from '../../api/v1alpha1/serverclaim.js';
import { BoundReason } from '../../api/vocabulary.js';
import { duplicatesIn } from './system-ownership.js';

type Selector = NonNullable<ServerClaim['spec']['serverSelector']>;
type Taint = NonNullable<Server['spec']['taints']>[number];
type Toleration = NonNullable<ServerClaim['spec']['tolerations']>[number];

/** `metav1.LabelSelector` matching; an empty selector matches everything, unknown operators nothing. */
export function selectorMatches(sel: Selector, labels: Record<string, string> | undefined): boolean {
  const l = labels ?? {};
  for (const [k, v] of Object.entries(sel.matchLabels ?? {})) if (l[k] !== v) return false;
  for (const e of sel.matchExpressions ?? []) {
    const has = Object.hasOwn(l, e.key);
    const values = e.values ?? [];
    switch (e.operator) {
      case 'In':
        if (!has || !values.includes(l[e.key] as string)) return false;
        break;
      case 'NotIn':
        if (has && values.includes(l[e.key] as string)) return false;
        break;
      case 'Exists':
        if (!has) return false;
        break;
      case 'DoesNotExist':
        if (has) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

/** Taint key that puts an unclaimed Server into `Maintenance` (set by `metalctl cordon`). */
export const MAINTENANCE_TAINT_KEY = 'metal.ironcore.dev/maintenance';

/** The maintenance taint of `server`, or undefined. */
export function maintenanceTaint(server: Server): Taint | undefined {
  return (server.spec.taints ?? []).find((t) => t.key === MAINTENANCE_TAINT_KEY);
}

/** `key=value:Effect` (`key:Effect` without a value), as kubectl prints taints. */
export function taintText(t: Taint): string {
  return `${t.key}${t.value ? `=${t.value}` : ''}:${t.effect ?? 'NoBind'}`;
}

/** A toleration matches a taint by key, by value (operator Equal, the default) and by effect (when set). */
export function tolerates(tolerations: readonly Toleration[] | undefined, taint: Taint): boolean {
  const effect = taint.effect ?? 'NoBind';
  return (tolerations ?? []).some(
    (t) =>
      t.key === taint.key &&
      (t.operator === 'Exists' || (t.value ?? '') === (taint.value ?? '')) &&
      (!t.effect || t.effect === effect),
  );
}

/**
 * Why `server` cannot be bound by `claim`, or `undefined` when it can. `uuidOwner`: the other Server
 * that owns its system UUID, if any (system-ownership.ts).
 */
export function ineligibility(claim: ServerClaim, server: Server, uuidOwner?: Server): string | undefined {
  const ref = server.spec.serverClaimRef;
  const mine = ref?.name === claim.metadata.name && ref?.namespace === claim.metadata.namespace;
  if (ref && !mine) return `claimed by ${ref.namespace}/${ref.name}`;
  if (server.metadata.deletionTimestamp) return 'being deleted';
  if (uuidOwner && !mine) return `system UUID held by Server ${uuidOwner.metadata.name}`;
  if (server.spec.unclaimable) return 'unclaimable';
  const untolerated = (server.spec.taints ?? []).filter((t) => !tolerates(claim.spec.tolerations, t));
  if (untolerated.length) return `taint ${untolerated.map(taintText).join(', ')} not tolerated`;
  if (!mine && server.status?.state !== 'Available')
    return `in state ${server.status?.state ?? 'Initial'}, not Available`;
  return undefined;
}

/**
 * Eligible Servers for `claim`, in an order that starts at a position derived from the claim's uid,
 * so that many claims racing for one pool try different Servers first instead of all fighting over
 * the first one.
 */
export function candidates(claim: ServerClaim, servers: readonly Server[]): Server[] {
  const want = claim.spec.serverRef?.name;
  const sel = claim.spec.serverSelector;
  const dup = duplicatesIn(servers);
  const fit = servers
    .filter((s) => (want ? s.metadata.name === want : sel ? selectorMatches(sel, s.metadata.labels) : true))
    .filter((s) => ineligibility(claim, s, dup.get(s.metadata.name ?? '')) === undefined)
    .sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''));
  if (fit.length < 2) return fit;
  const start = hash(claim.metadata.uid ?? claim.metadata.name ?? '') % fit.length;
  return [...fit.slice(start), ...fit.slice(0, start)];
}

function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619) >>> 0;
  return h;
}

/** Bound condition reason of a claim refused under `--require-server-selection`. */
export const SERVER_SELECTION_REQUIRED_REASON = BoundReason.ServerSelectionRequired;

/**
 * Why `claim` may not bind at all, or `undefined`: with `requireSelection`, a claim with neither
 * `spec.serverRef` nor `spec.serverSelector` (an explicit empty selector `{}` counts as a selection).
 */
export function selectionRefusal(
  claim: ServerClaim,
  requireSelection: boolean,
): { reason: string; message: string } | undefined {
  if (!requireSelection || claim.spec.serverRef?.name || claim.spec.serverSelector) return undefined;
  return {
    reason: SERVER_SELECTION_REQUIRED_REASON,
    message:
      'the claim has neither spec.serverRef nor spec.serverSelector and this operator runs with --require-server-selection: set one of them (serverSelector: {} accepts any Available Server)',
  };
}

/**
 * Why an unbound claim found no Server, the way the Kubernetes scheduler explains a pending pod:
 * `0/7 servers: 5 claimed, 1 unclaimable, 1 taint maintenance=disk-swap:NoBind not tolerated`.
 * `servers`: every Server the operator sees; `taken`: candidates that were bound by others meanwhile.
 * Pure; the reason is `ServerNotFound` / `ServerNotAvailable` for a claim naming its Server, else
 * `NoServerAvailable`.
 */
export function unboundExplanation(
  claim: ServerClaim,
  servers: readonly Server[],
  taken = 0,
): { reason: (typeof BoundReason)[keyof typeof BoundReason]; message: string } {
  const want = claim.spec.serverRef?.name;
  const dup = duplicatesIn(servers);
  if (want) {
    const s = servers.find((x) => x.metadata.name === want);
    if (!s) return { reason: BoundReason.ServerNotFound, message: `Server ${want} does not exist` };
    return {
      reason: BoundReason.ServerNotAvailable,
      message: `Server ${want} is ${ineligibility(claim, s, dup.get(want)) ?? 'taken meanwhile'}`,
    };
  }
  const sel = claim.spec.serverSelector;
  const counts = new Map<string, number>();
  for (const s of servers) {
    const why =
      sel && !selectorMatches(sel, s.metadata.labels)
        ? 'not matching the selector'
        : (ineligibility(claim, s, dup.get(s.metadata.name ?? '')) ?? 'taken meanwhile');
    const key = why.startsWith('claimed by ') ? 'claimed' : why;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  const parts = [...counts.entries()]
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([why, n]) => `${n} ${why}`);
  const extra = taken && !counts.has('taken meanwhile') ? `; ${taken} candidate(s) taken meanwhile` : '';
  return {
    reason: BoundReason.NoServerAvailable,
    message: `0/${servers.length} servers${parts.length ? `: ${parts.join(', ')}` : ''}${extra}`,
  };
}
