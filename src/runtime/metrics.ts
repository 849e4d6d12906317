/**
 * Prometheus metrics of the runtime. Names and labels mirror what client-go's workqueue,
 * controller-runtime and client-go's REST client export, so existing dashboards and alerts
 * (`workqueue_depth`, `controller_runtime_reconcile_errors_total`, …) work unchanged.
 * Durations are in seconds (Prometheus base unit).
 */
import * as prom from 'prom-client';

const RECONCILE_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const QUEUE_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60];
const REQUEST_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const RATE_LIMITER_BUCKETS = [0, 0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10];

export class RuntimeMetrics {
  readonly registry: prom.Registry;
  /** `workqueue_depth{name}`: items waiting (not delayed, not in flight). */
  readonly queueDepth: prom.Gauge<'name'>;
  /** `workqueue_adds_total{name}`: adds that were not deduplicated away. */
  readonly queueAdds: prom.Counter<'name'>;
  /** `workqueue_retries_total{name}`: rate-limited re-adds (failed or `requeue: true` reconciles). */
  readonly queueRetries: prom.Counter<'name'>;
  /** `workqueue_queue_duration_seconds{name}`: time from add to hand-out to a worker. */
  readonly queueLatency: prom.Histogram<'name'>;
  /** `controller_runtime_reconcile_total{controller,result}`; result: success|error|requeue|requeue_after. */
  readonly reconcileTotal: prom.Counter<'controller' | 'result'>;
  /** `controller_runtime_reconcile_errors_total{controller}`. */
  readonly reconcileErrors: prom.Counter<'controller'>;
  /** `controller_runtime_reconcile_time_seconds{controller}`. */
  readonly reconcileTime: prom.Histogram<'controller'>;
  /** `controller_runtime_active_workers{controller}`: reconciles running right now. */
  readonly activeWorkers: prom.Gauge<'controller'>;
  /** `leader_election_master_status{name}`: 1 while this process holds the Lease. */
  readonly leaderStatus: prom.Gauge<'name'>;
  /** `informer_relists_total{resource}`: full LISTs (first sync, 410 Gone, errors). */
  readonly informerRelists: prom.Counter<'resource'>;
  /** `informer_watch_restarts_total{resource,reason}`; reason: timeout|error|gone. */
  readonly informerWatchRestarts: prom.Counter<'resource' | 'reason'>;
  /** `rest_client_requests_total{method,code}`; code "0" when the API server was unreachable. */
  readonly restRequests: prom.Counter<'method' | 'code'>;
  /** `rest_client_request_duration_seconds{verb}` (watches excluded: they are long by design). */
  readonly restLatency: prom.Histogram<'verb'>;
  /**
   * `metal_api_requests_total{origin,resource,verb,code}`: where the requests go. origin: the
   * controller whose reconcile sent it (`other`: informers, registry, boot server, leader election);
   * resource: plural, `/status` for the subresource; code "0" when unreachable, 409 = conflict.
   */
  readonly apiRequests: prom.Counter<'origin' | 'resource' | 'verb' | 'code'>;
  /** `metal_api_noop_writes_total{origin,resource,verb}`: updates/patches answered with an unchanged resourceVersion. */
  readonly apiNoopWrites: prom.Counter<'origin' | 'resource' | 'verb'>;
  /** `rest_client_rate_limiter_duration_seconds{verb}` (client-go's name): wait for the client-side rate limit. */
  readonly rateLimiterLatency: prom.Histogram<'verb'>;

  /** Registers the runtime's metrics on `registry` (a fresh one by default), reusing any already there. */
  constructor(registry: prom.Registry = new prom.Registry()) {
    this.registry = registry;
    const m = new MetricFactory(registry);
    this.queueDepth = m.gauge('workqueue_depth', 'Current depth of the work queue', ['name']);
    this.queueAdds = m.counter('workqueue_adds_total', 'Adds handled by the work queue', ['name']);
    this.queueRetries = m.counter(
      'workqueue_retries_total',
      'Rate-limited retries handled by the work queue',
      ['name'],
    );
    this.queueLatency = m.histogram(
      'workqueue_queue_duration_seconds',
      'Seconds an item waits in the queue before a worker takes it',
      ['name'],
      QUEUE_BUCKETS,
    );
    this.reconcileTotal = m.counter(
      'controller_runtime_reconcile_total',
      'Reconciliations per controller and result',
      ['controller', 'result'],
    );
    this.reconcileErrors = m.counter(
      'controller_runtime_reconcile_errors_total',
      'Reconciliations that threw',
      ['controller'],
    );
    this.reconcileTime = m.histogram(
      'controller_runtime_reconcile_time_seconds',
      'Seconds per reconciliation',
      ['controller'],
      RECONCILE_BUCKETS,
    );
    this.activeWorkers = m.gauge('controller_runtime_active_workers', 'Workers currently reconciling', [
      'controller',
    ]);
    this.leaderStatus = m.gauge('leader_election_master_status', '1 while this process is the leader', [
      'name',
    ]);
    this.informerRelists = m.counter('informer_relists_total', 'Full LISTs done by informers', ['resource']);
    this.informerWatchRestarts = m.counter(
      'informer_watch_restarts_total',
      'Watch streams re-opened by informers',
      ['resource', 'reason'],
    );
    this.restRequests = m.counter(
      'rest_client_requests_total',
      'API server requests by method and HTTP status (0: unreachable)',
      ['method', 'code'],
    );
    this.restLatency = m.histogram(
      'rest_client_request_duration_seconds',
      'API server request latency in seconds',
      ['verb'],
      REQUEST_BUCKETS,
    );
    this.apiRequests = m.counter(
      'metal_api_requests_total',
      'API server requests by origin (controller), resource, verb and HTTP status (0: unreachable)',
      ['origin', 'resource', 'verb', 'code'],
    );
    this.apiNoopWrites = m.counter(
      'metal_api_noop_writes_total',
      'Updates and patches the API server answered with the resourceVersion the object already had',
      ['origin', 'resource', 'verb'],
    );
    this.rateLimiterLatency = m.histogram(
      'rest_client_rate_limiter_duration_seconds',
      'Seconds a request waited for the client-side rate limit',
      ['verb'],
      RATE_LIMITER_BUCKETS,
    );
  }
}

/**
 * Metrics of one registry, each made once: prom-client throws on duplicate names, and several
 * runtimes may share one registry (tests, embedding), so a name already registered is reused.
 */
class MetricFactory {
  constructor(private readonly r: prom.Registry) {}

  gauge<L extends string>(name: string, help: string, labelNames: L[]): prom.Gauge<L> {
    return this.once(name, () => new prom.Gauge({ name, help, labelNames, registers: [this.r] }));
  }

  counter<L extends string>(name: string, help: string, labelNames: L[]): prom.Counter<L> {
    return this.once(name, () => new prom.Counter({ name, help, labelNames, registers: [this.r] }));
  }

  histogram<L extends string>(
    name: string,
    help: string,
    labelNames: L[],
    buckets: number[],
  ): prom.Histogram<L> {
    return this.once(
      name,
      () => new prom.Histogram({ name, help, labelNames, buckets, registers: [this.r] }),
    );
  }

  private once<M extends prom.Metric<string>>(name: string, make: () => M): M {
    return (this.r.getSingleMetric(name) as M | undefined) ?? make();
  }
}
