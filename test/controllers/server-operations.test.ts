/**
 * Issue 31 item 1 / issue 36 item 8: upstream's operation annotation on Servers — `park` / `unpark`
 * (state Parked, the marker `metal.ironcore.dev/parked`), the power operations, unknown values —
 * mirroring upstream's server_controller_test.go "Parked state" and "Operation annotations" cases,
 * against the real API server with the sim virtual BMC as the Redfish peer.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import {
  OPERATION_ANNOTATION,
  OPERATION_IN_PROGRESS_ANNOTATION,
  PARKED_ANNOTATION,
} from '../../src/api/v1alpha1/operations.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { runManager } from '../../src/cmd/manager.js';
import { setCordon } from '../../src/localstack/server-ops.js';
import { newLogger } from '../../src/runtime/logger.js';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import { stopAfter } from '../harness/stop-after.js';
import {
  availableServers,
  cond,
  createClaim,
  eventsFor,
  eventually,
  getClaim,
  hostOf,
  pokeClaim,
  pokeServer,
  resets,
  resetsSent,
  type Stack,
  setSimFaults,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

const getServer = (s: Stack, name: string) => s.client.get<Server>(Resources.Server, name);
const annotate = (s: Stack, name: string, annotations: Record<string, string | null>) =>
  s.client.mergePatch(Resources.Server, name, undefined, { metadata: { annotations } });
const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));

/** Waits for an Event `reason` on Server `name`; returns it. */
function serverEvent(s: Stack, name: string, reason: string, timeoutMs = 15_000) {
  return eventually(`Event ${reason} on Server ${name}`, timeoutMs, async () =>
    (await eventsFor(s, 'Server', name, 'default')).find((e) => e.reason === reason),
  );
}

/** Waits until the operation annotation is gone from Server `name`; returns the Server. */
function consumed(s: Stack, name: string, timeoutMs = 15_000) {
  return eventually(`operation annotation consumed on ${name}`, timeoutMs, async () => {
    const x = await getServer(s, name);
    return x && !(OPERATION_ANNOTATION in (x.metadata.annotations ?? {})) ? x : undefined;
  });
}

async function parkAndWait(s: Stack, name: string): Promise<Server> {
  await annotate(s, name, { [OPERATION_ANNOTATION]: 'park' });
  return eventually(`Server ${name} Parked`, 30_000, async () => {
    const x = await getServer(s, name);
    const a = x?.metadata.annotations ?? {};
    return x?.status?.state === 'Parked' && a[PARKED_ANNOTATION] === 'true' && !(OPERATION_ANNOTATION in a)
      ? x
      : undefined;
  });
}

async function unparkAndWait(s: Stack, name: string, to: string): Promise<Server> {
  await annotate(s, name, { [OPERATION_ANNOTATION]: 'unpark' });
  return eventually(`Server ${name} resumed to ${to}`, 20_000, async () => {
    const x = await getServer(s, name);
    const a = x?.metadata.annotations ?? {};
    return x?.status?.state === to && !(PARKED_ANNOTATION in a) && !(OPERATION_ANNOTATION in a)
      ? x
      : undefined;
  });
}

test('park a free Server and resume it; parked it is left alone; operations on it are dropped; status loss rebuilt', {
  timeout: 150_000,
}, async () => {
  await withStack('park-free', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const name = srv!.metadata.name!;
    const host = hostOf(s, srv!);

    // Upstream: "should park a free server and resume to available".
    const parked = await parkAndWait(s, name);
    assert.equal(host.powerState(), 'Off');
    assert.equal(parked.status?.powerState, 'Off');
    assert.equal((await serverEvent(s, name, 'Parked')).type, 'Normal');

    // "should not power off a parked server that the external actor powered on".
    // Checked after a reconcile that is seen to run while it is On (the dropped operation below),
    // not after a fixed wait; the positive control is the unpark at the end: the same On Server,
    // no longer parked, is powered off.
    const before = resetsSent(s, srv!.spec.systemUUID).length;
    await host.powerOn('Hdd');

    // "should consume a reset operation annotation while parked without leaving it linger".
    await annotate(s, name, { [OPERATION_ANNOTATION]: 'graceful-restart-server' });
    const dropped = await serverEvent(s, name, 'ParkedOperationDropped');
    assert.equal(dropped.type, 'Warning');
    assert.match(dropped.message, /graceful-restart-server/);
    let x = await consumed(s, name);
    assert.equal(host.powerState(), 'On', 'a parked Server powered on by someone else stays on');
    assert.equal(resetsSent(s, srv!.spec.systemUUID).length, before, 'no power action on a parked Server');
    assert.equal(x.status?.state, 'Parked');
    assert.equal(x.metadata.annotations?.[PARKED_ANNOTATION], 'true');
    assert.equal(resetsSent(s, srv!.spec.systemUUID).length, before, 'the dropped restart was not sent');

    // "should clear an unsupported operation annotation while parked".
    await annotate(s, name, { [OPERATION_ANNOTATION]: 'bogus-operation' });
    assert.equal((await serverEvent(s, name, 'UnsupportedOperation')).type, 'Warning');
    x = await consumed(s, name);
    assert.equal(x.status?.state, 'Parked');

    // "should reconstruct the parked state from the annotation if status.state is lost".
    await s.client.jsonPatch(Resources.Server, name, undefined, [{ op: 'remove', path: '/status/state' }], {
      subresource: 'status',
    });
    await eventually('Parked rebuilt from the marker', 15_000, async () => {
      const y = await getServer(s, name);
      return y?.status?.state === 'Parked';
    });
    assert.equal(host.powerState(), 'On', 'still left alone after the status loss');

    // Unpark: back to Available, where the state machine powers it off again (as upstream).
    await unparkAndWait(s, name, 'Available');
    assert.ok(await serverEvent(s, name, 'Resumed'));
    await eventually('Available Server powered off again', 20_000, () => host.powerState() === 'Off');

    // "should clear an unsupported operation annotation" (not parked).
    await annotate(s, name, { [OPERATION_ANNOTATION]: 'bogus-2' });
    x = await consumed(s, name);
    assert.equal(x.status?.state, 'Available');
    await eventually('UnsupportedOperation naming bogus-2', 10_000, async () =>
      (await eventsFor(s, 'Server', name, 'default')).some(
        (e) => e.reason === 'UnsupportedOperation' && e.message.includes('bogus-2'),
      ),
    );

    // "should not deadlock on deletion while parked".
    await parkAndWait(s, name);
    const uid = (await getServer(s, name))!.metadata.uid;
    await s.client.delete(Resources.Server, name);
    await eventually('parked Server deleted', 15_000, async () => {
      const y = await getServer(s, name);
      return !y || y.metadata.uid !== uid; // the BMC controller may create it anew
    });
  });
});

test('a park request in a state other than Available/Reserved is deferred, then honoured', {
  timeout: 90_000,
}, async () => {
  await withStack('park-defer', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const name = srv!.metadata.name!;
    await setCordon(s.client, name, true);
    await eventually(
      'Maintenance',
      15_000,
      async () => (await getServer(s, name))?.status?.state === 'Maintenance',
    );
    await annotate(s, name, { [OPERATION_ANNOTATION]: 'park' });
    const deferred = await serverEvent(s, name, 'ParkDeferred');
    assert.equal(deferred.type, 'Warning');
    assert.match(deferred.message, /Maintenance/);
    await pokeServer(s, name);
    const still = (await getServer(s, name))!;
    assert.equal(still.metadata.annotations?.[OPERATION_ANNOTATION], 'park', 'the request stays');
    assert.equal(still.metadata.annotations?.[PARKED_ANNOTATION], undefined);
    await setCordon(s.client, name, false);
    await eventually('parked once Available', 30_000, async () => {
      const x = await getServer(s, name);
      return x?.status?.state === 'Parked' && !(OPERATION_ANNOTATION in (x.metadata.annotations ?? {}));
    });
  });
});

test('park a claimed Server: the claim stays Bound and its controller stands down; resume to Reserved; a deletion waits for unpark', {
  timeout: 150_000,
}, async () => {
  await withStack('park-claim', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const name = srv!.metadata.name!;
    const host = hostOf(s, srv!);
    await createClaim(s, 'tenant', { serverRef: name, timeout: '20s' });
    await eventually(
      'claim Booted',
      30_000,
      async () => cond(await getClaim(s, 'tenant'), 'Booted')?.status === 'True',
    );
    assert.equal(host.powerState(), 'On');

    // Upstream: "should park a claimed server, keep the claim bound, and resume to reserved".
    const parked = await parkAndWait(s, name);
    assert.equal(host.powerState(), 'Off', 'parking powers the tenant off');
    assert.equal(parked.spec.serverClaimRef?.name, 'tenant');
    // Positive control instead of a 3 s window: the claim controller reconciles the claim twice more.
    await pokeClaim(s, 'tenant');
    const claim = await getClaim(s, 'tenant');
    assert.equal(claim?.status?.phase, 'Bound');
    assert.equal(cond(claim, 'Bound')?.status, 'True');
    assert.equal(host.powerState(), 'Off', 'the claim controller does not power a parked Server on');

    await unparkAndWait(s, name, 'Reserved');
    await eventually('claim powers its Server on again', 30_000, () => host.powerState() === 'On');

    // Deletion while parked: nothing is powered off, Released=False ServerParked, done after unpark.
    await parkAndWait(s, name);
    await host.powerOn('Hdd'); // the external actor works on it
    await s.client.delete(Resources.ServerClaim, 'tenant', s.ns);
    const held = await eventually('Released=False ServerParked', 15_000, async () => {
      const c = await getClaim(s, 'tenant');
      return cond(c, 'Released')?.reason === 'ServerParked' ? c : undefined;
    });
    assert.equal(cond(held, 'Released')?.status, 'False');
    await pokeClaim(s, 'tenant');
    assert.equal(host.powerState(), 'On', 'a held release powers nothing off');
    await annotate(s, name, { [OPERATION_ANNOTATION]: 'unpark' });
    await eventually('claim gone after unpark', 40_000, async () => !(await getClaim(s, 'tenant')));
    await eventually('Server released to Available and Off', 30_000, async () => {
      const x = await getServer(s, name);
      return x?.status?.state === 'Available' && !x.spec.serverClaimRef && host.powerState() === 'Off';
    });
  });
});

test('power operations: each sent once; refused while a boot attempt owns the power or where the state undoes them', {
  timeout: 150_000,
}, async () => {
  await withStack('power-ops', { hosts: 2 }, async (s) => {
    const [a, b] = await availableServers(s, 2);
    const name = a!.metadata.name!;
    const uuid = a!.spec.systemUUID;
    const host = hostOf(s, a!);

    // Available: kept Off, so force-on is refused (nothing sent).
    const sent0 = resetsSent(s, uuid).length;
    await annotate(s, name, { [OPERATION_ANNOTATION]: 'force-on-server' });
    const refused = await serverEvent(s, name, 'OperationRefused');
    assert.match(refused.message, /Available Server is kept Off/);
    await consumed(s, name);
    await pokeServer(s, name);
    assert.equal(resetsSent(s, uuid).length, sent0, 'a refused operation sends nothing');

    // Maintenance: left alone, so the operator's power operations apply, each exactly once.
    await setCordon(s.client, name, true);
    await eventually(
      'Maintenance',
      15_000,
      async () => (await getServer(s, name))?.status?.state === 'Maintenance',
    );
    const ops: [string, string][] = [
      // The sim profile allows On but not ForceOn: the same-effect ResetType is sent.
      ['force-on-server', 'On'],
      ['hard-restart-server', 'ForceRestart'],
      ['power-cycle-server', 'PowerCycle'],
      ['graceful-restart-server', 'GracefulRestart'],
      ['force-off-server', 'ForceOff'],
    ];
    for (const [op, resetType] of ops) {
      const n = resets(s, uuid).filter((r) => r === resetType).length;
      await annotate(s, name, { [OPERATION_ANNOTATION]: op });
      await consumed(s, name);
      await eventually(
        `${op} sent`,
        10_000,
        () => resets(s, uuid).filter((r) => r === resetType).length === n + 1,
      );
      await pokeServer(s, name);
      assert.equal(
        resets(s, uuid).filter((r) => r === resetType).length,
        n + 1,
        `${op}: ${resetType} sent once`,
      );
      await eventually('in-progress marker removed', 10_000, async () => {
        const x = await getServer(s, name);
        return !(OPERATION_IN_PROGRESS_ANNOTATION in (x?.metadata.annotations ?? {}));
      });
      if (op === 'force-on-server') await eventually('host On', 10_000, () => host.powerState() === 'On');
    }
    assert.equal(host.powerState(), 'Off');
    const events = await eventsFor(s, 'Server', name, 'default');
    assert.ok(
      events.some(
        (e) =>
          e.reason === 'PowerOperation' &&
          /hard-restart-server: ComputerSystem.Reset ForceRestart sent/.test(e.message),
      ),
    );

    // graceful-restart-bmc: Manager.Reset, not a system reset.
    const systemResets = resets(s, uuid).length;
    await annotate(s, name, { [OPERATION_ANNOTATION]: 'graceful-restart-bmc' });
    await consumed(s, name);
    await eventually('Manager.Reset posted', 10_000, () =>
      s.vbmc
        .requests()
        .some(
          (r) =>
            r.method === 'POST' && r.path.endsWith('/Managers/BMC/Actions/Manager.Reset') && r.status === 204,
        ),
    );
    assert.equal(resets(s, uuid).length, systemResets, 'no ComputerSystem.Reset for a BMC restart');

    // A claim's attempt in flight owns the power: a restart is refused, the attempt goes on.
    setSimFaults(s, { neverCallBack: true });
    const other = b!.metadata.name!;
    await createClaim(s, 'busy', { serverRef: other, timeout: '60s' });
    await eventually(
      'attempt powered on',
      20_000,
      async () => !!(await getClaim(s, 'busy'))?.status?.boot?.poweredOnAt,
    );
    // poweredOnAt is the intent, written before the BMC is asked: wait for the power-on itself.
    await eventually('busy host On', 10_000, () => hostOf(s, b!).powerState() === 'On');
    // The power-on is stored as done (the attempt waits for its signals): no reset of the attempt
    // itself can follow and be mistaken for one the operation sent.
    await eventually('attempt awaiting its signals', 15_000, async () =>
      ['AwaitingNetboot', 'AwaitingSignals'].includes((await getClaim(s, 'busy'))?.status?.boot?.phase ?? ''),
    );
    const n = resets(s, b!.spec.systemUUID).length;
    await annotate(s, other, { [OPERATION_ANNOTATION]: 'hard-restart-server' });
    const busy = await eventually('refused for the attempt', 15_000, async () =>
      (await eventsFor(s, 'Server', other, 'default')).find((e) => e.reason === 'OperationRefused'),
    );
    assert.match(busy.message, /boot attempt of ServerClaim .*busy owns the power/);
    await consumed(s, other);
    assert.equal(resets(s, b!.spec.systemUUID).length, n, 'nothing sent during the attempt');

    // retry on a Reserved Server: nothing to retry there; consumed with a Warning (issue 36 item 8).
    await annotate(s, other, { [OPERATION_ANNOTATION]: 'retry' });
    await consumed(s, other);
    // The Event is recorded after the annotation is consumed (its own request): wait for it.
    await eventually('retry refused with a Warning', 15_000, async () =>
      (await eventsFor(s, 'Server', other, 'default')).some(
        (e) =>
          e.reason === 'OperationRefused' &&
          e.type === 'Warning' &&
          /retry .* in state Reserved there is nothing to retry/.test(e.message),
      ),
    );
  });
});

test('an operation set while the manager is down runs once after the start; one taken but not confirmed is reported, never repeated', {
  timeout: 120_000,
}, async () => {
  await withStack('ops-restart', { hosts: 1 }, async (s) => {
    const first = s.op;
    // Stack.close() stops the manager it started; the ones started here are this test's to stop.
    const stopOwn = async () => {
      if (s.op !== first) await s.op?.stop();
    };
    await stopAfter(s, stopOwn, async () => {
      const [srv] = await availableServers(s, 1);
      const name = srv!.metadata.name!;
      const uuid = srv!.spec.systemUUID;
      await setCordon(s.client, name, true);
      await eventually(
        'Maintenance',
        15_000,
        async () => (await getServer(s, name))?.status?.state === 'Maintenance',
      );
      const restart = async () => {
        await s.op!.stop();
        const log = newLogger('metal-test', { level: process.env.LOG_LEVEL ?? 'warn' });
        return async () => {
          s.op = await runManager(s.managerArgs, { log });
        };
      };

      let start = await restart();
      await annotate(s, name, { [OPERATION_ANNOTATION]: 'power-cycle-server' });
      await sleep(1_000);
      assert.equal(resets(s, uuid).filter((r) => r === 'PowerCycle').length, 0, 'nobody acts while down');
      await start();
      await consumed(s, name, 20_000);
      await eventually('PowerCycle sent', 10_000, () => resets(s, uuid).includes('PowerCycle'));
      // Not repeated: two more reconciles of the Server (the positive control: they ran) send nothing.
      await pokeServer(s, name);
      assert.equal(resets(s, uuid).filter((r) => r === 'PowerCycle').length, 1);

      // The state a kill leaves between "taken" and "sent": the operation removed, the marker written.
      start = await restart();
      await annotate(s, name, {
        [OPERATION_IN_PROGRESS_ANNOTATION]: `hard-restart-server ${new Date().toISOString()}`,
      });
      const before = resetsSent(s, uuid).length;
      await start();
      const interrupted = await serverEvent(s, name, 'OperationInterrupted', 20_000);
      assert.equal(interrupted.type, 'Warning');
      assert.match(interrupted.message, /hard-restart-server.*not sent again/);
      await eventually('marker removed', 10_000, async () => {
        const x = await getServer(s, name);
        return !(OPERATION_IN_PROGRESS_ANNOTATION in (x?.metadata.annotations ?? {}));
      });
      await pokeServer(s, name);
      assert.equal(resetsSent(s, uuid).length, before, 'the interrupted operation is not sent');
    });
  });
});
