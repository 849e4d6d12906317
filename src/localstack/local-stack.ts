/**
 * The whole system on one machine: a control plane (etcd + kube-apiserver on loopback), the CRDs,
 * the manager as its own process (controllers + registry + boot server; with `signalReplicas` the
 * registry and the boot server run as replicas of their own behind Service stand-ins instead), a
 * virtual BMC (or, sim only, several) whose systems are QEMU VMs with iPXE firmware (`qemu`) or
 * simulated hosts (`sim`), the BMC objects that point at it and the image catalog of the local boot
 * artefacts. The manager can be SIGKILLed and started again (`killManager`, `startManager`). Used by `metalctl local up`, the
 * end-to-end tests and the benchmarks; `stop()` ends every process it started and removes its files.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { STATIC_IP_ANNOTATION } from '../api/v1alpha1/boot-method.js';
import { API_VERSION } from '../api/v1alpha1/schema.js';
import type { Server } from '../api/v1alpha1/server.js';
import { CALLBACK_KEY_SECRET_NAME, ensureCallbackKey } from '../bootauth/callback-key-secret.js';
import type { CallbackKey } from '../bootauth/callback-token.js';
import { KubeClient } from '../runtime/client.js';
import { Informer } from '../runtime/informer.js';
import { Resources } from '../runtime/resource.js';
import { type AccelChoice, type AccelVerdict, accelFromEnv, chooseAccel } from '../virtualbmc/accel-probe.js';
import type { Host } from '../virtualbmc/host.js';
import { resolveProfile, type VendorProfileName } from '../virtualbmc/profile.js';
import { type Firmware, QemuHost, qemuHostIdentity } from '../virtualbmc/qemu.js';
import { type RequestRecord, startVirtualBmc, type VirtualBmc } from '../virtualbmc/server.js';
import { createSimFleet } from '../virtualbmc/sim-fleet.js';
import { ControlPlane, freePorts, REPO_ROOT, waitFor } from './control-plane.js';
import { nodeOptions } from './deployment-node-options.js';
import { type LocalImages, startLocalImages } from './local-images.js';
import { SignalReplicas } from './signal-replicas.js';
import { bridgeNetworkProblem, TestNetwork } from './test-network.js';
import { buildVmArtefacts, OS_IMAGE, PROBE_IMAGE, writeImageCatalog } from './vm-artefacts.js';

export type Backend = 'qemu' | 'sim';

export interface LocalStackOptions {
  servers: number;
  backend: Backend;
  /** Work folder: logs, kubeconfig copy, image catalog, VM disks. Created if missing. */
  dir: string;
  /** Extra manager flags (e.g. `--boot-timeout=30s`). */
  managerArgs?: string[];
  /** Progress lines (each step that takes longer than a second announces itself). */
  progress?: (line: string) => void;
  /** Log of the virtual BMC (silent when unset). */
  log?: pino.Logger;
  /** Vendor profile of the virtual BMC (`dell`, `hpe`, `supermicro`, `dmtf`; see virtualbmc/profile.ts). */
  bmcProfile?: VendorProfileName;
  /** Sim back end only: simulated firmware and kernel times in ms. */
  simTiming?: { firmwareMs?: number; kernelMs?: number };
  /** Sim back end only: each host registers a metalprobe-like payload of ~this many KiB (virtualbmc/probe-payload.ts). */
  simPayloadKib?: number;
  /** QEMU back end only: accelerator (default `$METAL_QEMU_ACCEL`, else `auto`: KVM only after a probe boot proved it). */
  accel?: AccelChoice;
  /**
   * QEMU back end only: `user` (default) QEMU user networking, every VM reaching the host as
   * 10.0.2.2; `bridge` the test network (src/localstack/test-network.ts: namespace, bridge, a tap
   * per VM, dnsmasq), every VM with its own DHCP address; `auto` bridge where namespaces can be
   * made, else user.
   */
  network?: 'user' | 'bridge' | 'auto';
  /**
   * Default boot method of claims (the manager's `--default-boot-method`): `pxe` (default), `http`
   * (UEFI HTTP boot: needs the bridged network and UEFI firmware), `vmedia` (the BMC inserts the
   * attempt's ISO: UEFI firmware, or simulated hosts; any network), `auto` http where possible.
   */
  bootMethod?: 'pxe' | 'http' | 'vmedia' | 'auto';
  /** QEMU back end only: firmware of every VM, or per VM index (default `bios`). */
  firmware?: Firmware | Firmware[];
  /**
   * True when the caller stops the stack itself on SIGTERM/SIGINT (the `local serve` daemon): the
   * control plane then installs no signal handler of its own that would exit mid-shutdown.
   */
  handlesSignals?: boolean;
  /** QEMU back end only: vCPUs (`-smp`) per VM index, repeated over the VMs (default 1 each). */
  cpus?: number[];
  /**
   * QEMU back end only: a VM network-booting for this long (ms) with nothing on its serial console
   * fails {@link LocalStack.waitForDiscovery} with a diagnosis instead of being waited on (default 150000).
   */
  silentVmMs?: number;
  /** Sim back end only: the hosts spread evenly over this many virtual BMCs (BMC objects `local-bmc`, `local-bmc-1`, …). Default 1. */
  bmcs?: number;
  /**
   * Run the registry and the boot server as processes of their own, this many replicas each, every
   * kind behind a Service stand-in (signal-replicas.ts, service-proxy.ts), as deployed. 0 (default):
   * the manager's in-process servers serve the hosts.
   */
  signalReplicas?: number;
  /** Called with every request each virtual BMC answered (`bmc`: its index). */
  onBmcRequest?: (bmc: number, r: RequestRecord) => void;
  /** Run the cleanup boot on release: the manager gets `--cleanup-image` = the pushed `metal/cleanup:latest`. */
  cleanup?: boolean;
  /**
   * QEMU on the bridged network only: false runs no DHCP server (no dnsmasq) on the test network, as a
   * provisioning network that boots by virtual media alone (needs `bootMethod: vmedia`, UEFI). Each VM
   * then has a Server made before its BMC (adopted by the BMC controller) with the annotation
   * `metal.ironcore.dev/boot-ip` = its static address ({@link TestNetwork.staticIpArg}), so discovery
   * too boots the ISO with `ip=`; no NIC carries a boot ROM; the boot server identifies VMs through
   * the host's neighbour table (`--client-mac-source=neighbours`). Default: false with `bootMethod:
   * vmedia` (on the bridged network; QEMU user networking has its own DHCP), else true.
   */
  dhcp?: boolean;
  /** Extra kube-apiserver flags (benchmarks: e.g. an audit policy to list every request). */
  apiServerArgs?: string[];
}

/** A VM that shows no sign of life; `diagnosis` holds its accel, QEMU command line and console tail. */
export class SilentVmError extends Error {
  constructor(
    readonly uuid: string,
    readonly diagnosis: string,
    onForMs: number,
  ) {
    super(
      `VM ${uuid} has network-booted for ${Math.round(onForMs / 1000)} s with an empty serial console and no boot: it shows no sign of life. If KVM was used, try --accel tcg (or METAL_QEMU_ACCEL=tcg).\n${diagnosis}`,
    );
    this.name = 'SilentVmError';
  }
}

/** Namespace of the manager's own objects (discovery boot configurations, leader Lease). */
export const MANAGER_NAMESPACE = 'metal-system';
export const BMC_NAME = 'local-bmc';
const BMC_USER = 'admin';

export class LocalStack {
  private constructor(
    readonly opts: LocalStackOptions,
    readonly cp: ControlPlane,
    readonly client: KubeClient,
    /** The first (or only) virtual BMC; all of them: {@link vbmcs}. */
    readonly vbmc: VirtualBmc,
    readonly hosts: Host[],
    /** The manager's current process ({@link killManager} / {@link startManager} replace it). */
    public manager: ChildProcess,
    private readonly managerCommand: string[],
    readonly managerLog: string,
    readonly registryUrl: string,
    readonly bootServerUrl: string,
    readonly metricsUrl: string,
    /** The local OCI registry and the images pushed to it (local-images.ts). */
    readonly images: LocalImages,
    readonly vbmcs: VirtualBmc[],
    /** The registry and boot server replicas, when `signalReplicas` > 0. */
    readonly signals: SignalReplicas | undefined,
    /** The bridged test network, when the VMs are on it. */
    readonly network: TestNetwork | undefined,
    /** The boot method claims default to (the manager's `--default-boot-method`), as chosen. */
    readonly bootMethod: 'pxe' | 'http' | 'vmedia',
    /** The callback key (`metal-system/metal-callback-key`), to derive the token a host is given. */
    readonly callbackKey: CallbackKey,
  ) {}

  get kubeconfigPath(): string {
    return this.cp.kubeconfigPath;
  }

  /** Starts everything and creates the BMC objects; resolves before discovery finished. */
  static async start(opts: LocalStackOptions): Promise<LocalStack> {
    const say = opts.progress ?? (() => undefined);
    mkdirSync(opts.dir, { recursive: true });
    const artefacts = bootArtefacts(opts, say);
    const catalog = writeImageCatalog(artefacts, join(opts.dir, 'images.yaml'));
    say(
      'starting etcd, kube-apiserver and the garbage collector (kube-controller-manager; built from their Go modules on first use), installing CRDs',
    );
    // The garbage collector: deleting a BMC removes its Servers (and their discovery SBCs) as in a cluster.
    const cp = await ControlPlane.start({
      garbageCollector: true,
      exitOnSignal: !opts.handlesSignals,
      apiServerArgs: opts.apiServerArgs,
    });
    const cleanup: (() => Promise<unknown>)[] = [() => cp.stop()];
    const step: StartStep = { opts, say, cleanup };
    try {
      const { images, client, callbackKey } = await startImagesAndKey(step, cp, artefacts);
      const ports = await stackPorts();
      const replicas = opts.signalReplicas ?? 0;
      if (replicas > 0 && opts.backend !== 'sim')
        throw new Error('signal server replicas: sim back end only (VMs reach the host on other addresses)');
      const network = await openTestNetwork(step, ports.boot);
      const addrs = stackAddresses(step, network, ports);
      const { hosts, closeFleet } = await startHosts(step, artefacts, network, addrs.localBootUrl);
      const bmcs = await startVirtualBmcs(step, hosts, closeFleet);
      const signals = await startSignalReplicas(step, replicas, cp, ports, catalog, images);
      say(`starting the manager (controllers${signals ? '' : ', registry, boot server'})`);
      const managerLog = join(opts.dir, 'manager.log');
      const managerCommand = managerFlags(opts, { cp, catalog, ports, addrs, network, images, signals });
      const metricsUrl = `http://127.0.0.1:${ports.metrics}`;
      const manager = spawnManager(managerCommand, managerLog);
      cleanup.unshift(() => stopChild(manager));
      await waitForManager(manager, metricsUrl, managerLog);
      await createBmcObjects(step, client, network, hosts, bmcs);
      return new LocalStack(
        opts,
        cp,
        client,
        bmcs.vbmcs[0]!,
        hosts,
        manager,
        managerCommand,
        managerLog,
        addrs.registryUrl,
        addrs.bootServerUrl,
        metricsUrl,
        images,
        bmcs.vbmcs,
        signals,
        network,
        addrs.bootMethod,
        callbackKey,
      );
    } catch (err) {
      for (const c of cleanup) await c().catch(() => undefined);
      throw err;
    }
  }

  /**
   * Waits until `count` Servers are Available (discovered), reporting progress every few seconds.
   * @throws SilentVmError at once when a VM shows no sign of life (see {@link assertVmsAlive});
   *   Error after `timeoutMs`, naming a Server in state Error if there is one.
   */
  async waitForDiscovery(
    count: number,
    timeoutMs: number,
    progress?: (servers: Server[]) => void,
  ): Promise<Server[]> {
    let servers: Server[] = [];
    let last = 0;
    let silent: SilentVmError | undefined;
    // A watch, not a LIST every 100 ms: at thousands of Servers the polling alone would load the
    // API server the benchmarks measure. The returned Servers are complete (managedFields stripped).
    const informer = new Informer<Server>(this.client, Resources.Server, {
      log: this.opts.log ?? pino({ level: 'silent' }),
    });
    await informer.start();
    try {
      await waitFor(`${count} servers Available`, timeoutMs, async () => {
        try {
          await this.assertVmsAlive();
        } catch (err) {
          if (err instanceof SilentVmError) silent = err;
          return true;
        }
        servers = informer.list();
        if (progress && Date.now() - last > 2_000) {
          last = Date.now();
          progress(servers);
        }
        const bad = servers.find((s) => s.status?.state === 'Error');
        if (bad)
          throw new Error(
            `Server ${bad.metadata.name} is in Error: ${JSON.stringify(bad.status?.conditions ?? [])}`,
          );
        return servers.filter((s) => s.status?.state === 'Available').length >= count;
      });
    } finally {
      informer.stop();
    }
    if (silent) throw silent;
    return servers;
  }

  /**
   * Throws {@link SilentVmError} for the first QEMU VM that has been network-booting for longer than
   * `silentVmMs` without writing anything to its serial console (the test kernel prints within
   * seconds of the iPXE fetch). VMs booting from disk are left alone: an empty disk prints nothing.
   */
  async assertVmsAlive(): Promise<void> {
    const bound = this.opts.silentVmMs ?? 150_000;
    for (const h of this.hosts) {
      if (!(h instanceof QemuHost)) continue;
      const life = await h.signsOfLife();
      if (life && life.device === 'Pxe' && life.consoleBytes === 0 && life.onForMs > bound) {
        throw new SilentVmError(h.identity.uuid, await h.diagnosis(), life.onForMs);
      }
    }
  }

  /** SIGKILLs the manager (no graceful stop: in-flight reconciles and BMC calls die with it). */
  async killManager(): Promise<void> {
    const p = this.manager;
    if (p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((ok) => p.once('exit', ok));
    p.kill('SIGKILL');
    await exited;
  }

  /** Starts the manager again with the same flags; resolves once it answers `/readyz`. */
  async startManager(): Promise<void> {
    if (this.manager.exitCode === null && this.manager.signalCode === null)
      throw new Error('the manager is still running');
    this.manager = spawnManager(this.managerCommand, this.managerLog);
    await waitForManager(this.manager, this.metricsUrl, this.managerLog);
  }

  /** Stops the manager, the VMs and the control plane; removes the control plane's files. */
  async stop(): Promise<void> {
    // Every step runs even when an earlier one failed: a failed VM close must not leave the test
    // network's namespace and dnsmasq (or the control plane) behind. The first error is rethrown.
    const steps: (() => Promise<unknown>)[] = [
      () => stopChild(this.manager),
      async () => this.signals?.stop(),
      () => Promise.all(this.vbmcs.map((b) => b.close())),
      () => Promise.all(this.hosts.map((h) => h.close().catch(() => undefined))),
      async () => this.network?.close(),
      () => this.client.close(),
      () => this.images.registry.stop(),
      () => this.cp.stop(),
    ];
    let first: unknown;
    for (const step of steps) {
      try {
        await step();
      } catch (err) {
        first ??= err;
      }
    }
    if (first !== undefined) throw first;
  }
}

/**
 * What every start-up step shares: the options, the progress line and the clean-up list (newest
 * first: a step that starts something puts its stop in front, so a failed start undoes in reverse).
 */
interface StartStep {
  opts: LocalStackOptions;
  say: (line: string) => void;
  cleanup: (() => Promise<unknown>)[];
}

/** The folder of the kernel and initramfs the catalog names: built for QEMU, placeholders for sim hosts. */
function bootArtefacts(opts: LocalStackOptions, say: (line: string) => void): string {
  if (opts.backend === 'qemu') {
    say('building VM boot artefacts (Debian kernel + busybox initramfs; cached after the first run)');
    return buildVmArtefacts();
  }
  // Sim hosts do not download kernels; the catalog still needs files that exist.
  const artefacts = join(opts.dir, 'sim-artefacts');
  mkdirSync(artefacts, { recursive: true });
  writeFileSync(join(artefacts, 'vmlinuz'), 'sim');
  writeFileSync(join(artefacts, 'initramfs.cpio.gz'), 'sim');
  return artefacts;
}

/** The OCI registry with the boot images pushed, the API client, the manager namespace and the callback key. */
async function startImagesAndKey({ say, cleanup, opts }: StartStep, cp: ControlPlane, artefacts: string) {
  say('starting the OCI registry on loopback and pushing the boot images (docker-registry)');
  const images = await startLocalImages(join(opts.dir, 'oci-registry'), artefacts, 'console=ttyS0 quiet');
  cleanup.unshift(() => images.registry.stop());
  const client = new KubeClient(cp.kubeConfig(), { fieldManager: 'metalctl' });
  await client.create(Resources.Namespace, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: MANAGER_NAMESPACE },
  });
  // Created here rather than by the manager's first start: signal server replicas start
  // before the manager and wait for it otherwise.
  const callbackKey = await ensureCallbackKey(client, {
    namespace: MANAGER_NAMESPACE,
    name: CALLBACK_KEY_SECRET_NAME,
  });
  return { images, client, callbackKey };
}

/** Ports hosts are told about (registry, boot), the metrics port, and the manager's own servers' behind replicas. */
interface StackPorts {
  registry: number;
  boot: number;
  metrics: number;
  ownRegistry: number;
  ownBoot: number;
}

async function stackPorts(): Promise<StackPorts> {
  const [registry, boot, metrics, ownRegistry, ownBoot] = (await freePorts(5)) as [
    number,
    number,
    number,
    number,
    number,
  ];
  return { registry, boot, metrics, ownRegistry, ownBoot };
}

/**
 * The bridged test network where asked for and possible (QEMU only); undefined for user networking.
 * @throws Error when `network: 'bridge'` is asked for where namespaces cannot be made.
 */
async function openTestNetwork({ opts, say, cleanup }: StartStep, bootPort: number) {
  // Virtual media needs no DHCP: on the bridged network it runs without (unless asked for).
  const dhcp = opts.dhcp ?? opts.bootMethod !== 'vmedia';
  if (opts.backend !== 'qemu' || !opts.network || opts.network === 'user') return undefined;
  const problem = bridgeNetworkProblem();
  if (problem && opts.network === 'bridge') throw new Error(`bridged test network: ${problem}`);
  if (problem) {
    say(`bridged test network not possible here (${problem}): QEMU user networking`);
    return undefined;
  }
  say(`creating the test network (namespace, bridge${dhcp ? ', dnsmasq' : ', no DHCP server'})`);
  const net = await TestNetwork.create({
    tag: 'ls',
    dir: join(opts.dir, 'net'),
    bootServerPort: bootPort,
    dhcp,
  });
  cleanup.unshift(() => net.close());
  say(`test network ${net.netns}: ${net.subnet}, boot server and registry on ${net.hostAddress}`);
  return net;
}

/** Where the registry and boot server listen, the URLs hosts use, and the boot method of claims. */
interface StackAddresses {
  listenHost: string;
  registryUrl: string;
  bootServerUrl: string;
  /** The boot server as the host itself reaches it (VMs' and simulated hosts' BMC side). */
  localBootUrl: string;
  bootMethod: 'pxe' | 'http' | 'vmedia';
}

/** @throws Error for `dhcp: false` without the bridged network and virtual media, and as {@link chooseBootMethod}. */
function stackAddresses(
  { opts, say }: StartStep,
  network: TestNetwork | undefined,
  ports: StackPorts,
): StackAddresses {
  // VMs on QEMU user networking reach the host's loopback as 10.0.2.2; on the test network
  // they reach the host end of its veth, where the registry and boot server listen.
  const guestHost = network ? network.hostAddress : opts.backend === 'qemu' ? '10.0.2.2' : '127.0.0.1';
  const listenHost = network ? network.hostAddress : '127.0.0.1';
  const bootMethod = chooseBootMethod(opts, network !== undefined);
  if (opts.dhcp === false && (!network || bootMethod !== 'vmedia'))
    throw new Error('no DHCP (dhcp: false): needs the bridged test network and --boot-method vmedia');
  say(
    `boot method of claims: ${bootMethod === 'http' ? 'UEFI HTTP boot of a UKI' : bootMethod === 'vmedia' ? 'virtual media (the BMC inserts the attempt ISO; no DHCP needed; discovery too)' : 'PXE (iPXE script)'}${opts.bootMethod === 'auto' ? ' (the most realistic this machine allows)' : ''}`,
  );
  return {
    listenHost,
    registryUrl: `http://${guestHost}:${ports.registry}`,
    bootServerUrl: `http://${guestHost}:${ports.boot}`,
    localBootUrl: `http://127.0.0.1:${ports.boot}`,
    bootMethod,
  };
}

/** The QEMU VMs (accelerator chosen first) or the simulated fleet; `closeFleet` stops the latter. */
async function startHosts(
  { opts, say }: StartStep,
  artefacts: string,
  network: TestNetwork | undefined,
  localBootUrl: string,
): Promise<{ hosts: Host[]; closeFleet: () => Promise<void> }> {
  let accel: AccelVerdict | undefined;
  if (opts.backend === 'qemu') {
    say('choosing the QEMU accelerator (a probe boot under KVM decides; cached per machine)');
    accel = await chooseAccel(opts.accel ?? accelFromEnv(), {
      guest: { kernel: join(artefacts, 'vmlinuz'), initrd: join(artefacts, 'initramfs.cpio.gz') },
    });
    say(`QEMU accelerator: ${accel.accel.toUpperCase()} (${accel.reason})`);
  }
  say(
    `starting ${opts.servers} ${accel ? `QEMU VMs (${describeFirmware(opts.firmware)} ${network?.dhcp === false ? 'with no NIC boot ROM' : 'with iPXE'}, ${accel.accel.toUpperCase()}, ${network ? 'bridged test network' : 'user networking'})` : 'simulated hosts'} behind a virtual BMC`,
  );
  if (accel)
    return { hosts: qemuHosts(opts, accel, network, localBootUrl), closeFleet: async () => undefined };
  const fleet = createSimFleet({
    count: opts.servers,
    bootServerUrl: localBootUrl,
    uuidCase: 'upper',
    timing: {
      firmwareMs: opts.simTiming?.firmwareMs ?? 200,
      kernelMs: opts.simTiming?.kernelMs ?? 500,
    },
    ...(opts.simPayloadKib ? { payloadKib: opts.simPayloadKib } : {}),
    logger: opts.log,
  });
  return { hosts: fleet.hosts, closeFleet: () => fleet.close() };
}

function qemuHosts(
  opts: LocalStackOptions,
  accel: AccelVerdict,
  network: TestNetwork | undefined,
  localBootUrl: string,
): Host[] {
  const chosen = accel.accel;
  return Array.from(
    { length: opts.servers },
    (_, i) =>
      new QemuHost(qemuHostIdentity(i, opts.cpus?.length ? { cpus: opts.cpus[i % opts.cpus.length] } : {}), {
        bootServerUrl: localBootUrl,
        workDir: join(opts.dir, `vm-${i}`),
        accel: chosen,
        firmware: firmwareOf(opts.firmware, i),
        // Without DHCP no boot ROM on the NIC, not even as the fallback after the disk.
        ...(network?.dhcp === false ? { noneBoot: 'disk' as const } : {}),
        ...(network ? tapOn(network, qemuHostIdentity(i).macAddress) : {}),
      }),
  );
}

/** The virtual BMCs, the hosts spread evenly over them (`per` each), sharing one password. */
interface StackBmcs {
  vbmcs: VirtualBmc[];
  password: string;
  per: number;
}

/** @throws Error for several virtual BMCs outside the sim back end. */
async function startVirtualBmcs(
  { opts, cleanup }: StartStep,
  hosts: Host[],
  closeFleet: () => Promise<void>,
): Promise<StackBmcs> {
  // The virtual BMCs' password: unguessable (N15), not Math.random().
  const password = randomBytes(18).toString('base64url');
  const bmcCount = Math.max(1, Math.min(opts.bmcs ?? 1, hosts.length || 1));
  if (bmcCount > 1 && opts.backend !== 'sim') throw new Error('several virtual BMCs: sim back end only');
  const per = Math.ceil(hosts.length / bmcCount);
  const vbmcs: VirtualBmc[] = [];
  cleanup.unshift(async () => {
    await Promise.all(vbmcs.map((b) => b.close()));
    await closeFleet();
  });
  for (let b = 0; b < bmcCount; b++) {
    const onBmcRequest = opts.onBmcRequest;
    vbmcs.push(
      await startVirtualBmc({
        hosts: hosts.slice(b * per, (b + 1) * per),
        username: BMC_USER,
        password,
        port: 0,
        ...(opts.bmcProfile ? { profile: resolveProfile(opts.bmcProfile) } : {}),
        ...(onBmcRequest ? { onRequest: (r: RequestRecord) => onBmcRequest(b, r) } : {}),
        logger: opts.log,
      }),
    );
  }
  return { vbmcs, password, per };
}

/** The registry and boot server replicas behind Service stand-ins, when `signalReplicas` > 0. */
async function startSignalReplicas(
  { opts, say, cleanup }: StartStep,
  replicas: number,
  cp: ControlPlane,
  ports: StackPorts,
  catalog: string,
  images: LocalImages,
): Promise<SignalReplicas | undefined> {
  if (replicas <= 0) return undefined;
  say(`starting ${replicas} registry and ${replicas} boot server replicas behind Service stand-ins`);
  const signals = await SignalReplicas.start({
    replicas,
    dir: opts.dir,
    kubeconfigPath: cp.kubeconfigPath,
    registryPort: ports.registry,
    bootServerPort: ports.boot,
    imageCatalog: catalog,
    imageArgs: images.managerArgs,
  });
  cleanup.unshift(() => signals.stop());
  return signals;
}

/** The manager's flags (kept: {@link LocalStack.startManager} starts it again with the same). */
function managerFlags(
  opts: LocalStackOptions,
  s: {
    cp: ControlPlane;
    catalog: string;
    ports: StackPorts;
    addrs: StackAddresses;
    network: TestNetwork | undefined;
    images: LocalImages;
    signals: SignalReplicas | undefined;
  },
): string[] {
  const { ports, addrs, network, signals } = s;
  // With replicas the manager's own servers listen on ports no host is told about; the URLs it
  // renders (HTTP boot URIs, scripts) name the Services.
  return [
    `--kubeconfig=${s.cp.kubeconfigPath}`,
    `--manager-namespace=${MANAGER_NAMESPACE}`,
    `--image-catalog=${s.catalog}`,
    `--probe-image=${PROBE_IMAGE}`,
    `--registry-addr=${addrs.listenHost}:${signals ? ports.ownRegistry : ports.registry}`,
    `--registry-url=${addrs.registryUrl}`,
    `--bootserver-addr=${addrs.listenHost}:${signals ? ports.ownBoot : ports.boot}`,
    `--bootserver-url=${addrs.bootServerUrl}`,
    `--metrics-port=${ports.metrics}`,
    `--default-boot-method=${addrs.bootMethod === 'http' ? 'HTTPBoot' : addrs.bootMethod === 'vmedia' ? 'VirtualMedia' : 'PXE'}`,
    // The default --script-client-identity=known-address on every network: on QEMU user
    // networking (VMs arrive as 127.0.0.1, not as the address they register) and with
    // simulated hosts the registry sees the NAT and the boot server falls back to the pin.
    // On the test network the boot server identifies VMs by the MAC dnsmasq leased their
    // address to (docs/MACHINE-IDENTITY.md).
    // Without DHCP: by the MAC the host's kernel resolved the VM's static address to (ARP).
    ...(network
      ? [
          network.dhcp
            ? `--client-mac-source=dnsmasq-leases=${network.leaseFile}`
            : '--client-mac-source=neighbours',
        ]
      : []),
    ...s.images.managerArgs,
    ...(opts.cleanup ? [`--cleanup-image=${s.images.cleanupImage}`] : []),
    ...(opts.managerArgs ?? []),
  ];
}

/**
 * The BMCSecret, without DHCP the hand-made static-address Servers, then one BMC object per
 * virtual BMC (`local-bmc`, `local-bmc-1`, …), which starts discovery.
 */
async function createBmcObjects(
  { say }: StartStep,
  client: KubeClient,
  network: TestNetwork | undefined,
  hosts: Host[],
  { vbmcs, password, per }: StackBmcs,
): Promise<void> {
  say(
    vbmcs.length > 1
      ? `creating ${vbmcs.length} BMCs ${BMC_NAME}, ${BMC_NAME}-1, … (${per} systems each) and their credentials`
      : `creating BMC ${BMC_NAME} (Redfish at ${vbmcs[0]!.url}) and its credentials`,
  );
  await client.create(Resources.BMCSecret, {
    apiVersion: API_VERSION,
    kind: 'BMCSecret',
    metadata: { name: `${BMC_NAME}-credentials` },
    data: {
      username: Buffer.from(BMC_USER).toString('base64'),
      password: Buffer.from(password).toString('base64'),
    },
  });
  if (network && !network.dhcp) await createStaticServers(say, client, network, hosts);
  for (const [b, v] of vbmcs.entries()) {
    await client.create(Resources.BMC, {
      apiVersion: API_VERSION,
      kind: 'BMC',
      metadata: { name: b === 0 ? BMC_NAME : `${BMC_NAME}-${b}` },
      spec: {
        access: { ip: '127.0.0.1' },
        bmcSecretRef: { name: `${BMC_NAME}-credentials` },
        protocol: { name: 'Redfish', port: Number(new URL(v.url).port), scheme: 'http' },
      },
    });
  }
}

/**
 * Servers in upstream's hand-made shape (UUID + bmcRef, no systemURI), made before the BMC: the
 * BMC controller adopts them, so their static address is there before discovery starts.
 */
async function createStaticServers(
  say: (line: string) => void,
  client: KubeClient,
  network: TestNetwork,
  hosts: Host[],
): Promise<void> {
  for (const [i, h] of hosts.entries()) {
    say(`Server ${BMC_NAME}-static-${i}: static address ${network.staticAddress(i)} (no DHCP)`);
    await client.create<Server>(Resources.Server, {
      apiVersion: API_VERSION,
      kind: 'Server',
      metadata: {
        name: `${BMC_NAME}-static-${i}`,
        annotations: { [STATIC_IP_ANNOTATION]: network.staticIpArg(i) },
      },
      spec: { systemUUID: h.identity.uuid.toLowerCase(), bmcRef: { name: BMC_NAME } },
    } as Server);
  }
}

/** QemuHost options of a VM on the test network: its own tap, and its Redfish `HttpBootUri` offered to its MAC by DHCP. */
export function tapOn(network: TestNetwork, mac: string) {
  return {
    network: { mode: 'tap' as const, ifname: network.addTap(), netns: network.netns },
    onHttpBootUri: (uri: string | undefined) => network.setHttpBootUri(mac, uri),
  };
}

/**
 * The boot method claims default to: HTTP boot needs UEFI firmware on every VM and the bridged
 * network (DHCP must offer the URI); virtual media needs UEFI VMs (or simulated hosts).
 * @throws Error when `http` or `vmedia` is asked for where it cannot work.
 */
function chooseBootMethod(opts: LocalStackOptions, bridged: boolean): 'pxe' | 'http' | 'vmedia' {
  const fw = Array.isArray(opts.firmware) ? opts.firmware : [opts.firmware ?? 'bios'];
  if (opts.bootMethod === 'vmedia') {
    // The ISO holds an EFI boot image only (bootserver/vmedia-iso.ts); simulated hosts read it directly.
    if (opts.backend === 'qemu' && !fw.every((f) => f === 'uefi'))
      throw new Error('virtual media boot needs --firmware uefi (the ISO boots under UEFI only)');
    return 'vmedia';
  }
  const possible = opts.backend === 'qemu' && bridged && fw.every((f) => f === 'uefi');
  if (opts.bootMethod === 'http' && !possible)
    throw new Error('UEFI HTTP boot needs --firmware uefi and the bridged network (--network bridge)');
  if (opts.bootMethod === 'http' || (opts.bootMethod === 'auto' && possible)) return 'http';
  return 'pxe';
}

function describeFirmware(firmware: LocalStackOptions['firmware']): string {
  const all = [...new Set(Array.isArray(firmware) ? firmware : [firmware ?? 'bios'])];
  return all.map((f) => (f === 'uefi' ? 'UEFI (OVMF)' : 'BIOS (SeaBIOS)')).join(' + ');
}

function firmwareOf(firmware: LocalStackOptions['firmware'], index: number): Firmware {
  if (Array.isArray(firmware)) return firmware[index % firmware.length] ?? 'bios';
  return firmware ?? 'bios';
}

/**
 * The manager's node process under `setpriv --pdeathsig KILL` (setpriv execs: same pid), with the
 * node options of its Deployment, logging to `log`.
 */
function spawnManager(args: string[], log: string): ChildProcess {
  const fd = openSync(log, 'a');
  const p = spawn(
    'setpriv',
    [
      '--pdeathsig',
      'KILL',
      '--',
      process.execPath,
      // The Deployment's V8 heap settings (its NODE_OPTIONS), so the heap behaves as deployed.
      ...nodeOptions(),
      join(REPO_ROOT, 'dist', 'src', 'cmd', 'manager.js'),
      ...args,
    ],
    { stdio: ['ignore', fd, fd], env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'info' } },
  );
  closeSync(fd);
  return p;
}

async function waitForManager(manager: ChildProcess, metricsUrl: string, log: string): Promise<void> {
  await waitFor('manager ready', 180_000, async () => {
    if (manager.exitCode !== null) throw new Error(`manager exited (${manager.exitCode}); see ${log}`);
    try {
      return (await fetch(`${metricsUrl}/readyz`)).status === 200;
    } catch {
      return false;
    }
  }).catch((err) => {
    throw new Error(`${String(err)}\n${tail(log)}`);
  });
}

async function stopChild(p: ChildProcess): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return;
  const done = new Promise((ok) => p.once('exit', ok));
  p.kill('SIGTERM');
  const t = setTimeout(() => p.kill('SIGKILL'), 10_000);
  await done;
  clearTimeout(t);
}

function tail(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

export { OS_IMAGE, PROBE_IMAGE };
