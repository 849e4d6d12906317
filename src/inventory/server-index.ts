/**
 * How the manager's and the signal servers' Server caches are shaped: indexed by canonical system
 * UUID ({@link SERVER_UUID_INDEX}, two index reads per lookup, never a scan) and stored without
 * `managedFields`, so a fleet's cache costs what the decisions read. The registration payload is
 * not on the Server (inventory/registration-record.ts); a record of an earlier release that still
 * carries it (`status.registration.data`) is cached as its hardware mapping instead. Pure
 * functions; the informers live with whoever starts them (controllers/setup.ts, cmd/signal-stack.ts).
 */
import { canonicalSystemUUID } from '../api/system-uuid.js';
import type { Server } from '../api/v1alpha1/server.js';
import { stripManagedFields } from '../runtime/informer.js';
import { hardwareFromRegistration } from './registration-hardware.js';
import { registrationRecord } from './registration-record.js';

/** Informer index of Servers by canonical `spec.systemUUID`. */
export const SERVER_UUID_INDEX = 'systemUUID';

/** Indexer for {@link SERVER_UUID_INDEX}; register it on the Server informer. */
export function serverUUIDIndexer(server: Server): string[] {
  const uuid = canonicalSystemUUID(server.spec?.systemUUID);
  return uuid ? [uuid] : [];
}

/**
 * Informer transform for Servers, shared by the manager's and the signal servers' caches: no
 * `managedFields`; a legacy payload in the record replaced by its hardware mapping (the cache must
 * not hold kilobytes per Server; `GET /systems` reads a legacy payload from the API server).
 * Modifies and returns its argument. A cached Server is never written back whole.
 */
export function cachedServer(server: Server): Server {
  const s = stripManagedFields(server);
  const record = registrationRecord(s);
  if (record?.data !== undefined) {
    if (!record.hardware) record.hardware = hardwareFromRegistration(record.data);
    delete record.data;
  }
  return s;
}
