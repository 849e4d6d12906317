/**
 * Redfish virtual media for the `VirtualMedia` boot method: finding a system's virtual CD and inserting
 * or ejecting an image (DMTF `VirtualMedia.v1_6_0`: `Image`, `Inserted`, `WriteProtected`, `MediaTypes`,
 * actions `#VirtualMedia.InsertMedia` and `#VirtualMedia.EjectMedia`; `VirtualMediaCollection`).
 *
 * Where the collection lives differs by vendor and is data in `vendor.ts` (`virtualMediaLocations`):
 * the ComputerSystem's `VirtualMedia` link (DMTF, current iDRAC) or the `VirtualMedia` link of its
 * Manager (HPE iLO, Supermicro). Within a collection the device is the first member whose `MediaTypes`
 * hold `CD` or `DVD` and that offers `InsertMedia` (HPE's slot 1 is Floppy/USBStick, its CD is slot 2).
 *
 * Each exchange is a handful of GETs and at most two POSTs within the caller's budget; POSTs are not
 * repeated when their answer was lost (`idempotent: false`).
 */
import type { MediaResult, VirtualMediaDevice } from './bmc.js';
import { VirtualMediaNotSupportedError } from './errors.js';
import { asObject, parseCollection } from './parse.js';
import type { RedfishClient } from './redfish-client.js';
import type { Budget } from './retry.js';
import type { VendorQuirks } from './vendor.js';

type Json = Record<string, unknown>;

/** A device with the action targets needed to change it. */
export interface MediaDevice extends VirtualMediaDevice {
  insertTarget: string | undefined;
  ejectTarget: string | undefined;
  mediaTypes: string[];
}

const linkOf = (v: unknown): string | undefined => {
  const id = typeof v === 'object' && v !== null ? (v as Json)['@odata.id'] : undefined;
  return typeof id === 'string' && id !== '' ? id : undefined;
};

const actionTarget = (actions: unknown, name: string): string | undefined => {
  const a = typeof actions === 'object' && actions !== null ? (actions as Json)[name] : undefined;
  const t = typeof a === 'object' && a !== null ? (a as Json)['target'] : undefined;
  return typeof t === 'string' && t !== '' ? t : undefined;
};

/** Parses a VirtualMedia resource. Pure; tolerant of missing optional properties. */
export function parseVirtualMedia(body: unknown, uri: string): MediaDevice {
  const obj = asObject(body, uri);
  const types = Array.isArray(obj['MediaTypes'])
    ? obj['MediaTypes'].filter((t): t is string => typeof t === 'string')
    : [];
  const image = typeof obj['Image'] === 'string' && obj['Image'] !== '' ? obj['Image'] : undefined;
  return {
    uri: typeof obj['@odata.id'] === 'string' ? obj['@odata.id'] : uri,
    inserted: obj['Inserted'] === true,
    image,
    writeProtected: typeof obj['WriteProtected'] === 'boolean' ? obj['WriteProtected'] : undefined,
    insertTarget: actionTarget(obj['Actions'], '#VirtualMedia.InsertMedia'),
    ejectTarget: actionTarget(obj['Actions'], '#VirtualMedia.EjectMedia'),
    mediaTypes: types,
  };
}

/** Whether a device can take a CD image. Pure. */
export function isCdDevice(d: MediaDevice): boolean {
  return d.insertTarget !== undefined && d.mediaTypes.some((t) => t === 'CD' || t === 'DVD');
}

/** The collection URIs to look at, in the vendor's order. Pure. */
export function collectionUris(
  system: Json,
  manager: Json | undefined,
  quirks: Pick<VendorQuirks, 'virtualMediaLocations'>,
): string[] {
  const out: string[] = [];
  for (const where of quirks.virtualMediaLocations) {
    const uri = linkOf(where === 'System' ? system['VirtualMedia'] : manager?.['VirtualMedia']);
    if (uri !== undefined && !out.includes(uri)) out.push(uri);
  }
  return out;
}

/** The body of `InsertMedia` for `image` (VirtualMedia.v1_6_0 InsertMedia parameters). Pure. */
export function insertMediaBody(image: string, quirks: Pick<VendorQuirks, 'insertMediaSendsFlags'>): Json {
  return quirks.insertMediaSendsFlags
    ? { Image: image, Inserted: true, WriteProtected: true }
    : { Image: image };
}

/**
 * The system's virtual CD. `system` is the ComputerSystem body already read.
 * @throws VirtualMediaNotSupportedError when no collection holds a CD-capable device.
 */
export async function findCdDevice(
  client: RedfishClient,
  systemUri: string,
  system: Json,
  quirks: VendorQuirks,
  budget: Budget,
): Promise<MediaDevice> {
  let manager: Json | undefined;
  if (quirks.virtualMediaLocations.includes('Manager')) {
    const links = system['Links'];
    const managedBy = typeof links === 'object' && links !== null ? (links as Json)['ManagedBy'] : undefined;
    let managerUri = Array.isArray(managedBy) ? linkOf(managedBy[0]) : undefined;
    if (managerUri === undefined) {
      const res = await client.get('/redfish/v1/Managers', { budget });
      managerUri = parseCollection(res.body, '/redfish/v1/Managers')[0]?.uri;
    }
    if (managerUri !== undefined) {
      const res = await client.get(managerUri, { budget });
      manager = asObject(res.body, managerUri);
    }
  }
  const looked: string[] = [];
  for (const col of collectionUris(system, manager, quirks)) {
    looked.push(col);
    const res = await client.get(col, { budget });
    for (const m of parseCollection(res.body, col)) {
      const dev = parseVirtualMedia((await client.get(m.uri, { budget })).body, m.uri);
      if (isCdDevice(dev)) return dev;
    }
  }
  throw new VirtualMediaNotSupportedError(systemUri, looked);
}

/** Eject-then-insert of `image` on `dev` (see `BMC.insertMedia`). */
export async function insertCd(
  client: RedfishClient,
  dev: MediaDevice,
  image: string,
  quirks: VendorQuirks,
  budget: Budget,
): Promise<MediaResult> {
  const device = publicView(dev);
  if (dev.inserted && dev.image === image) return { device, ejected: false, inserted: false };
  let ejected = false;
  if (dev.inserted) ejected = await eject(client, dev, budget);
  await client.post(
    dev.insertTarget ?? `${dev.uri}/Actions/VirtualMedia.InsertMedia`,
    insertMediaBody(image, quirks),
    {
      budget,
      idempotent: false,
    },
  );
  return { device: { ...device, inserted: true, image, writeProtected: true }, ejected, inserted: true };
}

/** Ejects `dev` when it holds media. */
export async function ejectCd(client: RedfishClient, dev: MediaDevice, budget: Budget): Promise<MediaResult> {
  const ejected = dev.inserted ? await eject(client, dev, budget) : false;
  return { device: { ...publicView(dev), inserted: false, image: undefined }, ejected, inserted: false };
}

async function eject(client: RedfishClient, dev: MediaDevice, budget: Budget): Promise<boolean> {
  if (dev.ejectTarget !== undefined) {
    // Ejecting twice leaves the same state: safe to repeat when the answer was lost.
    await client.post(dev.ejectTarget, {}, { budget, idempotent: true });
  } else {
    // Supermicro's captured device lists only InsertMedia: the PATCH form of VirtualMedia.v1_3_0+.
    await client.patch(dev.uri, { Image: null, Inserted: false }, { budget });
  }
  return true;
}

function publicView(d: MediaDevice): VirtualMediaDevice {
  return { uri: d.uri, inserted: d.inserted, image: d.image, writeProtected: d.writeProtected };
}
