/**
 * The operator as users run it: deployed into a real single-node cluster (cluster.ts) from the
 * shipped manifests (`kubectl apply -k` of an overlay that changes only the image and ConfigMap
 * metal-boot-network) or the Helm chart, with QEMU VMs on the test network (test-network.ts)
 * behind a virtual BMC, and the boot images in a real OCI registry. Used by the in-cluster tests
 * and `local up --in-cluster`.
 *
 * Who reaches what (all on this machine; `A` is the test network's host address, the node's):
 * - VMs → boot server and registry: `http://A:30082`, `http://A:30100`, the NodePorts of the shipped
 *   Services (kube-proxy DNAT to the pods). NodePort, not hostNetwork: the pods keep their own
 *   network namespace and the shipped NetworkPolicy, and the same URLs work for any number of
 *   replicas and across a rolling update;
 * - VMs → DHCP: the test network's dnsmasq, whose iPXE boot file is `http://A:30082/ipxe`;
 * - pods → API server: the `kubernetes` Service (ClusterIP 10.0.0.1), kube-proxy → `A`;
 * - pods → virtual BMC and OCI registry: `A` (both listen there).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { pino } from 'pino';
import { API_VERSION } from '../api/v1alpha1/schema.js';
import { KubeClient } from '../runtime/client.js';
import { Resources } from '../runtime/resource.js';
import { accelFromEnv, chooseAccel } from '../virtualbmc/accel-probe.js';
import { type Firmware, QemuHost, qemuHostIdentity } from '../virtualbmc/qemu.js';
import { startVirtualBmc, type VirtualBmc } from '../virtualbmc/server.js';
import { buildImageArchive, Cluster } from './cluster.js';
import { REPO_ROOT } from './control-plane.js';
import { type LocalImages, startLocalImages } from './local-images.js';
import { tapOn } from './local-stack.js';
import { TestNetwork } from './test-network.js';
import { buildVmArtefacts } from './vm-artefacts.js';

const run = promisify(execFile);

/** The NodePorts of the shipped Services metal-registry and metal-bootserver (config/manager/manager.yaml). */
export const NODE_PORTS = { registry: 30100, bootserver: 30082 } as const;
export const OPERATOR_NAMESPACE = 'metal-system';
export const IN_CLUSTER_BMC = 'cluster-bmc';
/** The image name the shipped Deployments use; overlays replace it. */
const SHIPPED_IMAGE = 'ghcr.io/metal-operator-ts/manager';

export interface InClusterOptions {
  /** Work folder (created). */
  dir: string;
  /** QEMU VMs behind the virtual BMC. */
  servers: number;
  /** Firmware of the VMs (default `bios`: SeaBIOS + iPXE, the quickest boot under TCG). */
  firmware?: Firmware;
  progress?: (line: string) => void;
}

/** Which shipped layout to deploy: `default` (one manager process) or `signals` (registry and boot server replicas). */
export type Layout = 'default' | 'signals';

export class InClusterStack {
  private constructor(
    readonly opts: InClusterOptions,
    readonly network: TestNetwork,
    readonly cluster: Cluster,
    /** The operator image as imported into the node (hack/build-image.sh). */
    readonly image: string,
    readonly images: LocalImages,
    readonly hosts: QemuHost[],
    readonly vbmc: VirtualBmc,
    private readonly bmcPassword: string,
    readonly client: KubeClient,
  ) {}

  get kubeconfigPath(): string {
    return this.cluster.kubeconfigPath;
  }

  /** Host-facing URLs as ConfigMap metal-boot-network must name them here. */
  get registryUrl(): string {
    return `http://${this.network.hostAddress}:${NODE_PORTS.registry}`;
  }

  get bootServerUrl(): string {
    return `http://${this.network.hostAddress}:${NODE_PORTS.bootserver}`;
  }

  /** Starts the test network, the cluster, the registry with the boot images and the VMs; deploys nothing. */
  static async start(opts: InClusterOptions): Promise<InClusterStack> {
    const say = opts.progress ?? (() => undefined);
    mkdirSync(opts.dir, { recursive: true });
    const undo: (() => Promise<unknown>)[] = [];
    try {
      say('creating the test network (namespace, bridge, dnsmasq)');
      const network = await TestNetwork.create({
        tag: 'ic',
        dir: join(opts.dir, 'net'),
        bootServerPort: NODE_PORTS.bootserver,
      });
      undo.unshift(() => network.close());
      say(
        `starting a single-node cluster on ${network.hostAddress} (kubelet, containerd, kube-proxy, scheduler)`,
      );
      const cluster = await Cluster.start({
        dir: join(opts.dir, 'cluster'),
        nodeAddress: network.hostAddress,
      });
      undo.unshift(() => cluster.stop());
      say('building the operator image from the Dockerfile (buildah; cached by content) and loading it');
      const archive = join(opts.dir, 'operator.tar');
      const image = buildImageArchive(archive);
      await cluster.importImage(archive);
      say('starting the OCI registry with the boot images');
      const artefacts = buildVmArtefacts();
      const images = await startLocalImages(
        join(opts.dir, 'oci-registry'),
        artefacts,
        'console=ttyS0 quiet',
        network.hostAddress,
      );
      undo.unshift(() => images.registry.stop());
      const accel = await chooseAccel(accelFromEnv(), {
        guest: { kernel: join(artefacts, 'vmlinuz'), initrd: join(artefacts, 'initramfs.cpio.gz') },
      });
      say(`starting ${opts.servers} QEMU VMs (${accel.accel.toUpperCase()}) behind a virtual BMC`);
      const hosts = Array.from({ length: opts.servers }, (_, i) => {
        const id = qemuHostIdentity(i);
        return new QemuHost(id, {
          bootServerUrl: `http://${network.hostAddress}:${NODE_PORTS.bootserver}`,
          workDir: join(opts.dir, `vm-${i}`),
          accel: accel.accel,
          firmware: opts.firmware ?? 'bios',
          ...tapOn(network, id.macAddress),
        });
      });
      undo.unshift(() => Promise.all(hosts.map((h) => h.close().catch(() => undefined))));
      const password = randomBytes(12).toString('hex');
      const vbmc = await startVirtualBmc({
        hosts,
        username: 'admin',
        password,
        port: 0,
        address: network.hostAddress,
        logger: pino({ level: 'silent' }),
      });
      undo.unshift(() => vbmc.close());
      const client = new KubeClient(cluster.cp.kubeConfig(), { fieldManager: 'metal-in-cluster-test' });
      return new InClusterStack(opts, network, cluster, image, images, hosts, vbmc, password, client);
    } catch (err) {
      for (const u of undo) await u().catch(() => undefined);
      throw err;
    }
  }

  /** `kubectl --kubeconfig <cluster> <args>`; resolves with stdout, rejects with stderr. */
  async kubectl(args: string[]): Promise<string> {
    try {
      const { stdout } = await run('kubectl', ['--kubeconfig', this.kubeconfigPath, ...args], {
        maxBuffer: 64 << 20,
      });
      return stdout;
    } catch (err) {
      const e = err as { stderr?: string; message: string };
      throw new Error(`kubectl ${args.join(' ')}: ${e.stderr || e.message}`);
    }
  }

  /** ConfigMap metal-boot-network's data for this machine (the one thing a user sets besides the image). */
  bootNetwork(): Record<string, string> {
    const registry = this.images.registry.host;
    return {
      'registry-url': this.registryUrl,
      'bootserver-url': this.bootServerUrl,
      'probe-image': this.images.probeImage,
      'allowed-registries': registry,
      'insecure-registries': registry,
    };
  }

  /**
   * Writes an overlay of `config/<layout>` that changes only the image and ConfigMap
   * metal-boot-network, applies it with `kubectl apply -k` and waits for every Deployment's
   * rollout. `imageTag` overrides the tag (a rolling update to another tag of the same image).
   * Returns the overlay folder.
   */
  async deployKustomize(layout: Layout, imageTag?: string): Promise<string> {
    const overlay = join(this.opts.dir, `overlay-${layout}`);
    mkdirSync(overlay, { recursive: true });
    const [name, tag] = splitImage(this.image);
    const data = Object.entries({ ...this.bootNetwork() })
      .map(([k, v]) => `        ${k}: "${v}"`)
      .join('\n');
    writeFileSync(
      join(overlay, 'kustomization.yaml'),
      [
        'resources:',
        `  - ${relative(overlay, join(REPO_ROOT, 'config', layout))}`,
        'images:',
        `  - name: ${SHIPPED_IMAGE}`,
        `    newName: ${name}`,
        `    newTag: ${JSON.stringify(imageTag ?? tag)}`, // quoted: an all-digit tag is a YAML number
        'patches:',
        '  - patch: |',
        '      apiVersion: v1',
        '      kind: ConfigMap',
        `      metadata: { name: metal-boot-network, namespace: ${OPERATOR_NAMESPACE} }`,
        '      data:',
        data,
        '',
      ].join('\n'),
    );
    await this.kubectl(['apply', '-k', overlay]);
    await this.waitForRollouts();
    return overlay;
  }

  /** Tags the imported operator image again as `<name>:<tag>` in the node's image store (for rolling updates). */
  async tagImage(tag: string): Promise<string> {
    const [name] = splitImage(this.image);
    const ctr = ['--address', this.cluster.containerdSocket, '-n', 'k8s.io'];
    await run('ctr', [...ctr, 'images', 'tag', '--force', this.image, `${name}:${tag}`]);
    return `${name}:${tag}`;
  }

  /** Waits until every Deployment in the operator's namespace has rolled out (5 min at most). */
  async waitForRollouts(): Promise<void> {
    const names = (await this.kubectl(['get', 'deploy', '-n', OPERATOR_NAMESPACE, '-o', 'name']))
      .split('\n')
      .filter(Boolean);
    for (const d of names)
      await this.kubectl(['rollout', 'status', d, '-n', OPERATOR_NAMESPACE, '--timeout=300s']).catch(
        async (err: Error) => {
          const pods = await this.kubectl(['get', 'pods', '-n', OPERATOR_NAMESPACE, '-o', 'wide']).catch(
            () => '',
          );
          const events = await this.kubectl(['get', 'events', '-n', OPERATOR_NAMESPACE]).catch(() => '');
          throw new Error(`${err.message}\n${pods}\n${events.split('\n').slice(-20).join('\n')}`);
        },
      );
  }

  /** Creates the BMC object (and its BMCSecret) of the virtual BMC; discovery starts. */
  async createBmc(): Promise<void> {
    await this.client.create(Resources.BMCSecret, {
      apiVersion: API_VERSION,
      kind: 'BMCSecret',
      metadata: { name: `${IN_CLUSTER_BMC}-credentials` },
      data: {
        username: Buffer.from('admin').toString('base64'),
        password: Buffer.from(this.bmcPassword).toString('base64'),
      },
    });
    await this.client.create(Resources.BMC, {
      apiVersion: API_VERSION,
      kind: 'BMC',
      metadata: { name: IN_CLUSTER_BMC },
      spec: {
        access: { ip: this.network.hostAddress },
        bmcSecretRef: { name: `${IN_CLUSTER_BMC}-credentials` },
        protocol: { name: 'Redfish', port: Number(new URL(this.vbmc.url).port), scheme: 'http' },
      },
    });
  }

  /** Stops everything it started (VMs, BMC, registry, cluster, network); never throws. */
  async stop(): Promise<void> {
    const steps: (() => Promise<unknown>)[] = [
      () => this.vbmc.close(),
      () => Promise.all(this.hosts.map((h) => h.close())),
      () => this.client.close(),
      () => this.images.registry.stop(),
      () => this.cluster.stop(),
      () => this.network.close(),
    ];
    for (const s of steps) await s().catch(() => undefined);
  }
}

/** `name:tag` → [name, tag] (the name may hold a registry port). */
function splitImage(image: string): [string, string] {
  const i = image.lastIndexOf(':');
  return [image.slice(0, i), image.slice(i + 1)];
}
