/**
 * Issue 20 defect 5: a dead BMC must not read `Ready=True` until its next resync (10 minutes by
 * default) while its Servers already found it unreachable; and `status.powerState` follows a power
 * action at once, not at the next reconcile. Real API server, sim virtual BMC.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { BMC } from '../../src/api/v1alpha1/bmc.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  cond,
  createClaim,
  eventsFor,
  eventually,
  getClaim,
  hostOf,
  setSimFaults,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

test('a BMC whose Server finds it unreachable turns Ready=False at once, and Ready=True again once it answers', {
  timeout: 90_000,
}, async () => {
  await withStack('deadbmc', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const before = await s.client.get<BMC>(Resources.BMC, s.bmcName);
    assert.equal(cond(before, 'Ready')?.status, 'True');
    // Every connection to the BMC is dropped: it is dead to the operator.
    s.vbmc.setFaults({ dropConnections: 1_000_000 });
    await createClaim(s, 'needs-power', { serverRef: srv!.metadata.name!, timeout: '30s' });
    const t0 = Date.now();
    const down = await eventually('BMC Ready=False', 15_000, async () => {
      const b = await s.client.get<BMC>(Resources.BMC, s.bmcName);
      return cond(b, 'Ready')?.status === 'False' ? b : undefined;
    });
    const ready = cond(down, 'Ready')!;
    assert.match(ready.reason, /^BMC(Unavailable|Timeout)$/);
    assert.ok(Date.now() - t0 < 15_000, 'well before the 10-minute BMC resync');
    // Events are recorded after the condition write (fire-and-forget): wait for it, do not list once.
    let events: { type: string; reason: string; message: string }[] = [];
    await eventually('a Warning Event on the BMC', 15_000, async () => {
      events = await eventsFor(s, 'BMC', s.bmcName, 'default');
      return events.some((e) => e.type === 'Warning' && /^BMC(Unavailable|Timeout)$/.test(e.reason));
    }).catch((err: Error) => {
      throw new Error(`${err.message} (got ${JSON.stringify(events)})`);
    });

    s.vbmc.setFaults({ dropConnections: 0 });
    await eventually('BMC Ready=True again', 30_000, async () => {
      const b = await s.client.get<BMC>(Resources.BMC, s.bmcName);
      return cond(b, 'Ready')?.status === 'True';
    });
    await eventually('the claim boots once the BMC answers', 40_000, async () => {
      const c = await getClaim(s, 'needs-power');
      return cond(c, 'Booted')?.status === 'True';
    });
  });
});

test('status.powerState shows the state reached by a power action without waiting for the next reconcile', {
  timeout: 60_000,
}, async () => {
  await withStack('pwrstate', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    // The host never calls back: after the power-on nothing else makes the claim reconcile.
    setSimFaults(s, { neverCallBack: true });
    await createClaim(s, 'on', { serverRef: srv!.metadata.name!, timeout: '40s' });
    await eventually('host powered on', 15_000, () => hostOf(s, srv!).powerState() === 'On');
    const seen = await eventually('status.powerState On', 3_000, async () => {
      const x = await s.client.get<Server>(Resources.Server, srv!.metadata.name!);
      return x?.status?.powerState === 'On' ? x : undefined;
    });
    assert.equal(seen.status?.powerState, 'On');
  });
});
