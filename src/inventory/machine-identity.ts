/**
 * The machine's identity on the boot network, from its BMC (issue 28): the NICs the BMC reports
 * (Redfish `ComputerSystem.EthernetInterfaces`) are what the host itself cannot make up, so they are
 * what a registration and a boot-file client are checked against. Pure decisions only; the server
 * controller reads the BMC and writes `status.bmcNetworkInterfaces` and the `MachineIdentity`
 * condition, the registry refuses registrations (src/registry/server.ts), the boot server maps
 * client addresses to MACs (src/bootserver/client-identity.ts).
 *
 * `status.bmcNetworkInterfaces` absent: never read (a Server discovered before this existed) — no
 * check, as before. Present and empty: the BMC reports no NIC — no check either, and the condition
 * says so (`NoBMCNICs`), so the fallback is visible.
 */
import type { Server } from '../api/v1alpha1/server.js';
import { ConditionType, MachineIdentityReason } from '../api/vocabulary.js';
import type { EthernetInterfaceInfo } from '../bmc/bmc.js';
import { canonicalMac } from '../bmc/parse.js';
import type { ConditionUpdate } from '../runtime/condition-writer.js';

/** One item of `status.bmcNetworkInterfaces` (shaped like upstream's `networkInterfaces` items). */
export interface BmcNetworkInterface {
  name: string;
  macAddress: string;
  carrierStatus?: string;
}

/** The status items for the NICs a BMC reported (name = Redfish Id, carrierStatus = LinkStatus). */
export function bmcNetworkInterfaces(nics: EthernetInterfaceInfo[]): BmcNetworkInterface[] {
  return nics.map((n) => ({
    name: n.id.slice(0, 128),
    macAddress: n.macAddress,
    ...(n.linkStatus ? { carrierStatus: n.linkStatus.slice(0, 32) } : {}),
  }));
}

/** The MACs the Server's BMC reports; `undefined` when they were never read or the BMC reports none. */
export function bmcMacs(server: Server): Set<string> | undefined {
  const nics = server.status?.bmcNetworkInterfaces;
  if (!nics || nics.length === 0) return undefined;
  return new Set(nics.map((n) => n.macAddress.toLowerCase()));
}

/** The `MachineIdentity` condition for what the BMC reported at discovery. */
export function nicInventoryCondition(nics: BmcNetworkInterface[]): ConditionUpdate {
  if (nics.length === 0) {
    return {
      type: ConditionType.MachineIdentity,
      status: 'False',
      reason: MachineIdentityReason.NoBMCNICs,
      message:
        "the BMC reports no Ethernet interface for this system: registrations are not checked against the machine's MACs and boot files are tied to the registered addresses, else to their first client",
    };
  }
  const macs = nics.map((n) => `${n.macAddress}${n.carrierStatus ? ` (${n.carrierStatus})` : ''}`);
  return {
    type: ConditionType.MachineIdentity,
    status: 'True',
    reason: MachineIdentityReason.BMCReportedNICs,
    message: `the BMC reports ${nics.length} NIC(s): ${macs.slice(0, 8).join(', ')}${nics.length > 8 ? ', ...' : ''}; registrations and boot-file clients are checked against these MACs`,
  };
}

/** Outcome of {@link checkRegistrationMacs}. */
export type RegistrationMacCheck =
  | { verdict: 'match'; macs: string[] }
  | { verdict: 'unchecked'; why: string }
  | { verdict: 'mismatch'; unknown: string[]; known: string[] };

/**
 * Whether a registration payload (`data.networkInterfaces[]` of upstream's metalprobe
 * `RegistrationPayload`) may be stored for `server`: every NIC that carries an address must have a
 * MAC the BMC reports (an address is stored only under a MAC the BMC vouches for; NICs without an
 * address identify nothing and are not checked, so a BMC that omits an unused port does not wedge
 * discovery). `unchecked` when the BMC's NICs are unknown or none.
 */
export function checkRegistrationMacs(server: Server, data: unknown): RegistrationMacCheck {
  const known = bmcMacs(server);
  if (!known) {
    return {
      verdict: 'unchecked',
      why:
        server.status?.bmcNetworkInterfaces === undefined
          ? "the BMC's NICs were not read"
          : 'the BMC reports no NIC',
    };
  }
  const d = typeof data === 'object' && data !== null ? (data as Record<string, unknown>) : {};
  const nics = Array.isArray(d.networkInterfaces) ? d.networkInterfaces : [];
  const unknown: string[] = [];
  const macs: string[] = [];
  for (const raw of nics) {
    if (typeof raw !== 'object' || raw === null) continue;
    const n = raw as Record<string, unknown>;
    const hasAddress = Array.isArray(n.ipAddresses) && n.ipAddresses.some((a) => typeof a === 'string');
    if (!hasAddress) continue;
    const mac = canonicalMac(n.macAddress);
    const shown = mac ?? String(n.macAddress ?? '(none)').slice(0, 40);
    if (mac && known.has(mac)) macs.push(mac);
    else unknown.push(shown);
  }
  if (unknown.length > 0) return { verdict: 'mismatch', unknown: unknown.slice(0, 8), known: [...known] };
  return { verdict: 'match', macs };
}

/** The `MachineIdentity` condition for a refused registration (no token, no payload in it). */
export function registrationRefusedCondition(
  check: Extract<RegistrationMacCheck, { verdict: 'mismatch' }>,
  from: string,
  at: string,
): ConditionUpdate {
  return {
    type: ConditionType.MachineIdentity,
    status: 'False',
    reason: MachineIdentityReason.RegistrationMACMismatch,
    message: `${at}: a registration from ${from} reported NIC(s) ${check.unknown.join(', ')} the BMC does not report (BMC: ${check.known.slice(0, 8).join(', ')}); refused (409), nothing stored`,
  };
}
