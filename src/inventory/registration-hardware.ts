/**
 * From the probe agent's registration (upstream metalprobe `RegistrationPayload.data`) to the Server
 * status fields upstream fills: network interfaces, processors, memory, storage, SKU and BIOS
 * version. The registry stores this mapping, bounded, in `status.registration.hardware` (the whole
 * payload goes to a ConfigMap, inventory/registration-record.ts); the Server controller copies it
 * into the upstream fields when discovery completes and drops it from the record.
 *
 * Two agent dialects exist and both are read: the busybox agent (`hack/vm/init`) writes lower-case
 * storage keys (`name`, `sizeBytes`, `rotational`), the simulated host (`src/virtualbmc/sim.ts`)
 * Go's default field names (`Name`, `Size`, `Rotational`), as upstream's `BlockDevice` has no JSON tags.
 * Processors are upstream-shaped: one per socket (`cpu[].id`, the physical package), however many
 * entries of that socket the agent reports. Every list is capped ({@link HARDWARE_LIMITS}) so the
 * Server's stored size does not grow with a machine's inventory.
 * Anything malformed is skipped, never thrown: a bad payload must not wedge discovery.
 */
import { isIP } from 'node:net';
import { binarySIQuantity } from '../api/quantity.js';
import type { ServerStatus } from '../api/v1alpha1/server.js';

type Json = Record<string, unknown>;

export type HardwareStatus = Pick<
  ServerStatus,
  'networkInterfaces' | 'processors' | 'totalSystemMemory' | 'storages'
> & {
  sku?: string;
  biosVersion?: string;
};

const obj = (v: unknown): Json | undefined =>
  typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : undefined;
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);
const int = (v: unknown): number | undefined =>
  typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined;
/** First present key of `o` among `keys` (case dialects). */
const pick = (o: Json, ...keys: string[]): unknown => keys.map((k) => o[k]).find((v) => v !== undefined);
const INT32_MAX = 2 ** 31 - 1;

/** Most entries kept per list: beyond a large server's counts, far below the registry's body limit. */
export const HARDWARE_LIMITS = { networkInterfaces: 64, processors: 16, storages: 64, ips: 8 } as const;
const int32 = (v: unknown): number | undefined => {
  const n = int(v);
  return n !== undefined && n <= INT32_MAX ? n : undefined;
};

/** Maps registration data to Server status fields; absent or malformed parts are left out. */
export function hardwareFromRegistration(data: unknown): HardwareStatus {
  const d = obj(data) ?? {};
  const out: HardwareStatus = {};

  const nics = arr(d.networkInterfaces)
    .map(obj)
    .filter((n): n is Json => !!n && !!str(n.name) && !!str(n.macAddress))
    .map((n) => {
      const ips = arr(n.ipAddresses)
        .filter((ip): ip is string => typeof ip === 'string' && isIP(ip) !== 0)
        .slice(0, HARDWARE_LIMITS.ips);
      return {
        name: str(n.name) as string,
        macAddress: (str(n.macAddress) as string).toLowerCase(),
        ...(ips.length ? { ips, ip: ips[0] } : {}),
        ...(str(n.carrierStatus) ? { carrierStatus: str(n.carrierStatus) } : {}),
      };
    });
  if (nics.length) out.networkInterfaces = nics.slice(0, HARDWARE_LIMITS.networkInterfaces);

  const cpus = processorsOf(arr(d.cpu));
  if (cpus.length) out.processors = cpus;

  const memory = arr(d.memory)
    .map(obj)
    .reduce((sum, m) => sum + (int(m?.size) ?? 0), 0);
  // A Quantity string, as upstream stores it (kubectl prints `16Gi`, not the byte count).
  if (memory > 0 && Number.isSafeInteger(memory)) out.totalSystemMemory = binarySIQuantity(memory);

  const storages = arr(d.storage)
    .map(obj)
    .filter((s): s is Json => !!s && !!str(pick(s, 'name', 'Name')))
    .map((s) => {
      const name = str(pick(s, 'name', 'Name')) as string;
      const size = int(pick(s, 'sizeBytes', 'Size', 'size'));
      const rotational = pick(s, 'rotational', 'Rotational');
      const removable = pick(s, 'removable', 'Removable');
      const vendor = str(pick(s, 'vendor', 'Vendor'));
      const model = str(pick(s, 'model', 'Model'));
      return {
        name,
        drives: [
          {
            name,
            ...(size !== undefined ? { capacity: size } : {}),
            ...(typeof rotational === 'boolean' ? { mediaType: rotational ? 'HDD' : 'SSD' } : {}),
            ...(typeof removable === 'boolean' ? { type: removable ? 'Removable' : 'Fixed' } : {}),
            ...(vendor ? { vendor } : {}),
            ...(model ? { model } : {}),
          },
        ],
      };
    });
  if (storages.length) out.storages = storages.slice(0, HARDWARE_LIMITS.storages);

  const sys = obj(obj(d.systemInfo)?.systemInformation);
  if (str(sys?.skuNumber)) out.sku = str(sys?.skuNumber);
  const bios = obj(obj(d.systemInfo)?.biosInformation);
  if (str(bios?.version)) out.biosVersion = str(bios?.version);
  return out;
}

/**
 * One processor per socket: `cpu` entries with the same `id` (metalprobe's physical package id; an
 * agent listing every logical CPU repeats it) are one processor, the first entry's facts kept.
 */
function processorsOf(entries: unknown[]): NonNullable<ServerStatus['processors']> {
  const sockets = new Map<string, Json>();
  entries.forEach((e, i) => {
    const c = obj(e);
    if (!c) return;
    const id = String(int(c.id) ?? i);
    if (!sockets.has(id) && sockets.size < HARDWARE_LIMITS.processors) sockets.set(id, c);
  });
  return [...sockets].map(([id, c]) => ({
    id,
    type: 'CPU',
    ...(str(c.vendor) ? { manufacturer: str(c.vendor) } : {}),
    ...(str(c.model) ? { model: str(c.model) } : {}),
    ...(int32(c.totalCores) !== undefined ? { totalCores: int32(c.totalCores) } : {}),
    ...(int32(c.totalHardwareThreads) !== undefined ? { totalThreads: int32(c.totalHardwareThreads) } : {}),
  }));
}
