/**
 * `/redfish/v1/Systems[/…]`: the ComputerSystem collection and documents (`GET`, `PATCH` of `Boot`
 * with `If-Match` checked: 412 stale, 428 missing where the profile requires it; 204 with the new
 * `ETag`), the settings object and `ResetActionInfo` where the profile has them,
 * `Actions/ComputerSystem.Reset` (204; 400 for a ResetType the profile does not list, 500 when the
 * host fails), `EthernetInterfaces`, the `VirtualMedia` collection and, with a captured tree, the
 * other captured parts of the system (GET only). 404 for an unknown system, 405 for another method.
 */
import { RESET_TYPES, type ResetType } from '../../bmc/bmc.js';
import {
  collection,
  computerSystem,
  ethernetInterface,
  nicId,
  resetActionInfo,
  SYSTEMS_URI,
  systemSettings,
  treeResource,
} from '../resources.js';
import type { BootOverrideState, VirtualSystem } from '../system.js';
import { BOOT_PROPERTY_OF, hpePostError, parseBootPatch } from './boot-patch.js';
import { asObject, etagMatches, fail, HttpFailure, methods, ok, type Reply } from './reply.js';
import type { RedfishRequest, RequestRecord } from './request.js';
import type { BmcState } from './state.js';
import { mediaCollection } from './virtual-media.js';

/** The reply for `r`, or undefined for a path it does not serve (the caller answers 404). */
export function systemsRoute(state: BmcState, r: RedfishRequest): Promise<Reply> | Reply | undefined {
  const { profile } = state;
  const { method, body, rec } = r;
  const [, id, sub, leaf, extra] = r.seg;
  if (id === undefined) {
    methods(method, ['GET']);
    return ok(
      collection(
        'ComputerSystemCollection',
        'Computer System Collection',
        SYSTEMS_URI,
        state.systems.map((s) => s.uri),
      ),
    );
  }
  const sys = state.systemOr404(id);
  if (sub === 'VirtualMedia' && leaf === undefined) {
    const media = mediaCollection(state, method, sys);
    if (media !== undefined) return media;
  }
  if (sub === undefined) {
    methods(method, ['GET', 'PATCH']);
    if (method === 'GET') return systemReply(state, sys);
    if (profile.settingsObject)
      fail(405, 'OperationNotAllowed', `PATCH the settings object ${sys.uri}/Settings`);
    return patchBoot(state, sys, body, rec, false);
  }
  if (sub === 'Settings' && profile.settingsObject && leaf === undefined) {
    methods(method, ['GET', 'PATCH']);
    if (method === 'GET')
      return { status: 200, body: systemSettings(sys, profile), headers: state.etagHeader(sys) };
    return patchBoot(state, sys, body, rec, true);
  }
  if (sub === 'ResetActionInfo' && profile.resetTypesAdvertised === 'action-info' && leaf === undefined) {
    methods(method, ['GET']);
    return ok(resetActionInfo(sys, profile));
  }
  if (sub === 'Actions' && leaf === 'ComputerSystem.Reset' && extra === undefined) {
    methods(method, ['POST']);
    return resetAction(state, sys, body);
  }
  return systemPartRoute(state, r, sys);
}

/** The parts below a system other than its own documents: NICs and, with a tree, what was captured. */
function systemPartRoute(state: BmcState, r: RedfishRequest, sys: VirtualSystem): Reply | undefined {
  const { profile } = state;
  const { method } = r;
  const [, , sub, leaf, extra] = r.seg;
  if (sub === 'ResetActionInfo' && profile.tree !== undefined && leaf === undefined) {
    methods(method, ['GET']);
    return ok(
      treeResource(profile.tree, `${profile.tree.systemUri}/ResetActionInfo`, sys.uri) ??
        resetActionInfo(sys, profile),
    );
  }
  if (sub === 'EthernetInterfaces' && extra === undefined && !profile.omitEthernetInterfaces) {
    methods(method, ['GET']);
    if (leaf === undefined) {
      return ok(
        collection(
          'EthernetInterfaceCollection',
          'Ethernet Interface Collection',
          `${sys.uri}/EthernetInterfaces`,
          [`${sys.uri}/EthernetInterfaces/${nicId(sys)}`],
        ),
      );
    }
    if (leaf.toUpperCase() === nicId(sys)) return ok(ethernetInterface(sys));
  }
  if (profile.tree !== undefined) {
    // Other parts of the system (Bios, BootOptions, Processors, ...) as captured.
    methods(method, ['GET']);
    const rest = r.seg.slice(2).join('/');
    const captured = treeResource(profile.tree, `${profile.tree.systemUri}/${rest}`, sys.uri);
    if (captured !== undefined) return ok(captured);
  }
  return undefined;
}

/** `GET Systems/{id}`: the ComputerSystem with its power state as the faults report it, and its ETag. */
function systemReply(state: BmcState, sys: VirtualSystem): Reply {
  return {
    status: 200,
    body: computerSystem(
      sys,
      state.profile,
      sys.powerState(state.faults.current.reportTransitionalState),
      state.consoleOf(sys),
    ),
    headers: state.etagHeader(sys),
  };
}

/**
 * A PATCH of `Boot`, on the system itself or (`viaSettings`) on its settings object, which applies
 * it at the next reset when the profile says `OnReset`. Notes re-sent unchanged fields in `rec`.
 */
function patchBoot(
  state: BmcState,
  sys: VirtualSystem,
  body: unknown,
  rec: RequestRecord,
  viaSettings: boolean,
): Reply {
  const { profile, faults } = state;
  const { ifMatch } = rec;
  if (faults.takeConcurrentWrite()) sys.touch();
  if (ifMatch === undefined && profile.requireIfMatch)
    fail(428, 'PreconditionRequired', 'If-Match is required');
  if (ifMatch !== undefined && !etagMatches(ifMatch, sys.etag)) {
    fail(412, 'PreconditionFailed', 'the resource has changed since the ETag was read');
  }
  const changes = parseBootPatch(asObject(body), profile);
  sys.startArmedPost();
  if (sys.inPost()) {
    // HPE iLO: Boot cannot change while the BIOS is in POST (HPE iLO message registry).
    throw new HttpFailure({ status: 400, body: hpePostError(Object.keys(changes)) });
  }
  if (profile.bootTargetWithEnabled && (changes.target === undefined) !== (changes.enabled === undefined)) {
    fail(
      400,
      'PropertyMissing',
      'BootSourceOverrideTarget and BootSourceOverrideEnabled must be set together',
    );
  }
  const before = sys.effectiveBoot();
  const same = (k: keyof BootOverrideState) => changes[k] !== undefined && changes[k] === before[k];
  rec.unchangedFields = (Object.keys(changes) as Array<keyof BootOverrideState>)
    .filter((k) => same(k))
    // Where the firmware needs Target and Enabled together, the unchanged partner is required.
    .filter((k) => !profile.bootTargetWithEnabled || k === 'mode' || (same('target') && same('enabled')))
    .map((k) => BOOT_PROPERTY_OF[k]);
  if (profile.biosJobOnModePatch && changes.mode !== undefined) {
    // Dell iDRAC: a BootSourceOverrideMode PATCH, changed or not, queues a BIOS configuration job.
    sys.biosJobs++;
    state.log.info({ system: sys.id, mode: changes.mode }, 'BIOS configuration job queued');
  }
  if (viaSettings && profile.settingsApplyTime === 'OnReset') sys.setPendingBoot(changes);
  else sys.setBoot(changes);
  return { status: 204, headers: state.etagHeader(sys) };
}

/** `ComputerSystem.Reset`: accepted at once (204), carried out after the profile's or a fault's delay. */
async function resetAction(state: BmcState, sys: VirtualSystem, body: unknown): Promise<Reply> {
  const { profile, faults } = state;
  const type = asObject(body)['ResetType'];
  if (type === undefined) fail(400, 'ActionParameterMissing', 'ResetType is required');
  if (
    typeof type !== 'string' ||
    !(RESET_TYPES as readonly string[]).includes(type) ||
    !profile.resetTypes.includes(type as ResetType)
  ) {
    fail(
      400,
      'ActionParameterValueNotInList',
      `ResetType ${String(type)} is not one of ${profile.resetTypes.join(', ')}`,
    );
  }
  try {
    // A Reset is accepted at once and takes effect later: the profile's delay, or a longer fault one.
    await sys.reset(type as ResetType, Math.max(faults.current.powerTransitionMs, profile.resetDelayMs));
  } catch (err) {
    state.log.error({ err, system: sys.id, type }, 'host failed to execute reset');
    fail(500, 'InternalError', 'the host failed to execute the reset');
  }
  return { status: 204 };
}
