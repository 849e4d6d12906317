/**
 * Standalone boot server (`node dist/src/cmd/bootserver.js`): stateless, several replicas may serve.
 * Prints one JSON log line with its URL once listening. SIGTERM/SIGINT close it.
 */
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { ImageCatalog } from '../bootserver/image-catalog.js';
import { startSignalStack } from '../bootsignals/signal-stack.js';
import { KubeClient } from '../runtime/client.js';
import { newLogger } from '../runtime/logger.js';
import { addImageOptions, imageFlagsOf, imageServices } from './image-flags.js';
import { loadKubeConfig } from './kubeconfig.js';
import { splitAddr } from './listen-address.js';
import { serveUntilSignal } from './signal-process.js';

const cmd = addImageOptions(new Command('bootserver'))
  .description(
    'metal-operator boot server: GET /ipxe, /ipxe/{uuid}, /ignition/{uuid}, /images/{name}/{file}, /oci/{uuid}/{attempt}/{layer}',
  )
  .option('--metrics-addr <host:port>', 'serve /healthz, /readyz and /metrics here (off when unset)')
  .option('--kubeconfig <path>', 'kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster)')
  .option('--addr <host:port>', 'listen address', '127.0.0.1:10001')
  .option('--url <url>', 'URL hosts use to reach this boot server (default: the listen address)')
  .requiredOption('--registry-url <url>', 'URL hosts use to reach the registry')
  .option('--image-catalog <file>', 'YAML image catalog (see src/bootserver/image-catalog.ts)')
  .option('--no-pin-script-client', 'serve an attempt script to any client, not only the first')
  .option('--no-inject-bootstate', 'do not merge the /bootstate unit into served ignition')
  .parse();
const o = cmd.opts<{
  metricsAddr?: string;
  kubeconfig?: string;
  addr: string;
  url?: string;
  registryUrl: string;
  imageCatalog?: string;
  pinScriptClient: boolean;
  injectBootstate: boolean;
}>();
const log = newLogger('bootserver');
const [host, port] = splitAddr(o.addr);
const catalog = o.imageCatalog
  ? ImageCatalog.parse(readFileSync(o.imageCatalog, 'utf8'))
  : ImageCatalog.empty();
const kubeConfig = loadKubeConfig(o.kubeconfig);
const oci = await imageServices(
  imageFlagsOf(cmd.opts()),
  new KubeClient(kubeConfig, { fieldManager: 'metal-bootserver' }),
  log,
);
const stack = await startSignalStack({
  kubeConfig,
  log,
  bootServer: {
    host,
    port,
    externalUrl: o.url,
    registryUrl: o.registryUrl,
    catalog: () => catalog,
    pinScriptClient: o.pinScriptClient,
    injectBootstateUnit: o.injectBootstate,
    ignition: oci.ignition,
    oci: { images: oci.images, cache: oci.cache },
  },
});
log.info({ url: stack.bootServer!.url }, 'boot server listening');
await serveUntilSignal(stack, o.metricsAddr);
