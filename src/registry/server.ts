/**
 * The registry: where booted hosts report (paths and bodies compatible with upstream metal-operator).
 *
 * - `POST /register` `{"systemUUID", "data": {...}}` + `Authorization: Bearer <token>` of the
 *   server's current DISCOVERY attempt (its SBC is controlled by the Server) → 201 stored (200 when
 *   identical to what is stored). The payload lands in `Server.status.registration` before the
 *   answer, with the source address seen (`clientAddress`; the boot server tells a NAT from it,
 *   bootserver/client-identity.ts), and `RegistrationReceived` is set on the current SBC. 409
 *   `UnknownNICs` and nothing stored when a NIC with an address has a MAC the Server's BMC does not
 *   report (`status.bmcNetworkInterfaces`; inventory/machine-identity.ts), with the Server's
 *   `MachineIdentity` condition and a Warning Event `RegistrationRefused` saying who and what. A claim attempt's token is refused
 *   (403 `NotDiscovery`): a tenant cannot rewrite the inventory (S11). Bodies over 64 KiB are 413,
 *   `data` nested deeper than {@link MAX_REGISTRATION_DEPTH} is 400 `TooDeep`.
 * - `GET /systems/{uuid}` + Bearer token of the current attempt → the stored payload (404 when none),
 *   read from the API server (the Server cache holds only a projection of it, see
 *   inventory/registration-cache.ts).
 * - `DELETE /delete/{uuid}` + Bearer token of the current discovery attempt → 200; removes the
 *   stored payload. (Both need the token since S5; the controllers never call them.)
 * - `POST /bootstate` `{"systemUUID", "booted": bool}` + `Authorization: Bearer <token>` → 200 once
 *   `BootStateReceived` (True for booted, False reason `BootFailed` otherwise) is stored on the
 *   server's current SBC for the current attempt.
 *
 * With `--callback-auth=optional`, requests WITHOUT a token are accepted on every route (upstream's
 * unauthenticated bodies; conditions get reason `Unauthenticated`): by design, that mode opens
 * `/register`, `/systems` and `/delete` to anyone who can reach the registry.
 *
 * Errors (JSON `{reason, message}`): 400 malformed / not a UUID, 401 missing or wrong token (also for
 * an unknown UUID: authentication comes first, S13), 403 claim token on a discovery route, 404 no
 * registration / object deleted mid-request, 409 ambiguous UUID, token of an earlier attempt (also an
 * Event on the SBC) or retired token, 413, 415, 429 after too many 401s from one address, 503 +
 * `Retry-After` while the API server is unavailable. The registry keeps no state: every answer is
 * backed by a write to the API server or a read of its caches (of the API server for `/systems`).
 */
import { Ajv } from 'ajv';
import type { FastifyBaseLogger, FastifyRequest } from 'fastify';
import { Registry } from 'prom-client';
import type { Server } from '../api/v1alpha1/server.js';
import { BootSignal, EventReason, SignalReason } from '../api/vocabulary.js';
import { apiFailure, type BootTarget, BootTargetResolver } from '../bootsignals/boot-target.js';
import { clientAddress } from '../bootsignals/client-address.js';
import type { RunningServer } from '../bootsignals/http-app.js';
import { AUTHENTICATED, createHttpApp, listen, type SignalServerOptions } from '../bootsignals/http-app.js';
import { HttpError } from '../bootsignals/http-error.js';
import { isDiscoveryAttempt } from '../bootsignals/power-intent.js';
import { recordSignal } from '../bootsignals/signal-condition.js';
import { checkRegistrationMacs, registrationRefusedCondition } from '../inventory/machine-identity.js';
import { isProjection, registrationDigest } from '../inventory/registration-cache.js';
import { applyCondition } from '../runtime/condition-writer.js';
import { Resources } from '../runtime/resource.js';

/** `required`: every callback needs the attempt token. `optional`: upstream's unauthenticated bodies are accepted too. */
export type CallbackAuth = 'required' | 'optional';

export interface RegistryOptions extends SignalServerOptions {
  callbackAuth: CallbackAuth;
}

/** Field-manager prefix of the registry's condition writes. */
export const REGISTRY_COMPONENT = 'metal-registry';

const uuidParam = {
  type: 'object',
  properties: { uuid: { type: 'string', maxLength: 16384 } },
  required: ['uuid'],
};
/** Largest `/register` body in bytes (S11; a probe agent's inventory is a few KiB). */
export const REGISTER_BODY_LIMIT_BYTES = 64 * 1024;
/** Deepest nesting of objects and arrays accepted in a registration (`data` itself is depth 1). */
export const MAX_REGISTRATION_DEPTH = 32;

/** Nesting depth of a JSON value (iterative: no recursion on input). */
export function jsonDepth(value: unknown): number {
  let max = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    const depth = d + 1;
    if (depth > max) max = depth;
    if (max > MAX_REGISTRATION_DEPTH) return max;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, depth]);
  }
  return max;
}

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
  const metrics = opts.metrics ?? new Registry();
  const resolver = new BootTargetResolver(opts, metrics);
  const app = createHttpApp('registry', opts.log, metrics, opts);
  // ajv's type coercion would turn "yes" into true; the wire format is strict JSON types.
  app.setValidatorCompiler(strictValidator);

  /** Verifies the caller for `target`; under `optional` auth a request without token is accepted as unauthenticated. */
  async function authorize(
    req: FastifyRequest,
    uuid: string,
  ): Promise<{ target: BootTarget; authenticated: boolean }> {
    const token = bearerToken(req);
    if (!token && opts.callbackAuth === 'optional')
      return { target: resolver.resolve(uuid), authenticated: false };
    try {
      return { target: await resolver.authenticate(uuid, token), authenticated: true };
    } catch (err) {
      const sbc =
        err instanceof HttpError && err.reason === 'StaleToken' ? resolver.resolve(uuid).sbc : undefined;
      if (sbc) {
        opts.events.event(
          { ...sbc, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'ServerBootConfiguration' },
          'Warning',
          EventReason.StaleCallback,
          `${req.method} ${req.routeOptions.url} from ${req.socket.remoteAddress} carried the token of an earlier attempt; ignored (current attempt ${sbc.spec.bootAttempt ?? 1})`,
        );
      }
      throw err;
    }
  }

  /** 403 unless the authenticated attempt is a discovery attempt (registration writes are the probe's). */
  function requireDiscovery(auth: { target: BootTarget; authenticated: boolean }): void {
    if (auth.authenticated && !(auth.target.sbc && isDiscoveryAttempt(auth.target.sbc)))
      throw new HttpError(
        403,
        'NotDiscovery',
        "only a discovery attempt's token may change the registration",
      );
  }

  /**
   * 409 `UnknownNICs` (nothing stored; the Server's `MachineIdentity` condition and a Warning Event
   * `RegistrationRefused` say who and what) when the payload reports a NIC with an address whose MAC
   * the Server's BMC does not report (inventory/machine-identity.ts). The condition write is best
   * effort: an API failure is logged, the 409 stands.
   */
  async function refuseForeignNics(server: Server, data: unknown, from: string, log: FastifyBaseLogger) {
    const check = checkRegistrationMacs(server, data);
    if (check.verdict === 'unchecked') {
      log.debug({ server: server.metadata.name, why: check.why }, 'registration NICs not checked');
      return;
    }
    if (check.verdict === 'match') return;
    const at = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    const cond = registrationRefusedCondition(check, from, at);
    log.warn(
      { server: server.metadata.name, unknown: check.unknown, known: check.known, from },
      'registration reports NICs the BMC does not: refused',
    );
    opts.events.event(
      { ...server, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'Server' },
      'Warning',
      EventReason.RegistrationRefused,
      `a registration from ${from} reported NIC(s) ${check.unknown.join(', ')} the BMC does not report; refused, nothing stored`,
    );
    try {
      await applyCondition(opts.client, Resources.Server, server, cond, `${REGISTRY_COMPONENT}-${cond.type}`);
    } catch (err) {
      log.warn(
        { server: server.metadata.name, error: String(err) },
        'cannot record the refused registration',
      );
    }
    throw new HttpError(
      409,
      'UnknownNICs',
      `the registration reports NIC(s) ${check.unknown.join(', ')} that the BMC of this server does not report`,
    );
  }

  app.post(
    '/register',
    { ...AUTHENTICATED, schema: { body: registerBody }, bodyLimit: REGISTER_BODY_LIMIT_BYTES },
    async (req, reply) => {
      const body = req.body as { systemUUID: string; data: Record<string, unknown> };
      const uuid = BootTargetResolver.parseUUID(body.systemUUID);
      if (jsonDepth(body.data) > MAX_REGISTRATION_DEPTH)
        throw new HttpError(400, 'TooDeep', `data is nested deeper than ${MAX_REGISTRATION_DEPTH} levels`);
      // Authenticate before writing anything: a wrong token must leave no trace.
      const auth = await authorize(req, uuid);
      requireDiscovery(auth);
      const server = auth.target.server;
      const previous = server.status?.registration?.data;
      const from = clientAddress(req.socket.remoteAddress);
      await refuseForeignNics(server, body.data, from, req.log);
      // The cache holds a projection of the stored payload with the digest of the whole one.
      const changed =
        previous === undefined || registrationDigest(previous) !== registrationDigest(body.data);
      if (changed || server.status?.registration?.clientAddress !== from) {
        const registration = {
          receivedAt: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
          clientAddress: from,
          data: body.data,
        };
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
        if (previous && changed) {
          opts.events.event(
            { ...server, apiVersion: 'metal.ironcore.dev/v1alpha1', kind: 'Server' },
            'Normal',
            EventReason.RegistrationChanged,
            'the probe agent registered data different from what was stored; replaced',
          );
        }
      }
      const target = auth.target;
      if (target.sbc) {
        await recordSignal(opts.client, REGISTRY_COMPONENT, target.sbc, {
          type: BootSignal.RegistrationReceived,
          status: 'True',
          reason: auth.authenticated ? SignalReason.Registered : SignalReason.Unauthenticated,
          message: `registration for attempt ${target.sbc.spec.bootAttempt ?? 1} stored`,
        });
      }
      req.log.info({ server: server.metadata.name, systemUUID: uuid, changed }, 'registration stored');
      return reply.code(changed ? 201 : 200).send({ systemUUID: uuid, stored: true, changed });
    },
  );

  app.get('/systems/:uuid', { ...AUTHENTICATED, schema: { params: uuidParam } }, async (req) => {
    const uuid = BootTargetResolver.parseUUID((req.params as { uuid: string }).uuid);
    const { target } = await authorize(req, uuid);
    let data = target.server.status?.registration?.data;
    if (isProjection(data)) {
      // The cache keeps only what the operator maps: the whole payload is read where it is stored.
      let stored: Server | undefined;
      try {
        stored = await opts.client.get<Server>(Resources.Server, target.server.metadata.name!);
      } catch (err) {
        apiFailure(err, 'reading the registration');
      }
      data = stored?.status?.registration?.data;
    }
    if (!data) throw new HttpError(404, 'NoRegistration', `no registration stored for ${uuid}`);
    return data;
  });

  app.delete('/delete/:uuid', { ...AUTHENTICATED, schema: { params: uuidParam } }, async (req) => {
    const uuid = BootTargetResolver.parseUUID((req.params as { uuid: string }).uuid);
    const auth = await authorize(req, uuid);
    requireDiscovery(auth);
    const server = auth.target.server;
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

  app.post('/bootstate', { ...AUTHENTICATED, schema: { body: bootstateBody } }, async (req) => {
    const body = req.body as { systemUUID: string; booted: boolean };
    const uuid = BootTargetResolver.parseUUID(body.systemUUID);
    const { target, authenticated } = await authorize(req, uuid);
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

  const bound = await listen(app, opts.host ?? '127.0.0.1', opts.port, !!opts.tls);
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
