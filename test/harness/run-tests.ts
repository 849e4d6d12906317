/**
 * Test entry point: starts one real control plane for the whole run, then runs `node --test` over
 * the given files with `METAL_TEST_KUBECONFIG` pointing at it, and stops it afterwards whatever the
 * outcome (also on SIGINT/SIGTERM). Exit code: node --test's.
 *
 * Usage: node dist/test/harness/run-tests.js [--concurrency N] <test files or folders...>
 */
import { spawn } from 'node:child_process';
import { ControlPlane } from '../../src/localstack/control-plane.js';

const args = process.argv.slice(2);
let concurrency = '2';
const ci = args.indexOf('--concurrency');
if (ci >= 0) {
  concurrency = args[ci + 1] ?? concurrency;
  args.splice(ci, 2);
}
const t0 = Date.now();
const cp = await ControlPlane.start();
console.log(
  `control plane ready in ${((Date.now() - t0) / 1000).toFixed(1)} s: KUBECONFIG=${cp.kubeconfigPath}`,
);
const child = spawn(process.execPath, ['--test', `--test-concurrency=${concurrency}`, ...args], {
  stdio: 'inherit',
  env: { ...process.env, METAL_TEST_KUBECONFIG: cp.kubeconfigPath },
});
const code: number = await new Promise((ok) => child.once('exit', (c, sig) => ok(c ?? (sig ? 1 : 0))));
await cp.stop();
process.exit(code);
