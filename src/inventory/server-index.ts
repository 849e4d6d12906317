/**
 * How the manager's and the signal servers' Server caches are shaped: indexed by canonical system
 * UUID ({@link SERVER_UUID_INDEX}, two index reads per lookup, never a scan) and stored without
 * `managedFields` and with the registration payload as its projection (registration-cache.ts), so
 * a fleet's cache costs what the decisions read. Pure functions; the informers live with whoever
 * starts them (controllers/setup.ts, cmd/signal-stack.ts).
 */
import { canonicalSystemUUID } from '../api/system-uuid.js';
import type { Server } from '../api/v1alpha1/server.js';
import { stripManagedFields } from '../runtime/informer.js';
import { slimRegistration } from './registration-cache.js';

/** Informer index of Servers by canonical `spec.systemUUID`. */
export const SERVER_UUID_INDEX = 'systemUUID';

/** Indexer for {@link SERVER_UUID_INDEX}; register it on the Server informer. */
export function serverUUIDIndexer(server: Server): string[] {
  const uuid = canonicalSystemUUID(server.spec?.systemUUID);
  return uuid ? [uuid] : [];
}

/**
 * Informer transform for Servers, shared by the manager's and the signal servers' caches: no
 * `managedFields`, and the registration payload as its projection (see registration-cache.ts).
 */
export function cachedServer(server: Server): Server {
  return slimRegistration(stripManagedFields(server));
}
