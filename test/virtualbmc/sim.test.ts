import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { RedfishBMC } from '../../src/bmc/redfish-bmc.js';
import { startVirtualBmc, type VirtualBmc } from '../../src/virtualbmc/server.js';
import type { SimHost } from '../../src/virtualbmc/sim.js';
import { createSimFleet, type SimFleet, simIdentity } from '../../src/virtualbmc/sim-fleet.js';
import { type Standin, type StandinMode, type StandinOptions, startStandin } from './standin-boot-server.js';

/** The parts of upstream metalprobe's registration data the test checks. */
interface RegistrationData {
  systemInfo: { systemInformation: { uuid: string; serialNumber: string } };
  networkInterfaces: Array<{ macAddress: string; ipAddresses: string[] }>;
  cpu: Array<{ totalCores: number }>;
  memory: Array<{ size: number }>;
  storage: Array<{ name: string; sizeBytes: number }>;
  nics: Array<{ mac: string }>;
}

const USER = 'admin';
const PASSWORD = 'sim-password';

interface Env {
  standin: Standin;
  fleet: SimFleet;
  vbmc: VirtualBmc;
  bmc: RedfishBMC;
  close(): Promise<void>;
}

async function startEnv(
  count: number,
  opts: { standin?: StandinOptions; uuidCase?: 'lower' | 'upper'; seed?: string } = {},
): Promise<Env> {
  const standin = await startStandin(opts.standin);
  const fleet = createSimFleet({
    count,
    bootServerUrl: standin.url,
    seed: opts.seed ?? 'sim-test',
    timing: { firmwareMs: 5, kernelMs: 5, retryInitialMs: 10, retryMaxMs: 50, retryBudgetMs: 3_000 },
    ...(opts.uuidCase ? { uuidCase: opts.uuidCase } : {}),
  });
  const vbmc = await startVirtualBmc({ hosts: fleet.hosts, username: USER, password: PASSWORD });
  const bmc = new RedfishBMC({ endpoint: vbmc.url, username: USER, password: PASSWORD });
  return {
    standin,
    fleet,
    vbmc,
    bmc,
    close: async () => {
      await bmc.close();
      await vbmc.close();
      await fleet.close();
      await standin.close();
    },
  };
}

/** What a provisioning controller does through the BMC: netboot once, power on. */
async function netbootAll(env: Env): Promise<void> {
  for (const s of env.vbmc.systems) {
    await env.bmc.setBootOverride(s.uri, { target: 'Pxe', enabled: 'Once' });
    await env.bmc.powerOn(s.uri);
  }
}

function finished(host: SimHost, timeoutMs = 3_000): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (): boolean => host.lastBoot?.phase === 'up' || host.lastBoot?.phase === 'failed';
    if (done()) return resolve();
    const timer = setTimeout(
      () => reject(new Error(`boot of ${host.identity.uuid} not finished`)),
      timeoutMs,
    );
    const off = host.onBootFinished(() => {
      clearTimeout(timer);
      off();
      resolve();
    });
  });
}

describe('sim hosts booting end to end through the virtual BMC', () => {
  it('probe mode: fetches script and ignition, then registers its hardware', async () => {
    const env = await startEnv(3);
    try {
      await netbootAll(env);
      await env.standin.waitForAccepted(3, 5_000);
      await Promise.all(env.fleet.hosts.map((h) => finished(h)));
      const ids = env.fleet.hosts.map((h) => h.identity);
      assert.deepEqual(env.standin.ipxePaths.sort(), ids.map((i) => `/ipxe/${i.uuid}`).sort());
      assert.deepEqual(env.standin.ignitionFetched.sort(), ids.map((i) => i.uuid).sort());
      for (const id of ids) {
        const cb = env.standin.callbacks.find((c) => c.uuid === id.uuid);
        assert.equal(cb?.path, '/register');
        assert.equal(cb?.status, 200);
        assert.equal(cb?.body['systemUUID'], id.uuid);
        const data = cb?.body['data'] as RegistrationData;
        assert.equal(data.systemInfo.systemInformation.uuid, id.uuid);
        assert.equal(data.systemInfo.systemInformation.serialNumber, id.serialNumber);
        assert.equal(data.networkInterfaces[0]?.macAddress, id.macAddress);
        assert.equal(data.networkInterfaces[0]?.ipAddresses.length, 1);
        assert.equal(data.cpu[0]?.totalCores, id.cpus);
        assert.equal(data.memory[0]?.size, id.memoryMiB * 1024 * 1024);
        assert.equal(data.storage[0]?.name, 'vda');
        assert.equal(data.storage[0]?.sizeBytes, 64 * 1024 ** 3);
        assert.equal(data.nics[0]?.mac, id.macAddress);
      }
      for (const h of env.fleet.hosts) {
        assert.deepEqual(
          {
            phase: h.lastBoot?.phase,
            source: h.lastBoot?.source,
            mode: h.lastBoot?.mode,
            status: h.lastBoot?.callbackStatus,
          },
          { phase: 'up', source: 'network', mode: 'probe', status: 200 },
        );
      }
      // The Once override was consumed: the next restart boots from disk, without the network.
      await env.bmc.restart(env.vbmc.systems[0]!.uri);
      await finished(env.fleet.hosts[0]!);
      assert.equal(env.fleet.hosts[0]!.lastBoot?.source, 'disk');
      assert.equal(env.standin.ipxePaths.length, 3);
    } finally {
      await env.close();
    }
  });

  it('os mode: posts /bootstate with the attempt token, asking for the script with an upper-case UUID', async () => {
    const env = await startEnv(2, { standin: { mode: () => 'os' }, uuidCase: 'upper' });
    try {
      await netbootAll(env);
      await env.standin.waitForAccepted(2, 5_000);
      for (const h of env.fleet.hosts) {
        const uuid = h.identity.uuid;
        assert.ok(env.standin.ipxePaths.includes(`/ipxe/${uuid.toUpperCase()}`));
        const cb = env.standin.callbacks.find((c) => c.uuid === uuid);
        assert.deepEqual(cb?.body, { systemUUID: uuid, booted: true });
        assert.equal(cb?.authorization, `Bearer ${env.standin.tokenFor(uuid)}`);
      }
    } finally {
      await env.close();
    }
  });

  it('boots from disk when the boot server answers with a local-boot script, or the override is Hdd', async () => {
    const modes: StandinMode[] = ['local', 'probe'];
    const env = await startEnv(2, {
      standin: { mode: (uuid) => (uuid === simIdentity(0, 'sim-test').uuid ? modes[0]! : modes[1]!) },
    });
    try {
      const [a, b] = env.vbmc.systems;
      await env.bmc.setBootOverride(a!.uri, { target: 'Pxe', enabled: 'Once' });
      await env.bmc.powerOn(a!.uri);
      await env.bmc.setBootOverride(b!.uri, { target: 'Hdd', enabled: 'Once' });
      await env.bmc.powerOn(b!.uri);
      await Promise.all(env.fleet.hosts.map((h) => finished(h)));
      assert.equal(env.fleet.hosts[0]!.lastBoot?.source, 'disk');
      assert.equal(env.fleet.hosts[1]!.lastBoot?.source, 'disk');
      assert.deepEqual(env.standin.ipxePaths, [`/ipxe/${env.fleet.hosts[0]!.identity.uuid}`]);
      assert.equal(env.standin.callbacks.length, 0);
    } finally {
      await env.close();
    }
  });

  it('retries the callback while the registry answers 503, like a real agent', async () => {
    const env = await startEnv(1, { standin: { failCallbacks: 3 } });
    try {
      await netbootAll(env);
      await env.standin.waitForAccepted(1, 5_000);
      assert.deepEqual(
        env.standin.callbacks.map((c) => c.status),
        [503, 503, 503, 200],
      );
      // The stand-in says `Retry-After: 0`; the host still backs off (10, 20, 40 ms, ±jitter).
      const gaps = env.standin.callbacks.slice(1).map((c, i) => c.at - env.standin.callbacks[i]!.at);
      assert.ok(
        gaps.reduce((a, b) => a + b, 0) >= 35,
        `the retries backed off: gaps ${gaps.map((g) => g.toFixed(1)).join(', ')} ms`,
      );
    } finally {
      await env.close();
    }
  });

  it('ends the boot as failed on a 4xx answer, without retrying', async () => {
    const env = await startEnv(1, { standin: { mode: () => 'os', callbackStatus: 409 } });
    try {
      await netbootAll(env);
      const host = env.fleet.hosts[0]!;
      await finished(host);
      assert.equal(host.lastBoot?.phase, 'failed');
      assert.match(host.lastBoot?.error ?? '', /bootstate: HTTP 409/);
      assert.doesNotMatch(host.lastBoot?.error ?? '', new RegExp(env.standin.tokenFor(host.identity.uuid)));
      assert.equal(env.standin.callbacks.length, 1);
    } finally {
      await env.close();
    }
  });
});

describe('sim host faults', () => {
  let env: Env;
  before(async () => {
    env = await startEnv(5, { seed: 'faults' });
  });
  after(() => env.close());

  it('never calls back, calls back late, fails the ignition fetch, or boots from disk', async () => {
    const [silent, late, noIgnition, disk, normal] = env.fleet.hosts as [
      SimHost,
      SimHost,
      SimHost,
      SimHost,
      SimHost,
    ];
    silent.setFaults({ neverCallBack: true });
    late.setFaults({ callbackDelayMs: 300 });
    noIgnition.setFaults({ failIgnitionFetch: true });
    disk.setFaults({ bootFromDisk: true });
    const started = performance.now();
    const lateDone = finished(late).then(() => performance.now() - started);
    await netbootAll(env);
    await Promise.all(env.fleet.hosts.map((h) => finished(h)));
    const uuids = (h: SimHost) => h.identity.uuid;

    assert.ok(env.standin.ipxePaths.includes(`/ipxe/${uuids(silent)}`));
    assert.ok(env.standin.ignitionFetched.includes(uuids(silent)));
    assert.equal(silent.lastBoot?.phase, 'up');
    assert.equal(silent.lastBoot?.callbackStatus, undefined);

    assert.ok((await lateDone) >= 300, 'late callback came after the delay');
    assert.equal(late.lastBoot?.callbackStatus, 200);

    assert.ok(env.standin.ipxePaths.includes(`/ipxe/${uuids(noIgnition)}`));
    assert.ok(!env.standin.ignitionFetched.includes(uuids(noIgnition)));
    assert.equal(noIgnition.lastBoot?.phase, 'failed');
    assert.match(noIgnition.lastBoot?.error ?? '', /ignition/);

    assert.ok(!env.standin.ipxePaths.some((p) => p.endsWith(uuids(disk))));
    assert.equal(disk.lastBoot?.source, 'disk');
    assert.equal(disk.lastBoot?.device, 'Pxe', 'the BMC did hand over Pxe');

    assert.equal(normal.lastBoot?.callbackStatus, 200);
    const called = env.standin.callbacks.map((c) => c.uuid).sort();
    assert.deepEqual(called, [uuids(late), uuids(normal)].sort());
  });

  it('ignores the ACPI power button when told to', async () => {
    const host = env.fleet.hosts[4]!;
    host.setFaults({ ignoreGracefulShutdown: true });
    const uri = env.vbmc.systems[4]!.uri;
    assert.equal(await env.bmc.powerState(uri), 'On');
    assert.equal((await env.bmc.gracefulShutdown(uri)).sent, 'GracefulShutdown');
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(await env.bmc.powerState(uri), 'On');
    assert.equal((await env.bmc.forceOff(uri)).sent, 'ForceOff');
    assert.equal(await env.bmc.powerState(uri), 'Off');
  });

  it('abandons a boot in progress when reset, and the new boot completes', async () => {
    const host = env.fleet.hosts[1]!;
    host.setFaults({ callbackDelayMs: 1_000 });
    const uri = env.vbmc.systems[1]!.uri;
    await env.bmc.setBootOverride(uri, { target: 'Pxe', enabled: 'Continuous' });
    await env.bmc.restart(uri);
    const firstSeq = host.lastBoot!.seq;
    let aborted: string | undefined;
    host.onBootFinished((_, b) => {
      if (b.seq === firstSeq) aborted = b.phase;
    });
    await new Promise((r) => setTimeout(r, 100));
    host.setFaults({ callbackDelayMs: 0 });
    const callbacksBefore = env.standin.callbacks.length;
    await env.bmc.restart(uri);
    await finished(host);
    assert.equal(aborted, 'aborted');
    assert.equal(host.lastBoot?.seq, firstSeq + 1);
    assert.equal(host.lastBoot?.callbackStatus, 200);
    assert.equal(env.standin.callbacks.length, callbacksBefore + 1, 'the abandoned boot never called back');
  });
});
