/**
 * `POST /register` `{"systemUUID", "data": {...}}` + `Authorization: Bearer <token>` of the server's
 * current DISCOVERY attempt → 201 `{systemUUID, stored: true, changed: true}` when stored, 200 with
 * `changed: false` when identical to what is stored (see registry/server.ts for the whole contract).
 *
 * The order is the guard: shape and depth (400 `TooDeep` deeper than {@link MAX_REGISTRATION_DEPTH};
 * 413 over {@link REGISTER_BODY_LIMIT_BYTES}, by Fastify) before authentication, authentication
 * (401/409/403 `NotDiscovery`) before anything is written — a wrong token leaves no trace — and the
 * NIC check (409 `UnknownNICs`) before the payload is stored. The payload lands in
 * `Server.status.registration` (with the source address) before `RegistrationReceived` is set on the
 * current SBC and before the answer; 503 + `Retry-After` while the API server is unavailable.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Server } from '../api/v1alpha1/server.js';
import { BootSignal, EventReason, SignalReason } from '../api/vocabulary.js';
import { apiFailure, BootTargetResolver } from '../bootsignals/boot-target.js';
import { clientAddress } from '../bootsignals/client-address.js';
import { AUTHENTICATED, type HttpApp } from '../bootsignals/http-app.js';
import { HttpError } from '../bootsignals/http-error.js';
import { recordSignal } from '../bootsignals/signal-condition.js';
import { checkRegistrationMacs, registrationRefusedCondition } from '../inventory/machine-identity.js';
import { registrationDigest } from '../inventory/registration-cache.js';
import type { KubeClient } from '../runtime/client.js';
import { applyCondition } from '../runtime/condition-writer.js';
import type { EventRecorder } from '../runtime/events.js';
import { Resources } from '../runtime/resource.js';
import {
  type Authorization,
  REGISTRY_COMPONENT,
  type RegistryAuth,
  requireDiscovery,
} from './callback-auth.js';

/** Largest `/register` body in bytes (S11; a probe agent's inventory is a few KiB). */
export const REGISTER_BODY_LIMIT_BYTES = 64 * 1024;
/** Deepest nesting of objects and arrays accepted in a registration (`data` itself is depth 1). */
export const MAX_REGISTRATION_DEPTH = 32;

/** What the registry's routes use: the API client, the Event recorder, the caller check. */
export interface RegistryRouteDeps {
  client: KubeClient;
  events: EventRecorder;
  auth: RegistryAuth;
}

const registerBody = {
  type: 'object',
  required: ['systemUUID', 'data'],
  properties: { systemUUID: { type: 'string', maxLength: 64 }, data: { type: 'object' } },
};

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

/** RFC 3339 without fractional seconds. */
function nowSeconds(): string {
  return new Date().toISOString().replace(/\.\d+Z$/, 'Z');
}

export function registerRegisterRoute(app: HttpApp, deps: RegistryRouteDeps): void {
  app.post(
    '/register',
    { ...AUTHENTICATED, schema: { body: registerBody }, bodyLimit: REGISTER_BODY_LIMIT_BYTES },
    async (req, reply) => {
      const body = req.body as { systemUUID: string; data: Record<string, unknown> };
      const uuid = BootTargetResolver.parseUUID(body.systemUUID);
      if (jsonDepth(body.data) > MAX_REGISTRATION_DEPTH)
        throw new HttpError(400, 'TooDeep', `data is nested deeper than ${MAX_REGISTRATION_DEPTH} levels`);
      // Authenticate before writing anything: a wrong token must leave no trace.
      const auth = await deps.auth.authorize(req, uuid);
      requireDiscovery(auth);
      const server = auth.target.server;
      const from = clientAddress(req.socket.remoteAddress);
      await refuseForeignNics(deps, server, body.data, from, req.log);
      const changed = await storeRegistration(deps, server, body.data, from);
      await recordRegistered(deps, auth);
      req.log.info({ server: server.metadata.name, systemUUID: uuid, changed }, 'registration stored');
      return reply.code(changed ? 201 : 200).send({ systemUUID: uuid, stored: true, changed });
    },
  );
}

/**
 * 409 `UnknownNICs` (nothing stored; the Server's `MachineIdentity` condition and a Warning Event
 * `RegistrationRefused` say who and what) when the payload reports a NIC with an address whose MAC
 * the Server's BMC does not report (inventory/machine-identity.ts). The condition write is best
 * effort: an API failure is logged, the 409 stands.
 */
async function refuseForeignNics(
  deps: RegistryRouteDeps,
  server: Server,
  data: unknown,
  from: string,
  log: FastifyBaseLogger,
): Promise<void> {
  const check = checkRegistrationMacs(server, data);
  if (check.verdict === 'unchecked') {
    log.debug({ server: server.metadata.name, why: check.why }, 'registration NICs not checked');
    return;
  }
  if (check.verdict === 'match') return;
  const cond = registrationRefusedCondition(check, from, nowSeconds());
  log.warn(
    { server: server.metadata.name, unknown: check.unknown, known: check.known, from },
    'registration reports NICs the BMC does not: refused',
  );
  deps.events.record(
    Resources.Server,
    server,
    'Warning',
    EventReason.RegistrationRefused,
    `a registration from ${from} reported NIC(s) ${check.unknown.join(', ')} the BMC does not report; refused, nothing stored`,
  );
  try {
    await applyCondition(deps.client, Resources.Server, server, cond, `${REGISTRY_COMPONENT}-${cond.type}`);
  } catch (err) {
    log.warn({ server: server.metadata.name, error: String(err) }, 'cannot record the refused registration');
  }
  throw new HttpError(
    409,
    'UnknownNICs',
    `the registration reports NIC(s) ${check.unknown.join(', ')} that the BMC of this server does not report`,
  );
}

/**
 * Whether `data` from `from` differs from what `server` stores (`changed`), and whether it must be
 * written (`write`: changed, or the same payload from another address). The cache holds a
 * projection of the stored payload with the digest of the whole one, so digests are compared.
 */
export function registrationChange(
  server: Server,
  data: unknown,
  from: string,
): { changed: boolean; replaced: boolean; write: boolean } {
  const previous = server.status?.registration?.data;
  const changed = previous === undefined || registrationDigest(previous) !== registrationDigest(data);
  return {
    changed,
    replaced: !!previous && changed,
    write: changed || server.status?.registration?.clientAddress !== from,
  };
}

/**
 * Stores `data` in `Server.status.registration` when {@link registrationChange} says so (503 while
 * the API server is unavailable), with a Normal Event `RegistrationChanged` when it replaced a
 * different payload. Returns `changed`.
 */
async function storeRegistration(
  deps: RegistryRouteDeps,
  server: Server,
  data: Record<string, unknown>,
  from: string,
): Promise<boolean> {
  const { changed, replaced, write } = registrationChange(server, data, from);
  if (!write) return changed;
  const registration = { receivedAt: nowSeconds(), clientAddress: from, data };
  const ops = server.status
    ? [{ op: 'add', path: '/status/registration', value: registration }]
    : [{ op: 'add', path: '/status', value: { registration } }];
  try {
    await deps.client.jsonPatch(Resources.Server, server.metadata.name!, undefined, ops, {
      subresource: 'status',
    });
  } catch (err) {
    apiFailure(err, 'storing the registration');
  }
  if (replaced) {
    deps.events.record(
      Resources.Server,
      server,
      'Normal',
      EventReason.RegistrationChanged,
      'the probe agent registered data different from what was stored; replaced',
    );
  }
  return changed;
}

/** `RegistrationReceived` on the current SBC, if any (reason `Unauthenticated` without a token). */
async function recordRegistered(deps: RegistryRouteDeps, auth: Authorization): Promise<void> {
  const sbc = auth.target.sbc;
  if (!sbc) return;
  await recordSignal(deps.client, REGISTRY_COMPONENT, sbc, {
    type: BootSignal.RegistrationReceived,
    status: 'True',
    reason: auth.authenticated ? SignalReason.Registered : SignalReason.Unauthenticated,
    message: `registration for attempt ${sbc.spec.bootAttempt ?? 1} stored`,
  });
}
