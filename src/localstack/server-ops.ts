/**
 * The operator's write actions behind `metalctl cordon|uncordon|retry`: each one small patch that the
 * controllers honour, so that kubectl can do the same (`kubectl patch`, `kubectl annotate`).
 *
 * - cordon: taint `metal.ironcore.dev/maintenance[=reason]:NoBind|Evict` on a Server (no new claims;
 *   an unclaimed Server goes to `Maintenance`; `Evict` also releases its claim): src/controllers/server/taints.ts.
 * - uncordon: removes that taint (back to `Available`).
 * - retry: annotation `metal.ironcore.dev/operation=retry` on a ServerClaim (a new series of boot
 *   attempts) or a Server (discovery starts again from Error; the cleanup boot, when its
 *   attempts put the Server in Error). Refused where it would do nothing (a Server in another
 *   state) and, without `--reprovision`, on a Booted claim (it would re-provision the machine).
 * - release: deletes a ServerClaim (its Server is released once the BMC reports it Off); `--force`
 *   first annotates `metal.ironcore.dev/force-release=true`, so a dead BMC does not hold the release
 *   forever (recorded as a `ForcedRelease` Warning Event on the claim and the Server).
 *
 * Every function resolves a one-line result or throws an `OpError` with the reason (exit code 1, or
 * 2 for bad input); the taint list is written with the Server's resourceVersion (a concurrent change
 * → read again, at most 5 times).
 */
import {
  FORCE_RELEASE_ANNOTATION,
  OPERATION_ANNOTATION,
  OPERATION_RETRY,
} from '../api/v1alpha1/boot-policy.js';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import { ConditionType } from '../api/vocabulary.js';
import { MAINTENANCE_TAINT_KEY, taintText, withMaintenanceTaint } from '../controllers/server/taints.js';
import { ApiError, type KubeClient } from '../runtime/client.js';
import { findCondition } from '../runtime/conditions.js';
import { Resources } from '../runtime/resource.js';

/** A failed action: `exitCode` 2 for bad input, 1 otherwise. */
export class OpError extends Error {
  constructor(
    message: string,
    readonly exitCode: 1 | 2 = 1,
  ) {
    super(message);
  }
}

/** Kubernetes label-value syntax, which taint values follow: at most 63 characters. */
const TAINT_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/;

export interface CordonOptions {
  /** Taint value (why), label-value syntax. */
  reason?: string;
  /** Effect `Evict` instead of `NoBind`: also releases the Server's claim. */
  evict?: boolean;
}

/** Sets (`cordon`) or removes the maintenance taint of Server `name`. */
export async function setCordon(
  client: KubeClient,
  name: string,
  cordon: boolean,
  o: CordonOptions = {},
): Promise<string> {
  if (o.reason !== undefined && !TAINT_VALUE.test(o.reason)) {
    throw new OpError(
      `--reason ${JSON.stringify(o.reason)}: a taint value has at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric`,
      2,
    );
  }
  for (let i = 0; ; i++) {
    const server = await client.get<Server>(Resources.Server, name);
    if (!server) throw new OpError(`Server ${name} not found`);
    const taints = withMaintenanceTaint(server.spec.taints, cordon, {
      reason: o.reason,
      effect: o.evict ? 'Evict' : 'NoBind',
    });
    const had = (server.spec.taints ?? []).some((t) => t.key === MAINTENANCE_TAINT_KEY);
    if (!cordon && !had) return `Server ${name} is not cordoned`;
    try {
      await client.mergePatch(Resources.Server, name, undefined, {
        metadata: { resourceVersion: server.metadata.resourceVersion },
        spec: { taints },
      });
    } catch (err) {
      if (err instanceof ApiError && err.status === 409 && i < 4) continue;
      throw err;
    }
    const t = taints.find((x) => x.key === MAINTENANCE_TAINT_KEY);
    return cordon
      ? `Server ${name} cordoned (taint ${t ? taintText(t) : MAINTENANCE_TAINT_KEY})`
      : `Server ${name} uncordoned`;
  }
}

/**
 * Annotates a ServerClaim (`namespace` given) or a Server with the retry operation. Refused (exit 1,
 * nothing written) where it would do nothing — a Server not in Error or Discovery — or more than a
 * retry — a Booted claim, whose retry re-provisions the running machine — unless `reprovision`.
 */
export async function requestRetry(
  client: KubeClient,
  kind: 'server' | 'claim',
  name: string,
  namespace?: string,
  o: { reprovision?: boolean } = {},
): Promise<string> {
  const rt = kind === 'claim' ? Resources.ServerClaim : Resources.Server;
  const obj = await client.get<Server | ServerClaim>(rt, name, kind === 'claim' ? namespace : undefined);
  const what = kind === 'claim' ? `ServerClaim ${namespace}/${name}` : `Server ${name}`;
  if (!obj) throw new OpError(`${what} not found`);
  const refusal =
    kind === 'claim' ? claimRetryRefusal(obj as ServerClaim, o) : serverRetryRefusal(obj as Server);
  if (refusal) throw new OpError(`${what}: ${refusal}; nothing annotated`);
  await client.mergePatch(rt, name, kind === 'claim' ? namespace : undefined, {
    metadata: { annotations: { [OPERATION_ANNOTATION]: OPERATION_RETRY } },
  });
  const booted =
    kind === 'claim' && findCondition(obj.status?.conditions, ConditionType.Booted)?.status === 'True';
  return `${what} annotated ${OPERATION_ANNOTATION}=${OPERATION_RETRY}${booted ? ': re-provisioning (a new series of attempts network-boots the running machine)' : ''}`;
}

function claimRetryRefusal(claim: ServerClaim, o: { reprovision?: boolean }): string | undefined {
  if (o.reprovision) return undefined;
  if (findCondition(claim.status?.conditions, ConditionType.Booted)?.status !== 'True') return undefined;
  const server = claim.spec.serverRef?.name;
  return `is Booted${server ? ` on Server ${server}` : ''}: a retry re-provisions it (a new series of attempts power-cycles the running machine into a network boot); run again with --reprovision to do that`;
}

function serverRetryRefusal(server: Server): string | undefined {
  const state = server.status?.state || 'Initial';
  if (state === 'Error' || state === 'Discovery') return undefined;
  const claim = server.spec.serverClaimRef;
  return `is in state ${state}: retry restarts discovery or cleanup of a Server in Error${claim ? `; to boot its claim again: metalctl retry claim ${claim.name} -n ${claim.namespace}` : ''}`;
}

/**
 * Deletes ServerClaim `namespace/name`; with `force` first annotates it with
 * {@link FORCE_RELEASE_ANNOTATION} (also on a claim already being deleted).
 */
export async function releaseClaim(
  client: KubeClient,
  name: string,
  namespace: string,
  force: boolean,
): Promise<string> {
  const what = `ServerClaim ${namespace}/${name}`;
  const claim = await client.get<ServerClaim>(Resources.ServerClaim, name, namespace);
  if (!claim) throw new OpError(`${what} not found`);
  if (force)
    await client.mergePatch(Resources.ServerClaim, name, namespace, {
      metadata: { annotations: { [FORCE_RELEASE_ANNOTATION]: 'true' } },
    });
  if (!claim.metadata.deletionTimestamp)
    await client.delete(Resources.ServerClaim, name, namespace).catch((err) => {
      if (!(err instanceof ApiError && err.status === 404)) throw err;
    });
  return force
    ? `${what} deleted with ${FORCE_RELEASE_ANNOTATION}=true: its Server is released even if the BMC never reports it Off (the machine may still run; see the ForcedRelease Event)`
    : `${what} deleted: its Server is released once the BMC reports it Off`;
}
