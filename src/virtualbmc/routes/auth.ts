/**
 * Who is asking: an `X-Auth-Token` of a live session (the profile's idle timeout ends it), or HTTP
 * Basic checked by the AccountService (a wrong password counts towards its lockout). {@link admit}
 * refuses with 401 (`WWW-Authenticate: Basic realm="virtual-bmc"`) when neither holds, and with 403
 * `PasswordChangeRequired` when an expired password asks for anything but its own account.
 */
import type { IncomingMessage } from 'node:http';
import type { AccountView } from '../accounts.js';
import { fail } from './reply.js';
import type { RequestRecord } from './request.js';
import type { BmcState } from './state.js';

/** The account `req` authenticates as, and how; undefined when it does not. */
export function authenticate(
  state: BmcState,
  req: IncomingMessage,
): { kind: 'basic' | 'session'; account: AccountView } | undefined {
  const { sessions, accounts, profile } = state;
  const token = req.headers['x-auth-token'];
  if (typeof token === 'string') {
    const s = sessions.get(token);
    if (s === undefined) return undefined;
    if (Date.now() - s.lastUsed > profile.sessionTimeoutSeconds * 1000) {
      sessions.delete(token);
      return undefined;
    }
    const account = accounts.account(s.user);
    if (account === undefined || !account.enabled || account.locked) return undefined;
    s.lastUsed = Date.now();
    return { kind: 'session', account };
  }
  const auth = req.headers.authorization;
  if (auth?.startsWith('Basic ')) {
    const decoded = Buffer.from(auth.slice(6), 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) return undefined;
    const outcome = accounts.authenticate(decoded.slice(0, colon), decoded.slice(colon + 1));
    if (outcome.ok) return { kind: 'basic', account: outcome.account };
  }
  return undefined;
}

/** The caller of `req` for `path`, noted in `rec` (`auth`, `user`); 401 or 403 as above. */
export function admit(state: BmcState, req: IncomingMessage, path: string, rec: RequestRecord): AccountView {
  const authed = authenticate(state, req);
  if (authed === undefined) {
    return fail(401, 'InsufficientPrivilege', 'authentication required', {
      'www-authenticate': 'Basic realm="virtual-bmc"',
    });
  }
  rec.auth = authed.kind;
  rec.user = authed.account.userName;
  const caller = authed.account;
  const own = state.accounts.restrictedTo(caller);
  if (own !== undefined && path !== own)
    fail(403, 'PasswordChangeRequired', 'the password has expired: change it first');
  return caller;
}
