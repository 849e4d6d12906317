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
    const r = registry;
    this.queueDepth = once(
      r,
      'workqueue_depth',
      (n) =>
        new prom.Gauge({
          name: n,
          help: 'Current depth of the work queue',
          labelNames: ['name'],
          registers: [r],
        }),
    );
    this.queueAdds = once(
      r,
      'workqueue_adds_total',
      (n) =>
        new prom.Counter({
          name: n,
          help: 'Adds handled by the work queue',
          labelNames: ['name'],
          registers: [r],
        }),
    );
    this.queueRetries = once(
      r,
      'workqueue_retries_total',
      (n) =>
        new prom.Counter({
          name: n,
          help: 'Rate-limited retries handled by the work queue',
          labelNames: ['name'],
          registers: [r],
        }),
    );
    this.queueLatency = once(
      r,
      'workqueue_queue_duration_seconds',
      (n) =>
        new prom.Histogram({
          name: n,
          help: 'Seconds an item waits in the queue before a worker takes it',
          labelNames: ['name'],
          buckets: QUEUE_BUCKETS,
          registers: [r],
        }),
    );
    this.reconcileTotal = once(
      r,
      'controller_runtime_reconcile_total',
      (n) =>
        new prom.Counter({
          name: n,
          help: 'Reconciliations per controller and result',
          labelNames: ['controller', 'result'],
          registers: [r],
        }),
    );
    this.reconcileErrors = once(
      r,
      'controller_runtime_reconcile_errors_total',
      (n) =>
        new prom.Counter({
          name: n,
          help: 'Reconciliations that threw',
          labelNames: ['controller'],
          registers: [r],
        }),
    );
    this.reconcileTime = once(
      r,
      'controller_runtime_reconcile_time_seconds',
      (n) =>
        new prom.Histogram({
          name: n,
          help: 'Seconds per reconciliation',
          labelNames: ['controller'],
          buckets: RECONCILE_BUCKETS,
          registers: [r],
        }),
    );
    this.activeWorkers = once(
      r,
      'controller_runtime_active_workers',
      (n) =>
        new prom.Gauge({
          name: n,
          help: 'Workers currently reconciling',
          labelNames: ['controller'],
          registers: [r],
        }),
    );
    this.leaderStatus = once(
      r,
      'leader_election_master_status',
      (n) =>
        new prom.Gauge({
          name: n,
          help: '1 while this process is the leader',
          labelNames: ['name'],
          registers: [r],
        }),
    );
    this.informerRelists = once(
      r,
      'informer_relists_total',
      (n) =>
        new prom.Counter({
          name: n,
          help: 'Full LISTs done by informers',
          labelNames: ['resource'],
          registers: [r],
        }),
    );
    this.informerWatchRestarts = once(
      r,
      'informer_watch_restarts_total',
      (n) =>
        new prom.Counter({
          name: n,
          help: 'Watch streams re-opened by informers',
          labelNames: ['resource', 'reason'],
          registers: [r],
        }),
    );
    this.restRequests = once(
      r,
      'rest_client_requests_total',
      (n) =>
        new prom.Counter({
          name: n,
          help: 'API server requests by method and HTTP status (0: unreachable)',
          labelNames: ['method', 'code'],
          registers: [r],
        }),
    );
    this.restLatency = once(
      r,
      'rest_client_request_duration_seconds',
      (n) =>
        new prom.Histogram({
          name: n,
          help: 'API server request latency in seconds',
          labelNames: ['verb'],
          buckets: REQUEST_BUCKETS,
          registers: [r],
        }),
    );
    this.apiRequests = once(
      r,
      'metal_api_requests_total',
      (n) =>
        new prom.Counter({
          name: n,
          help: 'API server requests by origin (controller), resource, verb and HTTP status (0: unreachable)',
          labelNames: ['origin', 'resource', 'verb', 'code'],
          registers: [r],
        }),
    );
    this.apiNoopWrites = once(
      r,
      'metal_api_noop_writes_total',
      (n) =>
        new prom.Counter({
          name: n,
          help: 'Updates and patches the API server answered with the resourceVersion the object already had',
          labelNames: ['origin', 'resource', 'verb'],
          registers: [r],
        }),
    );
    this.rateLimiterLatency = once(
      r,
      'rest_client_rate_limiter_duration_seconds',
      (n) =>
        new prom.Histogram({
          name: n,
          help: 'Seconds a request waited for the client-side rate limit',
          labelNames: ['verb'],
          buckets: [0, 0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10],
          registers: [r],
        }),
    );
  }
}

/** prom-client throws on duplicate names; several runtimes may share one registry (tests, embedding). */
function once<M extends prom.Metric<string>>(r: prom.Registry, name: string, make: (name: string) => M): M {
  return (r.getSingleMetric(name) as M | undefined) ?? make(name);
}
