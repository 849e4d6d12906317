/**
 * The production layout of the signal servers on one machine: the registry and the boot server as
 * processes of their own (`dist/src/cmd/registry.js`, `dist/src/cmd/bootserver.js`), N replicas each,
 * every kind behind a Service stand-in ({@link startServiceProxy}) whose port is the host-facing URL.
 * Replicas can be SIGKILLed and started again on the same port (the soak benchmark does). Every
 * replica serves `/metrics` (its API requests) on a port of its own; logs go to `<dir>/<name>.log`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { freePorts, REPO_ROOT, waitFor } from './control-plane.js';
import { nodeOptions, SIGNAL_MANIFESTS } from './deployment-node-options.js';
import { type ServiceProxy, startServiceProxy } from './service-proxy.js';

export type SignalKind = 'registry' | 'bootserver';

export interface SignalReplicasOptions {
  replicas: number;
  /** Logs and per-replica blob caches. */
  dir: string;
  kubeconfigPath: string;
  /** Ports of the two Services on 127.0.0.1 (the URLs hosts and the manager use). */
  registryPort: number;
  bootServerPort: number;
  imageCatalog: string;
  /** OCI flags of the boot server (`--allowed-registries`, …). */
  imageArgs: string[];
}

export interface Replica {
  name: string;
  kind: SignalKind;
  port: number;
  metricsPort: number;
  process: ChildProcess;
  log: string;
}

export class SignalReplicas {
  private constructor(
    private readonly opts: SignalReplicasOptions,
    readonly replicas: Replica[],
    readonly registryService: ServiceProxy,
    readonly bootServerService: ServiceProxy,
  ) {}

  /** Starts every replica and both Services; resolves once every replica answers `/readyz`. */
  static async start(opts: SignalReplicasOptions): Promise<SignalReplicas> {
    const ports = await freePorts(opts.replicas * 4);
    const replicas: Replica[] = [];
    for (const kind of ['registry', 'bootserver'] as const) {
      for (let i = 0; i < opts.replicas; i++) {
        replicas.push({
          name: `${kind}-${i}`,
          kind,
          port: ports.shift()!,
          metricsPort: ports.shift()!,
          process: undefined as unknown as ChildProcess,
          log: join(opts.dir, `${kind}-${i}.log`),
        });
      }
    }
    const backends = (k: SignalKind) => replicas.filter((r) => r.kind === k).map((r) => r.port);
    const registryService = await startServiceProxy(backends('registry'), opts.registryPort);
    const bootServerService = await startServiceProxy(backends('bootserver'), opts.bootServerPort);
    const set = new SignalReplicas(opts, replicas, registryService, bootServerService);
    try {
      await Promise.all(replicas.map((r) => set.startReplica(r)));
    } catch (err) {
      await set.stop();
      throw err;
    }
    return set;
  }

  /** The replicas of one kind, in index order. */
  of(kind: SignalKind): Replica[] {
    return this.replicas.filter((r) => r.kind === kind);
  }

  /** SIGKILLs a replica and resolves once it has exited. */
  async kill(r: Replica): Promise<void> {
    const p = r.process;
    if (p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((ok) => p.once('exit', ok));
    p.kill('SIGKILL');
    await exited;
  }

  /**
   * Starts (again) a replica on its port; resolves once it answers `/readyz` (informers synced).
   * @throws Error when it exits first or is not ready within 180 s (a loaded 2-core machine needs > 60 s).
   */
  async startReplica(r: Replica): Promise<void> {
    const script = r.kind === 'registry' ? 'registry.js' : 'bootserver.js';
    const args = [
      `--kubeconfig=${this.opts.kubeconfigPath}`,
      `--addr=127.0.0.1:${r.port}`,
      `--metrics-addr=127.0.0.1:${r.metricsPort}`,
    ];
    if (r.kind === 'bootserver') {
      args.push(
        `--url=${this.bootServerService.url}`,
        `--registry-url=${this.registryService.url}`,
        `--image-catalog=${this.opts.imageCatalog}`,
        ...this.opts.imageArgs,
        `--image-cache-dir=${join(this.opts.dir, `blob-cache-${r.name}`)}`,
      );
    }
    const fd = openSync(r.log, 'a');
    r.process = spawn(
      'setpriv',
      [
        '--pdeathsig',
        'KILL',
        '--',
        process.execPath,
        // The Deployment's V8 heap settings, so the replica's heap behaves as deployed.
        ...nodeOptions(SIGNAL_MANIFESTS[r.kind], r.kind),
        join(REPO_ROOT, 'dist', 'src', 'cmd', script),
        ...args,
      ],
      { stdio: ['ignore', fd, fd], env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'info' } },
    );
    closeSync(fd);
    const p = r.process;
    await waitFor(`${r.name} ready`, 180_000, async () => {
      if (p.exitCode !== null) throw new Error(`${r.name} exited (${p.exitCode}); see ${r.log}`);
      try {
        return (await fetch(`http://127.0.0.1:${r.metricsPort}/readyz`)).status === 200;
      } catch {
        return false;
      }
    });
  }

  /** `/metrics` URLs of the replicas that are running. */
  metricsUrls(): string[] {
    return this.replicas
      .filter((r) => r.process.exitCode === null && r.process.signalCode === null)
      .map((r) => `http://127.0.0.1:${r.metricsPort}/metrics`);
  }

  /** Stops every replica (SIGTERM, SIGKILL after 10 s) and both Services. */
  async stop(): Promise<void> {
    await Promise.all(
      this.replicas.map(async (r) => {
        const p = r.process;
        if (!p || p.exitCode !== null || p.signalCode !== null) return;
        const exited = new Promise((ok) => p.once('exit', ok));
        p.kill('SIGTERM');
        const t = setTimeout(() => p.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(t);
      }),
    );
    await Promise.all([this.registryService.close(), this.bootServerService.close()]);
  }
}
