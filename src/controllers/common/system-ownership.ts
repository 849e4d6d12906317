/**
 * Who owns a system UUID: pure functions over Servers, used by the BMC controller (never create a
 * Server for a UUID another Server holds), the Server controller (never drive a Server whose UUID
 * another Server owns) and claim selection (never bind one).
 *
 * Why: the boot signals map a UUID to exactly one Server, and the BMC of a Server is trusted only
 * for the systems it really has. A second BMC object for an already registered BMC, or a BMC
 * reporting another BMC's UUIDs (issue 15, S14), would otherwise produce a second Server per UUID,
 * drive it (discovery power-cycles the victim's machine) and make every callback of the victim
 * ambiguous (409). The rule: the oldest Server (creationTimestamp, then name) owns the UUID; every
 * other Server with it is a duplicate, gets the condition {@link DUPLICATE_SYSTEM_UUID} and is left
 * alone until the owner is gone.
 */
import { canonicalSystemUUID } from '../../api/system-uuid.js';
import type { Server } from '../../api/v1alpha1/server.js';
import { BmcReason, ConditionType, DuplicateReason } from '../../api/vocabulary.js';

/** Condition type (on BMCs and Servers), condition reason and Event reason of a duplicated UUID. */
export const DUPLICATE_SYSTEM_UUID = ConditionType.DuplicateSystemUUID;
/** `DuplicateSystemUUID=False` reason when no UUID of the object is held by another Server. */
export const NO_DUPLICATE_SYSTEM_UUID = DuplicateReason.SystemUUIDsUnique;
/** `SystemsDiscovered=False` reason and Event reason: the BMC lists more systems than `--bmc-max-systems`. */
export const SYSTEM_LIMIT_EXCEEDED = BmcReason.SystemLimitExceeded;
/** Default of `--bmc-max-systems`: a chassis manager has tens of blades; the sim fleet bench puts 1000 behind one. */
export const DEFAULT_MAX_SYSTEMS_PER_BMC = 1024;

/** Oldest first (creationTimestamp, then name): the first one owns the UUID. */
function byAge(a: Server, b: Server): number {
  const ta = Date.parse(a.metadata.creationTimestamp ?? '') || 0;
  const tb = Date.parse(b.metadata.creationTimestamp ?? '') || 0;
  return ta - tb || (a.metadata.name ?? '').localeCompare(b.metadata.name ?? '');
}

/** The owner among Servers that carry one UUID (deleted-in-progress ones never own), or undefined. */
export function uuidOwner(sameUuid: readonly Server[]): Server | undefined {
  return [...sameUuid].filter((s) => !s.metadata.deletionTimestamp).sort(byAge)[0];
}

/**
 * The Server that owns `server`'s UUID when that is another Server, else undefined.
 * `sameUuid`: every Server with the same canonical UUID (may include `server` itself).
 */
export function ownedElsewhere(server: Server, sameUuid: readonly Server[]): Server | undefined {
  const uuid = canonicalSystemUUID(server.spec.systemUUID);
  const rivals = sameUuid.filter((s) => canonicalSystemUUID(s.spec.systemUUID) === uuid);
  const owner = uuidOwner([...rivals.filter((s) => s.metadata.name !== server.metadata.name), server]);
  return owner && owner.metadata.name !== server.metadata.name ? owner : undefined;
}

/** `Server X (BMC Y)` for messages. */
export function describeOwner(owner: Server): string {
  const bmc = owner.spec.bmcRef?.name ?? owner.spec.bmc?.address;
  return `Server ${owner.metadata.name}${bmc ? ` (BMC ${bmc})` : ''}`;
}

/** Every Server of `servers` whose UUID another of them owns, by name, with that owner. */
export function duplicatesIn(servers: readonly Server[]): Map<string, Server> {
  const byUuid = new Map<string, Server[]>();
  for (const s of servers) {
    const uuid = canonicalSystemUUID(s.spec.systemUUID);
    if (uuid) byUuid.set(uuid, [...(byUuid.get(uuid) ?? []), s]);
  }
  const out = new Map<string, Server>();
  for (const group of byUuid.values()) {
    if (group.length < 2) continue;
    const owner = uuidOwner(group);
    for (const s of group) if (owner && s !== owner) out.set(s.metadata.name ?? '', owner);
  }
  return out;
}
