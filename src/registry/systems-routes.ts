/**
 * The registration read and delete routes, and the boot-state callback:
 *
 * - `GET /systems/{uuid}` + Bearer token of the current attempt → the stored payload, read from its
 *   ConfigMap (the record in `status.registration` names it; a record of an earlier release from
 *   the Server itself; without a record in the cache, the Server read from the API first); 404
 *   `NoRegistration` when there is no record or no ConfigMap.
 * - `DELETE /delete/{uuid}` + Bearer token of the current discovery attempt (403 `NotDiscovery`
 *   otherwise) → 200 `{systemUUID, deleted: true}` once the ConfigMap and then the record are gone;
 *   either removed concurrently (404, 422) is the outcome asked for.
 * - `POST /bootstate` `{"systemUUID", "booted": bool}` + Bearer token → 200
 *   `{systemUUID, attempt, recorded: true}` once `BootStateReceived` (True for booted, False reason
 *   `BootFailed` otherwise; `Unauthenticated` without a token) is stored on the current SBC; 404
 *   `NoBootConfiguration` without one.
 *
 * Authentication (callback-auth.ts) comes before every read and write; 503 + `Retry-After` while
 * the API server is unavailable.
 */
import type { Server } from '../api/v1alpha1/server.js';
import { BootSignal, SignalReason } from '../api/vocabulary.js';
import { apiFailure, BootTargetResolver } from '../bootsignals/boot-target.js';
import { AUTHENTICATED, type HttpApp } from '../bootsignals/http-app.js';
import { HttpError } from '../bootsignals/http-error.js';
import { recordSignal } from '../bootsignals/signal-condition.js';
import { REGISTRATION_PAYLOAD_KEY, registrationRecord } from '../inventory/registration-record.js';
import type { KObject } from '../runtime/resource.js';
import { Resources } from '../runtime/resource.js';
import { REGISTRY_COMPONENT, requireDiscovery } from './callback-auth.js';
import type { RegistryRouteDeps } from './register-route.js';

const uuidParam = {
  type: 'object',
  properties: { uuid: { type: 'string', maxLength: 16384 } },
  required: ['uuid'],
};
const bootstateBody = {
  type: 'object',
  required: ['systemUUID', 'booted'],
  properties: { systemUUID: { type: 'string', maxLength: 64 }, booted: { type: 'boolean' } },
};

export function registerSystemsRoutes(app: HttpApp, deps: RegistryRouteDeps): void {
  app.get('/systems/:uuid', { ...AUTHENTICATED, schema: { params: uuidParam } }, async (req) => {
    const uuid = BootTargetResolver.parseUUID((req.params as { uuid: string }).uuid);
    const { target } = await deps.auth.authorize(req, uuid);
    const data = await storedPayload(deps, target.server);
    if (!data) throw new HttpError(404, 'NoRegistration', `no registration stored for ${uuid}`);
    return data;
  });

  app.delete('/delete/:uuid', { ...AUTHENTICATED, schema: { params: uuidParam } }, async (req) => {
    const uuid = BootTargetResolver.parseUUID((req.params as { uuid: string }).uuid);
    const auth = await deps.auth.authorize(req, uuid);
    requireDiscovery(auth);
    const server = auth.target.server;
    const record = registrationRecord(server);
    if (record?.payload) {
      try {
        await deps.client.delete(Resources.ConfigMap, record.payload.name, record.payload.namespace);
      } catch (err) {
        apiFailure(err, 'deleting the registration payload');
      }
    }
    if (record) {
      try {
        await deps.client.jsonPatch(
          Resources.Server,
          server.metadata.name!,
          undefined,
          [{ op: 'remove', path: '/status/registration' }],
          { subresource: 'status' },
        );
      } catch (err) {
        // Already removed by a concurrent request: the outcome the caller asked for.
        if (!(err instanceof Error && 'status' in err && (err as { status: number }).status === 422)) {
          apiFailure(err, 'deleting the registration');
        }
      }
    }
    return { systemUUID: uuid, deleted: true };
  });
}

/**
 * The whole payload `server`'s record names: its ConfigMap's JSON (undefined when the record or the
 * ConfigMap is missing), or for a record of an earlier release the Server's own `data`, read from
 * the API server (the caches never hold it).
 */
async function storedPayload(deps: RegistryRouteDeps, cached: Server): Promise<unknown> {
  try {
    let record = registrationRecord(cached);
    // No record in the cache, which may lag a registration stored a moment ago (by this replica or
    // another), or a record of an earlier release (payload on the Server, left out of the cache):
    // the Server is read before the answer.
    if (!record?.payload) {
      const stored = await deps.client.get<Server>(Resources.Server, cached.metadata.name!);
      record = registrationRecord(stored ?? cached);
      if (!record?.payload) return record?.data;
    }
    const cm = await deps.client.get<KObject & { data?: Record<string, string> }>(
      Resources.ConfigMap,
      record.payload.name,
      record.payload.namespace,
    );
    const json = cm?.data?.[REGISTRATION_PAYLOAD_KEY];
    return json === undefined ? undefined : JSON.parse(json);
  } catch (err) {
    return apiFailure(err, 'reading the registration');
  }
}

export function registerBootstateRoute(app: HttpApp, deps: RegistryRouteDeps): void {
  app.post('/bootstate', { ...AUTHENTICATED, schema: { body: bootstateBody } }, async (req) => {
    const body = req.body as { systemUUID: string; booted: boolean };
    const uuid = BootTargetResolver.parseUUID(body.systemUUID);
    const { target, authenticated } = await deps.auth.authorize(req, uuid);
    if (!target.sbc) {
      throw new HttpError(
        404,
        'NoBootConfiguration',
        `Server ${target.server.metadata.name} has no current boot configuration`,
      );
    }
    const attempt = target.sbc.spec.bootAttempt ?? 1;
    await recordSignal(deps.client, REGISTRY_COMPONENT, target.sbc, {
      type: BootSignal.BootStateReceived,
      status: body.booted ? 'True' : 'False',
      reason: !authenticated
        ? SignalReason.Unauthenticated
        : body.booted
          ? SignalReason.Booted
          : SignalReason.BootFailed,
      message: `attempt ${attempt}: agent reported booted=${body.booted}`,
    });
    req.log.info(
      {
        server: target.server.metadata.name,
        sbc: `${target.sbc.metadata.namespace}/${target.sbc.metadata.name}`,
        systemUUID: uuid,
        attempt,
        booted: body.booted,
      },
      'boot state recorded',
    );
    return { systemUUID: uuid, attempt, recorded: true };
  });
}
