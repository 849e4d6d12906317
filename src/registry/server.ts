/**
 * The registry: where booted hosts report (paths and bodies compatible with upstream metal-operator).
 *
 * - `POST /register` `{"systemUUID", "data": {...}}` + `Authorization: Bearer <token>` of the
 *   server's current DISCOVERY attempt (its SBC is controlled by the Server) → 201 stored (200 when
 *   identical to what is stored, by digest). The whole payload lands in a ConfigMap in the
 *   manager's namespace (`registration-<server>`, label `metal.ironcore.dev/server`, owned by the
 *   Server; inventory/registration-record.ts), then the Server's `status.registration` records it:
 *   receivedAt, the source address seen (`clientAddress`; the boot server tells a NAT from it,
 *   bootserver/client-identity.ts), digest, the attempt it answers (discovery's completion
 *   signal), where the payload is and the bounded hardware mapping — both before the answer. 409
 *   `UnknownNICs` and nothing stored when a NIC with an address has a MAC the Server's BMC does not
 *   report (`status.bmcNetworkInterfaces`; inventory/machine-identity.ts), with the Server's
 *   `MachineIdentity` condition and a Warning Event `RegistrationRefused` saying who and what. A claim attempt's token is refused
 *   (403 `NotDiscovery`): a tenant cannot rewrite the inventory (S11). Bodies over 64 KiB are 413,
 *   `data` nested deeper than {@link MAX_REGISTRATION_DEPTH} is 400 `TooDeep`.
 * - `GET /systems/{uuid}` + Bearer token of the current attempt → the stored payload (404
 *   `NoRegistration` when none), read from its ConfigMap.
 * - `DELETE /delete/{uuid}` + Bearer token of the current discovery attempt → 200; removes the
 *   payload's ConfigMap and the record. (Both need the token since S5; the controllers never call them.)
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
 *
 * The routes live in register-route.ts and systems-routes.ts, the caller check in callback-auth.ts;
 * the start and stop sequence is bootsignals/signal-server.ts.
 */
import type { RunningServer, SignalServerOptions } from '../bootsignals/http-app.js';
import { listenSignalServer, openSignalServer } from '../bootsignals/signal-server.js';
import { type CallbackAuth, RegistryAuth } from './callback-auth.js';
import { registerRegisterRoute } from './register-route.js';
import { strictValidator } from './strict-validator.js';
import { registerBootstateRoute, registerSystemsRoutes } from './systems-routes.js';

export { bearerToken, type CallbackAuth, REGISTRY_COMPONENT } from './callback-auth.js';
export { jsonDepth, MAX_REGISTRATION_DEPTH, REGISTER_BODY_LIMIT_BYTES } from './register-route.js';

export interface RegistryOptions extends SignalServerOptions {
  callbackAuth: CallbackAuth;
  /** Namespace of the payload ConfigMaps (the manager's); default: each discovery SBC's namespace. */
  inventoryNamespace?: string;
}

/** Starts the registry; resolves once it listens. */
export async function startRegistry(opts: RegistryOptions): Promise<RunningServer> {
  const base = openSignalServer('registry', opts);
  // ajv's type coercion would turn "yes" into true; the wire format is strict JSON types.
  base.app.setValidatorCompiler(strictValidator);
  const deps = {
    client: opts.client,
    events: opts.events,
    auth: new RegistryAuth(base.resolver, opts.events, opts.callbackAuth),
    ...(opts.inventoryNamespace ? { inventoryNamespace: opts.inventoryNamespace } : {}),
  };
  registerRegisterRoute(base.app, deps);
  registerSystemsRoutes(base.app, deps);
  registerBootstateRoute(base.app, deps);
  return listenSignalServer(base, opts);
}
