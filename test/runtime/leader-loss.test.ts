/**
 * Security review S10: a manager that loses its Lease must not finish what it was doing. The
 * manager command runs as a child process against the real API server, with its BMC reconcile
 * blocked on a virtual BMC that answers only after 90 s; the Lease is then taken by another holder.
 * The process must exit (as controller-runtime does) well before the BMC would have answered, so no
 * call of the lost term can complete next to the new leader.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { API_VERSION } from '../../src/api/v1alpha1/schema.js';
import { KubeClient } from '../../src/runtime/client.js';
import { type KObject, Resources } from '../../src/runtime/resource.js';
import { microTime } from '../../src/runtime/time.js';
import { startVirtualBmc, type VirtualBmc } from '../../src/virtualbmc/server.js';
import { createSimFleet, type SimFleet } from '../../src/virtualbmc/sim-fleet.js';
import { waitFor } from '../harness/control-plane.js';
import { sharedCluster, testNamespace } from '../harness/shared.js';

interface Lease extends KObject {
  spec?: { holderIdentity?: string | null; leaseDurationSeconds?: number; renewTime?: string };
}

let child: ChildProcess | undefined;
let vbmc: VirtualBmc | undefined;
let fleet: SimFleet | undefined;

describe('leader election loss', { timeout: 120_000 }, () => {
  after(async () => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await vbmc?.close();
    await fleet?.close();
  });

  it('S10: losing the Lease while a reconcile is blocked on a slow BMC exits the process at once', async () => {
    const cluster = await sharedCluster();
    const kc = cluster.kubeConfig();
    const admin = new KubeClient(kc, { fieldManager: 'test' });
    const ns = await testNamespace(kc, 'sec-leader');
    const scope = randomBytes(4).toString('hex');
    try {
      fleet = createSimFleet({ count: 1, bootServerUrl: 'http://127.0.0.1:9', seed: `s10-${scope}` });
      vbmc = await startVirtualBmc({
        hosts: fleet.hosts,
        username: 'admin',
        password: 'pw',
        faults: { responseDelayMs: 90_000 },
      });
      let output = '';
      child = spawn(
        process.execPath,
        [
          join(process.cwd(), 'dist', 'src', 'cmd', 'manager.js'),
          `--kubeconfig=${cluster.kubeconfigPath}`,
          '--leader-elect',
          `--manager-namespace=${ns.name}`,
          `--object-selector=metal-test-s10=${scope}`,
          '--registry-addr=127.0.0.1:0',
          '--bootserver-addr=127.0.0.1:0',
          '--metrics-port=0',
          '--bmc-call-budget=120s',
          '--bmc-request-timeout=100s',
        ],
        { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'info' } },
      );
      child.stdout!.on('data', (c) => {
        output += c;
      });
      child.stderr!.on('data', (c) => {
        output += c;
      });
      const exited = new Promise<{ code: number | null; at: number }>((ok) =>
        child!.once('exit', (code) => ok({ code, at: Date.now() })),
      );

      await waitFor('manager holds the Lease', 30_000, async () => {
        const l = await admin.get<Lease>(Resources.Lease, 'metal-operator', ns.name);
        return !!l?.spec?.holderIdentity;
      });
      const labels = { 'metal-test-s10': scope };
      await admin.create(Resources.BMCSecret, {
        apiVersion: API_VERSION,
        kind: 'BMCSecret',
        metadata: { name: `s10-${scope}`, labels },
        data: {
          username: Buffer.from('admin').toString('base64'),
          password: Buffer.from('pw').toString('base64'),
        },
      });
      await admin.create(Resources.BMC, {
        apiVersion: API_VERSION,
        kind: 'BMC',
        metadata: { name: `s10-${scope}`, labels },
        spec: {
          access: { ip: '127.0.0.1' },
          bmcSecretRef: { name: `s10-${scope}` },
          protocol: { name: 'Redfish', port: Number(new URL(vbmc.url).port), scheme: 'http' },
        },
      });
      // The premise, checked: the BMC reconcile has a request at the virtual BMC that is not
      // answered yet (held for 90 s by the delay fault).
      const bmc = vbmc;
      await waitFor('a BMC request in flight', 30_000, () =>
        bmc.requests().some((r) => r.answeredAt === undefined),
      );
      const inFlight = bmc.requests().filter((r) => r.answeredAt === undefined);
      assert.equal(child.exitCode, null, `manager still running before the Lease is lost:\n${output}`);

      const lease = await admin.get<Lease>(Resources.Lease, 'metal-operator', ns.name);
      const stolenAt = Date.now();
      await admin.update<Lease>(Resources.Lease, {
        ...lease!,
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        spec: {
          ...lease!.spec,
          holderIdentity: 'another-leader',
          leaseDurationSeconds: 600,
          renewTime: microTime(new Date()),
        },
      });
      const outcome = await Promise.race([
        exited,
        new Promise<undefined>((ok) => setTimeout(() => ok(undefined), 30_000)),
      ]);
      assert.ok(outcome, `the manager kept running 30 s after losing its Lease:\n${output.slice(-2000)}`);
      assert.equal(outcome.code, 1);
      assert.ok(outcome.at - stolenAt < 30_000);
      assert.match(output, /leader election lost/);
      // The process did not wait for the call: the request it had sent is still unanswered, and it
      // was sent before the Lease was lost.
      assert.ok(
        inFlight.length > 0 && inFlight.every((r) => r.answeredAt === undefined && r.at < stolenAt),
        `the BMC request of the lost term was answered before the exit: ${JSON.stringify(inFlight)}`,
      );
    } finally {
      await ns.cleanup();
      await admin.close();
    }
  });
});
