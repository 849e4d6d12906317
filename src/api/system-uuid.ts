/**
 * SMBIOS system UUIDs in one canonical form, and the one alias a host may use for it.
 *
 * BMCs and QEMU's `-uuid` report upper case, Linux `/sys/class/dmi/id/product_uuid` reports lower
 * case (boot-flow case C01). Every boundary (CRD writes, HTTP paths and bodies, cache indexes)
 * passes UUIDs through {@link canonicalSystemUUID} so that one server is found whichever case is used.
 *
 * Byte order: SMBIOS 2.6 and later store the first three fields (`time_low`, `time_mid`,
 * `time_hi_and_version`) little-endian (DMTF DSP0134 §7.2.1, "System — UUID"), while RFC 4122 / RFC 9562
 * text is big-endian, and BMC firmware differs in which it prints (metal-stack/go-hal#57: a Supermicro
 * BIOS update changed the Redfish byte order). {@link byteSwappedSystemUUID} gives the one alternative
 * form such a host reports; nothing else (no character sorting or other fuzzy match) is an alias.
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

/** Reverses the byte (hex-pair) order of one hex field: `aabbccdd` → `ddccbbaa`. */
function reverseBytes(field: string): string {
  let out = '';
  for (let i = field.length - 2; i >= 0; i -= 2) out += field.slice(i, i + 2);
  return out;
}

/**
 * The same UUID with fields 1–3 byte-reversed (big-endian ⇄ SMBIOS ≥ 2.6 little-endian), e.g.
 * `00112233-4455-6677-8899-aabbccddeeff` ⇄ `33221100-5544-7766-8899-aabbccddeeff`. Its own inverse.
 * Takes and returns the canonical form; throws `TypeError` when `canonical` is not canonical.
 * Equal to the input when fields 1–3 are byte palindromes (then there is no distinct alias).
 */
export function byteSwappedSystemUUID(canonical: string): string {
  if (!UUID_SHAPE.test(canonical)) throw new TypeError(`not a canonical system UUID: ${canonical}`);
  const [a, b, c, d, e] = canonical.split('-') as [string, string, string, string, string];
  return `${reverseBytes(a)}-${reverseBytes(b)}-${reverseBytes(c)}-${d}-${e}`;
}
