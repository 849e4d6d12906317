/**
 * config/prometheus/: the PrometheusRule carries exactly the rule groups that `promtool test rules`
 * checks (rules.yaml), the ServiceMonitor selects the metrics Service of config/manager, and every
 * metric a rule uses is one the operator exports (README "Operations" lists them).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import { REPO_ROOT } from '../../src/localstack/control-plane.js';

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

test('every metal_* metric a rule uses is exported and listed in the README', () => {
  const rules = read('config/prometheus/rules.yaml');
  const readme = read('README.md');
  const used = new Set(
    [...rules.matchAll(/\bmetal_[a-z_]+/g)].map((m) => m[0].replace(/_(bucket|sum|count)$/, '')),
  );
  assert.ok(used.size >= 5);
  for (const m of used) assert.match(readme, new RegExp(`\`${m}\``), `${m} in the README`);
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
