/**
 * One control plane per test run: `test/harness/run-tests.ts` starts it and passes its kubeconfig
 * in `METAL_TEST_KUBECONFIG`; a test file run on its own (`node --test dist/test/x.test.js`) starts
 * a private one instead. Each test gets its own namespace.
 */
import { randomBytes } from 'node:crypto';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { ControlPlane } from '../../src/localstack/control-plane.js';

export interface TestCluster {
  kubeconfigPath: string;
  kubeConfig(): KubeConfig;
}

let cluster: Promise<TestCluster> | undefined;

/** The run's control plane (attached via `METAL_TEST_KUBECONFIG`, or started for this process). */
export function sharedCluster(): Promise<TestCluster> {
  cluster ??= (async () => {
    const path = process.env.METAL_TEST_KUBECONFIG;
    if (path) {
      return {
        kubeconfigPath: path,
        kubeConfig() {
          const kc = new KubeConfig();
          kc.loadFromFile(path);
          return kc;
        },
      };
    }
    return ControlPlane.start();
  })();
  return cluster;
}

/** Stops the control plane if this process started it (call from a top-level `after`). */
export async function releaseSharedCluster(): Promise<void> {
  if (!cluster) return;
  const c = await cluster;
  cluster = undefined;
  if (c instanceof ControlPlane) await c.stop();
}

/** Creates a fresh namespace `<prefix>-<random>` and returns its name; `cleanup` deletes it. */
export async function testNamespace(
  kc: KubeConfig,
  prefix = 't',
): Promise<{ name: string; cleanup(): Promise<void> }> {
  const core = kc.makeApiClient(CoreV1Api);
  const name = `${prefix
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '-')
    .slice(0, 40)}-${randomBytes(3).toString('hex')}`;
  await core.createNamespace({ body: { metadata: { name } } });
  return {
    name,
    async cleanup() {
      await core.deleteNamespace({ name }).catch(() => undefined);
    },
  };
}
