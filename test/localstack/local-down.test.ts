/**
 * `metalctl local up` / `local down` on the bridged test network, run as a user types them (child
 * processes, the daemon detached as `local up` starts it): `local down` leaves neither the test
 * network's namespace (`metaltn-ls-<daemon pid>`) nor any process of the stack (dnsmasq, QEMU,
 * manager: everything whose command line names the stack's folder); and what a SIGKILLed daemon
 * leaves (its namespace with dnsmasq, which clears the parent-death signal it was started with) is
 * removed by the next `local up`. Needs root (network namespaces); skipped, with the reason, where
 * the bridged network cannot be made.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { REPO_ROOT, waitFor } from '../../src/localstack/control-plane.js';
import { daemonPidPath, readLocalState } from '../../src/localstack/local-state.js';
import { bridgeNetworkProblem } from '../../src/localstack/test-network.js';

const METALCTL = join(REPO_ROOT, 'dist', 'src', 'cmd', 'metalctl.js');
/** One BIOS VM over PXE on the bridge, no example claim: the smallest stack with a test network. */
const UP = ['--backend', 'qemu', '--servers', '1', '--network', 'bridge', '--firmware', 'bios'];
const UP_FLAGS = [...UP, '--boot-method', 'pxe', '--no-claim', '--timeout', '600'];
const problem = process.getuid?.() === 0 ? bridgeNetworkProblem() : 'not root';

const run = promisify(execFile);
function metalctl(...args: string[]): Promise<{ stdout: string; stderr: string }> {
  return run(process.execPath, [METALCTL, ...args], { encoding: 'utf8', timeout: 700_000 });
}

function namespaces(): string[] {
  return execFileSync('/usr/sbin/ip', ['netns', 'list'], { encoding: 'utf8' })
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter(Boolean);
}

/** Running processes whose command line names `dir` (pid → command line). */
function processesOf(dir: string): Map<number, string> {
  const out = new Map<number, string>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
      if (cmd.includes(dir)) out.set(Number(entry), cmd.slice(0, 200));
    } catch {
      // It ended while we looked.
    }
  }
  return out;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Whatever is left after `local down`: no namespace of that daemon, no process naming the folder. */
async function assertNothingLeft(dir: string, netns: string): Promise<void> {
  // The daemon's children die with it; give the kernel a moment to reap them, then demand nothing.
  await waitFor(`nothing of ${dir} running`, 15_000, () => processesOf(dir).size === 0).catch(
    () => undefined,
  );
  assert.deepEqual([...processesOf(dir).values()], [], 'no process of the stack left');
  assert.ok(!namespaces().includes(netns), `namespace ${netns} removed: ${namespaces().join(' ')}`);
}

test('local up then local down on the bridged network: no namespace, no dnsmasq, no process left', {
  skip: problem,
  timeout: 900_000,
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'metal-tests2-down-'));
  try {
    await metalctl('local', 'up', '--dir', dir, ...UP_FLAGS);
    const pid = readLocalState(dir)!.pid;
    const netns = `metaltn-ls-${pid}`;
    assert.ok(namespaces().includes(netns), `the stack runs on ${netns}`);
    const running = [...processesOf(dir).values()];
    assert.ok(
      running.some((c) => c.includes('dnsmasq')),
      `dnsmasq runs for the stack: ${running.join('\n')}`,
    );
    const t0 = Date.now();
    await metalctl('local', 'down', '--dir', dir);
    console.log(`# local down took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    assert.ok(!alive(pid), 'the daemon ended');
    await assertNothingLeft(dir, netns);
  } finally {
    await metalctl('local', 'down', '--dir', dir).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a SIGKILLed local stack: the next local up removes its namespace and dnsmasq; local down then leaves nothing', {
  skip: problem,
  timeout: 900_000,
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'metal-tests2-crash-'));
  try {
    // Crash the daemon as soon as its test network and dnsmasq run (mid-start: the worst moment).
    const up = spawn(process.execPath, [METALCTL, 'local', 'up', '--dir', dir, ...UP_FLAGS], {
      stdio: 'ignore',
    });
    const upDone = new Promise((ok) => up.once('exit', ok));
    let pid = 0;
    await waitFor('the daemon runs dnsmasq in its namespace', 300_000, () => {
      if (!existsSync(daemonPidPath(dir))) return false;
      pid = Number(readFileSync(daemonPidPath(dir), 'utf8'));
      return (
        namespaces().includes(`metaltn-ls-${pid}`) &&
        [...processesOf(dir).values()].some((c) => c.includes('dnsmasq'))
      );
    });
    const netns = `metaltn-ls-${pid}`;
    process.kill(pid, 'SIGKILL');
    await upDone;
    await waitFor('the daemon gone', 10_000, () => !alive(pid));
    const left = processesOf(dir);
    console.log(`# left by the SIGKILLed daemon: ${netns}; ${[...left.values()].join(' | ')}`);
    assert.ok(namespaces().includes(netns), 'the crash left its namespace (what the next start must remove)');

    await metalctl('local', 'up', '--dir', dir, ...UP_FLAGS);
    const next = readLocalState(dir)!.pid;
    assert.notEqual(next, pid);
    assert.ok(!namespaces().includes(netns), `the crashed stack's ${netns} removed at the next start`);
    for (const [p, cmd] of left) assert.ok(!alive(p), `left-over process ${p} ended: ${cmd}`);

    await metalctl('local', 'down', '--dir', dir);
    await assertNothingLeft(dir, `metaltn-ls-${next}`);
  } finally {
    await metalctl('local', 'down', '--dir', dir).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
});
