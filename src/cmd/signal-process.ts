/**
 * The life of a standalone signal server process (registry or boot server): optional
 * `/healthz`, `/readyz`, `/metrics` on `metricsAddr`, and a clean stop on SIGTERM/SIGINT.
 */
import type { SignalStack } from '../bootsignals/signal-stack.js';
import { startHealthServer } from '../runtime/health.js';
import { splitAddr } from './listen-address.js';

/** Serves health and metrics (when `metricsAddr` is set) until SIGTERM/SIGINT, then closes and exits 0. */
export async function serveUntilSignal(stack: SignalStack, metricsAddr: string | undefined): Promise<void> {
  const health = metricsAddr
    ? await startHealthServer({
        host: splitAddr(metricsAddr)[0],
        port: splitAddr(metricsAddr)[1],
        registry: stack.metrics,
        ready: () => true,
      })
    : undefined;
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.once(sig, () => {
      void Promise.all([stack.close(), health?.close()]).finally(() => process.exit(0));
    });
  }
}
