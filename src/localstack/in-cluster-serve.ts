/**
 * `metalctl local serve --in-cluster` (started by `local up --in-cluster`): the daemon of the
 * in-cluster stack (in-cluster.ts). It deploys the operator with `kubectl apply -k config/default`
 * (an overlay of image and ConfigMap metal-boot-network only), creates the BMC of the VMs, waits
 * for their discovery and writes the same state file and progress lines as the process stack, so
 * `local up` applies and follows the example claim, and `local status` / `local down` work alike.
 */
import { appendFileSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Server } from '../api/v1alpha1/server.js';
import { Resources } from '../runtime/resource.js';
import { waitFor } from './control-plane.js';
import { InClusterStack, OPERATOR_NAMESPACE } from './in-cluster.js';
import { daemonPidPath, progressPath, statePath, writeLocalState } from './local-state.js';

/** Runs until SIGTERM/SIGINT (then stops everything and exits 0); exits 1 after a failed start. */
export async function serveInCluster(o: { dir: string; servers: number }): Promise<void> {
  mkdirSync(o.dir, { recursive: true });
  writeFileSync(daemonPidPath(o.dir), String(process.pid));
  const startedAt = new Date().toISOString();
  const say = (line: string) => appendFileSync(progressPath(o.dir), `${line}\n`);
  let stack: InClusterStack | undefined;
  let starting: Promise<InClusterStack> | undefined;
  const stop = async () => {
    rmSync(statePath(o.dir), { force: true });
    rmSync(daemonPidPath(o.dir), { force: true });
    const made = stack ?? (await starting?.catch(() => undefined));
    await made?.stop();
    process.exit(0);
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  try {
    starting = InClusterStack.start({ dir: join(o.dir, 'in-cluster'), servers: o.servers, progress: say });
    stack = await starting;
    say('kubectl apply -k config/default (overlay: the image built here, ConfigMap metal-boot-network)');
    await stack.deployKustomize('default');
    say(`the operator runs in namespace ${OPERATOR_NAMESPACE}; creating the BMC of the VMs`);
    await stack.createBmc();
    const s = stack;
    await waitFor(`${o.servers} servers Available`, 900_000, async () => {
      const servers = (await s.client.list<Server>(Resources.Server)).items;
      say(
        `discovery: ${servers.map((x) => `${x.metadata.name}=${x.status?.state ?? 'Initial'}`).join(' ') || 'no servers yet'}`,
      );
      await new Promise((ok) => setTimeout(ok, 2_000));
      return servers.filter((x) => x.status?.state === 'Available').length >= o.servers;
    });
    writeLocalState(o.dir, {
      pid: process.pid,
      kubeconfig: stack.kubeconfigPath,
      backend: 'qemu',
      servers: o.servers,
      bmcUrl: stack.vbmc.url,
      registryUrl: stack.registryUrl,
      bootServerUrl: stack.bootServerUrl,
      metricsUrl: `kubectl -n ${OPERATOR_NAMESPACE} port-forward svc/metal-operator-metrics 8080`,
      managerLog: `kubectl -n ${OPERATOR_NAMESPACE} logs deploy/metal-operator-controller-manager`,
      startedAt,
      osImage: stack.images.osImage,
    });
    say('READY');
  } catch (err) {
    say(`FAILED: ${err instanceof Error ? err.message : String(err)}`);
    await stack?.stop();
    rmSync(daemonPidPath(o.dir), { force: true });
    process.exit(1);
  }
  await new Promise(() => undefined);
}
