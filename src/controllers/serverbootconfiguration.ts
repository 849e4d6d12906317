/**
 * ServerBootConfiguration controller: decides whether an SBC can be booted and says so in
 * `status.state` (Pending → Ready | Error) and the `Ready` condition (reason = why not). The claim and
 * Server controllers power a server on only once this says Ready (boot-flow case C05).
 *
 * Checks: `spec.image` resolves through the image catalog; the ignition Secret, when referenced,
 * exists and has key `ignition`; a Butane ignition (`format: fcos`) needs the `butane` tool on PATH
 * (reason `ButaneUnavailable` otherwise), because the boot server converts it when serving.
 * Without `ignitionSecretRef` the SBC is Ready and its message says "no ignition configured" (the boot
 * server then serves the callback-only config, see `callbackOnlyIgnition`).
 *
 * A hand-made SBC (no `callbackSecretRef`) first gets its callback Secret and token
 * (handmade-boot-configuration.ts); it is evaluated once that is referenced.
 */
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import type pino from 'pino';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import type { SecretObject } from '../bootsignals/boot-target.js';
import type { KubeClient } from '../runtime/client.js';
import { Controller, type Request, type Result } from '../runtime/controller.js';
import type { EventRecorder } from '../runtime/events.js';
import type { Informer } from '../runtime/informer.js';
import type { RuntimeMetrics } from '../runtime/metrics.js';
import { Resources } from '../runtime/resource.js';
import { SBC_READY_CONDITION } from './boot-configuration.js';
import { isHandMade, issueCallbackSecret } from './handmade-boot-configuration.js';
import type { ImageCatalogSource } from './image-catalog-source.js';
import { applyOwnedCondition } from './owned-conditions.js';

/** How often an SBC in Error because of a missing Secret is looked at again, ms (Secrets are not watched). */
const SECRET_RECHECK_MS = 5_000;

export interface ServerBootConfigurationControllerOptions {
  client: KubeClient;
  sbcs: Informer<ServerBootConfiguration>;
  catalog: ImageCatalogSource;
  events: EventRecorder;
  log: pino.Logger;
  metrics?: RuntimeMetrics;
  /** Whether Butane ignitions can be converted; default: a `butane` executable on PATH. */
  butaneAvailable?: () => boolean;
  /** Concurrent reconciles (each waits on an API read and a status write). Default 2. */
  workers?: number;
  /** Labels put on callback Secrets issued for hand-made SBCs (the operator's scope labels). */
  labels?: Record<string, string>;
}

interface Verdict {
  state: 'Ready' | 'Error';
  reason: string;
  message: string;
  recheck?: boolean;
}

export function newServerBootConfigurationController(
  o: ServerBootConfigurationControllerOptions,
): Controller {
  const butane = o.butaneAvailable ?? butaneOnPath;
  const log = o.log.child({ controller: 'serverbootconfiguration' });

  async function evaluate(sbc: ServerBootConfiguration): Promise<Verdict> {
    const image = o.catalog.current().resolve(sbc.spec.image);
    if (!image.ok) return { state: 'Error', reason: image.reason, message: image.message };
    const ref = sbc.spec.ignitionSecretRef?.name;
    if (!ref)
      return {
        state: 'Ready',
        reason: 'Ready',
        message: `image ${image.image.name} resolved; no ignition configured (no ignitionSecretRef): /ignition serves only the /bootstate callback unit`,
      };
    const secret = await o.client.get<SecretObject>(Resources.Secret, ref, sbc.metadata.namespace);
    if (!secret) {
      return {
        state: 'Error',
        reason: 'IgnitionSecretNotFound',
        message: `ignition Secret ${ref} does not exist`,
        recheck: true,
      };
    }
    if (!secret.data?.ignition) {
      return {
        state: 'Error',
        reason: 'IgnitionMissing',
        message: `ignition Secret ${ref} has no key ignition`,
        recheck: true,
      };
    }
    const format = secret.data.format
      ? Buffer.from(secret.data.format, 'base64').toString('utf8').trim()
      : 'ignition';
    if ((format === 'fcos' || format === 'butane') && !butane()) {
      return {
        state: 'Error',
        reason: 'ButaneUnavailable',
        message: `ignition Secret ${ref} is Butane (format ${format}) but no butane executable is on PATH to convert it`,
        recheck: true,
      };
    }
    return {
      state: 'Ready',
      reason: 'Ready',
      message: `image ${image.image.name} resolved; ignition ${ref} (${format})`,
    };
  }

  async function reconcile(req: Request): Promise<Result | undefined> {
    const sbc = o.sbcs.get(req.name, req.namespace);
    if (!sbc || sbc.metadata.deletionTimestamp) return undefined;
    if (isHandMade(sbc)) {
      // The reference written here brings the next reconcile, which evaluates the SBC.
      const issued = await issueCallbackSecret(o.client, sbc, o.labels ?? {});
      return issued ? undefined : { requeueAfterMs: SECRET_RECHECK_MS };
    }
    const v = await evaluate(sbc);
    const l = log.child({
      namespace: sbc.metadata.namespace,
      name: sbc.metadata.name,
      server: sbc.spec.serverRef?.name,
    });
    // Condition first: whoever sees the state also finds its reason.
    await applyOwnedCondition(o.client, Resources.ServerBootConfiguration, sbc, {
      type: SBC_READY_CONDITION,
      status: v.state === 'Ready' ? 'True' : 'False',
      reason: v.reason,
      message: v.message,
    });
    if (sbc.status?.state !== v.state) {
      await o.client.mergePatch(
        Resources.ServerBootConfiguration,
        req.name,
        req.namespace,
        { status: { state: v.state } },
        { subresource: 'status' },
      );
      l.info({ state: v.state, reason: v.reason }, 'boot configuration evaluated');
      o.events.event(
        { ...sbc, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'ServerBootConfiguration' },
        v.state === 'Ready' ? 'Normal' : 'Warning',
        v.state === 'Ready' ? 'BootConfigurationReady' : v.reason,
        v.message,
      );
    }
    return v.recheck ? { requeueAfterMs: SECRET_RECHECK_MS } : undefined;
  }

  const c = new Controller('serverbootconfiguration', {
    reconcile,
    workers: o.workers ?? 2,
    log: o.log,
    metrics: o.metrics,
  });
  c.watches(o.sbcs);
  o.catalog.onChange(() => {
    for (const s of o.sbcs.list())
      c.enqueue({ name: s.metadata.name ?? '', namespace: s.metadata.namespace });
  });
  return c;
}

/** True when an executable `butane` is on PATH. */
export function butaneOnPath(): boolean {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    try {
      accessSync(join(dir, 'butane'), constants.X_OK);
      return true;
    } catch {
      // not in this directory
    }
  }
  return false;
}
