/**
 * `POST /register` `{"systemUUID", "data": {...}}` + `Authorization: Bearer <token>` of the server's
 * current DISCOVERY attempt → 201 `{systemUUID, stored: true, changed: true}` when stored, 200 with
 * `changed: false` when identical to what is stored (the record's digest; see registry/server.ts
 * for the whole contract).
 *
 * The order is the guard: shape and depth (400 `TooDeep` deeper than {@link MAX_REGISTRATION_DEPTH};
 * 413 over {@link REGISTER_BODY_LIMIT_BYTES}, by Fastify) before authentication, authentication
 * (401/409/403 `NotDiscovery`) before anything is written — a wrong token leaves no trace — and the
 * NIC check (409 `UnknownNICs`) before the payload is stored. The whole payload lands in its
 * ConfigMap (one server-side apply, inventory/registration-record.ts) before the Server's
 * `status.registration` record (receivedAt, clientAddress, digest, attempt, where the payload is,
 * the bounded hardware mapping) names it, and both before the answer: a 2xx means both are
 * durable. The record's attempt is the discovery flow's completion signal (no SBC condition).
 * 503 + `Retry-After` while the API server is unavailable; 409 `NoInventoryNamespace` when neither
 * the registry's configuration nor the attempt's SBC says where payloads go.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Server } from '../api/v1alpha1/server.js';
import { EventReason } from '../api/vocabulary.js';
import { apiFailure, BootTargetResolver } from '../bootsignals/boot-target.js';
import { clientAddress } from '../bootsignals/client-address.js';
import { AUTHENTICATED, type HttpApp } from '../bootsignals/http-app.js';
import { HttpError } from '../bootsignals/http-error.js';
import { checkRegistrationMacs, registrationRefusedCondition } from '../inventory/machine-identity.js';
import { hardwareFromRegistration } from '../inventory/registration-hardware.js';
import {
  type RegistrationRecord,
  registrationConfigMap,
  registrationDigest,
  registrationRecord,
} from '../inventory/registration-record.js';
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
  /** Namespace of the payload ConfigMaps (the manager's); default: the discovery SBC's namespace. */
  inventoryNamespace?: string;
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
      const changed = await storeRegistration(deps, auth, body.data, from);
      req.log.info(
        {
          server: server.metadata.name,
          systemUUID: uuid,
          changed,
          attempt: auth.target.sbc?.spec.bootAttempt,
        },
        'registration stored',
      );
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

/** What a registration under `auth` answers: the attempt and SBC uid (none without an SBC), and whether it was authenticated. */
type Answering = Pick<RegistrationRecord, 'attempt' | 'bootConfigurationUID' | 'authenticated'>;

function answering(auth: Authorization): Answering {
  const sbc = auth.target.sbc;
  const authenticated = auth.authenticated;
  if (!sbc) return { authenticated };
  return {
    authenticated,
    attempt: sbc.spec.bootAttempt ?? 1,
    ...(sbc.metadata.uid ? { bootConfigurationUID: sbc.metadata.uid } : {}),
  };
}

/**
 * Whether `data` (digest `digest`) from `from` for `attempt` differs from what `server` stores
 * (`changed`, by the record's digest), and whether the record must be written (`write`: changed,
 * or the same payload from another address, for another attempt or with other authentication).
 */
export function registrationChange(
  server: Server,
  digest: string,
  from: string,
  attempt: Answering,
): { changed: boolean; replaced: boolean; write: boolean } {
  const previous = registrationRecord(server);
  const changed = previous?.digest === undefined || previous.digest !== digest || !previous.payload;
  return {
    changed,
    replaced: !!previous && changed,
    write:
      changed ||
      previous?.clientAddress !== from ||
      previous?.attempt !== attempt.attempt ||
      previous?.bootConfigurationUID !== attempt.bootConfigurationUID ||
      previous?.authenticated !== attempt.authenticated,
  };
}

/**
 * Stores `data` when {@link registrationChange} says so: the ConfigMap first (only when the payload
 * changed), then the Server's record (503 while the API server is unavailable), with a Normal Event
 * `RegistrationChanged` when it replaced a different payload. Returns `changed`.
 */
async function storeRegistration(
  deps: RegistryRouteDeps,
  auth: Authorization,
  data: Record<string, unknown>,
  from: string,
): Promise<boolean> {
  const server = auth.target.server;
  const digest = registrationDigest(data);
  const attempt = answering(auth);
  const { changed, replaced, write } = registrationChange(server, digest, from, attempt);
  if (!write) return changed;
  const namespace = deps.inventoryNamespace ?? auth.target.sbc?.metadata.namespace;
  if (!namespace)
    throw new HttpError(
      409,
      'NoInventoryNamespace',
      `Server ${server.metadata.name} has no discovery boot configuration yet`,
    );
  const cm = registrationConfigMap(server, namespace, data, digest);
  try {
    if (changed)
      await deps.client.apply(Resources.ConfigMap, cm, { force: true, fieldManager: REGISTRY_COMPONENT });
  } catch (err) {
    apiFailure(err, 'storing the registration payload');
  }
  const registration: RegistrationRecord = {
    receivedAt: nowSeconds(),
    clientAddress: from,
    digest,
    ...attempt,
    payload: { namespace, name: cm.metadata.name! },
  };
  // Unchanged: the mapping as stored (absent once discovery copied it into the status).
  const hardware = changed ? hardwareFromRegistration(data) : registrationRecord(server)?.hardware;
  if (hardware) registration.hardware = hardware;
  await writeRecord(deps, server, registration);
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

/** `status.registration` := `registration`, one JSON patch of the status (503 when the API is away). */
async function writeRecord(deps: RegistryRouteDeps, server: Server, registration: RegistrationRecord) {
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
}
