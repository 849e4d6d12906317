/**
 * Servers whose system UUID another Server owns (see system-ownership.ts for the rule): the
 * informer lookup shared by the Server controller, power actions and claim selection, and the
 * `DuplicateSystemUUID` condition + Warning Event that tell the operator why such a Server is left
 * alone. Such Servers exist only when made by hand or by an operator version without this check:
 * the BMC controller never creates one.
 */
import type pino from 'pino';
import { canonicalSystemUUID } from '../../api/system-uuid.js';
import type { Server } from '../../api/v1alpha1/server.js';
import { SERVER_UUID_INDEX } from '../../inventory/server-index.js';
import type { KubeClient } from '../../runtime/client.js';
import { findCondition } from '../../runtime/conditions.js';
import type { EventRecorder } from '../../runtime/events.js';
import type { Informer } from '../../runtime/informer.js';
import { Resources } from '../../runtime/resource.js';
import { applyOwnedCondition } from '../common/owned-conditions.js';
import {
  DUPLICATE_SYSTEM_UUID,
  describeOwner,
  NO_DUPLICATE_SYSTEM_UUID,
  ownedElsewhere,
} from '../common/system-ownership.js';

export class DuplicateServers {
  constructor(
    private readonly o: {
      client: KubeClient;
      /** Must carry the {@link SERVER_UUID_INDEX} index. */
      servers: Informer<Server>;
      events: EventRecorder;
      log: pino.Logger;
    },
  ) {}

  /** Every cached Server with `server`'s canonical UUID (itself included when cached). */
  sameUuid(server: Server): Server[] {
    const uuid = canonicalSystemUUID(server.spec?.systemUUID);
    return uuid ? this.o.servers.byIndex(SERVER_UUID_INDEX, uuid) : [];
  }

  /**
   * The other Servers whose ownership of a UUID may have changed with this informer event, so their
   * `DuplicateSystemUUID` condition is decided again now rather than at their next resync: on
   * delete, those sharing the gone Server's UUID; on an update that changed `spec.systemUUID`, those
   * sharing the old UUID (one may own it now) and those sharing the new one (an older Server moving
   * in takes it over); on an update that set `deletionTimestamp`, those sharing its UUID (a Server
   * being deleted never owns).
   */
  rivalsAffected(obj: Server, old: Server | undefined, deleted: boolean): Server[] {
    const uuid = canonicalSystemUUID(obj.spec?.systemUUID);
    const oldUuid = old ? canonicalSystemUUID(old.spec?.systemUUID) : uuid;
    const affected: Server[] = [];
    const deleting = deleted || (!!obj.metadata.deletionTimestamp && !old?.metadata.deletionTimestamp);
    if (deleting || oldUuid !== uuid) affected.push(...this.sameUuid(obj));
    if (old && oldUuid !== uuid) affected.push(...this.sameUuid(old));
    return affected.filter((s) => s.metadata.name !== obj.metadata.name);
  }

  /** The other Server that owns `server`'s UUID, or undefined when `server` is the owner (or alone). */
  ownerOf(server: Server): Server | undefined {
    return ownedElsewhere(server, this.sameUuid(server));
  }

  /**
   * For the Server controller: records `DuplicateSystemUUID` (True with the owner's name, or False
   * once it is gone) and resolves true when `server` must be left alone. The Warning Event and the
   * log line come once per change of the condition. API errors propagate.
   */
  async check(server: Server): Promise<boolean> {
    const owner = this.ownerOf(server);
    const had = findCondition(server.status?.conditions, DUPLICATE_SYSTEM_UUID);
    if (!owner) {
      if (had?.status === 'True') {
        await applyOwnedCondition(this.o.client, Resources.Server, server, {
          type: DUPLICATE_SYSTEM_UUID,
          status: 'False',
          reason: NO_DUPLICATE_SYSTEM_UUID,
          message: 'no other Server holds this system UUID',
        });
      }
      return false;
    }
    const message = `system UUID ${server.spec.systemUUID} is held by ${describeOwner(owner)}: this Server is neither discovered, powered nor claimable while that Server exists`;
    const changed = await applyOwnedCondition(this.o.client, Resources.Server, server, {
      type: DUPLICATE_SYSTEM_UUID,
      status: 'True',
      reason: DUPLICATE_SYSTEM_UUID,
      message,
    });
    if (changed) {
      this.o.log.warn(
        { name: server.metadata.name, systemUUID: server.spec.systemUUID, owner: owner.metadata.name },
        'duplicate system UUID: Server left alone',
      );
      this.o.events.record(Resources.Server, server, 'Warning', DUPLICATE_SYSTEM_UUID, message);
    }
    return true;
  }
}
