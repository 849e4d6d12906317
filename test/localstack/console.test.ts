/**
 * `metalctl console SERVER` (src/localstack/console-command.ts, console-logic.ts):
 * - against the real API server, the manager and the virtual BMC of the controller fixture (sim hosts,
 *   whose serial port echoes), run as the CLI a user types (a child process with piped stdin):
 *   attach, type, read the echo, leave with `~.`; a second session refused while one is attached;
 *   wrong credentials refused (Redfish 401, and SSH when Redfish is not asked); an unknown host key
 *   refused with the line to add; the password never printed.
 * - the pure decisions: the escape filter, known_hosts matching, port and entry command precedence,
 *   Server → BMC resolution.
 */
import assert from 'node:assert/strict';
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it, test } from 'node:test';
import type { BMC } from '../../src/api/v1alpha1/bmc.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import {
  bmcOfServer,
  ConsoleError,
  checkKnownHost,
  consoleEntry,
  EscapeFilter,
  knownHostName,
} from '../../src/localstack/console-logic.js';
import { REPO_ROOT } from '../../src/localstack/control-plane.js';
import { Resources } from '../../src/runtime/resource.js';
import { availableServers, b64, eventually, withStack } from '../controllers/fixture.js';
import { releaseSharedCluster } from '../harness/shared.js';
import { within } from '../virtualbmc/ssh-session.js';

after(releaseSharedCluster);

interface Cli {
  proc: ChildProcessWithoutNullStreams;
  out(): string;
  err(): string;
  exit: Promise<number | null>;
}

function metalctlConsole(kubeconfig: string, ...args: string[]): Cli {
  const proc = spawn(
    process.execPath,
    [join(REPO_ROOT, 'dist', 'src', 'cmd', 'metalctl.js'), 'console', ...args, '--kubeconfig', kubeconfig],
    { env: { ...process.env, KUBECONFIG: '' }, stdio: ['pipe', 'pipe', 'pipe'] },
  );
  let out = '';
  let err = '';
  proc.stdout.on('data', (d: Buffer) => {
    out += d.toString('utf8');
  });
  proc.stderr.on('data', (d: Buffer) => {
    err += d.toString('utf8');
  });
  const exit = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  return { proc, out: () => out, err: () => err, exit };
}

test('metalctl console: attach, echo, ~. leaves; busy; wrong credentials; unknown host key', {
  timeout: 120_000,
}, async () => {
  await withStack('console', { hosts: 1 }, async (s) => {
    const extra: string[] = [];
    try {
      const [srv] = await availableServers(s, 1);
      const name = srv!.metadata.name!;
      const sshPort = s.vbmc.console!.port;
      const dir = mkdtempSync(join(tmpdir(), 'metalctl-console-'));
      const knownHosts = join(dir, 'known_hosts');
      writeFileSync(
        knownHosts,
        `# test\n${knownHostName('127.0.0.1', sshPort)} ${s.vbmc.console!.hostPublicKey}\n`,
      );

      const first = metalctlConsole(s.kubeconfigPath, name, '--known-hosts-file', knownHosts);
      await eventually(
        'the attach line',
        20_000,
        () => first.err().includes('type ~. at the start of a line to leave') || undefined,
      );
      assert.match(first.err(), new RegExp(`BMC 127\\.0\\.0\\.1:${sshPort}, "console 1"`));
      await eventually(
        'the sim host banner',
        10_000,
        () => first.out().includes(srv!.spec.systemUUID) || undefined,
      );
      first.proc.stdin.write('ping-console-42\r');
      await eventually('the echo', 10_000, () => first.out().includes('ping-console-42') || undefined);

      // A second user meanwhile: refused, the first stays attached.
      const second = metalctlConsole(s.kubeconfigPath, name, '--known-hosts-file', knownHosts);
      assert.equal(await within(second.exit, 20_000, 'the second metalctl'), 1);
      assert.match(
        second.err(),
        /console 1 is busy: another session is attached \(MaxConcurrentSessions 1\); retry once it ends/,
      );
      first.proc.stdin.write('after-refusal\r');
      await eventually(
        'the echo after the refusal',
        10_000,
        () => first.out().includes('after-refusal') || undefined,
      );

      // ~. after Enter ends the session; the escape itself is not sent.
      first.proc.stdin.write('~.');
      assert.equal(await within(first.exit, 10_000, 'metalctl after ~.'), 0);
      assert.doesNotMatch(first.out(), /~\./);
      assert.match(first.err(), /console closed \(~\.\)/);
      await eventually(
        'the console free again',
        10_000,
        () => s.vbmc.console!.activeSessions().length === 0 || undefined,
      );

      // Unknown host key: refused, with the line to add (the public key only).
      const emptyKnown = join(dir, 'empty_known_hosts');
      writeFileSync(emptyKnown, '');
      const unknown = metalctlConsole(s.kubeconfigPath, name, '--known-hosts-file', emptyKnown);
      assert.equal(await within(unknown.exit, 20_000, 'metalctl with an unknown host key'), 1);
      assert.match(unknown.err(), /host key is not in .*empty_known_hosts: check it out of band and add/);
      assert.ok(
        unknown.err().includes(`[127.0.0.1]:${sshPort} ${s.vbmc.console!.hostPublicKey}`),
        unknown.err(),
      );

      // Wrong credentials: a Server (not the manager's: no scope label) whose inline BMC has a wrong secret.
      const wrong = `wrong-${s.ns}`;
      const wrongPassword = `pw-${randomBytes(6).toString('hex')}`;
      await s.client.create(Resources.BMCSecret, {
        apiVersion: 'metal.ironcore.dev/v1alpha1',
        kind: 'BMCSecret',
        metadata: { name: wrong },
        data: { username: b64('admin'), password: b64(wrongPassword) },
      });
      extra.push(wrong);
      const port = Number(new URL(s.vbmc.url).port);
      await s.client.create<Server>(Resources.Server, {
        apiVersion: 'metal.ironcore.dev/v1alpha1',
        kind: 'Server',
        metadata: { name: wrong },
        spec: {
          systemUUID: randomUUID(),
          systemURI: s.vbmc.systems[0]!.uri,
          bmc: {
            address: '127.0.0.1',
            bmcSecretRef: { name: wrong },
            protocol: { name: 'Redfish', port, scheme: 'http' },
          },
        },
      });
      const redfish401 = metalctlConsole(s.kubeconfigPath, wrong, '--known-hosts-file', knownHosts);
      assert.equal(await within(redfish401.exit, 30_000, 'metalctl with wrong credentials (Redfish)'), 1);
      assert.match(
        redfish401.err(),
        new RegExp(`the BMC refused the credentials of BMCSecret ${wrong} \\(Redfish HTTP 401\\)`),
      );
      // Without a system URI Redfish is not asked: the SSH login itself is refused.
      await s.client.mergePatch(Resources.Server, wrong, undefined, { spec: { systemURI: null } });
      const ssh401 = metalctlConsole(
        s.kubeconfigPath,
        wrong,
        '--known-hosts-file',
        knownHosts,
        '--port',
        String(sshPort),
      );
      assert.equal(await within(ssh401.exit, 30_000, 'metalctl with wrong credentials (SSH)'), 1);
      assert.match(
        ssh401.err(),
        new RegExp(`the BMC refused the credentials of BMCSecret ${wrong} \\(SSH password authentication\\)`),
      );

      for (const c of [first, second, unknown, redfish401, ssh401]) {
        assert.ok(!`${c.out()}${c.err()}`.includes(wrongPassword), 'a password was printed');
        assert.doesNotMatch(`${c.out()}${c.err()}`, /\bsecret\b/, 'the stack password was printed');
      }
    } finally {
      for (const n of extra) {
        await s.client.delete(Resources.Server, n).catch(() => undefined);
        await s.client.delete(Resources.BMCSecret, n).catch(() => undefined);
      }
    }
  });
});

describe('console decisions (pure)', () => {
  it('EscapeFilter: ~. at a line start exits; ~~ sends ~; ~ elsewhere passes; state spans chunks', () => {
    const f = new EscapeFilter();
    assert.deepEqual(f.push(Buffer.from('ls ~/x\r')), { data: Buffer.from('ls ~/x\r'), exit: false });
    assert.deepEqual(f.push(Buffer.from('~')), { data: Buffer.from(''), exit: false });
    assert.deepEqual(f.push(Buffer.from('~a\n')), { data: Buffer.from('~a\n'), exit: false });
    assert.deepEqual(f.push(Buffer.from('~x')), { data: Buffer.from('~x'), exit: false });
    assert.deepEqual(f.push(Buffer.from('\r~.rest')), { data: Buffer.from('\r'), exit: true });
    const first = new EscapeFilter();
    assert.deepEqual(first.push(Buffer.from('~.')), { data: Buffer.from(''), exit: true });
    const mid = new EscapeFilter();
    assert.equal(mid.push(Buffer.from('a~.')).exit, false);
  });

  it('checkKnownHost: [host]:port, comma lists, hashed names, changed and revoked keys', () => {
    const blob = Buffer.from('key-blob-1');
    const other = Buffer.from('key-blob-2');
    const k = (b: Buffer) => b.toString('base64');
    assert.equal(knownHostName('10.0.0.1', 22), '10.0.0.1');
    assert.equal(knownHostName('10.0.0.1', 2222), '[10.0.0.1]:2222');
    assert.deepEqual(
      checkKnownHost(`[10.0.0.1]:2222 ssh-ed25519 ${k(blob)}\n`, '10.0.0.1', 2222, 'ssh-ed25519', blob),
      { ok: true },
    );
    // The same host on another port is another entry.
    assert.equal(
      checkKnownHost(`10.0.0.1 ssh-ed25519 ${k(blob)}\n`, '10.0.0.1', 2222, 'ssh-ed25519', blob).ok,
      false,
    );
    assert.equal(
      checkKnownHost(`bmc1,10.0.0.1 ssh-ed25519 ${k(blob)}`, '10.0.0.1', 22, 'ssh-ed25519', blob).ok,
      true,
    );
    const salt = Buffer.from('0123456789abcdefghij');
    const hash = createHmac('sha1', salt).update('[10.0.0.1]:2222').digest('base64');
    assert.equal(
      checkKnownHost(
        `|1|${salt.toString('base64')}|${hash} ssh-ed25519 ${k(blob)}`,
        '10.0.0.1',
        2222,
        'ssh-ed25519',
        blob,
      ).ok,
      true,
    );
    const changed = checkKnownHost(`10.0.0.1 ssh-ed25519 ${k(other)}`, '10.0.0.1', 22, 'ssh-ed25519', blob);
    assert.deepEqual(changed, { ok: false, reason: 'changed', line: `10.0.0.1 ssh-ed25519 ${k(blob)}` });
    assert.equal(checkKnownHost('', '10.0.0.1', 22, 'ssh-ed25519', blob).ok, false);
    const revoked = `@revoked 10.0.0.1 ssh-ed25519 ${k(blob)}\n10.0.0.1 ssh-ed25519 ${k(blob)}`;
    assert.equal(
      (checkKnownHost(revoked, '10.0.0.1', 22, 'ssh-ed25519', blob) as { reason: string }).reason,
      'revoked',
    );
  });

  it('consoleEntry: flags, then Redfish SerialConsole.SSH, then the BMC spec port, then 22 / console 1', () => {
    const sys = {
      SerialConsole: { SSH: { ServiceEnabled: true, Port: 2200, ConsoleEntryCommand: 'console 3' } },
    };
    assert.deepEqual(consoleEntry(sys, { consolePort: 2300 }, {}), {
      port: 2200,
      command: 'console 3',
      source: 'redfish',
    });
    assert.deepEqual(consoleEntry(sys, { consolePort: undefined }, { port: 24, number: 2 }), {
      port: 24,
      command: 'console 2',
      source: 'default',
    });
    assert.deepEqual(consoleEntry({}, { consolePort: 2300 }, {}), {
      port: 2300,
      command: 'console 1',
      source: 'bmc-spec',
    });
    assert.deepEqual(consoleEntry(undefined, { consolePort: undefined }, {}), {
      port: 22,
      command: 'console 1',
      source: 'default',
    });
    assert.deepEqual(
      consoleEntry(
        { SerialConsole: { SSH: { Port: 'x', ConsoleEntryCommand: ' ' } } },
        { consolePort: undefined },
        {},
      ),
      {
        port: 22,
        command: 'console 1',
        source: 'default',
      },
    );
    assert.throws(
      () =>
        consoleEntry({ SerialConsole: { SSH: { ServiceEnabled: false } } }, { consolePort: undefined }, {}),
      ConsoleError,
    );
  });

  it('bmcOfServer: bmcRef with access, endpoint or hostname; inline bmc; clear errors', () => {
    const server = (spec: Partial<Server['spec']>): Server =>
      ({
        metadata: { name: 's1' },
        spec: { systemUUID: 'u', systemURI: '/redfish/v1/Systems/1', ...spec },
      }) as Server;
    const bmc = (spec: Partial<BMC['spec']>): BMC =>
      ({
        metadata: { name: 'b1' },
        spec: { bmcSecretRef: { name: 'sec' }, protocol: { name: 'Redfish', port: 8443 }, ...spec },
      }) as BMC;
    const byRef = server({ bmcRef: { name: 'b1' } });
    assert.deepEqual(
      bmcOfServer(
        byRef,
        bmc({ access: { ip: '10.0.0.9' }, consoleProtocol: { name: 'SSH', port: 2222 } }),
        undefined,
      ),
      {
        address: '10.0.0.9',
        redfishUrl: 'https://10.0.0.9:8443',
        systemUri: '/redfish/v1/Systems/1',
        secretName: 'sec',
        consolePort: 2222,
      },
    );
    const viaEndpoint = bmcOfServer(byRef, bmc({ endpointRef: { name: 'e1' } }), {
      metadata: { name: 'e1' },
      spec: { ip: 'fd00::5' },
    } as never);
    assert.equal(viaEndpoint.redfishUrl, 'https://[fd00::5]:8443');
    assert.equal(viaEndpoint.consolePort, undefined);
    assert.throws(
      () => bmcOfServer(byRef, undefined, undefined),
      /BMC b1 \(spec.bmcRef of Server s1\) does not exist/,
    );
    assert.throws(
      () => bmcOfServer(byRef, bmc({ endpointRef: { name: 'e1' } }), undefined),
      /Endpoint e1 of BMC b1 does not exist/,
    );
    const inline = server({
      bmc: {
        address: '127.0.0.1',
        bmcSecretRef: { name: 'in' },
        protocol: { name: 'Redfish', port: 80, scheme: 'http' },
      },
    });
    assert.equal(bmcOfServer(inline, undefined, undefined).redfishUrl, 'http://127.0.0.1:80');
    assert.throws(() => bmcOfServer(server({}), undefined, undefined), /neither spec.bmcRef nor spec.bmc/);
  });
});
