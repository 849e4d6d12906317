/**
 * config/prometheus/: the PrometheusRule carries exactly the rule groups that `promtool test rules`
 * checks (rules.yaml), the ServiceMonitor selects the metrics Service of config/manager, and every
 * metric a rule uses is one the operator registers, with the labels the rule selects on, and is
 * listed in docs/OPERATIONS.md (Metrics). The registered set is read from the registries the
 * processes serve at /metrics, built by the same constructors (`RuntimeMetrics`, `BootMetrics`,
 * `createHttpApp`), not from any list: renaming a metric in the source fails here.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { parse, parseAllDocuments } from 'yaml';
import { createHttpApp } from '../../src/bootsignals/http-app.js';
import { BootMetrics } from '../../src/controllers/common/metrics.js';
import { REPO_ROOT } from '../../src/localstack/control-plane.js';
import { RuntimeMetrics } from '../../src/runtime/metrics.js';

const read = (p: string) => readFileSync(join(REPO_ROOT, p), 'utf8');

test('the PrometheusRule holds the groups of rules.yaml', () => {
  const rules = parse(read('config/prometheus/rules.yaml'));
  const cr = parse(read('config/prometheus/prometheusrule.yaml'));
  assert.equal(cr.kind, 'PrometheusRule');
  assert.deepEqual(cr.spec, rules);
});

test('the ServiceMonitor selects the metrics Service and its port', () => {
  const sm = parse(read('config/prometheus/servicemonitor.yaml'));
  const svc = parseAllDocuments(read('config/manager/manager.yaml'))
    .map((d) => d.toJS())
    .find((d) => d?.kind === 'Service' && d.metadata?.name === 'metal-operator-metrics');
  assert.ok(svc, 'Service metal-operator-metrics');
  for (const [k, v] of Object.entries(sm.spec.selector.matchLabels))
    assert.equal(svc.metadata.labels?.[k], v, k);
  assert.ok(svc.spec.ports.some((p: { name: string }) => p.name === sm.spec.endpoints[0].port));
  assert.equal(sm.metadata.namespace, svc.metadata.namespace);
});

/** Metric name → label names, as registered on the registries the manager and its HTTP servers serve. */
async function registered(): Promise<Map<string, string[]>> {
  const registry = new Registry();
  new RuntimeMetrics(registry);
  new BootMetrics(registry, () => ({}));
  const app = createHttpApp('test', pino({ level: 'silent' }), registry);
  await app.close();
  const out = new Map<string, string[]>();
  for (const m of registry.getMetricsAsArray())
    out.set(m.name, [...((m as unknown as { labelNames?: string[] }).labelNames ?? [])]);
  return out;
}

/** Every `metal_*` series a rule expression reads, with the label names its matchers and `by (...)` use. */
function ruleMetrics(rulesYaml: string): Map<string, Set<string>> {
  const used = new Map<string, Set<string>>();
  const doc = parse(rulesYaml) as { groups: { rules: { expr: string }[] }[] };
  for (const g of doc.groups)
    for (const r of g.rules) {
      const by = [...r.expr.matchAll(/\bby \(([^)]*)\)/g)].flatMap((m) =>
        m[1]!.split(',').map((l) => l.trim()),
      );
      for (const m of r.expr.matchAll(/\b(metal_[a-z_]+)(\{[^}]*\})?/g)) {
        const name = m[1]!.replace(/_(bucket|sum|count)$/, '');
        const labels = used.get(name) ?? new Set<string>();
        for (const l of m[2]?.matchAll(/([a-z_]+)\s*(=~|!~|!=|=)/g) ?? []) labels.add(l[1]!);
        for (const l of by) if (l !== 'le') labels.add(l);
        used.set(name, labels);
      }
    }
  return used;
}

test('every metal_* metric a rule uses is registered, with the labels the rule uses', async () => {
  const have = await registered();
  const used = ruleMetrics(read('config/prometheus/rules.yaml'));
  assert.ok(used.size >= 5, `rules read ${[...used.keys()].join(', ')}`);
  for (const [name, labels] of used) {
    const labelNames = have.get(name);
    assert.ok(labelNames, `rule metric ${name} is registered (have: ${[...have.keys()].join(', ')})`);
    for (const l of labels) assert.ok(labelNames.includes(l), `${name} has label ${l} (has ${labelNames})`);
  }
});

test('every metal_* metric a rule uses is listed in docs/OPERATIONS.md', () => {
  const readme = read('docs/OPERATIONS.md');
  const used = ruleMetrics(read('config/prometheus/rules.yaml'));
  for (const m of used.keys()) assert.match(readme, new RegExp(`\`${m}\``), `${m} in docs/OPERATIONS.md`);
});

test('every rejection reason an alert matches is one the signal servers answer with (issue 36 item 10)', () => {
  const rules = read('config/prometheus/rules.yaml');
  const m = /metal_callbacks_rejected_total\{reason=~"([^"]+)"\}/.exec(rules);
  assert.ok(m, 'MetalCallbacksRejected matches reasons');
  const src = ['src/bootsignals/boot-target.ts', 'src/bootsignals/http-app.ts', 'src/registry/server.ts']
    .concat([
      'src/bootserver/server.ts',
      'src/bootserver/attempt-pin.ts',
      'src/bootserver/client-identity.ts',
    ])
    .map(read)
    .join('\n');
  for (const reason of m[1]!.split('|')) assert.ok(src.includes(`'${reason}'`), `${reason} is emitted`);
  // A foreign client (another Server's address, a pinned attempt) is worth an alert too.
  for (const reason of ['ScriptPinned', 'UnknownClient'])
    assert.ok(m[1]!.split('|').includes(reason), `${reason} alerts`);
});
