/**
 * The life of a standalone signal server process (registry or boot server): optional
 * `/healthz`, `/readyz`, `/metrics` on `metricsAddr`, a clean stop on SIGTERM/SIGINT, and the
 * optional HTTPS certificate (`--tls-cert-file`, `--tls-key-file`).
 */
import { readFileSync } from 'node:fs';
import { collectDefaultMetrics } from 'prom-client';
import { startHealthServer } from '../runtime/health.js';
import { splitAddr } from './listen-address.js';
import type { SignalStack } from './signal-stack.js';

/** Serves health and metrics (when `metricsAddr` is set) until SIGTERM/SIGINT, then closes and exits 0. */
export async function serveUntilSignal(stack: SignalStack, metricsAddr: string | undefined): Promise<void> {
  // The process's own figures (RSS, heap, GC, event-loop lag) beside the server's.
  collectDefaultMetrics({ register: stack.metrics });
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

/**
 * The PEM certificate and key named by `--tls-cert-file` / `--tls-key-file`, read once at start;
 * undefined when neither is set. Exits with status 1 and a message when only one is set.
 */
export function tlsFiles(o: {
  tlsCertFile?: string;
  tlsKeyFile?: string;
}): { cert: Buffer; key: Buffer } | undefined {
  if (!o.tlsCertFile && !o.tlsKeyFile) return undefined;
  if (!o.tlsCertFile || !o.tlsKeyFile) {
    process.stderr.write('error: --tls-cert-file and --tls-key-file go together\n');
    process.exit(1);
  }
  return { cert: readFileSync(o.tlsCertFile), key: readFileSync(o.tlsKeyFile) };
}
