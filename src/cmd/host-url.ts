/**
 * Host-facing URLs (`--registry-url`, `--bootserver-url`, the boot server's `--url`): what is
 * rendered into iPXE scripts and kernel command lines, so hosts on the boot network must be able to
 * resolve and route to it (security review S16). Refused with a clear message:
 * - a cluster-DNS name (`*.svc`, `*.svc.<cluster domain>`): only pods resolve those;
 * - the wildcard address (`0.0.0.0`, `[::]`) or a URL that does not parse;
 * - no URL while listening on a wildcard address (the listen address names no host).
 * Loopback is accepted (local stack and tests: the hosts are on this machine).
 */

/** A host-facing URL that cannot work; `message` says which flag and why. */
export class HostUrlError extends Error {
  override name = 'HostUrlError';
}

const WILDCARDS = new Set(['0.0.0.0', '::', '[::]', '']);

/** True for names only cluster DNS resolves (`x.svc`, `x.ns.svc.cluster.local`). */
export function isClusterDnsName(hostname: string): boolean {
  const h = hostname.toLowerCase().replace(/\.$/, '');
  return h.endsWith('.svc') || h.includes('.svc.');
}

/**
 * Validates `given` for `flag` (returned without a trailing slash), or, when it is unset, derives
 * the URL from a specific listen host (`scheme://listenHost:port`). Throws {@link HostUrlError}.
 */
export function hostFacingUrl(
  flag: string,
  given: string | undefined,
  listen: { host: string; port: number; scheme?: 'http' | 'https' },
): string {
  if (given === undefined || given === '') {
    if (WILDCARDS.has(listen.host))
      throw new HostUrlError(
        `${flag} is required when listening on ${listen.host || 'all addresses'}: give the URL hosts on the boot network use to reach this server (an address or DNS name they can route to)`,
      );
    const host = listen.host.includes(':') ? `[${listen.host}]` : listen.host;
    return `${listen.scheme ?? 'http'}://${host}:${listen.port}`;
  }
  let u: URL;
  try {
    u = new URL(given);
  } catch {
    throw new HostUrlError(`${flag}: ${given} is not a URL`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:')
    throw new HostUrlError(`${flag}: ${given} must be http:// or https://`);
  if (WILDCARDS.has(u.hostname))
    throw new HostUrlError(`${flag}: ${given} names the wildcard address; hosts cannot connect to it`);
  if (isClusterDnsName(u.hostname))
    throw new HostUrlError(
      `${flag}: ${given} is a cluster-DNS name; hosts on the boot network cannot resolve it (use a routable address, e.g. a LoadBalancer or node IP)`,
    );
  return given.replace(/\/+$/, '');
}
