/**
 * Start-up check of `--manager-namespace`: the manager keeps its Lease and the discovery and
 * cleanup boot configurations there, so a namespace that does not exist would stall discovery
 * with 404s seen only in the log. Checked once, before the controllers start.
 */
import type pino from 'pino';
import { isApiStatus, type KubeClient } from '../runtime/client.js';
import { Resources } from '../runtime/resource.js';

/** Thrown by {@link assertManagerNamespace} when the namespace does not exist. */
export class ManagerNamespaceError extends Error {
  constructor(readonly namespace: string) {
    super(
      `--manager-namespace ${namespace}: namespace not found; create it (config/default makes metal-system) or pass --manager-namespace=<namespace>`,
    );
    this.name = 'ManagerNamespaceError';
  }
}

/**
 * Asks the API server to admit an Event in `namespace` as a dry run (`dryRun=All`: validated,
 * nothing stored; the manager may create Events everywhere, so no extra RBAC): 404 means the
 * namespace does not exist and throws {@link ManagerNamespaceError}. Any other failure (API
 * server not reachable yet) is logged and start-up goes on: the informers retry on their own.
 */
export async function assertManagerNamespace(
  client: KubeClient,
  namespace: string,
  log: pino.Logger,
): Promise<void> {
  try {
    await client.create(
      Resources.Event,
      {
        metadata: { generateName: 'metal-operator-startup-', namespace },
        involvedObject: { apiVersion: 'v1', kind: 'ConfigMap', name: 'metal-operator-startup', namespace },
        reason: 'StartupCheck',
        message: 'dry run: does --manager-namespace exist',
        type: 'Normal',
      },
      { dryRun: true },
    );
  } catch (err) {
    if (isApiStatus(err, 404)) throw new ManagerNamespaceError(namespace);
    log.warn({ err, namespace }, 'could not check --manager-namespace at start; continuing');
  }
}
