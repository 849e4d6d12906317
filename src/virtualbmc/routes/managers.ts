/**
 * `/redfish/v1/Managers[/…]`: with a captured tree, the captured Manager documents (GET only);
 * otherwise the built-in ones: `GET /Managers`, `GET /Managers/BMC`, `POST
 * /Managers/BMC/Actions/Manager.Reset` (204, hosts unaffected; 400 for a ResetType other than
 * GracefulRestart or ForceRestart). 405 for another method. Virtual media under a captured Manager
 * is served by `virtual-media.ts`.
 */
import { collection, MANAGER_ID, MANAGERS_URI, manager } from '../resources.js';
import { asObject, fail, methods, ok, type Reply } from './reply.js';
import type { RedfishRequest } from './request.js';
import type { BmcState } from './state.js';

/** The reply for `r`, or undefined for a path it does not serve. */
export function managersRoute(state: BmcState, r: RedfishRequest): Reply | undefined {
  const { profile } = state;
  const { method } = r;
  if (profile.tree !== undefined) {
    methods(method, ['GET']);
    const captured = profile.tree.get(r.path);
    return captured !== undefined ? ok(captured) : undefined;
  }
  const [, id, sub, leaf, extra] = r.seg;
  if (id === undefined) {
    methods(method, ['GET']);
    return ok(
      collection('ManagerCollection', 'Manager Collection', MANAGERS_URI, [`${MANAGERS_URI}/${MANAGER_ID}`]),
    );
  }
  if (id === MANAGER_ID && sub === undefined) {
    methods(method, ['GET']);
    return ok(manager(state.serviceUuid, state.systems, state.consoleServer !== undefined));
  }
  if (id === MANAGER_ID && sub === 'Actions' && leaf === 'Manager.Reset' && extra === undefined) {
    // A restart of the BMC itself: the hosts keep their power; only the request log records it.
    methods(method, ['POST']);
    const type = asObject(r.body)['ResetType'] ?? 'GracefulRestart';
    if (type !== 'GracefulRestart' && type !== 'ForceRestart')
      fail(
        400,
        'ActionParameterNotSupported',
        `ResetType ${String(type)} is not GracefulRestart or ForceRestart`,
      );
    return { status: 204 };
  }
  return undefined;
}
