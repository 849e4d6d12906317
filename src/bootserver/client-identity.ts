/**
 * Who is asking for a server's boot file? Firmware cannot authenticate, so the boot server tells a
 * Server's own fetch (iPXE script, UEFI HTTP-boot UKI) from someone else's by the client address
 * (issue 13 item 4; ironcore's boot-operator identifies HTTP-boot clients by address the same way).
 *
 * What is known about a Server's addresses: `status.networkInterfaces[].ips` (and legacy `ip`),
 * mapped from its probe registration. They are *usable* for identification when
 * - the registration was not seen from elsewhere: `status.registration.clientAddress` (the source
 *   address the registry saw) is absent or one of them. A registration that arrived from another
 *   address proves a NAT between host and signal servers (QEMU user networking: guests say
 *   10.0.2.15 and arrive as 127.0.0.1; simulated hosts: fake 10.x addresses, arriving as 127.0.0.1),
 *   so the reported addresses are never what the boot server sees;
 * - they are the Server's alone: an address that several Servers report (every QEMU user-network
 *   guest is 10.0.2.15) identifies none of them.
 *
 * {@link ClientIdentity.check} decides, for a request for Server S from address C:
 * - C is a usable address of S → identified;
 * - C is a usable address of another Server → 403 `UnknownClient` (a host fetching another's file);
 * - S has usable addresses and C is not one of them → 403 `UnknownClient`;
 * - nothing usable is known about S (no addresses yet — first discovery —, only shared ones, or a
 *   NAT) → not identified: the caller relies on the first-address pin (attempt-pin.ts), and a
 *   debug line says why.
 * Mode `first-address` skips all of it (the pin alone). Lookups go through the Server informer's
 * {@link SERVER_ADDRESS_INDEX}, never a scan.
 *
 * Before any of that, when an {@link AddressMacSource} is configured (`--client-mac-source`; issue 28)
 * and S's BMC reports NICs (`status.bmcNetworkInterfaces`), the machine is identified by MAC, looked
 * up now (nothing from discovery is trusted for ever):
 * - the source maps C to a MAC of S → identified (also when C was never registered: the address
 *   changed between attempts);
 * - the source maps C to another MAC → 403 `UnknownClient` when that MAC is another Server's, else
 *   403 `MACMismatch` (a re-leased address, or a host that registered someone else's address);
 * - the source knows no MAC for C but knows addresses of S's MACs → 403 `UnknownClient`;
 * - the source knows neither (a NAT, a host outside the source's view) → the address rules above,
 *   with a debug line saying so.
 */
import type { Logger } from 'pino';
import type { Server } from '../api/v1alpha1/server.js';
import { clientAddress } from '../bootsignals/client-address.js';
import { HttpError } from '../bootsignals/http-error.js';
import { bmcMacs } from '../inventory/machine-identity.js';
import type { Informer } from '../runtime/informer.js';
import type { AddressMacSource } from './address-source.js';

/** How boot files are tied to clients: by known address (else the pin), or by the pin alone. */
export type ClientIdentityMode = 'known-address' | 'first-address';

/** Informer index of Servers by every address they report (see {@link knownAddresses}). */
export const SERVER_ADDRESS_INDEX = 'networkAddress';

/** The addresses a Server reports: every `ips` entry (and legacy `ip`) of its NICs. */
export function knownAddresses(server: Server): string[] {
  const out = new Set<string>();
  for (const nic of server.status?.networkInterfaces ?? []) {
    for (const ip of nic.ips ?? []) out.add(ip);
    if (nic.ip) out.add(nic.ip);
  }
  return [...out];
}

/** Informer index of Servers by the MACs their BMC reports. */
export const SERVER_BMC_MAC_INDEX = 'bmcMac';

/** Indexer for {@link SERVER_BMC_MAC_INDEX}. */
export function serverBmcMacIndexer(server: Server): string[] {
  return [...(bmcMacs(server) ?? [])];
}

/** Indexer for {@link SERVER_ADDRESS_INDEX}; register it on the Server informer. */
export function serverAddressIndexer(server: Server): string[] {
  return knownAddresses(server);
}

/**
 * The Server's addresses that may identify it, or why there are none: `[]` with `natFrom` set when
 * its registration came from an address it does not report.
 */
export function usableAddresses(server: Server): { addresses: string[]; natFrom?: string } {
  const known = knownAddresses(server);
  const seen = server.status?.registration?.clientAddress;
  if (seen && known.length > 0 && !known.includes(clientAddress(seen)))
    return { addresses: [], natFrom: seen };
  return { addresses: known };
}

/** Outcome of {@link ClientIdentity.check} when it does not refuse. */
export type IdentityVerdict = 'identified' | 'unidentified';

export class ClientIdentity {
  constructor(
    private readonly servers: Informer<Server>,
    private readonly mode: ClientIdentityMode = 'known-address',
    /** Address → MAC of the boot network (issue 28); `undefined`: addresses alone. */
    readonly source?: AddressMacSource,
  ) {
    servers.addIndexers({
      [SERVER_ADDRESS_INDEX]: serverAddressIndexer,
      [SERVER_BMC_MAC_INDEX]: serverBmcMacIndexer,
    });
  }

  /**
   * The MAC rule (file comment): `identified`, a throw, or `undefined` when the source knows nothing
   * of client and server (the address rules decide).
   */
  private byMac(server: Server, client: string, log: Logger, what: string): IdentityVerdict | undefined {
    const macs = bmcMacs(server);
    if (!this.source || !macs) return undefined;
    const mac = this.source.macOf(client);
    if (mac && macs.has(mac)) return 'identified';
    if (mac) {
      const others = this.servers
        .byIndex(SERVER_BMC_MAC_INDEX, mac)
        .filter((s) => s.metadata.name !== server.metadata.name);
      log.warn(
        { clientMac: mac, macOf: others.map((s) => s.metadata.name), source: this.source.name },
        `${what} requested from an address the boot network gives another NIC; refused`,
      );
      if (others.length > 0)
        throw new HttpError(
          403,
          'UnknownClient',
          `the request comes from ${client} (${mac}), a NIC of another server`,
        );
      throw new HttpError(
        403,
        'MACMismatch',
        `the request comes from ${client}, which the boot network gives ${mac}, not a NIC of this server`,
      );
    }
    const leased = [...macs].flatMap((m) => this.source!.addressesOf(m));
    if (leased.length > 0) {
      log.warn(
        { leased, source: this.source.name },
        `${what} requested from an address the server's NICs do not have; refused`,
      );
      throw new HttpError(
        403,
        'UnknownClient',
        `the request comes from ${client}; the boot network gives this server's NICs ${leased.slice(0, 4).join(', ')}`,
      );
    }
    log.debug(
      { source: this.source.name },
      `${what}: ${client} and the server's MACs unknown to the address source`,
    );
    return undefined;
  }

  /** Other Servers (not `server`) for which `address` is a usable address. */
  private owners(server: Server, address: string): Server[] {
    return this.servers
      .byIndex(SERVER_ADDRESS_INDEX, address)
      .filter(
        (s) => s.metadata.name !== server.metadata.name && usableAddresses(s).addresses.includes(address),
      );
  }

  /**
   * Decides whether `rawClient` (the socket's remote address) may fetch `server`'s boot file (see the
   * file comment). Throws `HttpError` 403 `UnknownClient` or `MACMismatch` (logged at warn) when it
   * may not; otherwise says whether the client was identified by address (`unidentified`: only the
   * first-address pin protects the file; logged at debug with the reason).
   */
  check(server: Server, rawClient: string | undefined, log: Logger, what: string): IdentityVerdict {
    if (this.mode === 'first-address') return 'unidentified';
    const client = clientAddress(rawClient);
    const byMac = this.byMac(server, client, log, what);
    if (byMac) return byMac;
    const { addresses, natFrom } = usableAddresses(server);
    const own = addresses.filter((a) => this.owners(server, a).length === 0);
    if (own.includes(client)) return 'identified';
    const others = addresses.includes(client) ? [] : this.owners(server, client);
    if (others.length > 0) {
      log.warn(
        { addressOf: others.map((s) => s.metadata.name) },
        `${what} requested from an address of another server; refused`,
      );
      throw new HttpError(403, 'UnknownClient', 'the request comes from an address of another server');
    }
    if (own.length > 0) {
      log.warn({ known: own }, `${what} requested from an address the server does not have; refused`);
      throw new HttpError(403, 'UnknownClient', 'the request does not come from an address of this server');
    }
    const why = natFrom
      ? `its registration came from ${natFrom}, not from an address it reports (NAT)`
      : addresses.length > 0
        ? 'its addresses are shared with other servers'
        : 'no addresses known yet';
    log.debug(
      { known: addresses },
      `${what}: client not identifiable by address (${why}); first-address pin`,
    );
    return 'unidentified';
  }
}
