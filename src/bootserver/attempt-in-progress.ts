/**
 * "No boot configuration" confirmed against the API server before a host is sent to local boot.
 *
 * The boot server reads Servers and SBCs from informer caches. Under load those lag the
 * controllers: a host powered on for an attempt whose SBC is Ready can ask for its script before
 * the boot server's cache has that SBC (or the Server's `bootConfigurationRef`). Answering that
 * host with the local-boot script loses the attempt: it boots from disk (or nothing) and the
 * operator waits out the attempt's deadline (10 min for discovery). So when the cache shows no
 * boot configuration, the Server and its SBC are read live once; when the SBC is still not there
 * but the Server has an attempt in progress — its power-on is recorded (`poweredOnAt`) for an
 * attempt that has not ended, in `status.discovery` of the Server or `status.boot` of its claim —
 * the caller answers 503 with `Retry-After` (the firmware retries) instead of local boot.
 *
 * Concurrent requests for one Server share one live read ({@link SingleFlight}, paced to one per
 * second per Server), so polling cannot turn into API load. 503 `APIUnavailable` when the API
 * server cannot be read.
 */
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import { apiFailure } from '../bootsignals/boot-target.js';
import { SingleFlight } from '../bootsignals/single-flight.js';
import type { KubeClient } from '../runtime/client.js';
import { Resources } from '../runtime/resource.js';

/** Seconds a host is told to wait while its attempt's boot configuration is not visible yet. */
export const BOOT_CONFIGURATION_PENDING_RETRY_SECONDS = 2;

/** Attempt phases after which nothing is in progress (controllers/boot-attempt/phase.ts `AttemptPhase`). */
const ENDED_PHASES = new Set(['Completed', 'Exhausted']);

/** What the live read found: the SBC the Server names (if it exists), and whether an attempt is in progress. */
export interface LiveBootConfiguration {
  server: Server;
  sbc?: ServerBootConfiguration;
  attemptInProgress: boolean;
}

function inProgress(book: { poweredOnAt?: string; phase?: string } | undefined): boolean {
  return !!book?.poweredOnAt && !ENDED_PHASES.has(book.phase ?? '');
}

export class LiveBootConfigurationCheck {
  private readonly flights = new SingleFlight<LiveBootConfiguration>(1000);

  constructor(private readonly client: KubeClient) {}

  /** Live reads made (for tests and metrics). */
  get reads(): number {
    return this.flights.reads;
  }

  /**
   * Reads `cached`'s Server, the SBC its `spec.bootConfigurationRef` names and, when it has no SBC,
   * its claim. A Server deleted meanwhile yields `cached` with no attempt in progress. Throws
   * `HttpError` 503 when the API server is unavailable.
   */
  async read(cached: Server): Promise<LiveBootConfiguration> {
    const name = cached.metadata.name ?? '';
    const r = await this.flights.do(name, async () => {
      try {
        const server = (await this.client.get<Server>(Resources.Server, name)) ?? cached;
        const ref = server.spec.bootConfigurationRef;
        const sbc = ref
          ? await this.client.get<ServerBootConfiguration>(
              Resources.ServerBootConfiguration,
              ref.name,
              ref.namespace,
            )
          : undefined;
        if (sbc) return { server, sbc, attemptInProgress: true };
        if (inProgress(server.status?.discovery)) return { server, attemptInProgress: true };
        const claimRef = server.spec.serverClaimRef;
        const claim = claimRef?.name
          ? await this.client.get<ServerClaim>(Resources.ServerClaim, claimRef.name, claimRef.namespace)
          : undefined;
        return { server, attemptInProgress: inProgress(claim?.status?.boot) };
      } catch (err) {
        apiFailure(err, 'reading the boot configuration of the server');
      }
    });
    return r.value;
  }
}
