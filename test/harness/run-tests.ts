/**
 * Test entry point: starts one real control plane for the whole run, then runs `node --test` over
 * the given files with `METAL_TEST_KUBECONFIG` pointing at it, and stops it afterwards whatever the
 * outcome (also on SIGINT/SIGTERM).
 *
 * Besides node's own report (spec on a terminal, TAP otherwise) it records every test through
 * `summary-reporter.ts` and fails the run (exit 1) when node --test failed, when any test was
 * skipped (unless filtered by --test-name-pattern) or left todo, when a suite failed without tests of its own, or, with
 * `--expect-count FILE`, when fewer tests ran than the number in FILE (`run-verdict.ts`).
 * hack/test.sh passes `--expect-count test/expected-test-count` for the full suite.
 *
 * Every test file ends after `--test-timeout-ms` (node's `--test-timeout`; default 2,700,000, 45 min),
 * so one that hangs fails the run instead of holding CI to its 90-minute limit. On Node 20 that flag
 * bounds each file as a whole and overrides the timeouts its tests set (nodejs/node#57656), so the
 * default lies above the largest budget a file gives itself (test/e2e/in-cluster.test.ts: 40 min on
 * a cold machine; 215 s with warm caches).
 *
 * Usage: node dist/test/harness/run-tests.js [--concurrency N] [--expect-count FILE]
 *        [--test-timeout-ms MS] <test files...>
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ControlPlane } from '../../src/localstack/control-plane.js';
import { judgeRun } from './run-verdict.js';
import type { SummaryLine } from './summary-reporter.js';

const args = process.argv.slice(2);
const option = (name: string): string | undefined => {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
};
const concurrency = option('--concurrency') ?? '2';
const countFile = option('--expect-count');
const testTimeoutMs = Number(option('--test-timeout-ms') ?? 2_700_000);
if (!Number.isInteger(testTimeoutMs) || testTimeoutMs < 1)
  throw new Error('--test-timeout-ms: not a positive integer');
let expected: number | undefined;
if (countFile !== undefined) {
  expected = Number(readFileSync(countFile, 'utf8').trim());
  if (!Number.isInteger(expected) || expected < 1) throw new Error(`${countFile}: not a positive integer`);
}
if (args.length === 0) throw new Error('no test files given');

const t0 = Date.now();
const cp = await ControlPlane.start();
console.log(
  `control plane ready in ${((Date.now() - t0) / 1000).toFixed(1)} s: KUBECONFIG=${cp.kubeconfigPath}`,
);
const scratch = mkdtempSync(join(tmpdir(), 'metal-test-summary-'));
const summaryPath = join(scratch, 'summary.jsonl');
const reporter = fileURLToPath(new URL('./summary-reporter.js', import.meta.url));
const child = spawn(
  process.execPath,
  [
    '--test',
    `--test-concurrency=${concurrency}`,
    `--test-timeout=${testTimeoutMs}`,
    `--test-reporter=${process.stdout.isTTY ? 'spec' : 'tap'}`,
    '--test-reporter-destination=stdout',
    `--test-reporter=${reporter}`,
    `--test-reporter-destination=${summaryPath}`,
    ...args,
  ],
  { stdio: 'inherit', env: { ...process.env, METAL_TEST_KUBECONFIG: cp.kubeconfigPath } },
);
const code: number = await new Promise((ok) => child.once('exit', (c, sig) => ok(c ?? (sig ? 1 : 0))));
await cp.stop();

let lines: SummaryLine[] = [];
try {
  lines = readFileSync(summaryPath, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as SummaryLine);
} catch (err) {
  console.error(`[run-tests] no test summary (${(err as Error).message})`);
}
rmSync(scratch, { recursive: true, force: true });
// Filtered by name: node reports the tests left out as skipped, which is then no defect.
const filtered = args.some((a) => a.startsWith('--test-name-pattern') || a === '--test-only');
const v = judgeRun(lines, expected, countFile, filtered);
console.log(
  `[run-tests] ${v.total} tests: ${v.passed} passed, ${v.failed} failed` +
    (expected !== undefined ? `; expected at least ${expected} (${countFile})` : ''),
);
for (const p of v.problems) console.error(`[run-tests] FAIL ${p}`);
if (v.raiseTo !== undefined)
  console.log(
    `[run-tests] more tests than expected: raise the count with \`echo ${v.raiseTo} > ${countFile}\``,
  );
process.exit(code !== 0 ? code : v.problems.length > 0 || lines.length === 0 ? 1 : 0);
