/**
 * The virtual BMC's SSH serial console (src/virtualbmc/console.ts) with simulated hosts, through a
 * real SSH client (the `ssh2` package): Redfish advertises it, `console N` attaches to the echoing
 * sim serial port, a second session is refused while one is attached, wrong credentials are refused.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CONSOLE_BUSY_EXIT, CONSOLE_USAGE_EXIT, parseConsoleCommand } from '../../src/virtualbmc/console.js';
import { startVirtualBmc, type VirtualBmc } from '../../src/virtualbmc/server.js';
import { createSimFleet, type SimFleet } from '../../src/virtualbmc/sim-fleet.js';
import { eventually } from '../controllers/fixture.js';
import { sshExec, within } from './ssh-session.js';

const USER = 'admin';
const PASSWORD = 'console-secret';

describe('virtual BMC serial console (SSH)', { timeout: 60_000 }, () => {
  let fleet: SimFleet;
  let vbmc: VirtualBmc;
  let port: number;
  const basic = `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString('base64')}`;

  before(async () => {
    // The hosts never boot here: the boot server URL is never fetched.
    fleet = createSimFleet({ count: 2, bootServerUrl: 'http://127.0.0.1:9', seed: 'console-test' });
    vbmc = await startVirtualBmc({ hosts: fleet.hosts, username: USER, password: PASSWORD });
    assert.ok(vbmc.console, 'the console is on by default');
    port = vbmc.console.port;
  });
  after(async () => {
    await vbmc.close();
    await fleet.close();
  });

  it('Redfish describes the console: Manager SerialConsole and each system SerialConsole.SSH', async () => {
    const mgr = (await (
      await fetch(`${vbmc.url}/redfish/v1/Managers/BMC`, { headers: { authorization: basic } })
    ).json()) as {
      SerialConsole?: {
        ServiceEnabled: boolean;
        MaxConcurrentSessions: number;
        ConnectTypesSupported: string[];
      };
    };
    assert.deepEqual(mgr.SerialConsole, {
      ServiceEnabled: true,
      MaxConcurrentSessions: 1,
      ConnectTypesSupported: ['SSH'],
    });
    for (const [i, s] of vbmc.systems.entries()) {
      const sys = (await (
        await fetch(`${vbmc.url}${s.uri}`, { headers: { authorization: basic } })
      ).json()) as {
        SerialConsole?: {
          MaxConcurrentSessions: number;
          SSH: { ServiceEnabled: boolean; Port: number; ConsoleEntryCommand: string };
        };
      };
      assert.equal(sys.SerialConsole?.MaxConcurrentSessions, 1);
      assert.equal(sys.SerialConsole?.SSH.ServiceEnabled, true);
      assert.equal(sys.SerialConsole?.SSH.Port, port);
      assert.equal(sys.SerialConsole?.SSH.ConsoleEntryCommand, `console ${i + 1}`);
    }
  });

  it('console 2 attaches to the second host: its banner, then the echo of what is typed', async () => {
    const s = await sshExec(port, USER, PASSWORD, 'console 2');
    await eventually(
      'the second host banner',
      5_000,
      () => s.out().includes(vbmc.systems[1]!.uuid) || undefined,
    );
    s.write('hello-console\r');
    await eventually('the echo', 5_000, () => s.out().includes('hello-console\r') || undefined);
    s.end();
    await within(s.closed, 5_000, 'the session end');
    await eventually(
      'no session attached',
      5_000,
      () => vbmc.console!.activeSessions().length === 0 || undefined,
    );
  });

  it('a second session on the same system is refused while one is attached (exit 75, the holder unaffected)', async () => {
    const first = await sshExec(port, USER, PASSWORD, 'console 1');
    await eventually(
      'the first session banner',
      5_000,
      () => first.out().includes('serial console') || undefined,
    );
    const second = await sshExec(port, USER, PASSWORD, 'console 1');
    assert.equal(await within(second.closed, 5_000, 'the refusal'), CONSOLE_BUSY_EXIT);
    assert.match(
      second.err(),
      /console 1 is busy: another session is attached \(MaxConcurrentSessions 1\); retry once it ends/,
    );
    first.write('still-mine\r');
    await eventually('the first session echo', 5_000, () => first.out().includes('still-mine') || undefined);
    // The other system's console is its own: not busy.
    const other = await sshExec(port, USER, PASSWORD, 'console 2');
    await eventually(
      'the other system banner',
      5_000,
      () => other.out().includes('serial console') || undefined,
    );
    other.end();
    first.end();
    await within(first.closed, 5_000, 'the first session end');
    // Once the holder left, the console is free again.
    await eventually(
      'console 1 free',
      5_000,
      () => !vbmc.console!.activeSessions().includes(vbmc.systems[0]!.id) || undefined,
    );
    const third = await sshExec(port, USER, PASSWORD, 'console 1');
    await eventually(
      'the third session banner',
      5_000,
      () => third.out().includes('serial console') || undefined,
    );
    third.end();
    await within(third.closed, 5_000, 'the third session end');
  });

  it('wrong credentials are refused at SSH authentication', async () => {
    await assert.rejects(sshExec(port, USER, 'wrong', 'console 1'), (err: Error & { level?: string }) => {
      assert.equal(err.level, 'client-authentication');
      return true;
    });
    await assert.rejects(sshExec(port, 'root', PASSWORD, 'console 1'), /authentication methods failed/);
  });

  it('anything but "console N" gets a usage message and exit 2', async () => {
    for (const cmd of ['console 3', 'reboot', 'console']) {
      const s = await sshExec(port, USER, PASSWORD, cmd);
      assert.equal(await within(s.closed, 5_000, cmd), CONSOLE_USAGE_EXIT, cmd);
      assert.match(s.err(), /use "console N" \(N = 1\.\.2\)/);
    }
  });

  it('parseConsoleCommand: 1-based numbers and Redfish Ids, nothing else', () => {
    const ids = ['System.Embedded.1', 'abc'];
    assert.equal(parseConsoleCommand('console 1', ids), 0);
    assert.equal(parseConsoleCommand('  console 2 ', ids), 1);
    assert.equal(parseConsoleCommand('console system.embedded.1', ids), 0);
    assert.equal(parseConsoleCommand('console 0', ids), undefined);
    assert.equal(parseConsoleCommand('console 3', ids), undefined);
    assert.equal(parseConsoleCommand('console 1; reboot', ids), undefined);
    assert.equal(parseConsoleCommand('vsp', ids), undefined);
  });

  it('console: false serves no SSH port and Redfish reports no SerialConsole', async () => {
    const f = createSimFleet({ count: 1, bootServerUrl: 'http://127.0.0.1:9', seed: 'console-off' });
    const v = await startVirtualBmc({ hosts: f.hosts, username: USER, password: PASSWORD, console: false });
    try {
      assert.equal(v.console, undefined);
      const sys = (await (
        await fetch(`${v.url}${v.systems[0]!.uri}`, { headers: { authorization: basic } })
      ).json()) as Record<string, unknown>;
      assert.equal(sys['SerialConsole'], undefined);
    } finally {
      await v.close();
      await f.close();
    }
  });
});
