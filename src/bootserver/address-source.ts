/**
 * Where the boot server learns which machine holds a client address (issue 28 item 3): a source the
 * boot network's infrastructure controls, not the host. Each lookup reads the source's current
 * state (a lease file re-parsed when it changed, the kernel's neighbour table), so an address that
 * moves between attempts, or is re-leased to another machine, is seen at the next fetch; nothing
 * from discovery is trusted for ever.
 *
 * What each source proves, and what it does not (docs/MACHINE-IDENTITY.md):
 * - {@link DnsmasqLeases}: the DHCP server gave `address` to the client that sent DHCP with
 *   `chaddr` = MAC. It proves what the DHCP server believed; a host that sends DHCP with another
 *   machine's MAC, or uses an address without DHCP, is not caught (DHCP snooping closes that).
 * - {@link NeighbourTable}: the boot server's kernel last resolved `address` to MAC over ARP, on a
 *   segment it shares with the client. ARP answers are unauthenticated (dynamic ARP inspection
 *   closes that); behind a router the table holds the router's MAC and the source knows nothing.
 * A site whose DHCP server is not dnsmasq feeds {@link DnsmasqLeases} with a file in dnsmasq's lease
 * format (one line `<expiry epoch s> <mac> <ip> <hostname> <client-id>`, expiry 0 = infinite),
 * e.g. from an ISC Kea lease hook or an export of the lease database; the file is read, never written.
 */
import { readFileSync, statSync } from 'node:fs';
import { isIP } from 'node:net';
import { canonicalMac } from '../bmc/parse.js';

/** Address → MAC as the boot network knows it right now. */
export interface AddressMacSource {
  /** For logs and conditions, e.g. `dnsmasq-leases:/var/lib/misc/dnsmasq.leases`. */
  readonly name: string;
  /** The MAC (canonical lower case) the source associates with `address` now, or `undefined`. */
  macOf(address: string): string | undefined;
  /** The addresses the source associates with `mac` now (`[]` when none). */
  addressesOf(mac: string): string[];
}

/** Largest lease file read (bytes): ~100 bytes a lease, far above any boot network's pool. */
export const MAX_LEASE_FILE_BYTES = 8 * 1024 * 1024;

interface LeaseTable {
  byAddress: Map<string, string>;
  byMac: Map<string, string[]>;
}

/** Parses dnsmasq's lease file text; expired leases (expiry in the past, not 0) are left out. */
export function parseDnsmasqLeases(text: string, nowSeconds: number): LeaseTable {
  const byAddress = new Map<string, string>();
  const byMac = new Map<string, string[]>();
  for (const line of text.split('\n')) {
    // `duid <server duid>` heads the DHCPv6 part; IPv6 leases carry the IAID in the MAC column.
    const [expires, rawMac, ip] = line.trim().split(/\s+/);
    const mac = canonicalMac(rawMac);
    if (!mac || !ip || isIP(ip) === 0) continue;
    const exp = Number(expires);
    if (!Number.isFinite(exp) || (exp !== 0 && exp < nowSeconds)) continue;
    byAddress.set(ip, mac);
    byMac.set(mac, [...(byMac.get(mac) ?? []), ip]);
  }
  return { byAddress, byMac };
}

/**
 * dnsmasq's lease file (`dhcp-leasefile`). Parsed again whenever its size or mtime changed (one
 * `stat` a lookup); unreadable or missing: no leases (every lookup `undefined`), never a throw.
 */
export class DnsmasqLeases implements AddressMacSource {
  readonly name: string;
  private table: LeaseTable = { byAddress: new Map(), byMac: new Map() };
  private seen = '';
  private parsedAt = 0;

  constructor(
    private readonly file: string,
    private readonly now: () => number = Date.now,
  ) {
    this.name = `dnsmasq-leases:${file}`;
  }

  private current(): LeaseTable {
    let stamp: string;
    try {
      const st = statSync(this.file);
      stamp = `${st.size}:${st.mtimeMs}`;
      if (st.size > MAX_LEASE_FILE_BYTES) stamp = 'too-large';
    } catch {
      stamp = 'missing';
    }
    // Re-parse on change, and at least every 10 s for leases that expired without a file write.
    if (stamp === this.seen && this.now() - this.parsedAt < 10_000) return this.table;
    let text = '';
    if (stamp !== 'missing' && stamp !== 'too-large') {
      try {
        text = readFileSync(this.file, 'utf8');
      } catch {
        text = '';
      }
    }
    this.table = parseDnsmasqLeases(text, Math.floor(this.now() / 1000));
    this.seen = stamp;
    this.parsedAt = this.now();
    return this.table;
  }

  macOf(address: string): string | undefined {
    return this.current().byAddress.get(address);
  }

  addressesOf(mac: string): string[] {
    return this.current().byMac.get(mac.toLowerCase()) ?? [];
  }
}

/** Parses `/proc/net/arp`: complete entries only (flag ATF_COM 0x2), no all-zero MACs. */
export function parseProcNetArp(text: string): LeaseTable {
  const byAddress = new Map<string, string>();
  const byMac = new Map<string, string[]>();
  for (const line of text.split('\n').slice(1)) {
    const [ip, , flags, rawMac] = line.trim().split(/\s+/);
    const mac = canonicalMac(rawMac);
    if (!ip || !mac || mac === '00:00:00:00:00:00' || (Number(flags) & 0x2) === 0) continue;
    byAddress.set(ip, mac);
    byMac.set(mac, [...(byMac.get(mac) ?? []), ip]);
  }
  return { byAddress, byMac };
}

/**
 * The boot server's IPv4 neighbour table (`/proc/net/arp` of its network namespace), read at most
 * once a second (every 100 ms for an address not in it). Useful only where the boot server shares
 * the L2 segment with the hosts.
 */
export class NeighbourTable implements AddressMacSource {
  readonly name: string;
  private table: LeaseTable = { byAddress: new Map(), byMac: new Map() };
  private readAt = -Infinity;

  constructor(
    private readonly file = '/proc/net/arp',
    private readonly now: () => number = Date.now,
  ) {
    this.name = `neighbours:${file}`;
  }

  private current(maxAgeMs = 1000): LeaseTable {
    if (this.now() - this.readAt < maxAgeMs) return this.table;
    let text = '';
    try {
      text = readFileSync(this.file, 'utf8');
    } catch {
      text = '';
    }
    this.table = parseProcNetArp(text);
    this.readAt = this.now();
    return this.table;
  }

  macOf(address: string): string | undefined {
    // The kernel resolves a new client while answering its TCP handshake: a miss in a table read
    // before that is read again (at most every 100 ms).
    return this.current().byAddress.get(address) ?? this.current(100).byAddress.get(address);
  }

  addressesOf(mac: string): string[] {
    return this.current().byMac.get(mac.toLowerCase()) ?? [];
  }
}

/** The first source that knows an address answers; addresses of a MAC are the union. */
export class ChainedSource implements AddressMacSource {
  readonly name: string;
  constructor(private readonly sources: AddressMacSource[]) {
    this.name = sources.map((s) => s.name).join(',');
  }
  macOf(address: string): string | undefined {
    for (const s of this.sources) {
      const mac = s.macOf(address);
      if (mac) return mac;
    }
    return undefined;
  }
  addressesOf(mac: string): string[] {
    return [...new Set(this.sources.flatMap((s) => s.addressesOf(mac)))];
  }
}

/**
 * Parses `--client-mac-source`: comma-separated `dnsmasq-leases=<file>` and `neighbours[=<file>]`;
 * `none` or empty → `undefined`. Throws `Error` naming the bad entry.
 */
export function parseAddressSource(spec: string | undefined): AddressMacSource | undefined {
  if (!spec || spec === 'none') return undefined;
  const sources = spec.split(',').map((part): AddressMacSource => {
    const [kind, file] = part.split(/=(.*)/s) as [string, string | undefined];
    if (kind === 'dnsmasq-leases' && file) return new DnsmasqLeases(file);
    if (kind === 'neighbours') return new NeighbourTable(file || undefined);
    throw new Error(`--client-mac-source: ${part} is not dnsmasq-leases=<file> or neighbours[=<file>]`);
  });
  return sources.length === 1 ? sources[0] : new ChainedSource(sources);
}
