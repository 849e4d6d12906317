/**
 * A deadline is decided on the API server's objects, not on a lagging cache (the soak's "accepted
 * callback lost": after a kube-apiserver restart the manager's watch had not delivered a boot's
 * signals when its netboot deadline passed, so the booted host was power-cycled into attempt 2).
 * Here the manager reaches the real API server through a proxy the test holds: the attempt's
 * signals are stored while the manager sees nothing, the deadline passes, then the proxy lets go.
 * The attempt must end completed, with no second power action.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import { OS_BOOT_SIGNALS } from '../../src/api/vocabulary.js';
import { recordSignal } from '../../src/bootsignals/signal-condition.js';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  cond,
  createClaim,
  eventually,
  getClaim,
  hostOf,
  managerMetric,
  resetsSent,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

test('signals stored while the manager cannot see them, then a passed deadline: completed, no second boot', {
  timeout: 120_000,
}, async () => {
  await withStack(
    'deadline-fresh',
    { hosts: 1, pausableApi: true, args: ['--netboot-timeout', '8s', '--boot-timeout', '30s'] },
    async (s) => {
      const [server] = await availableServers(s, 1);
      const uuid = server!.spec.systemUUID;
      // The host boots its disk: the only signals of the attempt are the ones written below.
      hostOf(s, server!).setFaults({ bootFromDisk: true });
      const resetsBefore = resetsSent(s, uuid).length;
      await createClaim(s, 'held', { serverRef: server!.metadata.name!, maxAttempts: 2 });
      // The intent is written before the BMC is asked: wait for the power-on itself too.
      const powered = await eventually('attempt 1 powered on', 20_000, async () => {
        const c = await getClaim(s, 'held');
        const on = resetsSent(s, uuid).length > resetsBefore;
        return on && c?.status?.boot?.poweredOnAt && c.status.boot.netbootDeadline ? c : undefined;
      });
      const resetsAtPowerOn = resetsSent(s, uuid).length;
      assert.equal(powered.status!.boot!.attempt, 1);
      const deadline = Date.parse(powered.status!.boot!.netbootDeadline!);
      // The power-on's reconcile ends with the Server's power state read back; a request of it still
      // in flight when the hold begins would keep the deadline's reconcile from running in the hold.
      await eventually('the power state read back', 10_000, async () => {
        const x = await s.client.get<Server>(Resources.Server, server!.metadata.name!);
        return x?.status?.powerState === 'On';
      });
      await sleep(1_000);
      assert.ok(Date.now() < deadline - 2_000, 'held before the netboot deadline (too slow a machine?)');

      s.api!.pause();
      try {
        // What the boot server and the registry record for this attempt, straight to the API server.
        const read = async () =>
          (await s.client.get<ServerBootConfiguration>(Resources.ServerBootConfiguration, 'held', s.ns))!;
        for (const type of OS_BOOT_SIGNALS) {
          await recordSignal(s.client, 'test', await read(), {
            type,
            status: 'True',
            reason: 'Test',
            message: `${type} for attempt 1 (written while the manager is held)`,
          });
        }
        // Past the netboot deadline: the manager's timer fires and decides on what it has.
        await sleep(Math.max(0, deadline - Date.now() + 2_500));
      } finally {
        s.api!.resume();
      }

      const done = await eventually('the claim Booted', 20_000, async () => {
        const c = await getClaim(s, 'held');
        return cond(c, 'Booted')?.status === 'True' ? c : undefined;
      });
      assert.equal(cond(done, 'Booted')!.reason, 'BootCompleted');
      assert.equal(done.status!.boot!.attempt, 1, 'attempt 1 completed, not a second attempt');
      await sleep(1_000);
      assert.deepEqual(resetsSent(s, uuid).slice(resetsAtPowerOn), [], 'no power action after the held time');
      const history = (await getClaim(s, 'held'))!.status!.boot!.history ?? [];
      assert.ok(
        history[0]?.signals?.BootStateReceived,
        `attempt 1 records its callback: ${JSON.stringify(history)}`,
      );
      // The held deadline step was decided again on the fresh SBC (not merely late, after the hold).
      const averted = await managerMetric(
        s,
        'metal_boot_deadline_rechecks_total',
        'flow="claim"',
        'result="averted"',
      );
      assert.ok(averted >= 1, `the held deadline step was averted by the fresh SBC (averted: ${averted})`);
    },
  );
});
