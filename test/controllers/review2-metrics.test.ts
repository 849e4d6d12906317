/**
 * Second security review (issue 29), metrics (pure, no cluster):
 * - N14: tenant-chosen `External<Name>` signals do not become label values of
 *   `metal_boot_signal_seconds`: they are folded into `signal="external"`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { BootMetrics } from '../../src/controllers/common/metrics.js';

describe('second security review: metrics', () => {
  it('N14: 500 External<Name> signals make one signal="external" series, not 500', async () => {
    const registry = new Registry();
    const m = new BootMetrics(registry, () => ({}));
    const names = Array.from({ length: 500 }, (_, i) => `ExternalTenantChosen${i}`);
    m.observeSignals('claim', 'uid/1', ['IPXEScriptFetched', ...names], Date.now() - 1000);
    const values = (await m.signalSeconds.get()).values.filter((v) => v.metricName?.endsWith('_count'));
    const labels = new Set(values.map((v) => v.labels.signal));
    assert.deepEqual([...labels].sort(), ['IPXEScriptFetched', 'external']);
    assert.equal(values.find((v) => v.labels.signal === 'external')?.value, 500);
  });
});
