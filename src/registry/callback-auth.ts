/**
 * Who is calling the registry: the bearer token of a request checked against the server's current
 * attempt (bootsignals/boot-target.ts), and the rule that only a discovery attempt may change the
 * registration.
 *
 * {@link RegistryAuth.authorize} throws the resolver's errors (401 missing/wrong token, also for an
 * unknown UUID; 409 ambiguous UUID, `StaleToken` — with a Warning Event `StaleCallback` on the SBC —
 * or retired token; 503 API unavailable). Under `--callback-auth=optional` a request WITHOUT a token
 * is accepted as unauthenticated (a request WITH one is still checked).
 * {@link requireDiscovery} throws 403 `NotDiscovery` for an authenticated non-discovery attempt.
 */
import type { FastifyRequest } from 'fastify';
import { EventReason } from '../api/vocabulary.js';
import type { BootTarget, BootTargetResolver } from '../bootsignals/boot-target.js';
import { HttpError } from '../bootsignals/http-error.js';
import { isDiscoveryAttempt } from '../bootsignals/power-intent.js';
import type { EventRecorder } from '../runtime/events.js';
import { Resources } from '../runtime/resource.js';

/** `required`: every callback needs the attempt token. `optional`: upstream's unauthenticated bodies are accepted too. */
export type CallbackAuth = 'required' | 'optional';

/** Field-manager prefix of the registry's condition writes. */
export const REGISTRY_COMPONENT = 'metal-registry';

/** The caller of a request: its server's current target, and whether a token proved it. */
export interface Authorization {
  target: BootTarget;
  authenticated: boolean;
}

/** The bearer token of a request, if any (`Authorization: Bearer <token>`). */
export function bearerToken(req: FastifyRequest): string | undefined {
  const h = req.headers.authorization;
  if (typeof h !== 'string') return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  return m?.[1];
}

export class RegistryAuth {
  constructor(
    private readonly resolver: BootTargetResolver,
    private readonly events: EventRecorder,
    private readonly callbackAuth: CallbackAuth,
  ) {}

  /** Verifies the caller for `uuid`; under `optional` auth a request without token is accepted as unauthenticated. */
  async authorize(req: FastifyRequest, uuid: string): Promise<Authorization> {
    const token = bearerToken(req);
    if (!token && this.callbackAuth === 'optional')
      return { target: this.resolver.resolve(uuid), authenticated: false };
    try {
      return { target: await this.resolver.authenticate(uuid, token), authenticated: true };
    } catch (err) {
      const sbc =
        err instanceof HttpError && err.reason === 'StaleToken' ? this.resolver.resolve(uuid).sbc : undefined;
      if (sbc) {
        this.events.record(
          Resources.ServerBootConfiguration,
          sbc,
          'Warning',
          EventReason.StaleCallback,
          `${req.method} ${req.routeOptions.url} from ${req.socket.remoteAddress} carried the token of an earlier attempt; ignored (current attempt ${sbc.spec.bootAttempt ?? 1})`,
        );
      }
      throw err;
    }
  }
}

/** 403 unless the authenticated attempt is a discovery attempt (registration writes are the probe's). */
export function requireDiscovery(auth: Authorization): void {
  if (auth.authenticated && !(auth.target.sbc && isDiscoveryAttempt(auth.target.sbc)))
    throw new HttpError(403, 'NotDiscovery', "only a discovery attempt's token may change the registration");
}
