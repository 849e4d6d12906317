/**
 * Records that a host reached its Server through the byte-swapped UUID alias (fields 1–3
 * byte-reversed, SMBIOS ≥ 2.6 little-endian; see src/api/system-uuid.ts), so operators can see which
 * form the host reports and fix their inventory:
 * - `Server.status.smbiosUUIDAlias` = the host's form (JSON patch of the status subresource);
 * - a Warning Event `SystemUUIDByteSwapped` on the Server, once per recorded change.
 *
 * Called from the signal servers' hot path once a request through the alias is authenticated (its
 * callback token verified: BootTargetResolver.authenticate; nothing unauthenticated writes the
 * Server), so it never blocks an answer: the write runs in the
 * background, one at a time per Server and form, and is skipped when the Server (as cached) or this
 * process (recently) already recorded that form. A failed write is logged and tried again by the next
 * request through the alias; the request itself is served either way.
 */
import type { Logger } from 'pino';
import type { Server } from '../api/v1alpha1/server.js';
import { EventReason } from '../api/vocabulary.js';
import type { KubeClient } from '../runtime/client.js';
import type { EventRecorder } from '../runtime/events.js';
import { Resources } from '../runtime/resource.js';

/** Reason of the Event recorded on a Server matched through its byte-swapped UUID. */
export const SYSTEM_UUID_BYTE_SWAPPED_REASON = EventReason.SystemUUIDByteSwapped;
/** Forms remembered as recorded (the cache may lag the write); oldest forgotten first. */
const RECENT_LIMIT = 4096;

export class UUIDAliasRecorder {
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly recent = new Set<string>();

  constructor(
    private readonly client: KubeClient,
    private readonly events: EventRecorder | undefined,
    private readonly log: Logger | undefined,
  ) {}

  /** Starts recording that `server` was reached as `hostUUID` (canonical form), unless already recorded. */
  note(server: Server, hostUUID: string): void {
    if (server.status?.smbiosUUIDAlias === hostUUID) return;
    const key = `${server.metadata.uid ?? server.metadata.name}/${hostUUID}`;
    if (this.recent.has(key) || this.inFlight.has(key)) return;
    const p = this.record(server, hostUUID, key).finally(() => this.inFlight.delete(key));
    this.inFlight.set(key, p);
  }

  /** Resolves once every write started so far has settled (shutdown, tests). */
  async settled(): Promise<void> {
    await Promise.all([...this.inFlight.values()]);
  }

  private async record(server: Server, hostUUID: string, key: string): Promise<void> {
    const name = server.metadata.name ?? '';
    const ops = server.status
      ? [{ op: 'add', path: '/status/smbiosUUIDAlias', value: hostUUID }]
      : [{ op: 'add', path: '/status', value: { smbiosUUIDAlias: hostUUID } }];
    try {
      await this.client.jsonPatch(Resources.Server, name, undefined, ops, { subresource: 'status' });
    } catch (err) {
      this.log?.warn(
        { server: name, systemUUID: server.spec.systemUUID, hostUUID, err: String(err) },
        'could not record the byte-swapped system UUID; the next request through it tries again',
      );
      return;
    }
    this.recent.add(key);
    if (this.recent.size > RECENT_LIMIT) this.recent.delete(this.recent.values().next().value!);
    this.log?.warn(
      { server: name, systemUUID: server.spec.systemUUID, hostUUID },
      'host reports its system UUID with fields 1-3 byte-reversed; matched through the alias',
    );
    this.events?.record(
      Resources.Server,
      server,
      'Warning',
      SYSTEM_UUID_BYTE_SWAPPED_REASON,
      `the host reports system UUID ${hostUUID}: spec.systemUUID ${server.spec.systemUUID} with fields 1-3 byte-reversed (SMBIOS >= 2.6 stores them little-endian); matched through that alias and recorded in status.smbiosUUIDAlias`,
    );
  }
}
