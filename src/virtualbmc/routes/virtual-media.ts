/**
 * Virtual media of hosts that implement it (`Host.insertMedia`), when the profile has virtual media:
 * the built-in `Systems/{id}/VirtualMedia` collection and its `CD1`, or with a captured tree its
 * CD/DVD devices (under the captured system, or a captured Manager bound to the first system).
 * `GET|PATCH` the device (PATCH: the eject form only, else 400), `POST
 * …/Actions/VirtualMedia.InsertMedia` (204; 400 for an unknown or bad parameter or an image that
 * cannot be read, 409 while media is inserted), `POST …/Actions/VirtualMedia.EjectMedia` (204; 404
 * where the captured device has no such action).
 */
import { MediaFetchError } from '../media.js';
import { collection, treeResource, VIRTUAL_CD_ID, virtualMedia } from '../resources.js';
import type { VirtualSystem } from '../system.js';
import { asObject, fail, methods, ok, type Reply } from './reply.js';
import type { BmcState } from './state.js';

/** A live virtual CD: its system, its URI, the captured document (with a tree), the segments after it. */
export interface MediaDevice {
  sys: VirtualSystem;
  uri: string;
  captured: Record<string, unknown> | undefined;
  rest: string[];
}

/**
 * The live virtual CD that `seg` (path segments below /redfish/v1) names, with the segments after
 * the device (`Actions/VirtualMedia.InsertMedia`, ...): the built-in `Systems/{id}/VirtualMedia/CD1`,
 * or a captured CD/DVD device under the captured system or a captured Manager (bound to the first
 * system). Only for hosts that implement virtual media.
 */
export function mediaAt(state: BmcState, seg: string[]): MediaDevice | undefined {
  const { profile } = state;
  if (!profile.virtualMedia || seg.length < 4 || seg[2] !== 'VirtualMedia') return undefined;
  const [top, id, , dev] = seg as [string, string, string, string];
  const rest = seg.slice(4);
  const isCd = (b: Record<string, unknown> | undefined) =>
    Array.isArray(b?.['MediaTypes']) && (b['MediaTypes'] as unknown[]).some((t) => t === 'CD' || t === 'DVD');
  let sys: VirtualSystem | undefined;
  let captured: Record<string, unknown> | undefined;
  if (top === 'Systems') {
    sys = state.system(id);
    if (sys === undefined) return undefined;
    if (profile.tree === undefined) {
      if (dev !== VIRTUAL_CD_ID) return undefined;
    } else {
      captured = treeResource(profile.tree, `${profile.tree.systemUri}/VirtualMedia/${dev}`, sys.uri);
      if (!isCd(captured)) return undefined;
    }
  } else if (top === 'Managers' && profile.tree !== undefined) {
    captured = profile.tree.get(`/redfish/v1/Managers/${id}/VirtualMedia/${dev}`);
    if (!isCd(captured)) return undefined;
    sys = state.systems[0];
  }
  if (sys?.host.insertMedia === undefined) return undefined;
  return { sys, uri: `/redfish/v1/${top}/${id}/VirtualMedia/${dev}`, captured, rest };
}

/** `method` on the device `m` (or below it). */
export async function mediaRoute(
  state: BmcState,
  method: string,
  m: MediaDevice,
  body: unknown,
): Promise<Reply> {
  const { sys, uri, captured, rest } = m;
  if (rest.length === 0) {
    methods(method, ['GET', 'PATCH']);
    if (method === 'GET') return ok(virtualMedia(sys, uri, captured));
    // The PATCH form of eject (VirtualMedia.v1_3_0+: `Image` null, `Inserted` false).
    const b = asObject(body);
    if (b['Image'] !== null || (b['Inserted'] !== undefined && b['Inserted'] !== false))
      fail(400, 'PropertyValueNotInList', 'only {"Image": null, "Inserted": false} (eject) may be PATCHed');
    await ejectMedia(sys);
    return { status: 204 };
  }
  if (rest.length === 2 && rest[0] === 'Actions' && rest[1] === 'VirtualMedia.InsertMedia') {
    methods(method, ['POST']);
    return insertMedia(state, sys, body);
  }
  const ejectable =
    captured === undefined ||
    (captured['Actions'] as Record<string, unknown> | undefined)?.['#VirtualMedia.EjectMedia'] !== undefined;
  if (rest.length === 2 && rest[0] === 'Actions' && rest[1] === 'VirtualMedia.EjectMedia' && ejectable) {
    methods(method, ['POST']);
    await ejectMedia(sys);
    return { status: 204 };
  }
  return fail(404, 'ResourceMissingAtURI', `${uri}/${rest.join('/')} does not exist`);
}

/**
 * `GET Systems/{id}/VirtualMedia` (built-in documents, a host with virtual media); undefined
 * otherwise, the path then being served by whatever comes next.
 */
export function mediaCollection(state: BmcState, method: string, sys: VirtualSystem): Reply | undefined {
  if (!state.profile.virtualMedia || state.profile.tree !== undefined) return undefined;
  if (sys.host.insertMedia === undefined) return undefined;
  methods(method, ['GET']);
  return ok(
    collection('VirtualMediaCollection', 'Virtual Media Collection', `${sys.uri}/VirtualMedia`, [
      `${sys.uri}/VirtualMedia/${VIRTUAL_CD_ID}`,
    ]),
  );
}

const INSERT_PARAMETERS = [
  'Image',
  'Inserted',
  'WriteProtected',
  'TransferProtocolType',
  'TransferMethod',
  'UserName',
  'Password',
];

/** `VirtualMedia.InsertMedia` (VirtualMedia.v1_6_0): the image is checked readable first, as BMCs do. */
async function insertMedia(state: BmcState, sys: VirtualSystem, body: unknown): Promise<Reply> {
  const b = asObject(body);
  for (const k of Object.keys(b))
    if (!INSERT_PARAMETERS.includes(k))
      fail(400, 'ActionParameterUnknown', `InsertMedia has no parameter ${k}`);
  const image = b['Image'];
  if (image === undefined) fail(400, 'ActionParameterMissing', 'Image is required');
  if (typeof image !== 'string' || !/^https?:\/\/\S+$/.test(image))
    fail(400, 'ActionParameterValueFormatError', 'Image must be an http(s) URI');
  if (state.profile.insertMediaRejectsFlags && ('Inserted' in b || 'WriteProtected' in b))
    fail(400, 'ActionParameterNotSupported', 'Inserted and WriteProtected are not supported');
  if (b['Inserted'] === false) fail(400, 'ActionParameterValueError', 'Inserted false: nothing to insert');
  if (sys.media.inserted) fail(409, 'ResourceAlreadyExists', 'media is already inserted: eject it first');
  try {
    await sys.host.insertMedia?.(image as string);
  } catch (err) {
    if (!(err instanceof MediaFetchError)) throw err;
    state.log.info({ system: sys.id, error: err.message }, 'virtual media refused: image not readable');
    fail(400, 'ActionParameterValueError', `the image cannot be read: ${err.message}`);
  }
  sys.media = { image: image as string, inserted: true, writeProtected: b['WriteProtected'] !== false };
  sys.mediaLog.push({ at: Date.now(), action: 'insert', image: image as string });
  sys.touch();
  return { status: 204 };
}

async function ejectMedia(sys: VirtualSystem): Promise<void> {
  await sys.host.ejectMedia?.();
  if (sys.media.inserted) sys.mediaLog.push({ at: Date.now(), action: 'eject', image: sys.media.image });
  sys.media = { image: undefined, inserted: false, writeProtected: true };
  sys.touch();
}
