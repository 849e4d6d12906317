import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { RedfishBMC } from '../../src/bmc/redfish-bmc.js';
import { simIdentity } from '../../src/virtualbmc/sim-fleet.js';
import { startStandin } from './standin-boot-server.js';

const CLI = fileURLToPath(new URL('../../src/cmd/virtual-bmc.js', import.meta.url));

describe('virtual-bmc command', () => {
  it('prints its URL as a JSON log line, serves N sim systems that netboot, and stops on SIGTERM', async () => {
    const standin = await startStandin();
    const child = spawn(
      process.execPath,
      [
        CLI,
        '--boot-server-url',
        standin.url,
        '--systems',
        '3',
        '--seed',
        'cli',
        '--firmware-ms',
        '5',
        '--kernel-ms',
        '5',
      ],
      { env: { ...process.env, VIRTUAL_BMC_PASSWORD: 'from-env' }, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    try {
      const lines = createInterface({ input: child.stdout! });
      let ready: Record<string, unknown> | undefined;
      for await (const line of lines) {
        const entry = JSON.parse(line) as Record<string, unknown>;
        if (entry['msg'] === 'virtual BMC ready') {
          ready = entry;
          break;
        }
      }
      assert.ok(ready, 'ready line printed');
      assert.equal(typeof ready['level'], 'number');
      assert.equal(ready['systems'], 3);
      assert.match(String(ready['url']), /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.doesNotMatch(JSON.stringify(ready), /from-env/);

      const bmc = new RedfishBMC({ endpoint: String(ready['url']), username: 'admin', password: 'from-env' });
      try {
        const systems = await bmc.listSystems();
        assert.equal(systems.length, 3);
        const uuids = await Promise.all(systems.map((s) => bmc.systemUUID(s.uri)));
        assert.deepEqual(uuids.sort(), [0, 1, 2].map((i) => simIdentity(i, 'cli').uuid).sort());
        await bmc.setBootOverride(systems[0]!.uri, { target: 'Pxe', enabled: 'Once' });
        await bmc.powerOn(systems[0]!.uri);
        await standin.waitForAccepted(1, 5_000);
        assert.equal(standin.callbacks[0]?.path, '/register');
      } finally {
        await bmc.close();
      }
      child.kill('SIGTERM');
      const [code] = await once(child, 'exit');
      assert.equal(code, 0);
    } finally {
      child.kill('SIGKILL');
      await standin.close();
    }
  });

  for (const [flag, value, manufacturer, systemUri] of [
    ['--profile', 'hpe', 'HPE', '/redfish/v1/Systems/1'],
    [
      '--profile-tree',
      '../shared/redfish-mockups/libredfish-dell',
      'Dell Inc.',
      '/redfish/v1/Systems/System.Embedded.1',
    ],
  ] as const) {
    it(`serves a captured tree with ${flag} ${value}`, async () => {
      const child = spawn(
        process.execPath,
        [CLI, '--boot-server-url', 'http://127.0.0.1:9', '--systems', '1', flag, value],
        { env: { ...process.env, VIRTUAL_BMC_PASSWORD: 'pw' }, stdio: ['ignore', 'pipe', 'inherit'] },
      );
      try {
        let url: string | undefined;
        for await (const line of createInterface({ input: child.stdout! })) {
          const entry = JSON.parse(line) as Record<string, unknown>;
          if (entry['msg'] === 'virtual BMC ready') {
            url = String(entry['url']);
            break;
          }
        }
        assert.ok(url, 'ready line printed');
        const bmc = new RedfishBMC({ endpoint: url, username: 'admin', password: 'pw' });
        try {
          const [ref] = await bmc.listSystems();
          assert.equal(ref?.uri, systemUri);
          assert.equal((await bmc.getSystem(systemUri)).manufacturer, manufacturer);
        } finally {
          await bmc.close();
        }
      } finally {
        child.kill('SIGKILL');
      }
    });
  }

  it('rejects a missing boot server URL with a usage error', async () => {
    const child = spawn(process.execPath, [CLI], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    const [code] = await once(child, 'exit');
    assert.notEqual(code, 0);
    assert.match(stderr, /--boot-server-url/);
  });
});
