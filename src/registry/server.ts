/**
 * The registry: where booted hosts report (paths and bodies compatible with upstream metal-operator).
 *
 * - `POST /register` `{"systemUUID", "data": {...}}` → 201 stored (200 when identical to what is
 *   stored). The payload lands in `Server.status.registration` before the answer; with the discovery
 *   attempt's token (`Authorization: Bearer`) it also sets `RegistrationReceived` on the current SBC.
 * - `GET /systems/{uuid}` → the stored payload (404 when none).
 * - `DELETE /delete/{uuid}` → 200; removes the stored payload.
 * - `POST /bootstate` `{"systemUUID", "booted": bool}` + `Authorization: Bearer <token>` → 200 once
 *   `BootStateReceived` (True for booted, False reason `BootFailed` otherwise) is stored on the
 *   server's current SBC for the current attempt.
 *
 * Errors (JSON `{reason, message}`): 400 malformed / not a UUID, 401 missing or wrong token, 404
 * unknown server or no boot configuration, 409 ambiguous UUID or token of an earlier attempt (also an
 * Event on the SBC), 413, 415, 503 + `Retry-After` while the API server is unavailable. The registry
 * keeps no state: every answer is backed by a write to the API server or a read of its caches.
 */
import { isDeepStrictEqual } from 'node:util';
import { Ajv } from 'ajv';
import type { FastifyRequest } from 'fastify';
import { Registry } from 'prom-client';
import { BootSignal, EventReason, SignalReason } from '../api/vocabulary.js';
import { apiFailure, type BootTarget, BootTargetResolver } from '../bootsignals/boot-target.js';
import { createHttpApp, listen, type SignalServerOptions } from '../bootsignals/http-app.js';
import { HttpError } from '../bootsignals/http-error.js';
import { recordSignal } from '../bootsignals/signal-condition.js';
import { Resources } from '../runtime/resource.js';

/** `required`: every callback needs the attempt token. `optional`: upstream's unauthenticated bodies are accepted too. */
export type CallbackAuth = 'required' | 'optional';

export interface RegistryOptions extends SignalServerOptions {
  callbackAuth: CallbackAuth;
}

export interface RunningServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

/** Field-manager prefix of the registry's condition writes. */
export const REGISTRY_COMPONENT = 'metal-registry';

const uuidParam = {
  type: 'object',
  properties: { uuid: { type: 'string', maxLength: 16384 } },
  required: ['uuid'],
};
const registerBody = {
  type: 'object',
  required: ['systemUUID', 'data'],
  properties: { systemUUID: { type: 'string', maxLength: 64 }, data: { type: 'object' } },
};
const bootstateBody = {
  type: 'object',
  required: ['systemUUID', 'booted'],
  properties: { systemUUID: { type: 'string', maxLength: 64 }, booted: { type: 'boolean' } },
};

/** The bearer token of a request, if any (`Authorization: Bearer <token>`). */
export function bearerToken(req: FastifyRequest): string | undefined {
  const h = req.headers.authorization;
  if (typeof h !== 'string') return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  return m?.[1];
}

/** Starts the registry; resolves once it listens. */
export async function startRegistry(opts: RegistryOptions): Promise<RunningServer> {
  const resolver = new BootTargetResolver(opts);
  const app = createHttpApp('registry', opts.log, opts.metrics ?? new Registry());
  // ajv's type coercion would turn "yes" into true; the wire format is strict JSON types.
  app.setValidatorCompiler(strictValidator);

  /** Verifies the caller for `target`; under `optional` auth a request without token is accepted as unauthenticated. */
  async function authorize(
    req: FastifyRequest,
    target: BootTarget,
  ): Promise<{ target: BootTarget; authenticated: boolean }> {
    const token = bearerToken(req);
    if (!token && opts.callbackAuth === 'optional') return { target, authenticated: false };
    try {
      return { target: await resolver.verify(target, token), authenticated: true };
    } catch (err) {
      if (err instanceof HttpError && err.reason === 'StaleToken' && target.sbc) {
        opts.events.event(
          { ...target.sbc, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'ServerBootConfiguration' },
          'Warning',
          EventReason.StaleCallback,
          `${req.method} ${req.routeOptions.url} from ${req.socket.remoteAddress} carried the token of an earlier attempt; ignored (current attempt ${target.sbc.spec.bootAttempt ?? 1})`,
        );
      }
      throw err;
    }
  }

  app.post('/register', { schema: { body: registerBody } }, async (req, reply) => {
    const body = req.body as { systemUUID: string; data: Record<string, unknown> };
    const uuid = BootTargetResolver.parseUUID(body.systemUUID);
    const server = resolver.server(uuid);
    // Authenticate before writing anything: a wrong token must leave no trace.
    const bearer = bearerToken(req);
    let auth: { target: BootTarget; authenticated: boolean } | undefined;
    if (bearer || opts.callbackAuth === 'required') {
      auth = await authorize(req, resolver.resolve(uuid));
    }
    const previous = server.status?.registration?.data;
    const changed = !isDeepStrictEqual(previous, body.data);
    if (changed) {
      const registration = { receivedAt: new Date().toISOString().replace(/\.\d+Z$/, 'Z'), data: body.data };
      const ops = server.status
        ? [{ op: 'add', path: '/status/registration', value: registration }]
        : [{ op: 'add', path: '/status', value: { registration } }];
      try {
        await opts.client.jsonPatch(Resources.Server, server.metadata.name!, undefined, ops, {
          subresource: 'status',
        });
      } catch (err) {
        apiFailure(err, 'storing the registration');
      }
      if (previous) {
        opts.events.event(
          { ...server, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'Server' },
          'Normal',
          EventReason.RegistrationChanged,
          'the probe agent registered data different from what was stored; replaced',
        );
      }
    }
    const target = auth?.target ?? resolver.resolve(uuid);
    if (target.sbc && (auth?.authenticated || opts.callbackAuth === 'optional')) {
      await recordSignal(opts.client, REGISTRY_COMPONENT, target.sbc, {
        type: BootSignal.RegistrationReceived,
        status: 'True',
        reason: auth?.authenticated ? SignalReason.Registered : SignalReason.Unauthenticated,
        message: `registration for attempt ${target.sbc.spec.bootAttempt ?? 1} stored`,
      });
    }
    req.log.info({ server: server.metadata.name, systemUUID: uuid, changed }, 'registration stored');
    return reply.code(changed ? 201 : 200).send({ systemUUID: uuid, stored: true, changed });
  });

  app.get('/systems/:uuid', { schema: { params: uuidParam } }, async (req) => {
    const uuid = BootTargetResolver.parseUUID((req.params as { uuid: string }).uuid);
    const data = resolver.server(uuid).status?.registration?.data;
    if (!data) throw new HttpError(404, 'NoRegistration', `no registration stored for ${uuid}`);
    return data;
  });

  app.delete('/delete/:uuid', { schema: { params: uuidParam } }, async (req) => {
    const uuid = BootTargetResolver.parseUUID((req.params as { uuid: string }).uuid);
    const server = resolver.server(uuid);
    if (server.status?.registration) {
      try {
        await opts.client.jsonPatch(
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

  app.post('/bootstate', { schema: { body: bootstateBody } }, async (req) => {
    const body = req.body as { systemUUID: string; booted: boolean };
    const uuid = BootTargetResolver.parseUUID(body.systemUUID);
    const { target, authenticated } = await authorize(req, resolver.resolve(uuid));
    if (!target.sbc) {
      throw new HttpError(
        404,
        'NoBootConfiguration',
        `Server ${target.server.metadata.name} has no current boot configuration`,
      );
    }
    const attempt = target.sbc.spec.bootAttempt ?? 1;
    await recordSignal(opts.client, REGISTRY_COMPONENT, target.sbc, {
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

  const bound = await listen(app, opts.host ?? '127.0.0.1', opts.port);
  return {
    ...bound,
    close: async () => {
      await app.close();
      await resolver.aliases.settled();
    },
  };
}

const ajv = new Ajv({ coerceTypes: false, allErrors: false, removeAdditional: false, useDefaults: false });
/** Fastify validator compiler with strict JSON types (no coercion of `"yes"` to a boolean). */
function strictValidator({ schema }: { schema: object }) {
  const validate = ajv.compile(schema);
  return (data: unknown) =>
    validate(data) ? { value: data } : { error: new Error(ajv.errorsText(validate.errors)) };
}
