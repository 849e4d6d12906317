/**
 * Standalone registry (`node dist/src/cmd/registry.js`): stateless, so several replicas can serve
 * behind one Service. Prints one JSON log line with its URL once listening. SIGTERM/SIGINT close it.
 */
import { Command, Option } from 'commander';
import { CALLBACK_KEY_SECRET_NAME, parseSecretRef } from '../bootauth/callback-key-secret.js';
import { loadKubeConfig } from '../runtime/kubeconfig.js';
import { newLogger } from '../runtime/logger.js';
import { splitAddr } from './listen-address.js';
import { serveUntilSignal, tlsFiles } from './signal-process.js';
import { startSignalStack } from './signal-stack.js';

const cmd = new Command('registry')
  .description(
    'metal-operator registry: POST /register, GET /systems/{uuid}, DELETE /delete/{uuid}, POST /bootstate',
  )
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
  .option('--tls-key-file <path>', 'PEM private key of --tls-cert-file')
  .option('--addr <host:port>', 'listen address', '127.0.0.1:10000')
  .addOption(
    new Option(
      '--callback-auth <mode>',
      'required: callbacks need the attempt token; optional: accept upstream unauthenticated bodies',
    )
      .choices(['required', 'optional'])
      .default('required'),
  )
  .parse();
const o = cmd.opts<{
  metricsAddr?: string;
  kubeconfig?: string;
  callbackKeySecret: string;
  addr: string;
  tlsCertFile?: string;
  tlsKeyFile?: string;
  callbackAuth: 'required' | 'optional';
}>();
const log = newLogger('registry');
const [host, port] = splitAddr(o.addr);
let callbackKey: ReturnType<typeof parseSecretRef>;
try {
  callbackKey = parseSecretRef(o.callbackKeySecret);
} catch (err) {
  process.stderr.write(`error: ${(err as Error).message}\n`);
  process.exit(1);
}
const stack = await startSignalStack({
  callbackKey,
  kubeConfig: loadKubeConfig(o.kubeconfig),
  log,
  registry: { host, port, callbackAuth: o.callbackAuth, tls: tlsFiles(o) },
});
log.info({ url: stack.registry!.url }, 'registry listening');
await serveUntilSignal(stack, o.metricsAddr);
