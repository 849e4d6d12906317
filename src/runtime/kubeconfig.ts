/**
 * Loads a KubeConfig: an explicit path, else `KUBECONFIG`, `~/.kube/config` or the in-cluster
 * ServiceAccount (client-node's `loadFromDefault`). Throws `Error` naming what was tried when none
 * of them gives a cluster (client-node would silently fall back to http://localhost:8080).
 */
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';

export function loadKubeConfig(path?: string): KubeConfig {
  const kc = new KubeConfig();
  if (path) {
    if (!existsSync(path)) throw new Error(`--kubeconfig ${path}: no such file`);
    try {
      kc.loadFromFile(path);
    } catch (err) {
      throw new Error(`--kubeconfig ${path}: ${err instanceof Error ? err.message : String(err)}`);
    }
    return kc;
  }
  const inCluster = !!process.env.KUBERNETES_SERVICE_HOST;
  const candidates = (process.env.KUBECONFIG ?? '').split(':').filter(Boolean);
  const home = join(homedir(), '.kube', 'config');
  if (!inCluster && !candidates.some((c) => existsSync(c)) && !existsSync(home)) {
    throw new Error(
      `no kubeconfig: --kubeconfig not given, KUBECONFIG ${process.env.KUBECONFIG ? `(${process.env.KUBECONFIG}) names no existing file` : 'unset'}, ${home} missing, not in a cluster`,
    );
  }
  kc.loadFromDefault();
  return kc;
}
