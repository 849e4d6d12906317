/**
 * The state one virtual BMC holds while it serves, shared by its route handlers: the service
 * profile and faults, the systems (by Redfish Id, case-insensitive), the login sessions, the
 * AccountService and, once it listens, the SSH console. Throws at construction when two hosts share
 * a UUID; {@link BmcState.systemOr404} refuses an unknown system with 404.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { type AccountPolicy, AccountService } from '../accounts.js';
import type { ConsoleServer } from '../console.js';
import type { FaultState } from '../faults.js';
import type { Host } from '../host.js';
import type { ServiceProfile } from '../profile.js';
import { VirtualSystem } from '../system.js';
import { fail } from './reply.js';

/** One login session (SessionService), keyed by its token in {@link BmcState.sessions}. */
export interface SessionEntry {
  id: string;
  user: string;
  /** Last request made with the token, ms since the epoch (for the profile's session timeout). */
  lastUsed: number;
}

export interface BmcStateOptions {
  log: Logger;
  profile: ServiceProfile;
  faults: FaultState;
  hosts: Host[];
  /** The first account (Administrator). */
  username: string;
  password: string;
  accounts?: Partial<AccountPolicy>;
}

export class BmcState {
  readonly log: Logger;
  readonly profile: ServiceProfile;
  readonly faults: FaultState;
  readonly serviceUuid = randomUUID();
  readonly systems: VirtualSystem[];
  /** token → session */
  readonly sessions = new Map<string, SessionEntry>();
  readonly accounts: AccountService;
  /** Set once the Redfish service listens; the documents read it when they are served. */
  consoleServer: ConsoleServer | undefined;
  private readonly byId = new Map<string, VirtualSystem>();

  constructor(o: BmcStateOptions) {
    const { log, profile } = o;
    this.log = log;
    this.profile = profile;
    this.faults = o.faults;
    this.systems = o.hosts.map(
      (h, i) =>
        new VirtualSystem(h, log, {
          ...(profile.tree ? { id: treeSystemId(profile.tree.get(profile.tree.systemUri)?.['Id'], i) } : {}),
          initialBoot: profile.initialBoot,
          etagFormat: profile.etagFormat,
          postWindowMs: profile.postWindowMs,
        }),
    );
    for (const s of this.systems) {
      if (this.byId.has(s.id.toLowerCase())) throw new Error(`two hosts share the UUID ${s.id}`);
      this.byId.set(s.id.toLowerCase(), s);
    }
    this.accounts = new AccountService(
      { userName: o.username, password: o.password },
      o.accounts,
      Date.now,
      // A changed password, a disabled or deleted account ends that account's sessions.
      (user) => {
        for (const [token, s] of this.sessions) if (s.user === user) this.sessions.delete(token);
      },
    );
  }

  /** The system with Redfish Id `id` (case-insensitive), if any. */
  system(id: string): VirtualSystem | undefined {
    return this.byId.get(id.toLowerCase());
  }

  /** The system with Redfish Id `id`; 404 `ResourceMissingAtURI` when there is none. */
  systemOr404(id: string): VirtualSystem {
    return this.system(id) ?? fail(404, 'ResourceMissingAtURI', `no system ${id}`);
  }

  /** Where `sys`'s serial console is reached (SSH port, entry command); undefined without a console. */
  consoleOf(sys: VirtualSystem): { port: number; command: string } | undefined {
    const c = this.consoleServer;
    return c && { port: c.port, command: c.entryCommand(this.systems.indexOf(sys)) };
  }

  /** The `ETag` header of `sys`, when the profile sends ETags. */
  etagHeader(sys: VirtualSystem): Record<string, string> {
    return this.profile.etags ? { etag: sys.etag } : {};
  }
}

/**
 * Redfish `Id` of system `index` in a captured tree: the captured Id for the first, then the same Id
 * with its trailing number counted up (`System.Embedded.1`, `System.Embedded.2`, ...; `1`, `2`, ...).
 */
function treeSystemId(capturedId: unknown, index: number): string {
  const id = typeof capturedId === 'string' && capturedId !== '' ? capturedId : 'System';
  if (index === 0) return id;
  const m = /^(.*?)(\d+)$/.exec(id);
  return m ? `${m[1]}${Number(m[2]) + index}` : `${id}-${index + 1}`;
}
