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
