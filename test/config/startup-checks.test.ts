/**
 * Start-up checks of what an installation gets wrong first (in-cluster issue): a folder the
 * process must write that a read-only root file system makes unwritable, and a
 * `--manager-namespace` that does not exist (the old default, metal-operator-system, differed from
 * config/default's metal-system and stalled discovery with 404s seen only in the log). Each ends
 * the process at start with one line naming the setting, against the run's real API server.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { DEFAULT_CONTROLLER_CONFIG } from '../../src/controllers/common/config.js';
import { sharedCluster } from '../harness/shared.js';

const run = promisify(execFile);
// A folder below a regular file cannot be made: as unwritable as a read-only root file system, for root too.
const scratch = mkdtempSync(join(tmpdir(), 'metal-startup-'));
const FILE = join(scratch, 'a-file');
writeFileSync(FILE, '');
const DIST = join(process.cwd(), 'dist', 'src', 'cmd');

/** Runs a command of dist/src/cmd and returns its exit code and stderr (it must end within 60 s). */
async function exitOf(cmd: string, args: string[]): Promise<{ code: number; stderr: string }> {
  try {
    await run(process.execPath, [join(DIST, cmd), ...args], { timeout: 60_000 });
    return { code: 0, stderr: '' };
  } catch (err) {
    const e = err as { code?: number; stderr?: string; killed?: boolean };
    assert.ok(!e.killed, `${cmd} did not exit at start`);
    return { code: e.code ?? -1, stderr: e.stderr ?? '' };
  }
}

describe('start-up checks', { timeout: 180_000 }, () => {
  it('the default --manager-namespace is the one config/default creates', () => {
    assert.equal(DEFAULT_CONTROLLER_CONFIG.managerNamespace, 'metal-system');
  });

  it('a --manager-namespace that does not exist: exit 1 with one line naming the flag', async () => {
    const cluster = await sharedCluster();
    const r = await exitOf('manager.js', [
      `--kubeconfig=${cluster.kubeconfigPath}`,
      '--manager-namespace=metal-operator-system',
      '--registry-addr=127.0.0.1:0',
      '--bootserver-addr=127.0.0.1:0',
      '--metrics-port=0',
    ]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /^error: --manager-namespace metal-operator-system: namespace not found/m);
    assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  });

  it('an unwritable --image-cache-dir (read-only root file system): exit 1 naming the flag', async () => {
    const cluster = await sharedCluster();
    for (const cmd of ['manager.js', 'bootserver.js']) {
      const r = await exitOf(cmd, [
        `--kubeconfig=${cluster.kubeconfigPath}`,
        `--image-cache-dir=${FILE}/blobs`,
        '--registry-url=http://127.0.0.1:1',
        ...(cmd === 'manager.js'
          ? ['--registry-addr=127.0.0.1:0', '--bootserver-addr=127.0.0.1:0', '--metrics-port=0']
          : ['--addr=127.0.0.1:0']),
      ]);
      assert.equal(r.code, 1, `${cmd}: ${r.stderr}`);
      assert.match(r.stderr, new RegExp(`error: --image-cache-dir: ${FILE}/blobs is not writable`), cmd);
    }
  });

  it('an unwritable TMPDIR: exit 1 naming TMPDIR', async () => {
    const cluster = await sharedCluster();
    try {
      await run(
        process.execPath,
        [
          join(DIST, 'bootserver.js'),
          `--kubeconfig=${cluster.kubeconfigPath}`,
          '--registry-url=http://127.0.0.1:1',
          '--addr=127.0.0.1:0',
          '--image-cache-dir=/tmp/metal-startup-check-cache',
        ],
        {
          timeout: 60_000,
          env: { ...process.env, TMPDIR: `${FILE}/tmp` },
        },
      );
      assert.fail('the boot server started with an unwritable TMPDIR');
    } catch (err) {
      const e = err as { code?: number; stderr?: string };
      assert.equal(e.code, 1, e.stderr);
      assert.match(e.stderr ?? '', new RegExp(`error: TMPDIR: ${FILE}/tmp is not writable`));
    }
  });
});
