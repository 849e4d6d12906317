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
import { decodeCallbackSecret } from '../../src/bootauth/callback-token.js';
import type { SecretObject } from '../../src/bootsignals/boot-target.js';
import { Resources } from '../../src/runtime/resource.js';
import { bearer, postJson, spawnRegistry } from '../bootsignals/fixture.js';
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
  startStack,
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
  timeout: 150_000,
}, async () => {
  const [registryPort, bootPort] = await stablePorts(2);
  const s = await startStack('restart', {
    hosts: 1,
    noManager: true,
    bootServerUrl: `http://127.0.0.1:${bootPort}`,
  });
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
    // The restart must land inside attempt 1: 20 s leaves a loaded machine room for the SIGKILL, a
    // fresh process start and its first reconcile of the claim, and nothing below waits on a clock:
    // the checks run once the new process has reconciled the claim (its metrics say so) and once
    // the claim shows AttemptsExhausted.
    await createClaim(s, 'r', { serverRef: srv!.metadata.name!, timeout: '20s', maxAttempts: 2 });
    const running = await eventually('attempt 1 powered on', 30_000, async () => {
      const c = await getClaim(s, 'r');
      return c?.status?.boot?.deadline && resets(s, uuid).length > mark ? c.status.boot : undefined;
    });
    await kill(m.child);
    const killedAt = Date.now();
    m = await spawnManager(args);
    const metricsPort = managerRunningLine(m.output()).metricsPort;
    await eventually('the restarted manager reconciled the claim', 30_000, async () => {
      return (await claimReconciles(metricsPort)) >= 1;
    });
    const deadline = Date.parse(running.deadline!);
    const mid = await getClaim(s, 'r');
    assert.ok(
      Date.now() < deadline,
      `restart and first reconcile took ${Date.now() - killedAt} ms: attempt 1 (20 s) ended before it`,
    );
    // The new process continues attempt 1 from the status: same attempt, deadline and power-on.
    assert.equal(mid?.status?.boot?.attempt, 1);
    assert.equal(mid?.status?.boot?.deadline, running.deadline);
    assert.equal(mid?.status?.boot?.poweredOnAt, running.poweredOnAt);
    assert.deepEqual(resets(s, uuid).slice(mark), ['On'], 'no second power-on after the restart');

    // At the deadline the restarted manager continues with attempt 2 (one power cycle), then gives up.
    const exhausted = await eventually('AttemptsExhausted after attempt 2', 90_000, async () => {
      const c = await getClaim(s, 'r');
      return cond(c, 'Booted')?.reason === 'AttemptsExhausted' ? c : undefined;
    });
    assert.equal(exhausted.status?.boot?.attempt, 2);
    assert.match(cond(exhausted, 'Booted')!.message, /attempt 2\/2 timed out/);
    assert.deepEqual(resets(s, uuid).slice(mark), ['On', 'ForceRestart']);
    // Attempt 1 as recorded: powered on once (before the kill) and timed out at its own deadline.
    const first = exhausted.status?.boot?.history?.find((h) => h.attempt === 1);
    assert.equal(first?.poweredOnAt, running.poweredOnAt);
    assert.equal(first?.result, 'TimedOut');
    assert.ok(
      Date.parse(first?.endedAt ?? '') >= deadline,
      `attempt 1 ended ${first?.endedAt}, not before its deadline ${running.deadline}`,
    );
  } catch (err) {
    (err as Error).message += `\n--- manager output (tail) ---\n${m.output().slice(-4000)}`;
    throw err;
  } finally {
    await kill(m.child);
    await s.close();
  }
});

test('C02: /bootstate answered 2xx, then registry and manager SIGKILLed before any controller ran: after restart the signal is there and the claim completes', {
  timeout: 120_000,
}, async () => {
  const [registryPort, bootPort, standalonePort] = await stablePorts(3);
  const s = await startStack('c02', {
    hosts: 1,
    noManager: true,
    bootServerUrl: `http://127.0.0.1:${bootPort}`,
  });
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
    const secret = await s.client.get<SecretObject>(
      Resources.Secret,
      sbc.spec.callbackSecretRef?.name ?? 'c02-callback',
      s.ns,
    );
    const token = decodeCallbackSecret(secret?.data)!.token;
    // Freeze the manager: no controller of it runs from here on. A standalone registry takes the callbacks.
    m.child.kill('SIGSTOP');
    registry = await spawnRegistry(s.kubeconfigPath, standalonePort!);
    const url = `http://127.0.0.1:${standalonePort}`;
    // A claim's token cannot rewrite the inventory (security review S11): /register takes only a
    // discovery attempt's token; the registration half of C02 is test/bootsignals/boot-flow-cases.
    const before = (await s.client.get<Server>(Resources.Server, srv!.metadata.name!))?.status?.registration
      ?.data;
    const reg = await postJson(`${url}/register`, { systemUUID: uuid, data: { memory: [] } }, bearer(token));
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
    assert.deepEqual(after?.status?.registration?.data, before, 'the refused /register changed nothing');
  } catch (err) {
    (err as Error).message += `\n--- manager output (tail) ---\n${m.output().slice(-4000)}`;
    throw err;
  } finally {
    if (registry) await kill(registry);
    await kill(m.child);
    await s.close();
  }
});
