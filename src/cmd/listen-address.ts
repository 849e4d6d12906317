/** `host:port` → `[host, port]`; `:port` means 127.0.0.1; `[::1]:80` is IPv6. Throws on a bad port. */
export function splitAddr(addr: string): [string, number] {
  const i = addr.lastIndexOf(':');
  const host = addr.slice(0, i).replace(/^\[|\]$/g, '') || '127.0.0.1';
  const port = Number(addr.slice(i + 1));
  if (i < 0 || !Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`bad address ${addr}`);
  return [host, port];
}
