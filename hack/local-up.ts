/**
 * `npm run local-up` (until `metalctl local up` replaces it): a local control plane with the CRDs
 * and the example objects of `config/samples/`, then `kubectl get` of them. Runs until Ctrl-C.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type KubernetesObject, KubernetesObjectApi } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { ControlPlane, REPO_ROOT } from '../src/localstack/control-plane.js';

const t0 = Date.now();
const step = (msg: string) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);
step('starting etcd and kube-apiserver, installing CRDs');
const cp = await ControlPlane.start();
step(`control plane ready: ${cp.server}`);
const api = KubernetesObjectApi.makeApiClient(cp.kubeConfig());
const dir = join(REPO_ROOT, 'config', 'samples');
for (const file of readdirSync(dir).filter((f) => f.endsWith('.yaml'))) {
  for (const doc of parseAllDocuments(readFileSync(join(dir, file), 'utf8'))) {
    const obj = doc.toJSON() as KubernetesObject | null;
    if (!obj) continue;
    await api.create(obj);
    step(
      `created ${obj.kind} ${obj.metadata?.namespace ? `${obj.metadata.namespace}/` : ''}${obj.metadata?.name}`,
    );
  }
}
try {
  const out = execFileSync(
    'kubectl',
    ['--kubeconfig', cp.kubeconfigPath, 'get', 'srv,scl,sbc,bmc,bmcsec', '-A'],
    {
      encoding: 'utf8',
    },
  );
  console.log(out);
} catch (err) {
  console.log(`kubectl not usable here (${String(err)}); the objects are in the API server anyway`);
}
console.log(`export KUBECONFIG=${cp.kubeconfigPath}`);
if (process.argv.includes('--exit')) {
  await cp.stop();
} else {
  console.log('control plane running; Ctrl-C stops it and removes its files');
  await new Promise(() => undefined);
}
