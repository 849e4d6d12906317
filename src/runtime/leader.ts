/**
 * Leader election on a `coordination.k8s.io/v1` Lease, with client-go's `leaderelection` algorithm:
 *
 * - a candidate takes the Lease when it does not exist, has no holder, or its record has not changed
 *   for `leaseDurationMs` as measured on the candidate's own clock since it last saw the record
 *   change (so clock skew between hosts never matters; `renewTime` is only informative);
 * - every write is a compare-and-swap on the Lease's resourceVersion, so two candidates can never
 *   both succeed;
 * - the leader renews every `retryPeriodMs`; if it cannot renew within `renewDeadlineMs` it considers
 *   itself deposed (before the Lease can expire for others, since renewDeadline < leaseDuration) and
 *   calls `onStoppedLeading`;
 * - `stop()` releases the Lease (empty holder, as client-go's `ReleaseOnCancel`), so a successor need
 *   not wait for expiry.
 *
 * Unlike client-go, a waiting candidate also wakes up exactly when the observed Lease is due to expire,
 * instead of up to one retry period later. Handover after a leader's crash therefore takes at most
 * leaseDuration + ~1.2·retryPeriod (≈ 17.4 s with the defaults).
 */
import type pino from 'pino';
import { sleep } from './backoff.js';
import { ApiError, type KubeClient } from './client.js';
import { newLogger } from './logger.js';
import type { RuntimeMetrics } from './metrics.js';
import { type KObject, Resources } from './resource.js';
import { microTime } from './time.js';

export interface LeaderElectorOptions {
  /** Lease name. */
  name: string;
  namespace: string;
  /** Unique per process (client-go: hostname + '_' + uuid). */
  identity: string;
  /** How long a Lease is valid without renewal, in ms. Default 15 000. */
  leaseDurationMs?: number;
  /** How long the leader keeps retrying a failed renewal before giving up, in ms. Default 10 000. */
  renewDeadlineMs?: number;
  /** Pause between attempts (to acquire or renew), in ms, jittered up to +20%. Default 2 000. */
  retryPeriodMs?: number;
  log?: pino.Logger;
  metrics?: RuntimeMetrics;
}

export interface LeaderCallbacks {
  /** Leadership gained; `signal` aborts when it is lost or released. */
  onStartedLeading: (signal: AbortSignal) => void | Promise<void>;
  /** Leadership lost or released (called once per term, after `signal` aborted). */
  onStoppedLeading: () => void;
}

interface Lease extends KObject {
  spec?: {
    holderIdentity?: string | null;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

export class LeaderElector {
  private readonly leaseDurationMs: number;
  private readonly renewDeadlineMs: number;
  private readonly retryPeriodMs: number;
  private readonly log: pino.Logger;
  private leading = false;
  private lease?: Lease;
  /** Record we last saw, and when (our clock): the expiry reference. */
  private observedRecord = '';
  private observedAt = 0;
  private stopCtl = new AbortController();
  private runDone?: Promise<void>;

  constructor(
    private readonly client: KubeClient,
    private readonly opts: LeaderElectorOptions,
  ) {
    this.leaseDurationMs = opts.leaseDurationMs ?? 15_000;
    this.renewDeadlineMs = opts.renewDeadlineMs ?? 10_000;
    this.retryPeriodMs = opts.retryPeriodMs ?? 2_000;
    if (this.renewDeadlineMs >= this.leaseDurationMs)
      throw new Error('renewDeadlineMs must be < leaseDurationMs');
    if (this.retryPeriodMs * 1.2 >= this.renewDeadlineMs)
      throw new Error('retryPeriodMs·1.2 must be < renewDeadlineMs');
    this.log = (opts.log ?? newLogger('leader')).child({
      lease: `${opts.namespace}/${opts.name}`,
      identity: opts.identity,
    });
  }

  isLeader(): boolean {
    return this.leading;
  }

  /**
   * Campaigns until leadership is gained, leads until it is lost or `stop()` is called, then resolves.
   * Run it again to campaign for a new term. API errors while campaigning are logged and retried.
   */
  run(callbacks: LeaderCallbacks): Promise<void> {
    if (this.runDone) throw new Error('LeaderElector.run is already running');
    if (this.stopCtl.signal.aborted) this.stopCtl = new AbortController();
    this.runDone = this.campaignAndLead(callbacks).finally(() => {
      this.runDone = undefined;
    });
    return this.runDone;
  }

  /** Stops campaigning or leading; releases the Lease if held. Resolves when `run` has returned. */
  async stop(): Promise<void> {
    this.stopCtl.abort();
    await this.runDone;
  }

  private async campaignAndLead(cb: LeaderCallbacks): Promise<void> {
    const stop = this.stopCtl.signal;
    while (!stop.aborted) {
      let acquired = false;
      try {
        acquired = await this.tryAcquireOrRenew();
      } catch (err) {
        this.log.warn({ err }, 'leader election: cannot read or write the Lease');
      }
      if (acquired) break;
      await sleep(this.nextAttemptDelay(), stop);
    }
    if (stop.aborted) return;

    this.setLeading(true);
    this.log.info('became leader');
    const term = new AbortController();
    // Not awaited (client-go runs it in its own goroutine): a slow start must not delay renewals.
    void Promise.resolve()
      .then(() => cb.onStartedLeading(term.signal))
      .catch((err: unknown) => this.log.error({ err }, 'onStartedLeading threw'));
    const released = await this.renewLoop(stop);
    term.abort();
    this.setLeading(false);
    try {
      cb.onStoppedLeading();
    } catch (err) {
      this.log.error({ err }, 'onStoppedLeading threw');
    }
    if (released) await this.release();
  }

  /** Renews until the renew deadline passes without success (false) or `stop` aborts (true: release). */
  private async renewLoop(stop: AbortSignal): Promise<boolean> {
    let lastRenew = Date.now();
    while (!stop.aborted) {
      await sleep(this.jittered(this.retryPeriodMs), stop);
      if (stop.aborted) return true;
      const left = this.renewDeadlineMs - (Date.now() - lastRenew);
      let ok = false;
      try {
        ok = await withTimeout(this.tryAcquireOrRenew(), Math.max(left, 1));
      } catch (err) {
        this.log.warn({ err }, 'failed to renew the Lease');
      }
      if (ok) {
        lastRenew = Date.now();
      } else if (Date.now() - lastRenew >= this.renewDeadlineMs) {
        this.log.error(
          { renewDeadlineMs: this.renewDeadlineMs },
          'leadership lost: Lease not renewed within the deadline',
        );
        return false;
      } else if (this.lease?.spec?.holderIdentity && this.lease.spec.holderIdentity !== this.opts.identity) {
        this.log.error(
          { holder: this.lease.spec.holderIdentity },
          'leadership lost: another candidate holds the Lease',
        );
        return false;
      }
    }
    return true;
  }

  /** One attempt; true when we hold the Lease afterwards. Throws on API errors other than 409. */
  private async tryAcquireOrRenew(): Promise<boolean> {
    const { name, namespace, identity } = this.opts;
    const now = new Date();
    const leaseDurationSeconds = Math.max(1, Math.round(this.leaseDurationMs / 1000));
    const current = await this.client.get<Lease>(Resources.Lease, name, namespace);
    if (!current) {
      try {
        this.lease = await this.client.create<Lease>(Resources.Lease, {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name, namespace },
          spec: {
            holderIdentity: identity,
            leaseDurationSeconds,
            acquireTime: microTime(now),
            renewTime: microTime(now),
            leaseTransitions: 0,
          },
        });
        this.observe(this.lease);
        return true;
      } catch (err) {
        if (err instanceof ApiError && err.status === 409) return false;
        throw err;
      }
    }
    this.lease = current;
    this.observe(current);
    const spec = current.spec ?? {};
    const holder = spec.holderIdentity ?? '';
    const mine = holder === identity;
    if (!mine && holder && Date.now() < this.observedAt + this.leaseDurationMs) return false;
    const next: Lease = {
      ...current,
      spec: {
        ...spec,
        holderIdentity: identity,
        leaseDurationSeconds,
        acquireTime: mine && spec.acquireTime ? spec.acquireTime : microTime(now),
        renewTime: microTime(now),
        leaseTransitions: mine ? (spec.leaseTransitions ?? 0) : (spec.leaseTransitions ?? 0) + 1,
      },
    };
    try {
      this.lease = await this.client.update<Lease>(Resources.Lease, next);
      this.observe(this.lease);
      return true;
    } catch (err) {
      if (err instanceof ApiError && err.status === 409) return false;
      throw err;
    }
  }

  /** Tracks when the Lease record last changed, on our own clock. */
  private observe(lease: Lease): void {
    const s = lease.spec ?? {};
    const record = `${s.holderIdentity ?? ''}|${s.renewTime ?? ''}|${s.acquireTime ?? ''}|${s.leaseTransitions ?? 0}`;
    if (record !== this.observedRecord) {
      this.observedRecord = record;
      this.observedAt = Date.now();
    }
  }

  /** Until the next acquire attempt: the retry period, or sooner if the observed Lease expires sooner. */
  private nextAttemptDelay(): number {
    const retry = this.jittered(this.retryPeriodMs);
    const holder = this.lease?.spec?.holderIdentity;
    if (!holder || holder === this.opts.identity) return retry;
    const untilExpiry = this.observedAt + this.leaseDurationMs - Date.now() + 20;
    return Math.max(20, Math.min(retry, untilExpiry));
  }

  private jittered(ms: number): number {
    return ms * (1 + Math.random() * 0.2);
  }

  /** Empties the holder so candidates can take over at once (only if we still hold it). */
  private async release(): Promise<void> {
    const lease = this.lease;
    if (!lease || lease.spec?.holderIdentity !== this.opts.identity) return;
    const now = microTime(new Date());
    try {
      this.lease = await this.client.update<Lease>(Resources.Lease, {
        ...lease,
        spec: {
          ...lease.spec,
          holderIdentity: null,
          leaseDurationSeconds: 1,
          renewTime: now,
          acquireTime: now,
        },
      });
      this.log.info('released the Lease');
    } catch (err) {
      this.log.warn({ err }, 'failed to release the Lease; successors wait for it to expire');
    }
  }

  private setLeading(v: boolean): void {
    this.leading = v;
    this.opts.metrics?.leaderStatus.set({ name: this.opts.name }, v ? 1 : 0);
  }
}

/** Rejects with a timeout error when `p` takes longer than `ms`. */
function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let t: NodeJS.Timeout;
  return Promise.race([
    p,
    new Promise<never>((_, fail) => {
      t = setTimeout(() => fail(new Error(`timed out after ${Math.round(ms)} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(t));
}
