/**
 * Which Servers a ServerClaim may bind: pure functions over the claim and Server specs.
 *
 * A Server is eligible when it is `Available`, has no `serverClaimRef` (or already names this
 * claim), is not `unclaimable`, and every taint is tolerated by the claim; by reference it must be
 * the named Server, by selector its labels must match (`metav1.LabelSelector` semantics: all
 * `matchLabels` and all `matchExpressions` ANDed). With neither reference nor selector every eligible
 * Server fits (upstream's "any Available server"), unless the manager requires an explicit selection
 * (`--require-server-selection`, see {@link selectionRefusal}).
 */
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import { BoundReason } from '../api/vocabulary.js';

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

/** Why `server` cannot be bound by `claim`, or `undefined` when it can. */
export function ineligibility(claim: ServerClaim, server: Server): string | undefined {
  const ref = server.spec.serverClaimRef;
  const mine = ref?.name === claim.metadata.name && ref?.namespace === claim.metadata.namespace;
  if (ref && !mine) return `claimed by ${ref.namespace}/${ref.name}`;
  if (server.metadata.deletionTimestamp) return 'being deleted';
  if (server.spec.unclaimable) return 'unclaimable';
  if (!mine && server.status?.state !== 'Available')
    return `in state ${server.status?.state ?? 'Initial'}, not Available`;
  const untolerated = (server.spec.taints ?? []).filter((t) => !tolerates(claim.spec.tolerations, t));
  if (untolerated.length) return `taint ${untolerated.map((t) => t.key).join(', ')} not tolerated`;
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
  const fit = servers
    .filter((s) => (want ? s.metadata.name === want : sel ? selectorMatches(sel, s.metadata.labels) : true))
    .filter((s) => ineligibility(claim, s) === undefined)
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
