/**
 * `GET /ignition/{uuid}?token=…` → the attempt's ignition (Ignition v3 JSON, Butane translated) with
 * the `/bootstate` hook merged in, validated first (src/ignition/); sets `IgnitionDataFetched` on
 * the SBC before answering. The token is checked first (401 / 409 as the registry; a token of an
 * earlier attempt also records a Warning Event `StaleCallback` on the SBC; 409 `TokenRetired` once a
 * NetBootOnce claim completed). 409 with the validator's report for an invalid config; an SBC
 * without `ignitionSecretRef` gets the callback-only config ({@link callbackOnlyIgnition}), or 404
 * `NoIgnitionConfigured` with the hook disabled. 503 + `Retry-After` while the API server is
 * unavailable.
 */
import type { FastifyRequest } from 'fastify';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { BootSignal, EventReason, SignalReason } from '../api/vocabulary.js';
import { type BootTarget, BootTargetResolver } from '../bootsignals/boot-target.js';
import { AUTHENTICATED, type HttpApp, type SignalServerOptions } from '../bootsignals/http-app.js';
import { HttpError } from '../bootsignals/http-error.js';
import { recordSignal } from '../bootsignals/signal-condition.js';
import { DEFAULT_IGNITION_VERSION, type IgnitionConfig } from '../ignition/bootstate-hook.js';
import type { IgnitionRenderer } from '../ignition/served-ignition.js';
import type { EventRecorder } from '../runtime/events.js';
import { Resources } from '../runtime/resource.js';
import { servedIgnition } from './ignition.js';
import { uuidParam } from './ipxe-route.js';

export interface IgnitionRouteOptions {
  client: SignalServerOptions['client'];
  events: EventRecorder;
  resolver: BootTargetResolver;
  ignition: IgnitionRenderer;
  /** Field manager of the condition write. */
  component: string;
  registryUrl: string;
  /** Merge the `/bootstate` hook into served ignition. */
  inject: boolean;
}

export function registerIgnitionRoute(app: HttpApp, o: IgnitionRouteOptions): void {
  app.get('/ignition/:uuid', { ...AUTHENTICATED, schema: { params: uuidParam } }, async (req, reply) => {
    const uuid = BootTargetResolver.parseUUID((req.params as { uuid: string }).uuid);
    const q = req.query as Record<string, unknown>;
    const token = typeof q.token === 'string' ? q.token : undefined;
    const target = await authenticated(o, req, uuid, token);
    const sbc = target.sbc!;
    const attempt = sbc.spec.bootAttempt ?? 1;
    const hook = { registryUrl: o.registryUrl, uuid, token: target.callback!.token, attempt };
    if (!sbc.spec.ignitionSecretRef?.name) callbackOnlyIgnition(sbc, o.inject); // 404 without the hook
    const body = await servedIgnition(o.client, o.ignition, sbc, o.inject ? hook : undefined);
    await recordSignal(o.client, o.component, sbc, {
      type: BootSignal.IgnitionDataFetched,
      status: 'True',
      reason: SignalReason.IgnitionServed,
      message: `ignition for attempt ${attempt} served to ${req.socket.remoteAddress}`,
    });
    req.log.info(
      { server: target.server.metadata.name, systemUUID: uuid, attempt, bytes: body.length },
      'ignition served',
    );
    return reply.type('application/json').send(body);
  });
}

/** The target `token` authenticates; a token of an earlier attempt also records `StaleCallback`. */
async function authenticated(
  o: IgnitionRouteOptions,
  req: FastifyRequest,
  uuid: string,
  token: string | undefined,
): Promise<BootTarget> {
  try {
    return await o.resolver.authenticate(uuid, token);
  } catch (err) {
    const sbc =
      err instanceof HttpError && err.reason === 'StaleToken' ? o.resolver.resolve(uuid).sbc : undefined;
    if (sbc) {
      o.events.record(
        Resources.ServerBootConfiguration,
        sbc,
        'Warning',
        EventReason.StaleCallback,
        `ignition fetch from ${req.socket.remoteAddress} carried the token of an earlier attempt; refused`,
      );
    }
    throw err;
  }
}

/**
 * What `/ignition/{uuid}` serves for an SBC without `ignitionSecretRef` (upstream boot-operator has no
 * answer for it: its handler dereferences the missing reference). The image may still need the
 * `/bootstate` callback that completes the boot, so with the hook enabled the config is
 * `{"ignition":{"version":"3.4.0"}}` and nothing else; the hook is merged into it by the caller, so a
 * host gets only the callback unit and its env file. With the hook disabled: 404 `NoIgnitionConfigured`.
 */
export function callbackOnlyIgnition(sbc: ServerBootConfiguration, inject: boolean): IgnitionConfig {
  if (!inject) {
    throw new HttpError(
      404,
      'NoIgnitionConfigured',
      `ServerBootConfiguration ${sbc.metadata.namespace}/${sbc.metadata.name} has no ignitionSecretRef and the /bootstate hook is disabled: no ignition configured`,
    );
  }
  return { ignition: { version: DEFAULT_IGNITION_VERSION } };
}
