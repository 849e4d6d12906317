import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  BootTargetNotSupportedError,
  RedfishHttpError,
  ResetTypeNotSupportedError,
} from '../../src/bmc/errors.js';
import { RedfishParseError } from '../../src/bmc/parse.js';
import type { Host } from '../../src/virtualbmc/host.js';
import { eventually, type Fixture, type FixtureOptions, startFixture } from './fixture.js';

async function withFixture(opts: FixtureOptions, fn: (f: Fixture) => Promise<void>): Promise<void> {
  const f = await startFixture(opts);
  try {
    await fn(f);
  } finally {
    await f.close();
  }
}

const patches = (f: Fixture) => f.vbmc.requests().filter((r) => r.method === 'PATCH');
const posts = (f: Fixture, suffix: string) =>
  f.vbmc.requests().filter((r) => r.method === 'POST' && r.path.endsWith(suffix));

describe('RedfishBMC against the virtual BMC: reading', () => {
  it('lists systems and managers', () =>
    withFixture({ systems: 3 }, async (f) => {
      const systems = await f.bmc.listSystems();
      assert.deepEqual(systems.map((s) => s.uri).sort(), f.vbmc.systems.map((s) => s.uri).sort());
      assert.deepEqual(await f.bmc.listManagers(), [{ id: 'BMC', uri: '/redfish/v1/Managers/BMC' }]);
    }));

  it('reads a system with its UUID canonicalised to lower case', () =>
    withFixture({}, async (f) => {
      const id = f.hosts[0]!.identity;
      // The virtual BMC reports the UUID upper case, as many BMCs do.
      const raw = (await f.bmc.client.get(f.uri())).body as Record<string, unknown>;
      assert.equal(raw['UUID'], id.uuid.toUpperCase());
      const sys = await f.bmc.getSystem(f.uri());
      assert.equal(sys.uuid, id.uuid.toLowerCase());
      assert.equal(await f.bmc.systemUUID(f.uri()), id.uuid.toLowerCase());
      assert.equal(sys.serialNumber, id.serialNumber);
      assert.equal(sys.manufacturer, id.manufacturer);
      assert.equal(sys.model, id.model);
      assert.equal(sys.powerState, 'Off');
      assert.equal(sys.memoryGiB, 16);
      assert.equal(sys.processorCount, 1);
      assert.deepEqual(sys.boot, {
        target: 'None',
        enabled: 'Disabled',
        mode: 'UEFI',
        allowedTargets: ['None', 'Pxe', 'Hdd', 'Cd', 'Usb', 'BiosSetup', 'UefiHttp'],
        httpBootUri: null,
      });
    }));

  it('reports a system without UUID as a typed error, while power state still reads (C01)', () =>
    withFixture({ profile: { omitSystemUUID: true } }, async (f) => {
      await assert.rejects(
        f.bmc.getSystem(f.uri()),
        (err: unknown) =>
          err instanceof RedfishParseError && err.field === 'UUID' && err.resource === f.uri(),
      );
      await assert.rejects(f.bmc.systemUUID(f.uri()), RedfishParseError);
      assert.equal(await f.bmc.powerState(f.uri()), 'Off');
      assert.equal((await f.bmc.powerOn(f.uri())).sent, 'On');
    }));

  it('reads the manager', () =>
    withFixture({}, async (f) => {
      const m = await f.bmc.getManager('/redfish/v1/Managers/BMC');
      assert.equal(m.id, 'BMC');
      assert.equal(m.managerType, 'BMC');
      assert.match(m.uuid ?? '', /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      assert.equal(m.firmwareVersion, '1.0.0');
    }));

  it('answers 404 for an unknown system as an HTTP error without retrying', () =>
    withFixture({}, async (f) => {
      await assert.rejects(
        f.bmc.powerState('/redfish/v1/Systems/does-not-exist'),
        (err: unknown) =>
          err instanceof RedfishHttpError && err.status === 404 && /ResourceMissingAtURI/.test(err.message),
      );
      assert.equal(f.vbmc.requests().filter((r) => r.path.endsWith('does-not-exist')).length, 1);
    }));
});

describe('RedfishBMC against the virtual BMC: power', () => {
  it('powers on once and skips when already on', () =>
    withFixture({}, async (f) => {
      const first = await f.bmc.powerOn(f.uri());
      assert.deepEqual(first, { observed: 'Off', sent: 'On', skipped: undefined });
      assert.equal(f.hosts[0]!.powerState(), 'On');
      assert.equal(await f.bmc.powerState(f.uri()), 'On');
      const second = await f.bmc.powerOn(f.uri());
      assert.deepEqual(second, { observed: 'On', sent: undefined, skipped: 'already' });
      assert.equal(posts(f, 'ComputerSystem.Reset').length, 1);
    }));

  it('starts a graceful shutdown without waiting for it to finish', () =>
    // The simulated OS takes 3 s to shut down: wide enough for a stalled event loop, and the
    // call must return long before that.
    withFixture({ timing: { shutdownMs: 3_000 } }, async (f) => {
      await f.bmc.powerOn(f.uri());
      const r = await f.bmc.gracefulShutdown(f.uri());
      assert.equal(r.sent, 'GracefulShutdown');
      assert.equal(await f.bmc.powerState(f.uri()), 'PoweringOff');
      assert.deepEqual(await f.bmc.gracefulShutdown(f.uri()), {
        observed: 'PoweringOff',
        sent: undefined,
        skipped: 'in-progress',
      });
      await eventually(() => f.hosts[0]!.powerState() === 'Off', 20_000);
      assert.equal((await f.bmc.gracefulShutdown(f.uri())).skipped, 'already');
    }));

  it('falls back from GracefulShutdown to ForceOff only when asked', () =>
    withFixture({ profile: { resetTypes: ['On', 'ForceOff', 'ForceRestart'] } }, async (f) => {
      await f.bmc.powerOn(f.uri());
      await assert.rejects(
        f.bmc.gracefulShutdown(f.uri()),
        (err: unknown) =>
          err instanceof ResetTypeNotSupportedError && err.allowed.join() === 'On,ForceOff,ForceRestart',
      );
      assert.equal(f.hosts[0]!.powerState(), 'On');
      const r = await f.bmc.gracefulShutdown(f.uri(), { fallbackToForceOff: true });
      assert.equal(r.sent, 'ForceOff');
      assert.equal(f.hosts[0]!.powerState(), 'Off');
    }));

  it('falls back to ForceOff when a service that advertises no reset types rejects GracefulShutdown', () =>
    withFixture({ profile: { resetTypesAdvertised: 'none', resetTypes: ['On', 'ForceOff'] } }, async (f) => {
      await f.bmc.powerOn(f.uri());
      await assert.rejects(
        f.bmc.gracefulShutdown(f.uri()),
        (err: unknown) => err instanceof RedfishHttpError && err.status === 400,
      );
      assert.equal((await f.bmc.gracefulShutdown(f.uri(), { fallbackToForceOff: true })).sent, 'ForceOff');
      assert.deepEqual(
        posts(f, 'ComputerSystem.Reset').map((r) => [(r.body as { ResetType: string }).ResetType, r.status]),
        [
          ['On', 204],
          ['GracefulShutdown', 400],
          ['GracefulShutdown', 400],
          ['ForceOff', 204],
        ],
      );
      assert.equal(f.hosts[0]!.powerState(), 'Off');
    }));

  it('forces power off, and skips when off', () =>
    withFixture({}, async (f) => {
      assert.equal((await f.bmc.forceOff(f.uri())).skipped, 'already');
      await f.bmc.powerOn(f.uri());
      assert.equal((await f.bmc.forceOff(f.uri())).sent, 'ForceOff');
      assert.equal(f.hosts[0]!.powerState(), 'Off');
    }));

  it('restarts a running system and powers on a system that is off', () =>
    withFixture({}, async (f) => {
      const host = f.hosts[0]!;
      assert.equal((await f.bmc.restart(f.uri())).sent, 'On');
      assert.equal(host.bootCount, 1);
      assert.equal((await f.bmc.restart(f.uri())).sent, 'ForceRestart');
      assert.equal(host.bootCount, 2);
      assert.equal((await f.bmc.restart(f.uri(), { graceful: true })).sent, 'GracefulRestart');
      assert.equal(host.bootCount, 3);
    }));

  it('restarts gracefully only when allowed, forcing it only when asked', () =>
    withFixture({ profile: { resetTypes: ['On', 'ForceOff', 'ForceRestart'] } }, async (f) => {
      await f.bmc.powerOn(f.uri());
      await assert.rejects(f.bmc.restart(f.uri(), { graceful: true }), ResetTypeNotSupportedError);
      assert.equal(
        (await f.bmc.restart(f.uri(), { graceful: true, fallbackToForce: true })).sent,
        'ForceRestart',
      );
    }));

  it('posts an explicit ResetType and refuses one the system does not allow', () =>
    withFixture({ profile: { resetTypes: ['On', 'ForceOff', 'Nmi'] } }, async (f) => {
      assert.equal((await f.bmc.reset(f.uri(), 'Nmi')).sent, 'Nmi');
      await assert.rejects(f.bmc.reset(f.uri(), 'PowerCycle'), ResetTypeNotSupportedError);
      assert.equal(posts(f, 'ComputerSystem.Reset').length, 1);
    }));

  it('reads allowable reset types from @Redfish.ActionInfo once and honours them', () =>
    withFixture(
      { profile: { resetTypesAdvertised: 'action-info', resetTypes: ['ForceOn', 'ForceOff'] } },
      async (f) => {
        assert.equal((await f.bmc.powerOn(f.uri())).sent, 'ForceOn');
        assert.equal((await f.bmc.forceOff(f.uri())).sent, 'ForceOff');
        assert.equal((await f.bmc.powerOn(f.uri())).sent, 'ForceOn');
        assert.equal(f.vbmc.requests().filter((r) => r.path.endsWith('/ResetActionInfo')).length, 1);
      },
    ));
});

describe('RedfishBMC against the virtual BMC: boot override', () => {
  it('sends only the changed fields with If-Match, and nothing when nothing changes', () =>
    withFixture({}, async (f) => {
      const r = await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' });
      assert.deepEqual(r, {
        changed: true,
        patchedUri: f.uri(),
        sentFields: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once' },
        ignored: [],
      });
      const [patch] = patches(f);
      assert.deepEqual(patch?.body, {
        Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once' },
      });
      assert.equal(patch?.ifMatch, '"1"');
      assert.equal(patch?.status, 204);

      const again = await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once', mode: 'UEFI' });
      assert.equal(again.changed, false);
      assert.equal(patches(f).length, 1);

      await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once', mode: 'Legacy' });
      assert.deepEqual(patches(f)[1]?.body, { Boot: { BootSourceOverrideMode: 'Legacy' } });
    }));

  it('has a Once override consumed by the next boot, after which it reads Disabled', () =>
    withFixture({}, async (f) => {
      await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' });
      await f.bmc.powerOn(f.uri());
      assert.equal(f.hosts[0]!.lastBoot?.device, 'Pxe');
      const after = await f.bmc.getSystem(f.uri());
      assert.equal(after.boot.enabled, 'Disabled');
      assert.equal(after.boot.target, 'Pxe');
      await eventually(() => f.hosts[0]!.lastBoot?.phase === 'up');
      assert.equal(f.standin.ipxePaths.length, 1);

      await f.bmc.restart(f.uri());
      assert.equal(f.hosts[0]!.lastBoot?.device, 'None');
      await eventually(() => f.hosts[0]!.lastBoot?.phase === 'up');
      assert.equal(f.standin.ipxePaths.length, 1);
    }));

  it('keeps a Continuous override across boots', () =>
    withFixture({}, async (f) => {
      await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Continuous' });
      await f.bmc.powerOn(f.uri());
      await f.bmc.restart(f.uri());
      assert.equal(f.hosts[0]!.bootCount, 2);
      assert.equal(f.hosts[0]!.lastBoot?.device, 'Pxe');
      assert.equal((await f.bmc.getSystem(f.uri())).boot.enabled, 'Continuous');
    }));

  it('sets UefiHttp with Boot.HttpBootUri, which the next boot hands to the host', () =>
    withFixture({}, async (f) => {
      const uri = 'http://10.251.7.1:8082/httpboot/x/1/uki.efi';
      const r = await f.bmc.setBootOverride(f.uri(), {
        target: 'UefiHttp',
        enabled: 'Once',
        httpBootUri: uri,
      });
      assert.deepEqual(r.sentFields, {
        BootSourceOverrideTarget: 'UefiHttp',
        BootSourceOverrideEnabled: 'Once',
        HttpBootUri: uri,
      });
      assert.equal((await f.bmc.getSystem(f.uri())).boot.httpBootUri, uri);
      const given: (string | undefined)[] = [];
      (f.hosts[0] as Host).setHttpBootUri = (u) => {
        given.push(u);
      };
      await f.bmc.powerOn(f.uri());
      assert.equal(f.hosts[0]!.lastBoot?.device, 'UefiHttp');
      assert.deepEqual(given, [uri]);
      const again = await f.bmc.setBootOverride(f.uri(), {
        target: 'UefiHttp',
        enabled: 'Once',
        httpBootUri: uri,
      });
      assert.deepEqual(
        again.sentFields,
        { BootSourceOverrideEnabled: 'Once' },
        'an unchanged URI is not sent',
      );
    }));

  it('refuses a boot target outside the allowable values without patching', () =>
    withFixture({}, async (f) => {
      await assert.rejects(
        f.bmc.setBootOverride(f.uri(), { target: 'UefiShell', enabled: 'Once' }),
        (err: unknown) => err instanceof BootTargetNotSupportedError && err.target === 'UefiShell',
      );
      assert.equal(patches(f).length, 0);
    }));

  it('leaves out the mode on a service that does not report it', () =>
    withFixture({ profile: { reportBootMode: false } }, async (f) => {
      const r = await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once', mode: 'UEFI' });
      assert.deepEqual(r.ignored, ['mode']);
      assert.deepEqual(patches(f)[0]?.body, {
        Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once' },
      });
      assert.equal(patches(f)[0]?.status, 204);
    }));

  it('patches the @Redfish.Settings SettingsObject when the system advertises one', () =>
    withFixture({ profile: { settingsObject: true } }, async (f) => {
      const r = await f.bmc.setBootOverride(f.uri(), { target: 'Hdd', enabled: 'Continuous' });
      assert.equal(r.patchedUri, `${f.uri()}/Settings`);
      assert.deepEqual(
        patches(f).map((p) => [p.path, p.status]),
        [[`${f.uri()}/Settings`, 204]],
      );
      assert.equal((await f.bmc.getSystem(f.uri())).boot.target, 'Hdd');
    }));

  it('retries once with a fresh ETag after 412, and fails on a second 412', () =>
    withFixture({ faults: { concurrentWrites: 1 } }, async (f) => {
      const r = await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' });
      assert.equal(r.changed, true);
      assert.deepEqual(
        patches(f).map((p) => [p.status, p.ifMatch]),
        [
          [412, '"1"'],
          [204, '"2"'],
        ],
      );
      f.vbmc.setFaults({ concurrentWrites: 2 });
      await assert.rejects(
        f.bmc.setBootOverride(f.uri(), { target: 'Hdd', enabled: 'Once' }),
        (err: unknown) => err instanceof RedfishHttpError && err.status === 412,
      );
    }));

  it('answers 428 Precondition Required by retrying with If-Match: * when the resource has no ETag', () =>
    withFixture({ profile: { requireIfMatch: true, etags: false } }, async (f) => {
      await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' });
      assert.deepEqual(
        patches(f).map((p) => [p.status, p.ifMatch]),
        [
          [428, undefined],
          [204, '*'],
        ],
      );
    }));
});

describe('RedfishBMC vendor quirks (against the virtual BMC)', () => {
  it('Lenovo: sends If-Match: * up front when the resource has no ETag', () =>
    withFixture({ manufacturer: 'Lenovo', profile: { requireIfMatch: true, etags: false } }, async (f) => {
      await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' });
      assert.deepEqual(
        patches(f).map((p) => [p.status, p.ifMatch]),
        [[204, '*']],
      );
    }));

  it('Supermicro: sends BootSourceOverrideTarget and BootSourceOverrideEnabled together, never an unchanged mode', () =>
    withFixture({ manufacturer: 'Supermicro' }, async (f) => {
      await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Once' });
      await f.bmc.setBootOverride(f.uri(), { target: 'Pxe', enabled: 'Continuous' });
      assert.deepEqual(
        patches(f).map((p) => p.body),
        [
          { Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once' } },
          { Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Continuous' } },
        ],
      );
    }));

  it('HPE: presses the power button when GracefulShutdown is not offered (iLO 4)', () =>
    withFixture(
      {
        manufacturer: 'HPE',
        profile: { resetTypes: ['On', 'ForceOff', 'ForceRestart', 'Nmi', 'PushPowerButton'] },
      },
      async (f) => {
        await f.bmc.powerOn(f.uri());
        assert.equal((await f.bmc.gracefulShutdown(f.uri())).sent, 'PushPowerButton');
        await eventually(() => f.hosts[0]!.powerState() === 'Off');
      },
    ));

  it('generic vendor: no power-button fallback for graceful shutdown', () =>
    withFixture({ profile: { resetTypes: ['On', 'ForceOff', 'PushPowerButton'] } }, async (f) => {
      await f.bmc.powerOn(f.uri());
      await assert.rejects(f.bmc.gracefulShutdown(f.uri()), ResetTypeNotSupportedError);
    }));
});
