/**
 * The machinery shared by discovery (Server controller) and provisioning (ServerClaim controller):
 * a ServerBootConfiguration (SBC), one boot attempt after another, and the question "which signals
 * arrived for the current attempt?".
 *
 * Contract with the registry and the boot server (docs/ARCHITECTURE.md, 'A boot attempt'; README, 'Security model'):
 * - the attempt's callback token is derived from the SBC's uid and `spec.bootAttempt` with the
 *   callback key (bootauth/callback-token.ts): no Secret is written per attempt;
 * - a new attempt: bump `spec.bootAttempt` (bumping `metadata.generation`; every earlier token is
 *   then stale), then set `status.attemptGeneration` to that generation (not written for the first
 *   attempt of a new SBC: generation 1 is what an unstamped SBC's attempt generation reads as);
 * - a signal counts for the attempt when its `observedGeneration >= status.attemptGeneration`.
 *
 * Attempts are identified by an opaque key chosen by the caller (e.g. `s2a3`: series 2, attempt 3),
 * stored in the annotation {@link ATTEMPT_KEY_ANNOTATION} in the same write that bumps
 * `spec.bootAttempt`, so a sync after a crash knows whether the attempt it wants has begun. Every
 * write is guarded by the object's resourceVersion: a reconcile that read a stale cache fails with
 * 409 and retries, and never starts an attempt twice.
 */
import type { BootMethod } from '../../api/v1alpha1/boot-method.js';
import { ATTEMPT_KEY_ANNOTATION, type BootPolicy } from '../../api/v1alpha1/boot-policy.js';
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import {
  BootCompletedReason,
  BootConfigurationReason,
  ConditionType,
  countsForCurrentAttempt,
} from '../../api/vocabulary.js';
import type { CallbackKey } from '../../bootauth/callback-token.js';
import { attemptToken } from '../../bootauth/callback-token.js';
import { ApiError, type KubeClient } from '../../runtime/client.js';
import { findCondition } from '../../runtime/conditions.js';
import type { Informer } from '../../runtime/informer.js';
import { controllerOwnerReference, isControlledBy } from '../../runtime/ownerrefs.js';
import { type KObject, Resources, type ResourceType } from '../../runtime/resource.js';
import { StatusPatch } from '../../runtime/status-patch.js';
import { applyOwnedCondition } from './owned-conditions.js';

export { ATTEMPT_KEY_ANNOTATION };
/**
 * Annotation on an SBC: the attempt key in which its spec was edited without a new attempt (a boot
 * policy flip, an image or ignition that boots the same). Its generation then moved past the
 * attempt's, and `status.attemptGeneration` must not follow it (the attempt's signals keep counting).
 */
export const EDITED_IN_ATTEMPT_ANNOTATION = 'metal.ironcore.dev/edited-in-attempt';
/** SBC condition owned by the ServerBootConfiguration controller; `status.state` mirrors it. */
export const SBC_READY_CONDITION = ConditionType.Ready;
export const BOOT_COMPLETED_CONDITION = ConditionType.BootCompleted;

export interface DesiredBootConfiguration {
  name: string;
  namespace: string;
  /** Controller owner of the SBC (a ServerClaim, or the Server for discovery). */
  owner: { obj: KObject; rt: ResourceType };
  serverName: string;
  image: string;
  ignitionSecretName?: string;
  bootPolicy: BootPolicy;
  /** Omitted: PXE (and nothing written, as upstream objects have no such field). */
  bootMethod?: BootMethod;
  /** Identity of the wanted attempt; a different key than the SBC's starts a new attempt. */
  attemptKey: string;
  /**
   * The attempt number the caller wants `spec.bootAttempt` to be at a new attempt; the number never
   * goes back (tokens of earlier attempts are told apart by it), so the SBC may end up ahead.
   */
  bootAttempt?: number;
  labels: Record<string, string>;
}

export interface AttemptSignals {
  arrived: string[];
  missing: string[];
}

export interface Readiness {
  ready: boolean;
  /** `Pending`, `Ready`, or the SBC's error reason (e.g. `ImageNotFound`). */
  reason: string;
  message: string;
}

/**
 * The signals of `types` that are True for the SBC's current attempt, and those that are not.
 * Order follows `types`.
 */
/** SBC conditions that are no sign of anything served: the SBC controller's and the claim's own. */
const UNSERVED_CONDITIONS = new Set<string>([SBC_READY_CONDITION, BOOT_COMPLETED_CONDITION]);

/**
 * Whether anything of `sbc` went over the wire: a signal or refusal condition of any attempt. An SBC
 * that served nothing gave no client its token, so a first series may start on its attempt.
 */
export function servedAnything(sbc: ServerBootConfiguration): boolean {
  return (sbc.status?.conditions ?? []).some((c) => !UNSERVED_CONDITIONS.has(c.type));
}

export function attemptSignals(sbc: ServerBootConfiguration, types: readonly string[]): AttemptSignals {
  const arrived: string[] = [];
  const missing: string[] = [];
  for (const t of types) (countsForCurrentAttempt(sbc, t) ? arrived : missing).push(t);
  return { arrived, missing };
}

/** Readiness of an SBC whose current generation the SBC controller has not evaluated yet. */
export const NOT_EVALUATED: Readonly<Readiness> = {
  ready: false,
  reason: BootConfigurationReason.Pending,
  message: 'the boot configuration has not been evaluated yet',
};

/**
 * Whether the SBC is Ready for its current spec: `status.state` Ready and a `Ready` condition written
 * for the current generation (so a just-bumped attempt waits for one more evaluation).
 */
export function bootConfigurationReadiness(sbc: ServerBootConfiguration): Readiness {
  const cond = findCondition(sbc.status?.conditions, SBC_READY_CONDITION);
  const fresh = !!cond && (cond.observedGeneration ?? 0) >= (sbc.metadata.generation ?? 0);
  if (sbc.status?.state === 'Ready' && cond?.status === 'True' && fresh) {
    return { ready: true, reason: BootConfigurationReason.Ready, message: cond.message };
  }
  if (sbc.status?.state === 'Error' && cond?.status === 'False') {
    return { ready: false, reason: cond.reason, message: cond.message };
  }
  return NOT_EVALUATED;
}

export class BootConfigurations {
  /**
   * uid by `namespace/name` of SBCs this process deleted whose deletion the watch has not delivered
   * yet: so a reconcile in between does not delete them again (a 404 each). Bounded: an entry goes
   * with the informer's delete event.
   */
  private readonly deleted = new Map<string, string>();

  constructor(
    private readonly client: KubeClient,
    private readonly sbcs: Informer<ServerBootConfiguration>,
    private readonly callbackKey: CallbackKey,
  ) {
    sbcs.on('delete', (gone) => {
      const key = `${gone.metadata.namespace}/${gone.metadata.name}`;
      if (this.deleted.get(key) === gone.metadata.uid) this.deleted.delete(key);
    });
  }

  /** The cached SBC, unless this process deleted it already (the cache lags the delete). */
  cached(name: string, namespace: string): ServerBootConfiguration | undefined {
    const sbc = this.sbcs.get(name, namespace);
    return sbc && this.deleted.get(`${namespace}/${name}`) === sbc.metadata.uid ? undefined : sbc;
  }

  /**
   * `sbc` as the API server has it now (a GET, not the cache), or undefined when it is gone or
   * another object took its name (another uid). For decisions that must not rest on a lagging cache
   * (boot-attempt `endsOnDeadline`). Throws `ApiError` for other API errors (the caller retries).
   */
  async read(sbc: ServerBootConfiguration): Promise<ServerBootConfiguration | undefined> {
    const fresh = await this.client.get<ServerBootConfiguration>(
      Resources.ServerBootConfiguration,
      sbc.metadata.name ?? '',
      sbc.metadata.namespace,
    );
    return fresh?.metadata.uid === sbc.metadata.uid ? fresh : undefined;
  }

  /**
   * Makes the SBC match `d`, starting a new attempt when `d.attemptKey`
   * differs from the SBC's. Returns the SBC as stored. Throws `ApiError` 409 when the cache was stale
   * or the name belongs to an object controlled by someone else (the caller retries), and other API
   * errors.
   */
  async sync(d: DesiredBootConfiguration): Promise<ServerBootConfiguration> {
    let sbc = this.cached(d.name, d.namespace) ?? (await this.create(d));
    if (sbc.metadata.deletionTimestamp || !isControlledBy(sbc, d.owner.obj)) {
      throw new ApiError(
        `ServerBootConfiguration ${d.namespace}/${d.name} is being deleted or belongs to another owner`,
        409,
        {
          reason: 'Conflict',
        },
      );
    }
    const spec = desiredSpec(d);
    if (sbc.metadata.annotations?.[ATTEMPT_KEY_ANNOTATION] !== d.attemptKey) {
      sbc = await this.beginAttempt(d, sbc, spec);
    } else {
      if (specDiffers(sbc, spec)) {
        // An edit within the attempt (boot policy, an image or ignition that boots the same): the
        // attempt's generation is stamped first, so its signals keep counting after the bump.
        sbc = await this.stampAttempt(sbc, d, true);
        sbc = await this.client.mergePatch<ServerBootConfiguration>(
          Resources.ServerBootConfiguration,
          d.name,
          d.namespace,
          {
            metadata: {
              resourceVersion: sbc.metadata.resourceVersion,
              annotations: { [EDITED_IN_ATTEMPT_ANNOTATION]: d.attemptKey },
            },
            spec: specPatch(spec),
          },
        );
      }
    }
    return this.stampAttempt(sbc, d, false);
  }

  /**
   * Stamps `status.attemptGeneration` with the generation the current attempt began at, when it is
   * owed: after the write that began the attempt (also after a crash between the two writes), never
   * after an in-attempt edit (annotation {@link EDITED_IN_ATTEMPT_ANNOTATION} naming the attempt).
   * `beforeEdit`: an in-attempt edit follows, so even a brand-new SBC (generation 1) is stamped.
   */
  private async stampAttempt(
    sbc: ServerBootConfiguration,
    d: DesiredBootConfiguration,
    beforeEdit: boolean,
  ): Promise<ServerBootConfiguration> {
    const generation = sbc.metadata.generation ?? 1;
    if (sbc.metadata.annotations?.[EDITED_IN_ATTEMPT_ANNOTATION] === d.attemptKey) return sbc;
    // A brand-new SBC (generation 1) needs no stamp: unstamped, the attempt's generation is the
    // object's (attemptGenerationOf), and no signal can predate the object.
    if ((generation > 1 || beforeEdit) && (sbc.status?.attemptGeneration ?? 0) < generation) {
      // `attemptGeneration` is this writer's alone: no precondition (runtime/status-patch.ts).
      sbc = await new StatusPatch(this.client, Resources.ServerBootConfiguration, sbc, 'none')
        .set({ attemptGeneration: generation })
        .commit();
    }
    return sbc;
  }

  /**
   * Starts the attempt `d.attemptKey`: bumps `spec.bootAttempt` together with the key annotation
   * (the token changes with it). Reads the SBC fresh (this runs once per attempt) and writes with
   * its resourceVersion, so a lagging cache can neither skip nor repeat the bump.
   */
  private async beginAttempt(
    d: DesiredBootConfiguration,
    cached: ServerBootConfiguration,
    spec: ServerBootConfiguration['spec'],
  ): Promise<ServerBootConfiguration> {
    const sbc =
      (await this.client.get<ServerBootConfiguration>(
        Resources.ServerBootConfiguration,
        d.name,
        d.namespace,
      )) ?? cached;
    if (sbc.metadata.annotations?.[ATTEMPT_KEY_ANNOTATION] === d.attemptKey) return sbc;
    const next = Math.max((sbc.spec.bootAttempt ?? 1) + 1, d.bootAttempt ?? 0);
    return this.client.mergePatch<ServerBootConfiguration>(
      Resources.ServerBootConfiguration,
      d.name,
      d.namespace,
      {
        metadata: {
          resourceVersion: sbc.metadata.resourceVersion,
          annotations: { [ATTEMPT_KEY_ANNOTATION]: d.attemptKey },
        },
        spec: { ...specPatch(spec), bootAttempt: next },
      },
    );
  }

  /**
   * The callback token of `sbc`'s current attempt (`spec.bootAttempt` as given): what keys the
   * attempt's virtual-media capability (bootauth/vmedia-capability.ts). `undefined` for an SBC not
   * stored yet (no uid).
   */
  attemptToken(sbc: ServerBootConfiguration): string | undefined {
    return attemptToken(this.callbackKey, sbc)?.token;
  }

  /** Sets the SBC's `BootCompleted` condition (read by the boot server for NetBootOnce). */
  async setBootCompleted(sbc: ServerBootConfiguration, completed: boolean, message: string): Promise<void> {
    await applyOwnedCondition(this.client, Resources.ServerBootConfiguration, sbc, {
      type: BOOT_COMPLETED_CONDITION,
      status: completed ? 'True' : 'False',
      reason: completed ? BootCompletedReason.ClaimBooted : BootCompletedReason.Provisioning,
      message,
    });
  }

  /**
   * Deletes the SBC (idempotent). Its tokens die with its uid: nothing else to clean up.
   */
  async delete(name: string, namespace: string): Promise<void> {
    const key = `${namespace}/${name}`;
    const uid = this.sbcs.get(name, namespace)?.metadata.uid;
    // Remembered before the request: the watch often delivers the deletion ahead of the response,
    // and an entry set after that event would never be removed.
    if (uid) this.deleted.set(key, uid);
    try {
      await this.client.delete(Resources.ServerBootConfiguration, name, namespace);
    } catch (err) {
      if (uid && this.deleted.get(key) === uid) this.deleted.delete(key);
      throw err;
    }
  }

  private async create(d: DesiredBootConfiguration): Promise<ServerBootConfiguration> {
    try {
      return await this.client.create<ServerBootConfiguration>(Resources.ServerBootConfiguration, {
        apiVersion: 'metal.ironcore.dev/v1alpha1',
        kind: 'ServerBootConfiguration',
        metadata: {
          name: d.name,
          namespace: d.namespace,
          labels: d.labels,
          annotations: { [ATTEMPT_KEY_ANNOTATION]: d.attemptKey },
          ownerReferences: [controllerOwnerReference(d.owner.obj, d.owner.rt)],
        },
        spec: { ...desiredSpec(d), bootAttempt: Math.max(1, d.bootAttempt ?? 1) },
      });
    } catch (err) {
      if (!(err instanceof ApiError && err.conflict)) throw err;
      const existing = await this.client.get<ServerBootConfiguration>(
        Resources.ServerBootConfiguration,
        d.name,
        d.namespace,
      );
      if (!existing) throw err;
      return existing;
    }
  }
}

function desiredSpec(d: DesiredBootConfiguration): ServerBootConfiguration['spec'] {
  return {
    serverRef: { name: d.serverName },
    image: d.image,
    ...(d.ignitionSecretName ? { ignitionSecretRef: { name: d.ignitionSecretName } } : {}),
    bootPolicy: d.bootPolicy,
    ...(d.bootMethod && d.bootMethod !== 'PXE' ? { bootMethod: d.bootMethod } : {}),
  };
}

/** Merge-patch form of a desired spec: an unwanted ignition reference is removed, not kept. */
function specPatch(spec: ServerBootConfiguration['spec']): Record<string, unknown> {
  return { ...spec, ignitionSecretRef: spec.ignitionSecretRef ?? null, bootMethod: spec.bootMethod ?? null };
}

function specDiffers(sbc: ServerBootConfiguration, want: ServerBootConfiguration['spec']): boolean {
  const s = sbc.spec;
  return (
    s.serverRef?.name !== want.serverRef.name ||
    s.image !== want.image ||
    (s.ignitionSecretRef?.name || undefined) !== (want.ignitionSecretRef?.name || undefined) ||
    s.bootPolicy !== want.bootPolicy ||
    (s.bootMethod ?? 'PXE') !== (want.bootMethod ?? 'PXE')
  );
}
