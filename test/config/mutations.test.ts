/**
 * Keeps three configuration tests able to fail (issue 34): each runs in a scratch copy of the
 * built repository (dist/, config/, docs/, README.md, package.json; node_modules linked) with one
 * deliberate defect, and must fail there with the message that names the defect; the same copy
 * without the defect must pass (so the failure is the defect's, not the copy's):
 * - a metric a Prometheus rule reads is renamed in the built BootMetrics → prometheus.test.ts;
 * - the manager's ClusterRole is widened to list/watch ConfigMaps cluster-wide → rbac.test.ts;
 * - `../shared` (captured Redfish trees) is missing → captured-trees.test.ts fails every test
 *   instead of defining none (run in place, METAL_SHARED_DIR naming a folder that does not exist).
 * Each run is one `node --test` process over one file (about a second). The repository itself is
 * not changed: each test checks the files it mutates in its copy are as before in the original.
 * hack/test.sh runs this file before the suite (a test that can no longer fail stops CI early).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  appendFileSync,
  cpSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { REPO_ROOT } from '../../src/localstack/control-plane.js';

const scratch = mkdtempSync(join(tmpdir(), 'metal-mutations-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** Tests read `../shared` relative to the working directory (the repository root in CI), or METAL_SHARED_DIR. */
const SHARED = resolve(process.env.METAL_SHARED_DIR ?? join('..', 'shared'));

/** A copy of the built repository at `<scratch>/<name>/repo` (without `../shared`). */
function copy(name: string): string {
  const repo = join(scratch, name, 'repo');
  for (const p of ['dist', 'src', 'config', 'docs', 'README.md', 'package.json'])
    cpSync(join(REPO_ROOT, p), join(repo, p), { recursive: true });
  symlinkSync(join(REPO_ROOT, 'node_modules'), join(repo, 'node_modules'));
  return repo;
}

/** Asserts the original of `rel` (a file mutated in a copy) is unchanged: the check leaves the tree as it was. */
function unchanged(rel: string, before: string): void {
  assert.equal(readFileSync(join(REPO_ROOT, rel), 'utf8'), before, `${rel} changed in the repository`);
}

/** Runs one built test file with `node --test` in `repo`; exit status and output. */
function run(
  repo: string,
  testFile: string,
  extraEnv: Record<string, string> = {},
): { status: number | null; out: string } {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extraEnv };
  // Inside a `node --test` run this variable would make the child report to us as a subtest.
  delete env.NODE_TEST_CONTEXT;
  const r = spawnSync(process.execPath, ['--test', `dist/test/${testFile}`], {
    cwd: repo,
    env,
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

function expectFails(repo: string, testFile: string, message: RegExp): void {
  const r = run(repo, testFile);
  assert.notEqual(r.status, 0, `${testFile} passed with the defect:\n${r.out.slice(-2000)}`);
  assert.match(r.out, message, `${testFile} failed, but not for the defect:\n${r.out.slice(-2000)}`);
}

function expectPasses(repo: string, testFile: string): void {
  const r = run(repo, testFile);
  assert.equal(r.status, 0, `${testFile} fails in the scratch copy without a defect:\n${r.out.slice(-2000)}`);
}

describe('the configuration tests fail on the defects they guard against', () => {
  it('prometheus.test.ts: a rule metric renamed in the registered metrics', () => {
    const rel = 'dist/src/controllers/common/metrics.js';
    const original = readFileSync(join(REPO_ROOT, rel), 'utf8');
    const repo = copy('metric');
    expectPasses(repo, 'config/prometheus.test.js');
    const f = join(repo, rel);
    const src = readFileSync(f, 'utf8');
    assert.ok(
      src.includes("'metal_boot_timeouts_total'"),
      'the built BootMetrics names metal_boot_timeouts_total',
    );
    writeFileSync(f, src.replace("'metal_boot_timeouts_total'", "'metal_boot_timeout_total'"));
    expectFails(repo, 'config/prometheus.test.js', /rule metric metal_boot_timeouts_total is registered/);
    unchanged(rel, original);
  });

  it('rbac.test.ts: the manager ClusterRole widened to list/watch ConfigMaps', () => {
    const rel = 'config/rbac/role.yaml';
    const original = readFileSync(join(REPO_ROOT, rel), 'utf8');
    const repo = copy('role');
    expectPasses(repo, 'config/rbac.test.js');
    appendFileSync(
      join(repo, rel),
      "  - apiGroups: ['']\n    resources: [configmaps]\n    verbs: [list, watch]\n",
    );
    expectFails(repo, 'config/rbac.test.js', /ClusterRole metal-operator-manager grants list on ConfigMaps/);
    unchanged(rel, original);
  });

  it('captured-trees.test.ts: ../shared missing fails every test', () => {
    assert.ok(existsSync(SHARED), `${SHARED} (the captured Redfish trees) is missing`);
    // In place: the trees are only read, and METAL_SHARED_DIR chooses the folder.
    const ok = run(REPO_ROOT, 'bmc/captured-trees.test.js', { METAL_SHARED_DIR: SHARED });
    assert.equal(ok.status, 0, `captured-trees fails with ${SHARED}:\n${ok.out.slice(-2000)}`);
    const r = run(REPO_ROOT, 'bmc/captured-trees.test.js', {
      METAL_SHARED_DIR: join(scratch, 'no-such-shared'),
    });
    assert.notEqual(r.status, 0, r.out.slice(-2000));
    const failed = Number(/^# fail (\d+)/m.exec(r.out)?.[1]);
    const total = Number(/^# tests (\d+)/m.exec(r.out)?.[1]);
    assert.ok(total >= 32 && failed === total, `without ../shared: ${failed} of ${total} tests failed`);
  });
});
