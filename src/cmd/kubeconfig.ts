/** Loads a KubeConfig: an explicit path, else `KUBECONFIG`, `~/.kube/config` or the in-cluster ServiceAccount (client-node's `loadFromDefault`). */
import { KubeConfig } from '@kubernetes/client-node';

export function loadKubeConfig(path?: string): KubeConfig {
  const kc = new KubeConfig();
  if (path) kc.loadFromFile(path);
  else kc.loadFromDefault();
  return kc;
}
