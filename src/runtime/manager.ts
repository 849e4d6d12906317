/**
 * Manager: owns one KubeClient, one EventRecorder, one metrics registry, the shared informers and the
 * controllers of a process, and runs the controllers only while this process is the leader.
 *
 * Informers run in every replica, leader or not, because the registry and the boot server (which may
 * run in the same process) answer reads from the caches. Controllers start when the Lease is won and
 * stop when it is lost; the next term begins only after the previous term's in-flight reconciles
 * have finished, so one process never reconciles a key twice at once.
 */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { KubeConfig } from '@kubernetes/client-node';
import type pino from 'pino';
import { KubeClient, type KubeClientOptions } from './client.js';
import type { Controller } from './controller.js';
import { EventRecorder } from './events.js';
import { startHealthServer } from './health.js';
import { Informer } from './informer.js';
import { LeaderElector } from './leader.js';
import { newLogger } from './logger.js';
import { RuntimeMetrics } from './metrics.js';
import type { KObject, ResourceType } from './resource.js';

export interface LeaderElectionOptions {
  /** Namespace of the Lease. */
  namespace: string;
  /** Default `<hostname>_<uuid>`, unique per process as client-go recommends. */
  identity?: string;
  /** Lease name. Default: the manager's name. */
  leaseName?: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  /**
   * Called once when a held Lease is lost (not on `stop()`), after the controllers were told to stop.
   * controller-runtime exits the process here, so no reconcile of the lost term (a BMC call in
   * flight, a power action about to be sent) runs on next to the new leader; the manager command
   * does the same (security review S10). Unset: controllers stop and the process campaigns again.
   */
  onLost?: () => void;
}

export interface ManagerOptions {
  kubeConfig: KubeConfig;
  /** Component name: field manager, Event `reportingComponent`, default Lease name. */
  name: string;
  /** false: controllers run without election (single replica, tests). */
  leaderElection?: LeaderElectionOptions | false;
  /** Serve /healthz, /readyz and /metrics on this port (0: any free port, see `healthPort`). */
  metricsPort?: number;
  metricsHost?: string;
  log?: pino.Logger;
  client?: Omit<KubeClientOptions, 'fieldManager' | 'metrics'>;
}

export class Manager {
  readonly client: KubeClient;
  readonly events: EventRecorder;
  readonly metrics: RuntimeMetrics;
  readonly log: pino.Logger;
  // biome-ignore lint/suspicious/noExplicitAny: informers of different kinds share one map
  private readonly informers = new Map<string, Informer<any>>();
  private readonly controllers: Controller[] = [];
  private readonly elector?: LeaderElector;
  private started = false;
  private stopping = false;
  private leading = false;
  private electionLoop?: Promise<void>;
  private termDone: Promise<unknown> = Promise.resolve();
  private health?: { port: number; close(): Promise<void> };

  constructor(private readonly opts: ManagerOptions) {
    this.log = opts.log ?? newLogger(opts.name);
    this.metrics = new RuntimeMetrics();
    this.client = new KubeClient(opts.kubeConfig, {
      ...opts.client,
      fieldManager: opts.name,
      metrics: this.metrics,
    });
    this.events = new EventRecorder(this.client, opts.name, { log: this.log });
    this.client.onObject((obj, writer) => {
      for (const inf of this.informers.values()) inf.observe(obj, writer);
    });
    const le = opts.leaderElection;
    if (le) {
      this.elector = new LeaderElector(this.client, {
        name: le.leaseName ?? opts.name,
        namespace: le.namespace,
        identity: le.identity ?? `${hostname()}_${randomUUID()}`,
        leaseDurationMs: le.leaseDurationMs,
        renewDeadlineMs: le.renewDeadlineMs,
        retryPeriodMs: le.retryPeriodMs,
        log: this.log,
        metrics: this.metrics,
      });
    }
  }

  /**
   * The shared informer for (`rt`, namespace, labelSelector), created on first use. Index functions
   * of later callers are added to it (a clashing index name throws). Informers created after
   * `start()` start at once.
   */
  informer<T extends KObject>(
    rt: ResourceType,
    opts: {
      namespace?: string;
      labelSelector?: string;
      indexers?: Record<string, (obj: T) => string[]>;
      /** See `InformerOptions.transform`; only the first registration of an informer sets it. */
      transform?: (obj: T) => T;
    } = {},
  ): Informer<T> {
    const key = `${rt.group}/${rt.version}/${rt.plural}|${opts.namespace ?? ''}|${opts.labelSelector ?? ''}`;
    const existing = this.informers.get(key) as Informer<T> | undefined;
    if (existing) {
      if (opts.indexers) existing.addIndexers(opts.indexers);
      return existing;
    }
    const inf = new Informer<T>(this.client, rt, {
      namespace: opts.namespace,
      labelSelector: opts.labelSelector,
      indexers: opts.indexers,
      transform: opts.transform,
      log: this.log,
      metrics: this.metrics,
    });
    this.informers.set(key, inf);
    if (this.started && !this.stopping) {
      inf.start().catch((err: unknown) => this.log.debug({ err }, 'informer stopped before sync'));
    }
    return inf;
  }

  /** Registers a controller; it runs whenever this process leads (at once if it leads already). */
  add(c: Controller): void {
    this.controllers.push(c);
    if (this.leading) c.start();
  }

  /** True once every informer has its first full list (the readiness condition). */
  ready(): boolean {
    for (const inf of this.informers.values()) if (!inf.hasSynced()) return false;
    return this.started;
  }

  /** True while controllers run: Lease held, or election disabled. */
  isLeader(): boolean {
    return this.leading;
  }

  /** Port of the health/metrics server, when one was requested. */
  get healthPort(): number | undefined {
    return this.health?.port;
  }

  /**
   * Starts the health server (if `metricsPort` is set) and every informer, resolves once all caches
   * are synced; then controllers start immediately (no election) or whenever the Lease is won.
   */
  async start(): Promise<void> {
    if (this.started) throw new Error('manager already started');
    this.started = true;
    if (this.opts.metricsPort !== undefined) {
      this.health = await startHealthServer({
        port: this.opts.metricsPort,
        host: this.opts.metricsHost,
        registry: this.metrics.registry,
        ready: () => this.ready(),
      });
      this.log.info({ port: this.health.port }, 'health and metrics server listening');
    }
    await Promise.all([...this.informers.values()].map((i) => i.start()));
    this.log.info({ informers: this.informers.size }, 'caches synced');
    if (this.stopping) return;
    if (!this.elector) {
      this.beginTerm();
      return;
    }
    this.electionLoop = this.campaign(this.elector);
  }

  /**
   * Graceful stop: controllers stop and their in-flight reconciles finish, then the Lease is released
   * (so a successor starts without waiting for expiry and without overlapping this one), then
   * informers stop, pending Events are written, and servers and connections close.
   */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.leading = false;
    await Promise.all(this.controllers.map((c) => c.stop(true)));
    await this.elector?.stop();
    await this.electionLoop;
    for (const inf of this.informers.values()) inf.stop();
    await Promise.all([...this.informers.values()].map((i) => i.stopped()));
    await this.events.flush();
    await this.health?.close();
    await this.client.close();
  }

  private async campaign(elector: LeaderElector): Promise<void> {
    while (!this.stopping) {
      await elector.run({
        onStartedLeading: () => this.beginTerm(),
        onStoppedLeading: () => {
          this.leading = false;
          this.termDone = Promise.all(this.controllers.map((c) => c.stop(true)));
          const le = this.opts.leaderElection;
          if (!this.stopping && le) le.onLost?.();
        },
      });
      // Never overlap terms: the old term's reconciles finish before we campaign again.
      await this.termDone;
    }
  }

  private beginTerm(): void {
    if (this.stopping) return;
    this.leading = true;
    for (const c of this.controllers) c.start();
  }
}
