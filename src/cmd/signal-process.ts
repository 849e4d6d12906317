/**
 * The life of a standalone signal server process (registry or boot server): the flags both have
 * (`--metrics-addr`, `--kubeconfig`, `--callback-key-secret`, `--tls-cert-file`, `--tls-key-file`),
 * optional `/healthz`, `/readyz`, `/metrics` on `metricsAddr` from the start ({@link startProbes}),
 * a clean stop on SIGTERM/SIGINT, and
 * the optional HTTPS certificate. Flag errors print one `error: ` line and exit with status 1.
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { collectDefaultMetrics, Registry } from 'prom-client';
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

/**
 * The probe endpoints of a signal process, up before its stack starts: `/healthz` answers 200 from
 * the start (the process is alive while it waits for the callback key Secret, which the manager
 * creates, or for its first LISTs), `/readyz` 503 until {@link Probes.serving} got the stack, then 200;
 * `/metrics` serves {@link Probes.metrics}, the registry to hand to the stack. A kubelet that probed
 * `/healthz` only once the stack served would restart a process that is merely waiting (Kubernetes
 * probes: liveness restarts, readiness only takes the Pod out of its Service's endpoints).
 * Nothing listens when `metricsAddr` is unset. Rejects when the address is taken.
 */
export interface Probes {
  /** The registry `/metrics` serves: hand it to the stack (`SignalStackOptions.metrics`). */
  metrics: Registry;
  /** `/readyz` answers 200 from now on. */
  serving(stack: SignalStack): void;
  close(): Promise<void>;
}

/** Starts the {@link Probes} (see there); call it before anything the process waits for. */
export async function startProbes(metricsAddr: string | undefined): Promise<Probes> {
  const metrics = new Registry();
  // The process's own figures (RSS, heap, GC, event-loop lag) beside the server's.
  collectDefaultMetrics({ register: metrics });
  let stack: SignalStack | undefined;
  const health = metricsAddr
    ? await startHealthServer({
        host: splitAddr(metricsAddr)[0],
        port: splitAddr(metricsAddr)[1],
        registry: metrics,
        ready: () => stack !== undefined,
      })
    : undefined;
  return {
    metrics,
    serving(s) {
      stack = s;
    },
    close: async () => health?.close(),
  };
}

/** Marks `stack` ready on `probes` and serves until SIGTERM/SIGINT, then closes both and exits 0. */
export async function serveUntilSignal(stack: SignalStack, probes: Probes): Promise<void> {
  probes.serving(stack);
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.once(sig, () => {
      void Promise.all([stack.close(), probes.close()]).finally(() => process.exit(0));
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
