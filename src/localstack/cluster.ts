/**
 * A real single-node Kubernetes cluster on this machine, for the in-cluster tests and
 * `local up --in-cluster`: the control plane of control-plane.ts (etcd, kube-apiserver) listening
 * on the node's address, kube-controller-manager with its usual controllers, kube-scheduler,
 * kube-proxy (iptables) and a kubelet, all from the same Kubernetes release's Go modules
 * (`hack/build-control-plane.sh --node`), Debian's containerd + runc as the container runtime and
 * Debian's CNI plugins (bridge, host-local, portmap) for the pod network. Nothing is simulated:
 * pods are containers the kubelet starts through CRI, Services are kube-proxy's iptables rules.
 *
 * Layout (`nodeAddress` is the host end of the test network's veth, test-network.ts, so the VMs on
 * that network, the pods and the host all reach it, and no traffic leaves the machine):
 *
 * ```
 *  kube-apiserver  https://<nodeAddress>:<port>   (ClusterIP 10.0.0.1:443 via kube-proxy)
 *  kubelet         <nodeAddress>:<port>, node name `metal-node`, pods on bridge `mcni<N>` 10.244.N.0/24
 *  NodePorts       <nodeAddress>:30000-32767     (kube-proxy)
 * ```
 *
 * Every process runs under `setpriv --pdeathsig KILL`; {@link Cluster.stop} ends them in reverse
 * order, removes every pod container, the pod bridge and kube-proxy's iptables chains, and deletes
 * the work folder. Needs root (containerd, iptables, network namespaces).
 */
import { type ChildProcess, execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ControlPlane, freePorts, REPO_ROOT, spawnLogged, stopProcess, waitFor } from './control-plane.js';

const run = promisify(execFile);

/** Name of the only node. */
export const NODE_NAME = 'metal-node';
/** Debian `containernetworking-plugins`. */
const CNI_BIN = '/usr/lib/cni';
const POD_CIDR_PREFIX = '10.244';

export interface ClusterOptions {
  /** Work folder (created; removed by {@link Cluster.stop}). */
  dir: string;
  /** Address of the node on this machine: the API server, the kubelet and NodePorts use it. */
  nodeAddress: string;
  /** Third octet of the pod network 10.244.N.0/24 and suffix of its bridge (default: from the pid). */
  podSubnet?: number;
}

/** Folder with every binary of a node, building what is missing first (minutes, once). */
export function nodeBinaries(): string {
  const out = execFileSync('bash', [join(REPO_ROOT, 'hack', 'build-control-plane.sh'), '--node'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return out.trim().split('\n').pop()!;
}

/** Builds (or reuses) an image with hack/build-image.sh and writes it as an oci-archive; returns its name. */
export function buildImageArchive(archive: string, args: string[] = []): string {
  const out = execFileSync(
    'bash',
    [join(REPO_ROOT, 'hack', 'build-image.sh'), ...args, '--archive', archive],
    {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  return out.trim().split('\n').pop()!;
}

export class Cluster {
  private readonly procs = new Map<string, ChildProcess>();
  private readonly logDir: string;
  readonly containerdSocket: string;
  readonly bridge: string;
  readonly podCidr: string;

  private constructor(
    readonly opts: ClusterOptions,
    readonly cp: ControlPlane,
    private readonly bin: string,
  ) {
    this.logDir = join(opts.dir, 'logs');
    this.containerdSocket = join(opts.dir, 'containerd', 'containerd.sock');
    const n = opts.podSubnet ?? 10 + (process.pid % 200);
    this.bridge = `mcni${n}`;
    this.podCidr = `${POD_CIDR_PREFIX}.${n}.0/24`;
  }

  get kubeconfigPath(): string {
    return this.cp.kubeconfigPath;
  }

  /**
   * Starts every component and resolves once the node is Ready and the `default` ServiceAccount
   * exists (pods can be created). Throws with the failing component's log tail; what started is
   * stopped again.
   */
  static async start(opts: ClusterOptions): Promise<Cluster> {
    mkdirSync(opts.dir, { recursive: true });
    const bin = nodeBinaries();
    // The CRDs come from the shipped manifests (kubectl apply -k), as in a user's cluster.
    const cp = await ControlPlane.start({
      nodeAddress: opts.nodeAddress,
      exitOnSignal: true,
      installCRDs: false,
    });
    const c = new Cluster(opts, cp, bin);
    try {
      await c.boot();
    } catch (err) {
      await c.stop();
      throw err;
    }
    return c;
  }

  private async boot(): Promise<void> {
    const kubeconfig = this.cp.kubeconfigPath;
    const d = this.cp.dir;
    await this.startContainerd();
    const [schedPort, proxyMetrics, proxyHealth, kubeletPort] = (await freePorts(4)) as [
      number,
      number,
      number,
      number,
    ];
    this.spawn('kube-controller-manager', [
      `--kubeconfig=${kubeconfig}`,
      `--authentication-kubeconfig=${kubeconfig}`,
      `--authorization-kubeconfig=${kubeconfig}`,
      // The usual controllers (deployments, replicasets, endpoints/endpointslices, namespace,
      // garbage collector, serviceaccount tokens, ...), each under its own ServiceAccount.
      '--controllers=*',
      '--use-service-account-credentials=true',
      `--service-account-private-key-file=${join(d, 'sa.key')}`,
      `--root-ca-file=${this.cp.caFile}`,
      '--leader-elect=false',
      '--secure-port=0',
    ]);
    this.spawn('kube-scheduler', [
      `--kubeconfig=${kubeconfig}`,
      `--authentication-kubeconfig=${kubeconfig}`,
      `--authorization-kubeconfig=${kubeconfig}`,
      '--leader-elect=false',
      '--bind-address=127.0.0.1',
      `--secure-port=${schedPort}`,
    ]);
    this.spawn('kube-proxy', [
      `--kubeconfig=${kubeconfig}`,
      '--proxy-mode=iptables',
      `--hostname-override=${NODE_NAME}`,
      `--cluster-cidr=${this.podCidr}`,
      // Leave the machine's conntrack table size alone (a sysctl write).
      '--conntrack-max-per-core=0',
      `--metrics-bind-address=127.0.0.1:${proxyMetrics}`,
      `--healthz-bind-address=127.0.0.1:${proxyHealth}`,
    ]);
    this.startKubelet(kubeletPort);
    await this.waitReady();
  }

  private spawn(name: string, args: string[], path = join(this.bin, name)): ChildProcess {
    const p = spawnLogged(this.logDir, name, path, args);
    this.procs.set(name, p);
    return p;
  }

  private async startContainerd(): Promise<void> {
    const base = join(this.opts.dir, 'containerd');
    const cniConf = join(this.opts.dir, 'cni', 'net.d');
    mkdirSync(cniConf, { recursive: true });
    mkdirSync(base, { recursive: true });
    const pause = buildImageArchive(join(this.opts.dir, 'pause.tar'), ['--pause', join(this.bin, 'pause')]);
    writeFileSync(
      join(cniConf, '10-metal.conflist'),
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'metal-pods',
        plugins: [
          {
            type: 'bridge',
            bridge: this.bridge,
            isGateway: true,
            // Pods reach only this machine (API server, BMCs, registry on the node address): no NAT needed.
            ipMasq: false,
            hairpinMode: true,
            ipam: {
              type: 'host-local',
              ranges: [[{ subnet: this.podCidr }]],
              routes: [{ dst: '0.0.0.0/0' }],
              dataDir: join(this.opts.dir, 'cni', 'ipam'),
            },
          },
          { type: 'portmap', capabilities: { portMappings: true } },
        ],
      }),
    );
    const config = join(base, 'config.toml');
    writeFileSync(
      config,
      [
        'version = 2',
        `root = "${join(base, 'root')}"`,
        `state = "${join(base, 'state')}"`,
        'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]',
        '[grpc]',
        `  address = "${this.containerdSocket}"`,
        '[ttrpc]',
        `  address = "${this.containerdSocket}.ttrpc"`,
        '[plugins."io.containerd.grpc.v1.cri"]',
        `  sandbox_image = "${pause}"`,
        // The kubelet and containerd ask for negative OOM scores (sandboxes -998); a process here
        // may not lower its score below its own, and runc then dies at start. Clamp to containerd's.
        '  restrict_oom_score_adj = true',
        '  [plugins."io.containerd.grpc.v1.cri".containerd]',
        '    snapshotter = "overlayfs"',
        '    default_runtime_name = "runc"',
        '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
        '      runtime_type = "io.containerd.runc.v2"',
        '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]',
        '        SystemdCgroup = false',
        '  [plugins."io.containerd.grpc.v1.cri".cni]',
        `    bin_dir = "${CNI_BIN}"`,
        `    conf_dir = "${cniConf}"`,
        '',
      ].join('\n'),
    );
    const p = this.spawn('containerd', ['--config', config], '/usr/bin/containerd');
    await waitFor('containerd', 30_000, async () => {
      if (p.exitCode !== null) throw new Error(`containerd exited:\n${this.logTail('containerd')}`);
      return existsSync(this.containerdSocket);
    });
    await this.importImage(join(this.opts.dir, 'pause.tar'));
  }

  private startKubelet(port: number): void {
    const root = join(this.opts.dir, 'kubelet');
    mkdirSync(root, { recursive: true });
    const config = join(root, 'config.yaml');
    writeFileSync(
      config,
      JSON.stringify({
        apiVersion: 'kubelet.config.k8s.io/v1beta1',
        kind: 'KubeletConfiguration',
        address: this.opts.nodeAddress,
        port,
        readOnlyPort: 0,
        healthzPort: 0,
        // The API server reaches the kubelet (logs, exec) only on the node address of this machine.
        authentication: { anonymous: { enabled: true }, webhook: { enabled: false } },
        authorization: { mode: 'AlwaysAllow' },
        containerRuntimeEndpoint: `unix://${this.containerdSocket}`,
        cgroupDriver: 'cgroupfs',
        // The machine's cgroups are v1; keep the kubelet from managing QoS and allocatable
        // hierarchies above the pods (it still puts each pod in a cgroup of its own).
        cgroupsPerQOS: false,
        enforceNodeAllocatable: [],
        failCgroupV1: false,
        failSwapOn: false,
        // Evict only when the machine is really out of space (tests share it).
        evictionHard: { 'memory.available': '100Mi', 'nodefs.available': '1%', 'imagefs.available': '1%' },
        imageGCHighThresholdPercent: 100,
        imageGCLowThresholdPercent: 99,
        clusterDomain: 'cluster.local',
        resolvConf: '/etc/resolv.conf',
        serializeImagePulls: false,
        // No image is pulled from a registry: they are imported into containerd (importImage).
        registerNode: true,
      }),
    );
    this.spawn('kubelet', [
      `--config=${config}`,
      `--kubeconfig=${this.cp.kubeconfigPath}`,
      `--root-dir=${root}`,
      `--cert-dir=${join(root, 'pki')}`,
      `--node-ip=${this.opts.nodeAddress}`,
      `--hostname-override=${NODE_NAME}`,
      '--v=1',
    ]);
  }

  private async waitReady(): Promise<void> {
    await waitFor('node Ready and the default ServiceAccount', 180_000, async () => {
      for (const [name, p] of this.procs)
        if (p.exitCode !== null || p.signalCode !== null)
          throw new Error(`${name} exited at start:\n${this.logTail(name)}`);
      const node = await kubectlJson(this.kubeconfigPath, ['get', 'node', NODE_NAME]).catch(() => undefined);
      const ready = (
        node as { status?: { conditions?: { type: string; status: string }[] } }
      )?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
      if (!ready) return false;
      const sa = await kubectlJson(this.kubeconfigPath, [
        'get',
        'serviceaccount',
        'default',
        '-n',
        'default',
      ]).catch(() => undefined);
      return sa !== undefined;
    }).catch((err: Error) => {
      throw new Error(`${err.message}\n--- kubelet log ---\n${this.logTail('kubelet')}`);
    });
  }

  /** Imports an oci-archive (hack/build-image.sh --archive) into containerd's `k8s.io` namespace, where the kubelet finds it. */
  async importImage(archive: string): Promise<void> {
    await run('ctr', ['--address', this.containerdSocket, '-n', 'k8s.io', 'images', 'import', archive], {
      maxBuffer: 1 << 20,
    });
  }

  /** Last `lines` lines of a component's log. */
  logTail(name: string, lines = 40): string {
    try {
      return execFileSync('tail', ['-n', String(lines), join(this.logDir, `${name}.log`)], {
        encoding: 'utf8',
      });
    } catch {
      return '';
    }
  }

  /**
   * Stops the node's processes (kubelet first, so no pod is restarted), removes every container
   * and the pod bridge, kube-proxy's iptables rules, then the control plane and the work folder.
   * Idempotent; never throws.
   */
  async stop(): Promise<void> {
    for (const name of ['kubelet', 'kube-proxy', 'kube-scheduler', 'kube-controller-manager']) {
      await stopProcess(this.procs.get(name));
      this.procs.delete(name);
    }
    const ctr = ['--address', this.containerdSocket, '-n', 'k8s.io'];
    if (this.procs.has('containerd')) {
      const tasks = await run('ctr', [...ctr, 'tasks', 'ls', '-q']).catch(() => ({ stdout: '' }));
      for (const id of tasks.stdout.split('\n').filter(Boolean))
        await run('ctr', [...ctr, 'tasks', 'kill', '-s', 'SIGKILL', id]).catch(() => undefined);
      await new Promise((ok) => setTimeout(ok, 500));
      const containers = await run('ctr', [...ctr, 'containers', 'ls', '-q']).catch(() => ({ stdout: '' }));
      for (const id of containers.stdout.split('\n').filter(Boolean)) {
        await run('ctr', [...ctr, 'tasks', 'delete', '-f', id]).catch(() => undefined);
        await run('ctr', [...ctr, 'containers', 'delete', id]).catch(() => undefined);
      }
      await stopProcess(this.procs.get('containerd'));
      this.procs.delete('containerd');
    }
    // Pod sandboxes' network namespaces go with their containers; the bridge stays until removed.
    await run('ip', ['link', 'delete', this.bridge]).catch(() => undefined);
    await run(join(this.bin, 'kube-proxy'), ['--cleanup']).catch(() => undefined);
    // Mounts of the pods' volumes and rootfs below the work folder would keep rm from removing it.
    await run('sh', [
      '-c',
      `grep -o ' ${this.opts.dir}[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l`,
    ]).catch(() => undefined);
    await this.cp.stop();
    rmSync(this.opts.dir, { recursive: true, force: true });
  }
}

/** `kubectl <args> -o json` with `kubeconfig`; rejects on a non-zero exit (stderr in the message). */
export async function kubectlJson(kubeconfig: string, args: string[]): Promise<unknown> {
  const { stdout } = await run('kubectl', ['--kubeconfig', kubeconfig, ...args, '-o', 'json'], {
    maxBuffer: 64 << 20,
  });
  return JSON.parse(stdout);
}
