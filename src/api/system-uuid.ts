/**
 * SMBIOS system UUIDs in one canonical form.
 *
 * BMCs and QEMU's `-uuid` report upper case, Linux `/sys/class/dmi/id/product_uuid` reports lower
 * case (boot-flow case C01). Every boundary (CRD writes, HTTP paths and bodies, cache indexes)
 * passes UUIDs through {@link canonicalSystemUUID} so that one server is found whichever case is used.
 */

const UUID_SHAPE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** Longest input worth parsing: a 36-character UUID, optionally in braces. Longer input is rejected unread. */
const MAX_INPUT = 38;

/**
 * Returns the lower-case 8-4-4-4-12 form of `value`, or `undefined` when it is not a UUID.
 * Accepts any letter case and optional surrounding braces (`{…}`, as some BMCs print it).
 */
export function canonicalSystemUUID(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > MAX_INPUT) return undefined;
  let v = value.trim().toLowerCase();
  if (v.startsWith('{') && v.endsWith('}')) v = v.slice(1, -1);
  return UUID_SHAPE.test(v) ? v : undefined;
}
