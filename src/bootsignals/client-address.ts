/**
 * The client address of a signal request as the servers log, store and compare it: the socket's
 * remote address, an IPv4-mapped IPv6 address (`::ffff:10.0.0.5`, what a dual-stack listener
 * reports for IPv4 peers) as the IPv4 address it is. Nothing from request headers
 * (`X-Forwarded-For`) is used: a header proves nothing about where a request came from.
 */

/** `::ffff:a.b.c.d` → `a.b.c.d`; other addresses unchanged; `unknown` when the socket has none (closed). */
export function clientAddress(raw: string | undefined): string {
  if (!raw) return 'unknown';
  return raw.startsWith('::ffff:') && raw.includes('.') ? raw.slice(7) : raw;
}

/**
 * The rate-limit bucket of a client address (security review N16): an IPv4 address itself, an IPv6
 * address its /64 (`2001:db8:1:2::/64`), since a host on a /64 can pick any of its 2^64 addresses
 * and would otherwise get a fresh budget with each. Malformed input is its own bucket.
 */
export function addressBucket(raw: string | undefined): string {
  const a = clientAddress(raw).split('%')[0]!; // zone index off
  if (!a.includes(':')) return a;
  const [head = '', tail] = a.split('::');
  const h = head ? head.split(':') : [];
  const t = tail !== undefined && tail !== '' ? tail.split(':') : [];
  if (tail === undefined && h.length !== 8) return a;
  const groups =
    tail === undefined ? h : [...h, ...Array(Math.max(0, 8 - h.length - t.length)).fill('0'), ...t];
  if (groups.length < 4 || groups.some((g) => !/^[0-9a-fA-F]{1,4}$/.test(g) && !g.includes('.'))) return a;
  return `${groups
    .slice(0, 4)
    .map((g) => Number.parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}
