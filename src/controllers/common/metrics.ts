/**
 * Prometheus metrics of the boot flow, on the manager's registry (served at /metrics). Durations in
 * seconds (Prometheus base unit).
 */
import * as prom from 'prom-client';
import { SERVER_STATES } from '../../api/v1alpha1/server.js';
import { BOOT_SIGNALS } from '../../api/vocabulary.js';

const BOOT_BUCKETS = [1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 900, 1800];

/** Which flow an attempt belongs to. */
export type BootFlow = 'claim' | 'discovery' | 'cleanup';

export class BootMetrics {
  /**
   * `metal_boot_signal_seconds{flow,signal}`: power-on of an attempt to a signal of that attempt;
   * `signal` is one of the operator's own signals or `external` for every `External<Name>` signal
   * (tenants choose those names: one series each would let them grow the metrics without bound, N14).
   */
  readonly signalSeconds: prom.Histogram<'flow' | 'signal'>;
  /** `metal_boot_completion_seconds{flow}`: power-on of the completing attempt to completion. */
  readonly completionSeconds: prom.Histogram<'flow'>;
  /** `metal_boot_attempts_total{flow}`: attempts started. */
  readonly attempts: prom.Counter<'flow'>;
  /** `metal_boot_timeouts_total{flow}`: attempts whose deadline passed. */
  readonly timeouts: prom.Counter<'flow'>;
  /** `metal_boot_attempts_exhausted_total{flow}`: series that ended without completion. */
  readonly exhausted: prom.Counter<'flow'>;
  /**
   * `metal_boot_deadline_rechecks_total{flow,result}`: fresh reads before a deadline ended an
   * attempt (boot-attempt `DeadlineRecheck`: stands, averted, deferred). `averted` counts the
   * boots a lagging cache would have given up on.
   */
  readonly deadlineRechecks: prom.Counter<'flow' | 'result'>;
  /** `metal_servers{state}`: Servers by `status.state`, counted when scraped. */
  readonly servers: prom.Gauge<'state'>;
  /** Signals already observed, so each counts once per attempt (`uid/attempt/signal`). */
  private readonly seen = new Set<string>();

  constructor(registry: prom.Registry, serverStates: () => Record<string, number>) {
    const r = [registry];
    this.signalSeconds = new prom.Histogram({
      name: 'metal_boot_signal_seconds',
      help: 'Seconds from the power-on of a boot attempt to each boot signal of that attempt',
      labelNames: ['flow', 'signal'],
      buckets: BOOT_BUCKETS,
      registers: r,
    });
    this.completionSeconds = new prom.Histogram({
      name: 'metal_boot_completion_seconds',
      help: 'Seconds from the power-on of the completing attempt to boot completion',
      labelNames: ['flow'],
      buckets: BOOT_BUCKETS,
      registers: r,
    });
    this.attempts = new prom.Counter({
      name: 'metal_boot_attempts_total',
      help: 'Boot attempts started',
      labelNames: ['flow'],
      registers: r,
    });
    this.timeouts = new prom.Counter({
      name: 'metal_boot_timeouts_total',
      help: 'Boot attempts that timed out',
      labelNames: ['flow'],
      registers: r,
    });
    this.exhausted = new prom.Counter({
      name: 'metal_boot_attempts_exhausted_total',
      help: 'Boot series that used all attempts without completing',
      labelNames: ['flow'],
      registers: r,
    });
    this.deadlineRechecks = new prom.Counter({
      name: 'metal_boot_deadline_rechecks_total',
      help: 'Fresh reads of the boot configuration (and Server) before a deadline ended a boot attempt, by result',
      labelNames: ['flow', 'result'],
      registers: r,
    });
    this.servers = new prom.Gauge({
      name: 'metal_servers',
      help: 'Servers by state',
      labelNames: ['state'],
      registers: r,
      collect() {
        this.reset();
        // Every state, zero included: `metal_servers{state="Available"} == 0` must be a sample to alert on.
        for (const state of SERVER_STATES) this.set({ state }, 0);
        for (const [state, n] of Object.entries(serverStates())) this.set({ state }, n);
      },
    });
  }

  /** Observes signals of one attempt the first time each is seen; `poweredOnAt` is epoch ms. */
  observeSignals(flow: BootFlow, attemptId: string, signals: readonly string[], poweredOnAt: number): void {
    const now = Date.now();
    for (const s of signals) {
      const key = `${attemptId}/${s}`;
      if (this.seen.has(key)) continue;
      this.seen.add(key);
      this.signalSeconds.observe({ flow, signal: signalLabel(s) }, Math.max(0, now - poweredOnAt) / 1000);
    }
    // Bounded memory: attempt ids are only needed while their attempt runs.
    if (this.seen.size > 50_000) this.seen.clear();
  }
}

/** The `signal` label of a signal: its own name for the operator's signals, else `external`. */
export function signalLabel(signal: string): string {
  return (BOOT_SIGNALS as readonly string[]).includes(signal) ? signal : 'external';
}
