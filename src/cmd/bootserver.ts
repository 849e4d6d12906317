/**
 * Standalone boot server (`node dist/src/cmd/bootserver.js`): stateless, several replicas may serve.
 * Prints one JSON log line with its URL once listening. SIGTERM/SIGINT close it.
 */
import { readFileSync } from 'node:fs';
import { Command, Option } from 'commander';
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import { parseAddressSource } from '../bootserver/address-source.js';
import { ImageCatalog } from '../oci/image-catalog.js';
import { KubeClient } from '../runtime/client.js';
import { Informer } from '../runtime/informer.js';
import { loadKubeConfig } from '../runtime/kubeconfig.js';
import { newLogger } from '../runtime/logger.js';
import { Resources } from '../runtime/resource.js';
import { HostUrlError, hostFacingUrl } from './host-url.js';
import { addImageOptions, imageFlagsOf, imageServices } from './image-flags.js';
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
import { NotWritableError } from './writable-dir.js';

const cmd = addSignalProcessOptions(
  addImageOptions(new Command('bootserver')).description(
    'metal-operator boot server: GET /ipxe, /ipxe/{uuid}, /ignition/{uuid}, /images/{name}/{file}, /oci/{uuid}/{attempt}/{layer}',
  ),
)
  .option('--addr <host:port>', 'listen address', '127.0.0.1:10001')
  .option('--url <url>', 'URL hosts use to reach this boot server (default: the listen address)')
  .requiredOption('--registry-url <url>', 'URL hosts use to reach the registry')
  .option('--image-catalog <file>', 'YAML image catalog (see src/oci/image-catalog.ts)')
  .option('--no-pin-script-client', 'serve an attempt script to any client, not only the first')
  .addOption(
    new Option(
      '--script-client-identity <how>',
      "who gets an attempt script or HTTP-boot file: known-address (the server's own addresses where they identify it, never another server's; else the first fetcher) or first-address (the first fetcher alone)",
    )
      .choices(['known-address', 'first-address'])
      .default('known-address'),
  )
  .option(
    '--client-mac-source <sources>',
    "where the client address's MAC is looked up, per fetch, to identify a server by the NICs its BMC reports: comma-separated dnsmasq-leases=<lease file> and neighbours[=<file, default /proc/net/arp>]; none: addresses alone",
    'none',
  )
  .option('--no-inject-bootstate', 'do not merge the /bootstate unit into served ignition')
  .option(
    '--claims-cache',
    "watch ServerClaims (needs list and watch on serverclaims, as config/signals grants): a claim whose cached copy shows the attempt's power-on is not read per boot-file request",
    true,
  )
  .option(
    '--no-claims-cache',
    'read the claim of every boot-file request instead (RBAC with get on serverclaims alone)',
  )
  .option(
    '--no-prebuild-uki',
    "build an HTTP-boot attempt's UKI on the firmware's first request, not when its boot configuration turns Ready",
  )
  .parse();
const o = cmd.opts<
  SignalProcessFlags & {
    addr: string;
    url?: string;
    registryUrl: string;
    imageCatalog?: string;
    pinScriptClient: boolean;
    scriptClientIdentity: 'known-address' | 'first-address';
    clientMacSource: string;
    injectBootstate: boolean;
    prebuildUki: boolean;
    claimsCache: boolean;
  }
>();
const log = newLogger('bootserver');
const [host, port] = splitAddr(o.addr);
let externalUrl: string | undefined;
let registryUrl: string;
try {
  // These URLs go onto kernel command lines: refuse what hosts cannot reach (S16).
  registryUrl = hostFacingUrl('--registry-url', o.registryUrl, { host: '', port: 0 });
  externalUrl =
    port === 0 && !o.url
      ? undefined
      : hostFacingUrl('--url', o.url, { host, port, scheme: o.tlsCertFile ? 'https' : 'http' });
} catch (err) {
  if (!(err instanceof HostUrlError)) throw err;
  process.stderr.write(`error: ${err.message}\n`);
  process.exit(1);
}
const catalog = o.imageCatalog
  ? ImageCatalog.parse(readFileSync(o.imageCatalog, 'utf8'))
  : ImageCatalog.empty();
const kubeConfig = loadKubeConfig(o.kubeconfig);
const kube = new KubeClient(kubeConfig, { fieldManager: 'metal-bootserver' });
const oci = await imageServices(imageFlagsOf(cmd.opts()), kube, log).catch((err: unknown) => {
  // A read-only folder is fixed by a volume or a flag: one line naming it, not a stack trace.
  if (!(err instanceof NotWritableError)) throw err;
  process.stderr.write(`error: ${err.message}\n`);
  process.exit(1);
});
const callbackKey = callbackKeyRef(o);
// Stopped with the process (serveUntilSignal exits once the stack closed). Not awaited: until its
// first list is in, or while RBAC refuses it (the informer logs each retry, backing off), the
// power-on gate finds no cached claim and reads it, as with --no-claims-cache; the boot server
// must not stay down for an optimisation.
const claims = o.claimsCache ? new Informer<ServerClaim>(kube, Resources.ServerClaim, { log }) : undefined;
void claims?.start().catch(() => undefined);
// Probes first: alive while the key Secret or the first LISTs are awaited, ready once serving.
const probes = await startProbes(o.metricsAddr);
const stack = await startSignalStack({
  callbackKey,
  metrics: probes.metrics,
  kubeConfig,
  log,
  bootServer: {
    host,
    port,
    tls: tlsFiles(o),
    externalUrl,
    registryUrl,
    catalog: () => catalog,
    pinScriptClient: o.pinScriptClient,
    scriptClientIdentity: o.scriptClientIdentity,
    clientMacSource: parseAddressSource(o.clientMacSource),
    injectBootstateUnit: o.injectBootstate,
    prebuildUki: o.prebuildUki,
    claims,
    ignition: oci.ignition,
    oci: { images: oci.images, cache: oci.cache },
  },
});
log.info({ url: stack.bootServer!.url }, 'boot server listening');
await serveUntilSignal(stack, probes);
