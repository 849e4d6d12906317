/**
 * Issue 16 items 2–5 against the real virtual BMC serving captured vendor trees with their write
 * behaviour: tolerant reading of vendor values, pending SettingsObject values, transient MessageIds
 * (HPE POST window) retried inside the call budget, permanent rejections left permanent, and each
 * vendor's quirks (Dell: no re-sent BootSourceOverrideMode; Supermicro: Target with Enabled; X10: no
 * mode).
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBmcBusy, RedfishBudgetExceededError, RedfishHttpError } from '../../src/bmc/errors.js';
import { isTransientMessageId, TRANSIENT_MESSAGES } from '../../src/bmc/vendor.js';
import { classifyBmcFailure } from '../../src/controllers/bmc-actions/bmc-connections.js';
import { resolveProfile, VENDOR_PROFILES, type VendorProfileName } from '../../src/virtualbmc/profile.js';
import type { RequestRecord } from '../../src/virtualbmc/server.js';
import { SUPPORTED_BOOT_TARGETS } from '../../src/virtualbmc/system.js';
import { eventually, type Fixture, type FixtureOptions, startFixture } from './fixture.js';

async function withFixture(opts: FixtureOptions, fn: (f: Fixture) => Promise<void>): Promise<void> {
  const f = await startFixture(opts);
  try {
    await fn(f);
  } finally {
    await f.close();
  }
}

const patches = (f: Fixture): RequestRecord[] => f.vbmc.requests().filter((r) => r.method === 'PATCH');

describe('tolerant reading (issue 16 item 4)', () => {
  it('a vendor-specific current boot target (UsbKey) neither breaks getSystem nor setBootOverride', () =>
    withFixture(
      {
        profile: {
          initialBoot: { target: 'UsbKey', enabled: 'Continuous', mode: 'UEFI' },
          bootTargets: [...SUPPORTED_BOOT_TARGETS, 'UsbKey'],
        },
      },
      async (f) => {
        const sys = await f.bmc.getSystem(f.uri());
        assert.equal(sys.boot.target, 'UsbKey');
        assert.ok(!sys.boot.allowedTargets?.includes('UsbKey' as never), 'only DMTF values are offered');
        const r = await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' });
        assert.deepEqual(r.sentFields, {
          BootSourceOverrideTarget: 'Pxe',
          BootSourceOverrideEnabled: 'Once',
        });
        await f.bmc.powerOn(f.uri());
        assert.equal(f.hosts[0]!.lastBoot?.device, 'Pxe');
      },
    ));

  it('with a SettingsObject applied on reset, a second call before the reset sends nothing', () =>
    withFixture({ profile: { settingsObject: true, settingsApplyTime: 'OnReset' } }, async (f) => {
      const first = await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' });
      assert.equal(first.patchedUri, `${f.uri()}/Settings`);
      const second = await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' });
      assert.equal(second.changed, false, 'the pending values already are the wanted ones');
      assert.equal(patches(f).length, 1);
      assert.equal((await f.bmc.getSystem(f.uri())).boot.target, 'None', 'not applied before the reset');
      await f.bmc.powerOn(f.uri());
      assert.equal(f.hosts[0]!.lastBoot?.device, 'Pxe', 'applied when the reset took effect');
      assert.equal((await f.bmc.getSystem(f.uri())).boot.enabled, 'Disabled', 'and the Once was used up');
    }));
});

describe('transient Redfish errors (issue 16 item 3)', () => {
  it('the table names its sources and matches MessageIds of any version', () => {
    for (const m of TRANSIENT_MESSAGES) assert.ok(m.source.length > 20, m.key);
    assert.ok(isTransientMessageId('iLO.2.26.UnableToModifyDuringSystemPOST'));
    assert.ok(isTransientMessageId('iLO.2.14.UnableToModifyDuringSystemPOST'));
    assert.ok(isTransientMessageId('Base.1.18.ResourceInUse'));
    assert.ok(isTransientMessageId('Base.1.0.ServiceTemporarilyUnavailable'));
    assert.ok(!isTransientMessageId('Base.1.18.PropertyValueNotInList'));
    assert.ok(!isTransientMessageId('Base.1.18.ActionParameterValueNotInList'));
    assert.ok(!isTransientMessageId('Contoso.1.0.UnableToModifyDuringSystemPOST'), 'registry matters');
    assert.ok(!isTransientMessageId('ResourceInUse'));
  });

  it('HPE POST window: the boot PATCH is retried with backoff and succeeds within the call budget', () =>
    withFixture({ profile: resolveProfile('hpe') }, async (f) => {
      f.vbmc.setFaults({ hostsInPostMs: 1_200 });
      const started = performance.now();
      const r = await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' }, { budgetMs: 5_000 });
      const ms = performance.now() - started;
      assert.equal(r.changed, true);
      const statuses = patches(f).map((p) => p.status);
      assert.ok(statuses.length >= 2, `retried: ${statuses.join(',')}`);
      assert.ok(
        statuses.slice(0, -1).every((s) => s === 400),
        `400s during POST: ${statuses.join(',')}`,
      );
      assert.equal(statuses.at(-1), 204);
      assert.ok(
        ms >= 1_000 && ms < 5_000,
        `succeeded after POST ended, inside the budget (${Math.round(ms)} ms)`,
      );
    }));

  it('a POST window longer than the budget ends as busy (BMCBusy, 2 s requeue), not as rejected', () =>
    withFixture({ profile: resolveProfile('hpe') }, async (f) => {
      f.vbmc.setFaults({ hostsInPostMs: 60_000 });
      const err = await f.bmc
        .setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' }, { budgetMs: 800 })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      assert.ok(err instanceof RedfishBudgetExceededError, String(err));
      assert.ok(err.cause instanceof RedfishHttpError && err.cause.transient);
      assert.ok(isBmcBusy(err));
      const failure = classifyBmcFailure(err);
      assert.equal(failure.reason, 'BMCBusy');
      assert.equal(failure.busy, true);
      assert.equal(failure.maybeApplied, false);
      assert.ok(failure.retryAfterMs <= 5_000, `short requeue, not 30 s (${failure.retryAfterMs} ms)`);
    }));

  it('a permanent rejection is not retried', () =>
    withFixture({}, async (f) => {
      const err = await f.bmc.client.patch(f.uri(), { Boot: { BootSourceOverrideTarget: 'Floppy' } }).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof RedfishHttpError && err.status === 400 && !err.transient, String(err));
      assert.ok(!isBmcBusy(err));
      assert.equal(classifyBmcFailure(err).reason, 'BMCRejected');
      assert.equal(patches(f).length, 1);
    }));
});

describe('virtual BMC serving captured vendor trees (issue 16 items 2 and 5)', () => {
  for (const name of Object.keys(VENDOR_PROFILES) as VendorProfileName[]) {
    it(`${name}: discovery reads and a network boot, with no rejected and no unchanged field in any PATCH`, () =>
      withFixture({ systems: 2, profile: resolveProfile(name) }, async (f) => {
        const systems = await f.bmc.listSystems();
        assert.equal(systems.length, 2);
        let changed = 0;
        for (const [i, ref] of systems.entries()) {
          const sys = await f.bmc.getSystem(ref.uri);
          assert.equal(sys.uuid, f.hosts[i]!.identity.uuid, 'canonical UUID whatever the case reported');
          const root = (await f.bmc.client.get('/redfish/v1/')).body as Record<string, unknown>;
          assert.ok(root['@odata.id'] === '/redfish/v1' || root['@odata.id'] === '/redfish/v1/');
          const first = await f.bmc.setBootOverride(ref.uri, {
            target: 'Pxe',
            enabled: 'Once',
            mode: 'UEFI',
          });
          if (first.changed) changed++;
          const again = await f.bmc.setBootOverride(ref.uri, {
            target: 'Pxe',
            enabled: 'Once',
            mode: 'UEFI',
          });
          assert.equal(again.changed, false, 'the repeated call sends nothing');
          await f.bmc.powerOn(ref.uri);
          await eventually(() => f.hosts[i]!.lastBoot?.device === 'Pxe');
        }
        const p = patches(f);
        // DMTF's captured system already holds Pxe/Once: nothing to send there.
        assert.equal(p.length, changed);
        assert.equal(changed, name === 'dmtf' ? 0 : 2);
        assert.deepEqual(
          p.filter((r) => r.status >= 400),
          [],
        );
        assert.deepEqual(
          p.flatMap((r) => r.unchangedFields ?? []),
          [],
        );
        assert.equal(f.vbmc.biosJobs(), 0, 'no BIOS job (Dell)');
      }));
  }

  it('dell: ids like System.Embedded.N, captured sub-resources with their links moved', () =>
    withFixture({ systems: 2, profile: resolveProfile('dell') }, async (f) => {
      assert.deepEqual(
        f.vbmc.systems.map((s) => s.uri),
        ['/redfish/v1/Systems/System.Embedded.1', '/redfish/v1/Systems/System.Embedded.2'],
      );
      const bios = (await f.bmc.client.get('/redfish/v1/Systems/System.Embedded.2/Bios')).body as Record<
        string,
        unknown
      >;
      assert.equal(bios['@odata.id'], '/redfish/v1/Systems/System.Embedded.2/Bios');
      const sys = await f.bmc.getSystem(f.uri(1));
      assert.equal(sys.manufacturer, 'Dell Inc.');
      assert.ok(sys.boot.allowedTargets?.includes('UefiHttp'));
      // A re-sent unchanged BootSourceOverrideMode queues a BIOS job on iDRAC: the client never sends one.
      await f.bmc.setBootOverride(f.uri(1), { target: 'Pxe', enabled: 'Once', mode: 'UEFI' });
      assert.deepEqual(patches(f)[0]?.body, {
        Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once' },
      });
      await f.bmc.client.patch(f.uri(1), { Boot: { BootSourceOverrideMode: 'UEFI' } });
      assert.equal(f.vbmc.biosJobs(), 1, 'the virtual iDRAC models the job');
    }));

  it('supermicro: reset types from @Redfish.ActionInfo; Target and Enabled only together', () =>
    withFixture({ profile: resolveProfile('supermicro') }, async (f) => {
      assert.equal((await f.bmc.powerOn(f.uri())).sent, 'On');
      assert.ok(f.vbmc.requests().some((r) => r.path.endsWith('/ResetActionInfo') && r.status === 200));
      await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' });
      assert.deepEqual(patches(f)[0]?.body, {
        Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once' },
      });
      await assert.rejects(
        f.bmc.client.patch(f.uri(), { Boot: { BootSourceOverrideEnabled: 'Continuous' } }),
        (e: unknown) =>
          e instanceof RedfishHttpError && e.status === 400 && /PropertyMissing/.test(e.message),
      );
    }));

  it('supermicro-x10: no BootSourceOverrideMode reported, none sent', () =>
    withFixture({ profile: resolveProfile('supermicro-x10') }, async (f) => {
      assert.equal((await f.bmc.getSystem(f.uri())).boot.mode, undefined);
      const r = await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once', mode: 'UEFI' });
      assert.deepEqual(r.ignored, ['mode']);
      assert.equal(patches(f)[0]?.status, 204);
    }));

  it('hpe: the POST window follows every start of the host', () =>
    withFixture({ profile: { ...resolveProfile('hpe'), postWindowMs: 400 } }, async (f) => {
      await f.bmc.powerOn(f.uri());
      assert.equal(await f.bmc.powerState(f.uri()), 'Off', 'the Reset takes effect after a delay');
      await eventually(() => f.hosts[0]!.powerState() === 'On');
      await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' }, { budgetMs: 3_000 });
      const statuses = patches(f).map((p) => p.status);
      assert.equal(statuses[0], 400, 'refused during POST');
      assert.equal(statuses.at(-1), 204);
      const err = f.vbmc.requests().find((r) => r.method === 'PATCH' && r.status === 400);
      assert.ok(err);
    }));

  it('an unknown profile name is refused with the known ones', () => {
    assert.throws(() => resolveProfile('nosuchvendor'), /dell, hpe, supermicro/);
  });
});
