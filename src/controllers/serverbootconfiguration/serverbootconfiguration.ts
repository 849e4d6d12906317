/**
 * ServerBootConfiguration controller: decides whether an SBC can be booted and says so in
 * `status.state` (Pending → Ready | Error) and the `Ready` condition (reason = why not). The claim and
 * Server controllers power a server on only once this says Ready (boot-flow case C05).
 *
 * Checks: `spec.image` resolves through the image catalog or, as an OCI reference, through its
 * registry (once per attempt, recorded in `status.image` before the state says Ready; see
 * boot-image-resolution.ts); the ignition Secret, when referenced,
 * exists, and what the boot server would serve from it (Butane translated, the `/bootstate` hook
 * merged in) passes the official Ignition validator (src/ignition/); otherwise `Error` with the
 * translator's or validator's report (`InvalidButane`, `InvalidIgnition`, `IgnitionMissing`,
 * `IgnitionToolsUnavailable`). Without `ignitionSecretRef` the SBC is Ready and its message says
 * "no ignition configured" (the boot server then serves the callback-only config, see
 * `callbackOnlyIgnition`).
 *
 * The verdict is written in one request (condition, state and image together) and only when it
 * differs from the status. A Ready verdict is not re-evaluated until the SBC's generation (a new
 * attempt or spec edit) or the image catalog changes: the signals rewrite the status several times
 * per attempt and none of that changes it (Secrets are not watched either way; an Error verdict
 * is rechecked on a timer).
 *
 * A hand-made SBC (upstream's shape: created by a person or another controller) needs nothing more
 * than a claim-made one: its callback token is derived from its uid and attempt by every process
 * holding the callback key (bootauth/callback-token.ts).
 */
import type pino from 'pino';
import type { SBCImageStatus, ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import { BootConfigurationReason, EventReason } from '../../api/vocabulary.js';
import { IgnitionTools } from '../../ignition/ignition-tools.js';
import { IgnitionError, IgnitionRenderer } from '../../ignition/served-ignition.js';
import { secretUse } from '../../ignition/validated-secrets.js';
import type { BootImages } from '../../oci/boot-images.js';
import type { KubeClient } from '../../runtime/client.js';
import { applyCondition } from '../../runtime/condition-writer.js';
import { findCondition } from '../../runtime/conditions.js';
import { Controller, type Request, type Result } from '../../runtime/controller.js';
import type { EventRecorder } from '../../runtime/events.js';
import type { Informer } from '../../runtime/informer.js';
import type { RuntimeMetrics } from '../../runtime/metrics.js';
import { controllerOf } from '../../runtime/ownerrefs.js';
import { Resources, type SecretObject } from '../../runtime/resource.js';
import { SBC_READY_CONDITION } from '../common/boot-configuration.js';
import { CONTROLLER_COMPONENT } from '../common/owned-conditions.js';
import { resolveSbcImage } from './boot-image-resolution.js';
import type { ImageCatalogSource } from './image-catalog-source.js';

/** How often an SBC in Error because of a missing Secret is looked at again, ms (Secrets are not watched). */
const SECRET_RECHECK_MS = 5_000;
/** How often an SBC whose OCI image could not be resolved is looked at again, ms. */
const REGISTRY_RECHECK_MS = 10_000;

export interface ServerBootConfigurationControllerOptions {
  client: KubeClient;
  sbcs: Informer<ServerBootConfiguration>;
  catalog: ImageCatalogSource;
  events: EventRecorder;
  log: pino.Logger;
  metrics?: RuntimeMetrics;
  /** Butane translation and Ignition validation; default: the `ignition-tools` binary. */
  ignition?: IgnitionRenderer;
  /** Whether the boot server merges the `/bootstate` hook into served ignition (default true). */
  injectBootstateUnit?: boolean;
  /** OCI image resolution; without it only image catalog names resolve. */
  images?: BootImages;
  /** Concurrent reconciles (each waits on an API read and a status write). Default 2. */
  workers?: number;
}

interface Verdict {
  state: 'Ready' | 'Error';
  reason: string;
  message: string;
  recheck?: boolean;
  recheckMs?: number;
  /** The OCI image resolved for this attempt, to record in `status.image`. */
  image?: SBCImageStatus;
  /** True when `image` was resolved by this evaluation (not reused from the status). */
  resolvedNow?: boolean;
}

class ServerBootConfigurationReconciler {
  private readonly ignition: IgnitionRenderer;
  /** Images resolved by this process and perhaps not in the informer yet (uid → image), so a quick
   *  second reconcile does not ask the registry again. */
  private readonly recent = new Map<string, SBCImageStatus>();
  /** uid → `verdictKey` of the Ready verdict this process wrote (bounded, oldest out). */
  private readonly readyFor = new Map<string, string>();
  private catalogEpoch = 0;
  private readonly log: pino.Logger;

  constructor(private readonly o: ServerBootConfigurationControllerOptions) {
    this.ignition = o.ignition ?? new IgnitionRenderer(new IgnitionTools());
    this.log = o.log.child({ controller: 'serverbootconfiguration' });
  }

  private async evaluate(sbc: ServerBootConfiguration): Promise<Verdict> {
    const o = this.o;
    const known = this.recent.get(sbc.metadata.uid ?? '');
    const fresher =
      known?.bootAttempt === (sbc.spec.bootAttempt ?? 1) && sbc.status?.image?.digest !== known?.digest;
    const view = fresher ? { ...sbc, status: { ...sbc.status, image: known } } : sbc;
    const image = await resolveSbcImage(view, o.catalog.current(), o.images);
    if (!image.ok) {
      // A registry answer can change without the SBC changing (a push, an outage ending): look again.
      return {
        state: 'Error',
        reason: image.reason,
        message: image.message,
        recheck: image.askedRegistry,
        recheckMs: REGISTRY_RECHECK_MS,
      };
    }
    if (image.image && image.resolvedNow) {
      if (this.recent.size >= 10_000) this.recent.delete(this.recent.keys().next().value!);
      this.recent.set(sbc.metadata.uid ?? '', image.image);
    }
    const ign = await this.evaluateIgnition(sbc);
    if (ign) return { ...ign, image: image.image, resolvedNow: image.resolvedNow };
    const ref = sbc.spec.ignitionSecretRef?.name;
    const digest = image.image ? ` (${image.image.digest})` : '';
    return {
      state: 'Ready',
      reason: 'Ready',
      message: `image ${image.name}${digest} resolved; ${ref ? `ignition ${ref} valid` : 'no ignition configured (no ignitionSecretRef): /ignition serves only the /bootstate callback unit'}`,
      image: image.image,
      resolvedNow: image.resolvedNow,
    };
  }

  /**
   * Renders the ignition the boot server would serve (with a stand-in token: validity does not
   * depend on its value) and validates it; an Error verdict, or undefined when it is valid.
   */
  private async evaluateIgnition(sbc: ServerBootConfiguration): Promise<Verdict | undefined> {
    const o = this.o;
    const ref = sbc.spec.ignitionSecretRef?.name;
    let secret: SecretObject | undefined;
    if (ref) {
      secret = await o.client.get<SecretObject>(Resources.Secret, ref, sbc.metadata.namespace);
      if (!secret) {
        return {
          state: 'Error',
          reason: BootConfigurationReason.IgnitionSecretNotFound,
          message: `ignition Secret ${ref} does not exist`,
          recheck: true,
        };
      }
    }
    const hook = {
      registryUrl: 'http://registry.invalid',
      uuid: '00000000-0000-0000-0000-000000000000',
      token: 'x'.repeat(43),
      attempt: sbc.spec.bootAttempt ?? 1,
    };
    try {
      const key = `${sbc.metadata.namespace}/${ref}@${secret?.metadata.resourceVersion}`;
      const stored = await this.ignition.stored(ref ? (secret?.data ?? {}) : undefined, key, ref);
      await this.ignition.render(stored, (o.injectBootstateUnit ?? true) ? hook : undefined);
      // The boot server of this process serves this very version without reading it again.
      if (ref && secret) this.ignition.validated.handOver(secretUse(sbc, ref), secret);
      return undefined;
    } catch (err) {
      if (!(err instanceof IgnitionError)) throw err;
      // Secrets are not watched: look again, an edit may fix it.
      return { state: 'Error', reason: err.reason, message: err.message, recheck: true };
    }
  }

  async reconcile(req: Request): Promise<Result | undefined> {
    const o = this.o;
    const sbc = o.sbcs.get(req.name, req.namespace);
    if (!sbc || sbc.metadata.deletionTimestamp) return undefined;
    // Signals change the status many times per attempt; none of that changes the verdict.
    if (this.readyFor.get(sbc.metadata.uid ?? '') === this.verdictKey(sbc) && isReadyNow(sbc))
      return undefined;
    const v = await this.evaluate(sbc);
    const l = this.log.child({
      namespace: sbc.metadata.namespace,
      name: sbc.metadata.name,
      server: sbc.spec.serverRef?.name,
    });
    await this.writeVerdict(sbc, v);
    this.recordEvents(sbc, v, l);
    const uid = sbc.metadata.uid ?? '';
    if (v.state === 'Ready' && !v.recheck) {
      if (this.readyFor.size >= 10_000) this.readyFor.delete(this.readyFor.keys().next().value!);
      this.readyFor.set(uid, this.verdictKey(sbc));
    } else this.readyFor.delete(uid);
    return v.recheck ? { requeueAfterMs: v.recheckMs ?? SECRET_RECHECK_MS } : undefined;
  }

  /**
   * One Event per step: `ImageResolved` when the image was resolved for the attempt (saying Ready
   * too when the state becomes Ready with it), else one for a changed state — except a plain Ready
   * of an SBC a claim or Server controls (see {@link ownedByBootFlow}), which its owner's Events tell.
   */
  private recordEvents(sbc: ServerBootConfiguration, v: Verdict, l: pino.Logger): void {
    const changed = sbc.status?.state !== v.state;
    if (changed) l.info({ state: v.state, reason: v.reason }, 'boot configuration evaluated');
    if (v.image && v.resolvedNow) {
      const img = v.image;
      l.info(
        { image: img.reference, digest: img.digest, attempt: img.bootAttempt },
        'image resolved for the attempt',
      );
      const ready = changed && v.state === 'Ready' ? '; boot configuration Ready' : '';
      this.o.events.record(
        Resources.ServerBootConfiguration,
        sbc,
        'Normal',
        EventReason.ImageResolved,
        `attempt ${img.bootAttempt}: ${img.reference} resolved to ${img.digest}${ready}`,
      );
      if (ready) return;
    }
    if (!changed) return;
    // Ready is no news on an SBC of a claim or a Server: the owner's power-on Event that Ready lets
    // happen (BootAttemptStarted, BootStarted) follows at once, and the owner's condition says it.
    // Hand-made SBCs and every Error keep their Event.
    if (v.state === 'Ready' && ownedByBootFlow(sbc)) return;
    this.o.events.record(
      Resources.ServerBootConfiguration,
      sbc,
      v.state === 'Ready' ? 'Normal' : 'Warning',
      v.state === 'Ready' ? 'BootConfigurationReady' : v.reason,
      v.message,
    );
  }

  /** What a Ready verdict depends on besides Secrets (which are not watched): the spec and the catalog. */
  private verdictKey(sbc: ServerBootConfiguration): string {
    return `${sbc.metadata.generation ?? 0}/${this.catalogEpoch}`;
  }

  /** Forgets the Ready verdicts (the image catalog changed: names may resolve differently). */
  catalogChanged(): void {
    this.catalogEpoch++;
    this.readyFor.clear();
  }

  /**
   * Writes the verdict in one request: the `Ready` condition, `status.state`, `status.image` (and,
   * on a hand-made SBC, `status.attemptGeneration`) together (server-side apply, field manager `metal-operator-Ready`), so whoever sees the state
   * also finds its reason and a Ready SBC names its digests. Nothing is sent when all three are
   * already stored.
   */
  private async writeVerdict(sbc: ServerBootConfiguration, v: Verdict): Promise<void> {
    await applyCondition(
      this.o.client,
      Resources.ServerBootConfiguration,
      sbc,
      {
        type: SBC_READY_CONDITION,
        status: v.state === 'Ready' ? 'True' : 'False',
        reason: v.reason,
        message: v.message,
      },
      `${CONTROLLER_COMPONENT}-${SBC_READY_CONDITION}`,
      new Date(),
      {
        state: v.state,
        ...(v.image ? { image: v.image } : {}),
        // A hand-made SBC has no claim or Server to stamp its attempt: its first generation is
        // it. Sent in every apply of this field manager (an apply that left it out would remove it).
        ...(ownedByBootFlow(sbc)
          ? {}
          : { attemptGeneration: sbc.status?.attemptGeneration ?? sbc.metadata.generation ?? 0 }),
      },
    );
  }
}

/** The SBC is controlled by a claim or a Server (provisioning, discovery, cleanup), not hand-made. */
function ownedByBootFlow(sbc: ServerBootConfiguration): boolean {
  const owner = controllerOf(sbc);
  return (
    owner?.apiVersion.startsWith('metal.ironcore.dev/') === true &&
    (owner.kind === 'ServerClaim' || owner.kind === 'Server')
  );
}

/** The status says Ready for the current generation (the condition and the state). */
function isReadyNow(sbc: ServerBootConfiguration): boolean {
  const c = findCondition(sbc.status?.conditions, SBC_READY_CONDITION);
  return (
    sbc.status?.state === 'Ready' &&
    c?.status === 'True' &&
    (c.observedGeneration ?? 0) >= (sbc.metadata.generation ?? 0)
  );
}

export function newServerBootConfigurationController(
  o: ServerBootConfigurationControllerOptions,
): Controller {
  const r = new ServerBootConfigurationReconciler(o);
  const c = new Controller('serverbootconfiguration', {
    reconcile: (req) => r.reconcile(req),
    workers: o.workers ?? 2,
    log: o.log,
    metrics: o.metrics,
  });
  c.watches(o.sbcs);
  o.catalog.onChange(() => {
    r.catalogChanged();
    for (const s of o.sbcs.list())
      c.enqueue({ name: s.metadata.name ?? '', namespace: s.metadata.namespace });
  });
  return c;
}
