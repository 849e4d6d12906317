/**
 * The SessionService (when the profile has sessions): `POST /SessionService/Sessions` logs in
 * without other authentication (201 with `X-Auth-Token` and `Location`; 400 without string
 * `UserName`/`Password`, 401 for wrong credentials, 503 with `Retry-After: 5` past 1,024 sessions,
 * 404 when the profile has no SessionService); `GET /SessionService`, `GET /SessionService/Sessions`,
 * `GET|DELETE /SessionService/Sessions/{id}` (204; 404 for an unknown session).
 */
import { randomBytes } from 'node:crypto';
import { collection, SESSIONS_URI, session, sessionService } from '../resources.js';
import { asObject, fail, methods, ok, type Reply } from './reply.js';
import type { RedfishRequest } from './request.js';
import type { BmcState } from './state.js';

const MAX_SESSIONS = 1024;

/** `POST /redfish/v1/SessionService/Sessions`: a new session for valid credentials. */
export function login(state: BmcState, body: unknown): Reply {
  const { profile, accounts, sessions } = state;
  if (!profile.sessions) fail(404, 'ResourceMissingAtURI', 'this service has no SessionService');
  const b = asObject(body);
  const user = b['UserName'];
  const password = b['Password'];
  if (typeof user !== 'string' || typeof password !== 'string') {
    fail(400, 'PropertyMissing', 'UserName and Password are required strings');
  }
  const outcome = accounts.authenticate(user as string, password as string);
  if (!outcome.ok) fail(401, 'NoValidSession', 'invalid credentials');
  if (sessions.size >= MAX_SESSIONS)
    fail(503, 'SessionLimitExceeded', 'too many sessions', { 'retry-after': '5' });
  const token = randomBytes(24).toString('hex');
  const id = randomBytes(8).toString('hex');
  sessions.set(token, { id, user: user as string, lastUsed: Date.now() });
  return {
    status: 201,
    body: session(id, user as string),
    headers: { 'x-auth-token': token, location: `${SESSIONS_URI}/${id}` },
  };
}

/** `/redfish/v1/SessionService[/…]` for an authenticated caller; undefined for a path it does not serve. */
export function sessionsRoute(state: BmcState, r: RedfishRequest): Reply | undefined {
  const { sessions } = state;
  const { method } = r;
  const [, id, sub, leaf] = r.seg;
  if (id === undefined) {
    methods(method, ['GET']);
    return ok(sessionService(state.profile));
  }
  if (id === 'Sessions' && sub === undefined) {
    methods(method, ['GET', 'POST']);
    return ok(
      collection(
        'SessionCollection',
        'Session Collection',
        SESSIONS_URI,
        [...sessions.values()].map((s) => `${SESSIONS_URI}/${s.id}`),
      ),
    );
  }
  if (id === 'Sessions' && leaf === undefined && sub !== undefined) {
    methods(method, ['GET', 'DELETE']);
    const entry = [...sessions.entries()].find(([, s]) => s.id === sub);
    if (entry === undefined) fail(404, 'ResourceMissingAtURI', `no session ${sub}`);
    const [token, s] = entry!;
    if (method === 'DELETE') {
      sessions.delete(token);
      return { status: 204 };
    }
    return ok(session(s.id, s.user));
  }
  return undefined;
}
