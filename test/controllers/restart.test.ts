/**
 * The manager as a child process, SIGKILLed and restarted on the same ports: an attempt in flight
 * continues from the status (same deadline, no second power action), and callbacks answered 2xx
 * just before the kill (case C02) are there after the restart and complete the claim.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { CALLBACK_KEY_SECRET_NAME } from '../../src/bootauth/callback-key-secret.js';
import { Resources } from '../../src/runtime/resource.js';
import { bearer, postJson, spawnRegistry } from '../bootsignals/fixture.js';
import { callbackTokenOf } from '../harness/callback-token.js';
import { stablePorts } from '../harness/ports.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  cond,
  createClaim,
  eventually,
  getClaim,
  getSbc,
  resets,
  setSimFaults,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

const MANAGER = fileURLToPath(new URL('../../src/cmd/manager.js', import.meta.url));

/** `node …/manager.js args`; resolves once it logged "manager running". Output is kept for failure messages. */
async function spawnManager(args: string[]): Promise<{ child: ChildProcess; output: () => string }> {
  const child = spawn(process.execPath, [MANAGER, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOG_LEVEL: 'info' },
  });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => {
    out = (out + c.toString()).slice(-200_000);
  });
  child.stderr!.on('data', (c: Buffer) => {
    out = (out + c.toString()).slice(-200_000);
  });
  await eventually('manager child running', 30_000, () => {
    if (child.exitCode !== null)
      throw new Error(`manager exited with ${child.exitCode}: ${out.slice(-2000)}`);
    return out.includes('"manager running"');
  });
  return { child, output: () => out };
}

/** The fields of the manager's "manager running" log line (its ports: `--metrics-port 0` picks one). */
function managerRunningLine(output: string): { metricsPort: number } {
  const line = output.split('\n').find((l) => l.includes('"manager running"'));
  return JSON.parse(line ?? '{}') as { metricsPort: number };
}

/** Reconciles of the serverclaim controller so far, any result, from the process's `/metrics`. */
async function claimReconciles(metricsPort: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  let n = 0;
  for (const m of text.matchAll(/^controller_runtime_reconcile_total\{([^}]*)\} (\d+)/gm)) {
    if (/controller="serverclaim"/.test(m[1]!)) n += Number(m[2]);
  }
  return n;
}

async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((ok) => child.once('exit', ok));
  child.kill('SIGKILL');
  await exited;
}

test('manager SIGKILLed mid-attempt and restarted: deadline and attempt continue from status, no double power action', {
  timeout: 300_000,
}, async () => {
  const [registryPort, bootPort] = await stablePorts(2);
  await withStack(
    'restart',
    {
      hosts: 1,
      noManager: true,
      bootServerUrl: `http://127.0.0.1:${bootPort}`,
    },
    async (s) => {
      // Later flags win: fixed ports, so the hosts reach the restarted manager at the same URLs.
      const args = [
        ...s.managerArgs,
        '--registry-addr',
        `127.0.0.1:${registryPort}`,
        '--bootserver-addr',
        `127.0.0.1:${bootPort}`,
      ];
      let m = await spawnManager(args);
      try {
        const [srv] = await availableServers(s, 1);
        const uuid = srv!.spec.systemUUID;
        setSimFaults(s, { neverCallBack: true });
        const mark = resets(s, uuid).length;
        // Nothing here depends on how fast the restart is (under load a fresh manager took 20 s to its
        // first reconcile, longer than the attempt): the restarted process either finds attempt 1 still
        // running and ends it at its stored deadline, or finds the deadline passed and ends it at once.
        // Either way attempt 1 keeps its power-on, ends TimedOut no later than shortly after
        // max(deadline, first reconcile), and the only power actions are On and one ForceRestart.
        await createClaim(s, 'r', { serverRef: srv!.metadata.name!, timeout: '30s', maxAttempts: 2 });
        const running = await eventually('attempt 1 powered on', 30_000, async () => {
          const c = await getClaim(s, 'r');
          return c?.status?.boot?.deadline && resets(s, uuid).length > mark ? c.status.boot : undefined;
        });
        // Killed 12 s into the attempt, so a fresh deadline taken at the restart (≥ 42 s after power-on)
        // is far from the stored one (30 s). Waiting to kill is no race: any moment of the attempt will do.
        const poweredOn = Date.parse(running.poweredOnAt!);
        await eventually(
          'attempt 1 running for 12 s',
          60_000,
          () => Date.now() >= poweredOn + 12_000 || undefined,
        );
        await kill(m.child);
        const killedAt = Date.now();
        m = await spawnManager(args);
        const metricsPort = managerRunningLine(m.output()).metricsPort;
        await eventually('the restarted manager reconciled the claim', 60_000, async () => {
          return (await claimReconciles(metricsPort)) >= 1;
        });
        const reconciledAt = Date.now();
        const deadline = Date.parse(running.deadline!);
        console.log(
          `# restart to first reconcile: ${reconciledAt - killedAt} ms; ${deadline - reconciledAt} ms of attempt 1 left`,
        );

        // The restarted manager continues with attempt 2 (one power cycle), then gives up.
        const exhausted = await eventually('AttemptsExhausted after attempt 2', 120_000, async () => {
          const c = await getClaim(s, 'r');
          return cond(c, 'Booted')?.reason === 'AttemptsExhausted' ? c : undefined;
        });
        assert.equal(exhausted.status?.boot?.attempt, 2);
        assert.match(cond(exhausted, 'Booted')!.message, /attempt 2\/2 timed out/);
        assert.deepEqual(
          resets(s, uuid).slice(mark),
          ['On', 'ForceRestart'],
          'no second power-on after the restart',
        );
        // Attempt 1 as recorded: powered on once (before the kill), timed out at its own deadline.
        const first = exhausted.status?.boot?.history?.find((h) => h.attempt === 1);
        assert.equal(first?.poweredOnAt, running.poweredOnAt, 'the power-on of attempt 1 kept');
        assert.equal(first?.result, 'TimedOut');
        const endedAt = Date.parse(first?.endedAt ?? '');
        assert.ok(
          endedAt >= deadline,
          `attempt 1 ended ${first?.endedAt}, before its deadline ${running.deadline}`,
        );
        // A manager that took a fresh deadline at its start would end attempt 1 30 s after it (≥ 12 s
        // after the stored deadline); this one ends it at the stored deadline, or at its first reconcile
        // when that had passed.
        const bound = Math.max(deadline, reconciledAt) + 8_000;
        assert.ok(
          endedAt <= bound,
          `attempt 1 ended ${first?.endedAt}, later than ${new Date(bound).toISOString()}: not at its stored deadline ${running.deadline}`,
        );
      } catch (err) {
        (err as Error).message += `\n--- manager output (tail) ---\n${m.output().slice(-4000)}`;
        throw err;
      } finally {
        await kill(m.child);
      }
    },
  );
});

test('C02: /bootstate answered 2xx, then registry and manager SIGKILLed before any controller ran: after restart the signal is there and the claim completes', {
  timeout: 120_000,
}, async () => {
  const [registryPort, bootPort, standalonePort] = await stablePorts(3);
  await withStack(
    'c02',
    {
      hosts: 1,
      noManager: true,
      bootServerUrl: `http://127.0.0.1:${bootPort}`,
    },
    async (s) => {
      const args = [
        ...s.managerArgs,
        '--registry-addr',
        `127.0.0.1:${registryPort}`,
        '--bootserver-addr',
        `127.0.0.1:${bootPort}`,
      ];
      let m = await spawnManager(args);
      let registry: ChildProcess | undefined;
      try {
        const [srv] = await availableServers(s, 1);
        const uuid = srv!.spec.systemUUID;
        // The host boots (script, ignition) but never calls back: the test posts its callbacks.
        setSimFaults(s, { neverCallBack: true });
        await createClaim(s, 'c02', { serverRef: srv!.metadata.name!, timeout: '10m' });
        const sbc = await eventually('attempt 1 fetched its ignition', 30_000, async () => {
          const x = await getSbc(s, 'c02');
          return cond(x, 'IgnitionDataFetched')?.status === 'True' ? x : undefined;
        });
        const token = (await callbackTokenOf(s.client, s.ns, sbc))!;
        // Freeze the manager: no controller of it runs from here on. A standalone registry takes the callbacks.
        m.child.kill('SIGSTOP');
        registry = await spawnRegistry(s.kubeconfigPath, standalonePort!, {
          namespace: s.ns,
          name: CALLBACK_KEY_SECRET_NAME,
        });
        const url = `http://127.0.0.1:${standalonePort}`;
        // A claim's token cannot rewrite the inventory (security review S11): /register takes only a
        // discovery attempt's token; the registration half of C02 is test/bootsignals/boot-flow-cases.
        const before = (await s.client.get<Server>(Resources.Server, srv!.metadata.name!))?.status
          ?.registration;
        const reg = await postJson(
          `${url}/register`,
          { systemUUID: uuid, data: { memory: [] } },
          bearer(token),
        );
        assert.equal(reg.status, 403, reg.text);
        const boot = await postJson(`${url}/bootstate`, { systemUUID: uuid, booted: true }, bearer(token));
        assert.equal(boot.status, 200, boot.text);
        await kill(registry);
        await kill(m.child);
        assert.notEqual(
          cond(await getClaim(s, 'c02'), 'Booted')?.status,
          'True',
          'no controller ran between the answer and the kill',
        );
        // The only copy is in the API server.
        assert.equal(cond(await getSbc(s, 'c02'), 'BootStateReceived')?.status, 'True');

        m = await spawnManager(args);
        const done = await eventually('claim Booted after the restart', 30_000, async () => {
          const c = await getClaim(s, 'c02');
          return cond(c, 'Booted')?.status === 'True' ? c : undefined;
        });
        assert.equal(done.status?.boot?.attempt, 1, 'completed in the attempt the callbacks belonged to');
        const after = await s.client.get<Server>(Resources.Server, srv!.metadata.name!);
        assert.deepEqual(after?.status?.registration, before, 'the refused /register changed nothing');
      } catch (err) {
        (err as Error).message += `\n--- manager output (tail) ---\n${m.output().slice(-4000)}`;
        throw err;
      } finally {
        if (registry) await kill(registry);
        await kill(m.child);
      }
    },
  );
});
