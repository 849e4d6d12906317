/**
 * The probes of a standalone signal process (config/signals' Deployments probe `/healthz` for
 * liveness and `/readyz` for readiness), against the run's real API server: `dist/src/cmd/registry.js`
 * started before its callback key Secret exists, as on a fresh install where the signal Pods start
 * before the manager created the key. While it waits, `/healthz` is 200 (a kubelet must not restart a
 * process that is only waiting) and `/readyz` 503 with nothing listening on `--addr`; once the Secret
 * is there, `/readyz` turns 200 and the registry answers.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, test } from 'node:test';
import { freePorts } from '../../src/localstack/control-plane.js';
import { storeTestCallbackKey } from '../../src/testing/boot-target-seed.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';
import { newTestClient } from './fixture.js';

after(releaseSharedCluster);

const status = async (url: string) => {
  try {
    return (await fetch(url)).status;
  } catch {
    return 0;
  }
};

test('a signal process waiting for its callback key is alive but not ready, then ready', {
  timeout: 120_000,
}, async () => {
  const cluster = await sharedCluster();
  const client = newTestClient(cluster.kubeConfig());
  const ns = await testNamespace(cluster.kubeConfig(), 'probes');
  const [port, metricsPort] = (await freePorts(2)) as [number, number];
  const child = spawn(
    process.execPath,
    [
      'dist/src/cmd/registry.js',
      `--kubeconfig=${cluster.kubeconfigPath}`,
      `--callback-key-secret=${ns.name}/metal-callback-key`,
      `--addr=127.0.0.1:${port}`,
      `--metrics-addr=127.0.0.1:${metricsPort}`,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } },
  );
  let err = '';
  child.stderr!.on('data', (b: Buffer) => {
    err += b.toString();
  });
  const probe = (path: string) => status(`http://127.0.0.1:${metricsPort}${path}`);
  try {
    await waitFor('the probes answering', 30_000, async () => {
      if (child.exitCode !== null) throw new Error(`registry exited ${child.exitCode}: ${err}`);
      return (await probe('/healthz')) === 200;
    });
    // The key is read with a backoff of 1 s, 2 s, …: two seconds in, it is still waiting.
    await new Promise((ok) => setTimeout(ok, 2_000));
    assert.equal(await probe('/healthz'), 200, 'alive while waiting for the key');
    assert.equal(await probe('/readyz'), 503, 'not ready while waiting for the key');
    assert.equal(await probe('/metrics'), 200);
    assert.equal(await status(`http://127.0.0.1:${port}/systems/x`), 0, 'nothing served before the key');
    await storeTestCallbackKey(client, ns.name);
    await waitFor('ready once the key exists', 60_000, async () => (await probe('/readyz')) === 200);
    assert.equal(
      await status(`http://127.0.0.1:${port}/systems/x`),
      400,
      'the registry answers (400: not a UUID)',
    );
  } finally {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((ok) => child.once('exit', ok));
    }
    await ns.cleanup();
    await client.close();
  }
});
