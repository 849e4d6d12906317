/**
 * Table tests of the power and boot decisions of controllers/bmc-actions/power.ts (PowerActions
 * `ensure` and `boot`), against the in-memory FakeBmc through the BmcFactory seam: no API server, no
 * Redfish HTTP server. Each row gives the BMC's state and behaviour and wants the calls the BMC saw,
 * the outcome, the `PowerActionPending` condition written, the Events and what the BMC controller was
 * told (bmc-availability.ts: only BMC-level failures make a BMC unavailable).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { PowerState } from '../../src/bmc/bmc.js';
import { RedfishAuthError, RedfishTransportError } from '../../src/bmc/errors.js';
import type { NetbootVia, PowerGoal } from '../../src/controllers/bmc-actions/power.js';
import { FakeBmc, type FakeSystem } from '../../src/testing/fake-bmc.js';
import { powerBench, SYSTEM_URI } from './fake-bmc-power.js';

const NO_INFO = { code: undefined, message: undefined, messageIds: [] };
const connectionRefused = () => new RedfishTransportError('GET', SYSTEM_URI, 'connection', false);
const timedOut = () => new RedfishTransportError('POST', SYSTEM_URI, 'timeout', true);
const loginRefused = () => new RedfishAuthError('POST', '/redfish/v1/SessionService/Sessions', 401, NO_INFO);

interface EnsureRow {
  name: string;
  system: Partial<FakeSystem>;
  goal: PowerGoal;
  /** Rules set on the fake before the call. */
  arrange?: (bmc: FakeBmc) => void;
  want: {
    /** Methods the BMC saw, in order. */
    calls: string[];
    reached: boolean;
    sent?: string;
    /** `PowerActionPending`: its reason when written True; `undefined`: not written. */
    pending?: string;
    failed?: boolean;
    requeueAfterMs?: number;
    events: string[];
    /**
     * Reasons reported to the BMC controller. A failed PowerState read is reported twice (by the
     * read and by the failure it becomes): the BMC controller's handler takes the same report again.
     */
    down: string[];
  };
}

const ensureTable: EnsureRow[] = [
  {
    name: 'On wanted, On reported: nothing sent, nothing pending',
    system: { powerState: 'On' },
    goal: 'On',
    want: { calls: ['powerState'], reached: true, events: [], down: [] },
  },
  {
    name: 'On wanted, Off reported: On sent, the BMC follows at once',
    system: { powerState: 'Off' },
    goal: 'On',
    want: {
      calls: ['powerState', 'powerOn', 'powerState'],
      reached: true,
      sent: 'On',
      events: ['PowerOn'],
      down: [],
    },
  },
  {
    name: 'On wanted, a BMC that reports late: pending WaitingForPowerOn, polled in 1 s',
    system: { powerState: 'Off', follow: 'lag' },
    goal: 'On',
    want: {
      calls: ['powerState', 'powerOn', 'powerState'],
      reached: false,
      sent: 'On',
      pending: 'WaitingForPowerOn',
      requeueAfterMs: 1_000,
      events: ['PowerOn'],
      down: [],
    },
  },
  {
    name: 'Off wanted, On reported: ForceOff sent',
    system: { powerState: 'On' },
    goal: 'Off',
    want: {
      calls: ['powerState', 'forceOff', 'powerState'],
      reached: true,
      sent: 'ForceOff',
      events: ['PowerOff'],
      down: [],
    },
  },
  {
    name: "someone else's transition (PoweringOff) is waited out, nothing sent",
    system: { powerState: 'PoweringOff' },
    goal: 'On',
    want: {
      calls: ['powerState'],
      reached: false,
      pending: 'WaitingForTransition',
      requeueAfterMs: 2_000,
      events: [],
      down: [],
    },
  },
  {
    name: 'only ForceOff allowed: On cannot be sent (BMCUnsupported), the BMC is not down',
    system: { powerState: 'Off', allowedResets: ['ForceOff'] },
    goal: 'On',
    want: {
      calls: ['powerState', 'powerOn'],
      reached: false,
      failed: true,
      pending: 'BMCUnsupported',
      requeueAfterMs: 300_000,
      events: ['BMCUnsupported'],
      down: [],
    },
  },
  {
    name: 'PowerState read refused at the connection: BMCUnavailable, reported down',
    system: { powerState: 'Off' },
    goal: 'On',
    arrange: (b) => b.fail('powerState', connectionRefused),
    want: {
      calls: ['powerState'],
      reached: false,
      failed: true,
      pending: 'BMCUnavailable',
      requeueAfterMs: 5_000,
      events: ['BMCUnavailable'],
      down: ['BMCUnavailable', 'BMCUnavailable'],
    },
  },
  {
    name: 'On answered late with a timeout: BMCTimeout Event, reported down, the On recorded as maybe sent (WaitingForPowerOn)',
    system: { powerState: 'Off' },
    goal: 'On',
    arrange: (b) => b.delay('powerOn', 20).fail('powerOn', timedOut),
    want: {
      calls: ['powerState', 'powerOn'],
      reached: false,
      failed: true,
      pending: 'WaitingForPowerOn',
      requeueAfterMs: 5_000,
      events: ['BMCTimeout'],
      down: ['BMCTimeout'],
    },
  },
  {
    name: 'login refused: BMCAuthenticationFailed, reported down',
    system: { powerState: 'Off' },
    goal: 'On',
    arrange: (b) => b.fail('powerState', loginRefused),
    want: {
      calls: ['powerState'],
      reached: false,
      failed: true,
      pending: 'BMCAuthenticationFailed',
      requeueAfterMs: 60_000,
      events: ['BMCAuthenticationFailed'],
      down: ['BMCAuthenticationFailed', 'BMCAuthenticationFailed'],
    },
  },
  {
    name: 'On refused with 400: BMCRejected, the BMC itself is fine (not reported)',
    system: { powerState: 'Off' },
    goal: 'On',
    arrange: (b) => b.refuse('powerOn', 400),
    want: {
      calls: ['powerState', 'powerOn'],
      reached: false,
      failed: true,
      pending: 'BMCRejected',
      requeueAfterMs: 30_000,
      events: ['BMCRejected'],
      down: [],
    },
  },
  {
    name: 'On refused as busy (transient MessageId): BMCBusy, pending without a Warning',
    system: { powerState: 'Off' },
    goal: 'On',
    arrange: (b) => b.refuse('powerOn', 400, { messageIds: ['Base.1.8.ServiceTemporarilyUnavailable'] }),
    want: {
      calls: ['powerState', 'powerOn'],
      reached: false,
      failed: true,
      pending: 'BMCBusy',
      requeueAfterMs: 2_000,
      events: [],
      down: [],
    },
  },
];

for (const row of ensureTable) {
  test(`ensure: ${row.name}`, async () => {
    const fake = new FakeBmc({ systems: [row.system] });
    row.arrange?.(fake);
    const b = powerBench(fake);
    const p = await b.power.ensure(b.server, row.goal);
    assert.deepEqual(
      fake.calls.map((c) => c.method),
      row.want.calls,
      'the calls the BMC saw',
    );
    assert.equal(p.reached, row.want.reached, 'reached');
    assert.equal(p.sent?.resetType, row.want.sent, 'the ResetType sent');
    assert.equal(p.failed, row.want.failed, 'failed');
    if (row.want.requeueAfterMs !== undefined)
      assert.equal(p.requeueAfterMs, row.want.requeueAfterMs, 'requeue');
    const pending = b.conditions.filter((c) => c.type === 'PowerActionPending' && c.status === 'True');
    assert.deepEqual(
      pending.map((c) => c.reason),
      row.want.pending ? [row.want.pending] : [],
      'PowerActionPending written',
    );
    assert.deepEqual(
      b.events.map((e) => e.reason),
      row.want.events,
      'Events',
    );
    assert.deepEqual(
      b.down.map((d) => d.reason),
      row.want.down,
      'reported to the BMC controller',
    );
    if (row.want.down.length) assert.equal(b.down[0]!.bmc, 'bmc-1');
  });
}

test('ensure: a BMC that reports late is not sent On again within the resend window, and is after it', async () => {
  const fake = new FakeBmc({ systems: [{ powerState: 'Off', follow: 'lag' }] });
  const b = powerBench(fake, { resendAfterMs: 60_000 });
  await b.power.ensure(b.server, 'On');
  const again = await b.power.ensure(b.server, 'On');
  assert.equal(fake.callsOf('powerOn').length, 1, 'one On within the window');
  assert.equal(again.reached, false);
  assert.match(again.pending ?? '', /BMC still reports Off/);
  const late = powerBench(fake, { resendAfterMs: 0 });
  await late.power.ensure(late.server, 'On');
  await late.power.ensure(late.server, 'On');
  assert.equal(fake.callsOf('powerOn').length, 3, 'sent again once the window has passed');
});

test('ensure: an On that timed out is not sent again within the resend window, also by a restarted manager', async () => {
  const fake = new FakeBmc({ systems: [{ powerState: 'Off' }] });
  fake.fail('powerOn', timedOut);
  const first = powerBench(fake, { resendAfterMs: 60_000 });
  const p = await first.power.ensure(first.server, 'On');
  assert.equal(p.failed, true);
  assert.match(p.pending ?? '', /outcome unknown .*not sent again before/);
  assert.equal(fake.callsOf('powerOn').length, 1);
  // The same process, and a new one (no memory) reading the condition the first one wrote.
  await first.power.ensure(first.server, 'On');
  const restarted = powerBench(fake, { resendAfterMs: 60_000 });
  const stored = { ...restarted.server, status: { conditions: first.conditions } } as Server;
  const again = await restarted.power.ensure(stored, 'On');
  assert.equal(fake.callsOf('powerOn').length, 1, 'no second On within the window');
  assert.equal(again.reached, false);
  assert.match(again.pending ?? '', /BMC still reports Off/);
  const later = powerBench(fake, { resendAfterMs: 0 });
  await later.power.ensure({ ...later.server, status: { conditions: first.conditions } } as Server, 'On');
  assert.equal(fake.callsOf('powerOn').length, 2, 'sent again once the window has passed');
});

interface BootRow {
  name: string;
  system?: Partial<FakeSystem>;
  virtualMedia?: boolean;
  observed: PowerState;
  netboot?: boolean;
  via?: NetbootVia;
  persistent?: boolean;
  uuidOwner?: boolean;
  arrange?: (bmc: FakeBmc) => void;
  want: {
    /** Methods the BMC saw, in order (setBootOverride with its `enabled`). */
    calls: string[];
    ok: boolean;
    sent?: string;
    reason?: string;
    maybeApplied?: boolean;
    permanent?: string;
    /** The fake's override afterwards. */
    override?: string;
    down?: string[];
  };
}

const override = (enabled: string) => `setBootOverride:${enabled}`;

const bootTable: BootRow[] = [
  {
    name: 'PXE once on an Off system: override, then On',
    observed: 'Off',
    want: {
      calls: [override('Once'), 'powerOn', 'powerState'],
      ok: true,
      sent: 'On',
      override: 'Pxe/Once',
    },
  },
  {
    name: 'PXE on a running system: a forced restart',
    system: { powerState: 'On' },
    observed: 'On',
    want: {
      calls: [override('Once'), 'restart', 'powerState'],
      ok: true,
      sent: 'ForceRestart',
      override: 'Pxe/Once',
    },
  },
  {
    name: 'persistent (NetBootAlways): Continuous',
    observed: 'Off',
    persistent: true,
    want: {
      calls: [override('Continuous'), 'powerOn', 'powerState'],
      ok: true,
      sent: 'On',
      override: 'Pxe/Continuous',
    },
  },
  {
    name: 'persistent, Continuous refused with 400: Once instead',
    observed: 'Off',
    persistent: true,
    arrange: (b) => b.refuse('setBootOverride', 400, { times: 1 }),
    want: {
      calls: [override('Continuous'), override('Once'), 'powerOn', 'powerState'],
      ok: true,
      sent: 'On',
      override: 'Pxe/Once',
    },
  },
  {
    name: 'persistent, the override fails with 500: no Once retry, no power action, nothing applied',
    observed: 'Off',
    persistent: true,
    arrange: (b) => b.refuse('setBootOverride', 500),
    want: {
      calls: [override('Continuous')],
      ok: false,
      reason: 'BMCUnavailable',
      maybeApplied: false,
      override: 'None/Disabled',
      down: ['BMCUnavailable'],
    },
  },
  {
    name: 'a boot target the system does not offer: BMCUnsupported for good, no power action',
    system: { boot: { target: 'None', enabled: 'Disabled', mode: 'UEFI', allowedTargets: ['None', 'Hdd'] } },
    observed: 'Off',
    want: {
      calls: [override('Once')],
      ok: false,
      reason: 'BMCUnsupported',
      permanent: 'unsupported',
      maybeApplied: false,
      override: 'None/Disabled',
    },
  },
  {
    name: 'UEFI HTTP boot on a system without Boot.HttpBootUri: BMCUnsupported for good',
    system: {
      boot: {
        target: 'None',
        enabled: 'Disabled',
        mode: 'UEFI',
        allowedTargets: undefined,
        httpBootUri: undefined,
      },
    },
    observed: 'Off',
    via: { target: 'UefiHttp', httpBootUri: 'http://boot.example/x.efi' },
    want: {
      calls: [override('Once')],
      ok: false,
      reason: 'BMCUnsupported',
      permanent: 'unsupported',
      override: 'None/Disabled',
    },
  },
  {
    name: 'UEFI HTTP boot: the URI travels with the override',
    observed: 'Off',
    via: { target: 'UefiHttp', httpBootUri: 'http://boot.example/x.efi' },
    want: {
      calls: [override('Once'), 'powerOn', 'powerState'],
      ok: true,
      sent: 'On',
      override: 'UefiHttp/Once',
    },
  },
  {
    name: 'virtual media: insert, Cd override, On',
    observed: 'Off',
    via: { target: 'Cd', image: 'http://boot.example/a.iso' },
    want: {
      calls: ['insertMedia', override('Once'), 'powerOn', 'powerState'],
      ok: true,
      sent: 'On',
      override: 'Cd/Once',
    },
  },
  {
    name: 'virtual media, the insert refused (404): VirtualMediaInsertRefused, retried in 5 s, nothing else sent',
    observed: 'Off',
    via: { target: 'Cd', image: 'http://boot.example/a.iso' },
    arrange: (b) => b.refuse('insertMedia', 404),
    want: { calls: ['insertMedia'], ok: false, reason: 'VirtualMediaInsertRefused', maybeApplied: false },
  },
  {
    name: 'virtual media on a BMC client without it: BMCUnsupported, no call',
    virtualMedia: false,
    observed: 'Off',
    via: { target: 'Cd', image: 'http://boot.example/a.iso' },
    want: { calls: [], ok: false, reason: 'BMCUnsupported', permanent: 'unsupported' },
  },
  {
    name: 'override set, the On times out: BMCTimeout, maybe applied, reported down',
    observed: 'Off',
    arrange: (b) => b.fail('powerOn', timedOut),
    want: {
      calls: [override('Once'), 'powerOn'],
      ok: false,
      reason: 'BMCTimeout',
      maybeApplied: true,
      override: 'Pxe/Once',
      down: ['BMCTimeout'],
    },
  },
  {
    name: 'boot from disk: no override, On',
    observed: 'Off',
    netboot: false,
    want: { calls: ['powerOn', 'powerState'], ok: true, sent: 'On', override: 'None/Disabled' },
  },
  {
    name: 'another Server owns the UUID: refused before any BMC call',
    observed: 'Off',
    uuidOwner: true,
    want: { calls: [], ok: false, reason: 'DuplicateSystemUUID', maybeApplied: false },
  },
];

const OWNER = { metadata: { name: 'srv-0' }, spec: { bmcRef: { name: 'bmc-0' } } } as Server;

for (const row of bootTable) {
  test(`boot: ${row.name}`, async () => {
    const fake = new FakeBmc({
      systems: [{ powerState: row.observed, ...row.system }],
      ...(row.virtualMedia === false ? { virtualMedia: false } : {}),
    });
    row.arrange?.(fake);
    const b = powerBench(fake, row.uuidOwner ? { uuidOwner: OWNER } : {});
    const r = await b.power.boot(b.server, {
      netboot: row.netboot ?? true,
      observed: row.observed,
      ...(row.via ? { via: row.via } : {}),
      ...(row.persistent ? { persistent: true } : {}),
    });
    assert.deepEqual(
      fake.calls.map((c) =>
        c.method === 'setBootOverride' ? override((c.args[1] as { enabled: string }).enabled) : c.method,
      ),
      row.want.calls,
      'the calls the BMC saw',
    );
    assert.equal(r.ok, row.want.ok, `ok (${r.ok ? '' : `${r.failure.reason}: ${r.failure.message}`})`);
    if (r.ok) {
      assert.equal(r.sent, row.want.sent, 'the ResetType sent');
      assert.equal(r.overrideSet, row.netboot !== false, 'overrideSet');
    } else {
      assert.equal(r.failure.reason, row.want.reason, 'reason');
      if (row.want.maybeApplied !== undefined) assert.equal(r.failure.maybeApplied, row.want.maybeApplied);
      assert.equal(r.failure.permanent, row.want.permanent, 'permanent');
      assert.deepEqual(
        b.conditions.filter((c) => c.status === 'True').map((c) => c.reason),
        [row.want.reason],
        'PowerActionPending names the failure',
      );
    }
    if (r.ok && row.via?.target === 'UefiHttp')
      assert.equal(fake.system(SYSTEM_URI).boot.httpBootUri, row.via.httpBootUri, 'Boot.HttpBootUri set');
    if (row.want.override) {
      const boot = fake.system(SYSTEM_URI).boot;
      assert.equal(`${boot.target}/${boot.enabled}`, row.want.override, "the fake's override afterwards");
    }
    assert.deepEqual(
      b.down.map((d) => d.reason),
      row.want.down ?? [],
      'reported to the BMC controller',
    );
  });
}

test('BmcConnections: the factory is asked once per BMC, the fake is reused across calls', async () => {
  const fake = new FakeBmc({ systems: [{ powerState: 'Off' }] });
  const b = powerBench(fake);
  await b.power.ensure(b.server, 'On');
  await b.power.ensure(b.server, 'Off');
  assert.deepEqual(b.factoryCalls, ['https://192.0.2.1:443']);
  assert.equal(fake.closed, false);
});
