/**
 * Which handler answers a request: the version document and ServiceRoot (no auth), the login (no
 * auth), then, for an authenticated caller ({@link admit}: 401, 403), the AccountService, virtual
 * media, Systems, Managers and the SessionService, and with a captured tree whatever else the
 * vendor serves (GET only). 403 for a ReadOnly caller's change outside the SessionService; 404 for
 * any other path. Throws {@link HttpFailure} for every refusal.
 */
import type { IncomingMessage } from 'node:http';
import { AccountRefusal } from '../accounts.js';
import { serviceRoot } from '../resources.js';
import { admit } from './auth.js';
import { managersRoute } from './managers.js';
import { fail, methods, ok, type Reply } from './reply.js';
import { pathSegments, type RedfishRequest, type RequestRecord } from './request.js';
import { login, sessionsRoute } from './sessions.js';
import type { BmcState } from './state.js';
import { systemsRoute } from './systems.js';
import { mediaAt, mediaRoute } from './virtual-media.js';

/** The reply to `req` for `path` (trailing slashes removed) with its parsed `body`; notes the caller in `rec`. */
export function route(
  state: BmcState,
  req: IncomingMessage,
  path: string,
  body: unknown,
  rec: RequestRecord,
): Promise<Reply> | Reply {
  const { profile } = state;
  const method = req.method ?? 'GET';
  if (path === '/redfish') {
    methods(method, ['GET']);
    return { status: 200, body: { v1: '/redfish/v1/' } };
  }
  if (!path.startsWith('/redfish/v1')) fail(404, 'ResourceMissingAtURI', `${path} does not exist`);
  const seg = pathSegments(path);
  if (seg.length === 0) {
    methods(method, ['GET']);
    return {
      status: 200,
      body: profile.tree?.get('/redfish/v1/') ?? serviceRoot(state.serviceUuid, profile),
    };
  }
  const isLogin =
    seg.length === 2 && seg[0] === 'SessionService' && seg[1] === 'Sessions' && method === 'POST';
  if (isLogin) return login(state, body);

  const caller = admit(state, req, path, rec);
  const r: RedfishRequest = { method, path, seg, body, caller, rec };
  const top = seg[0];
  if (top === 'AccountService') return accountsRoute(state, r);
  if (caller.roleId === 'ReadOnly' && method !== 'GET' && top !== 'SessionService')
    fail(403, 'InsufficientPrivilege', 'the ReadOnly role may not change anything');
  const media = mediaAt(state, seg);
  if (media !== undefined) return mediaRoute(state, method, media, body);
  const reply =
    top === 'Systems'
      ? systemsRoute(state, r)
      : top === 'Managers'
        ? managersRoute(state, r)
        : top === 'SessionService' && profile.sessions
          ? sessionsRoute(state, r)
          : undefined;
  if (reply !== undefined) return reply;
  if (profile.tree !== undefined && top !== 'Systems' && top !== 'SessionService') {
    // Everything else the vendor serves (Chassis, AccountService, ...) as captured, read-only.
    const captured = profile.tree.get(path);
    if (captured !== undefined) {
      methods(method, ['GET']);
      return ok(captured);
    }
  }
  return fail(404, 'ResourceMissingAtURI', `${path} does not exist`);
}

/** `/redfish/v1/AccountService[/…]` (accounts.ts), its refusals as Redfish error replies. */
function accountsRoute(state: BmcState, r: RedfishRequest): Reply {
  try {
    return state.accounts.route(r.method, r.seg.slice(1), r.body, r.caller, r.rec.ifMatch);
  } catch (err) {
    if (err instanceof AccountRefusal) fail(err.status, err.messageId, err.message);
    throw err;
  }
}
