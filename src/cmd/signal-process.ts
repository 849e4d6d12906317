/**
 * The life of a standalone signal server process (registry or boot server): the flags both have
 * (`--metrics-addr`, `--kubeconfig`, `--callback-key-secret`, `--tls-cert-file`, `--tls-key-file`),
 * optional `/healthz`, `/readyz`, `/metrics` on `metricsAddr`, a clean stop on SIGTERM/SIGINT, and
 * the optional HTTPS certificate. Flag errors print one `error: ` line and exit with status 1.
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { collectDefaultMetrics } from 'prom-client';
import { CALLBACK_KEY_SECRET_NAME, parseSecretRef, type SecretRef } from '../bootauth/callback-key-secret.js';
import { startHealthServer } from '../runtime/health.js';
import { splitAddr } from './listen-address.js';
import type { SignalStack } from './signal-stack.js';

/** The flags {@link addSignalProcessOptions} adds, as commander names them. */
export interface SignalProcessFlags {
  metricsAddr?: string;
  kubeconfig?: string;
  callbackKeySecret: string;
  tlsCertFile?: string;
  tlsKeyFile?: string;
}

/** Adds the flags every signal server process has, in this `--help` order, to `cmd`. */
export function addSignalProcessOptions(cmd: Command): Command {
  return cmd
    .option('--metrics-addr <host:port>', 'serve /healthz, /readyz and /metrics here (off when unset)')
    .option('--kubeconfig <path>', 'kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster)')
    .option(
      '--callback-key-secret <namespace/name>',
      'Secret holding the callback key (created by the manager; this process only reads it)',
      `metal-system/${CALLBACK_KEY_SECRET_NAME}`,
    )
    .option(
      '--tls-cert-file <path>',
      'PEM certificate (chain): serve HTTPS (e.g. a mounted kubernetes.io/tls Secret)',
    )
    .option('--tls-key-file <path>', 'PEM private key of --tls-cert-file');
}

/** The callback key Secret of `--callback-key-secret`; exits with status 1 and a message when it is not namespace/name. */
export function callbackKeyRef(o: SignalProcessFlags): SecretRef {
  try {
    return parseSecretRef(o.callbackKeySecret);
  } catch (err) {
    process.stderr.write(`error: ${(err as Error).message}\n`);
    process.exit(1);
  }
}

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
