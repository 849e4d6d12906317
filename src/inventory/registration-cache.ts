/**
 * What a Server cache keeps of the probe agent's registration (`status.registration.data`, the
 * upstream metalprobe `RegistrationPayload.data` the registry stores; up to the registry's body
 * limit, kilobytes per Server on real hardware): an informer transform replaces it with its
 * *projection* — the keys the Server status mapping reads (`src/controllers/server/registration.ts`,
 * `hardwareFromRegistration`; a test asserts that both give the same status for every agent dialect)
 * — and remembers a digest of the whole payload, so the registry still answers "unchanged" for a
 * repeated registration without the payload in memory.
 *
 * Why: every cached Server version that is replaced by a watch event becomes old-space garbage
 * (the cache outlives young-generation collections); a Server changes ~10 times after its
 * registration, so the payload's size multiplied by that count is what the manager's heap grows by
 * between full collections. `receivedAt` and `clientAddress` are kept as they are (the boot server's
 * client identity and the taint rules read them).
 *
 * Who needs the whole payload reads it from the API server: the registry's `GET /systems/{uuid}`.
 * A slimmed Server must never be written back whole (no writer of Servers does: all status writes
 * are field-level patches); the projection is only known to be one through {@link isProjection}.
 */
import { createHash } from 'node:crypto';
import type { Server } from '../api/v1alpha1/server.js';

/** A projection spec: `true` keeps a value whole; an object keeps those keys; `[spec]` maps array elements. */
type Spec = true | { readonly [key: string]: Spec } | readonly [Spec];

/**
 * The keys `hardwareFromRegistration` reads, in both agent dialects (busybox agent: lower-case
 * storage keys; simulated host: Go's default field names). Keep in step with it.
 */
const READ: Spec = {
  networkInterfaces: [{ name: true, macAddress: true, ipAddresses: true, carrierStatus: true }],
  cpu: [{ id: true, vendor: true, model: true, totalCores: true, totalHardwareThreads: true }],
  memory: [{ size: true }],
  storage: [
    {
      name: true,
      Name: true,
      sizeBytes: true,
      Size: true,
      size: true,
      rotational: true,
      Rotational: true,
      removable: true,
      Removable: true,
      vendor: true,
      Vendor: true,
      model: true,
      Model: true,
    },
  ],
  systemInfo: { systemInformation: { skuNumber: true }, biosInformation: { version: true } },
};

/** projection → sha256 of the whole payload it was made from. Weak: dies with the cached Server. */
const digests = new WeakMap<object, string>();

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * What the mapping would read of `value`. Elements and values of the wrong type become `null` (the
 * mapping skips those just as it skips a string or a number in their place).
 */
function project(value: unknown, spec: Spec): unknown {
  if (spec === true) return value;
  if (Array.isArray(spec)) return Array.isArray(value) ? value.map((v) => project(v, spec[0])) : null;
  if (!isRecord(value)) return null;
  const out: Record<string, unknown> = {};
  for (const [k, inner] of Object.entries(spec as Record<string, Spec>)) {
    if (value[k] !== undefined) out[k] = project(value[k], inner);
  }
  return out;
}

/** JSON with object keys sorted: equal for deep-equal JSON values whatever their key order. */
function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (isRecord(v)) {
    const keys = Object.keys(v)
      .filter((k) => v[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

/**
 * Hex sha256 of a registration payload's canonical JSON (sorted keys: the API server re-encodes the
 * stored payload with sorted keys, the agent posts its own order). For a cached projection: the
 * digest of the payload it was made from.
 */
export function registrationDigest(data: unknown): string {
  if (isRecord(data)) {
    const known = digests.get(data);
    if (known) return known;
  }
  return createHash('sha256').update(canonicalJson(data)).digest('hex');
}

/** True when `data` is a cache projection made by {@link slimRegistration}, not a whole payload. */
export function isProjection(data: unknown): boolean {
  return isRecord(data) && digests.has(data);
}

/**
 * Informer transform for Servers: replaces `status.registration.data` with its projection (see the
 * file comment). Modifies and returns its argument; a Server without registration is returned as is.
 */
export function slimRegistration(server: Server): Server {
  const reg = server.status?.registration;
  if (!reg || !isRecord(reg.data) || isProjection(reg.data)) return server;
  const digest = registrationDigest(reg.data);
  const slim = project(reg.data, READ) as Record<string, unknown>;
  digests.set(slim, digest);
  reg.data = slim;
  return server;
}
