/**
 * Standalone registry (`node dist/src/cmd/registry.js`): stateless, so several replicas can serve
 * behind one Service. Prints one JSON log line with its URL once listening. SIGTERM/SIGINT close it.
 * Registration payloads go to ConfigMaps in the namespace of `--callback-key-secret` (the manager's).
 */
import { Command, Option } from 'commander';
import { loadKubeConfig } from '../runtime/kubeconfig.js';
import { newLogger } from '../runtime/logger.js';
import { splitAddr } from './listen-address.js';
import {
  addSignalProcessOptions,
  callbackKeyRef,
  type SignalProcessFlags,
  serveUntilSignal,
  startProbes,
  tlsFiles,
} from './signal-process.js';
import { startSignalStack } from './signal-stack.js';

const cmd = addSignalProcessOptions(
  new Command('registry').description(
    'metal-operator registry: POST /register, GET /systems/{uuid}, DELETE /delete/{uuid}, POST /bootstate',
  ),
)
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
const o = cmd.opts<SignalProcessFlags & { addr: string; callbackAuth: 'required' | 'optional' }>();
const log = newLogger('registry');
const [host, port] = splitAddr(o.addr);
const callbackKey = callbackKeyRef(o);
// Probes first: alive while the key Secret or the first LISTs are awaited, ready once serving.
const probes = await startProbes(o.metricsAddr);
const stack = await startSignalStack({
  callbackKey,
  metrics: probes.metrics,
  kubeConfig: loadKubeConfig(o.kubeconfig),
  log,
  // The callback key Secret lives in the manager's namespace: so do the registration payloads.
  registry: {
    host,
    port,
    callbackAuth: o.callbackAuth,
    tls: tlsFiles(o),
    inventoryNamespace: callbackKey.namespace,
  },
});
log.info({ url: stack.registry!.url }, 'registry listening');
await serveUntilSignal(stack, probes);
