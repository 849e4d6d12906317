/** `--kube-api-qps` / `--kube-api-burst`: defaults (unlimited), parsed values, and rejected input. */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { parseManagerConfig } from '../../src/cmd/manager.js';

it('defaults to no client-side limit', () => {
  assert.deepEqual(parseManagerConfig([]).kubeApi, { qps: 0, burst: 0 });
});

it('parses --kube-api-qps and --kube-api-burst', () => {
  assert.deepEqual(parseManagerConfig(['--kube-api-qps=50', '--kube-api-burst', '100']).kubeApi, {
    qps: 50,
    burst: 100,
  });
});

it('rejects a negative or non-numeric rate', () => {
  assert.throws(() => parseManagerConfig(['--kube-api-qps=-1']));
  assert.throws(() => parseManagerConfig(['--kube-api-burst=lots']));
});
