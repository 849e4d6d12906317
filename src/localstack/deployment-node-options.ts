/**
 * The Node.js options a container of ours runs with: the `NODE_OPTIONS` of a named container of the
 * Deployment in a manifest (`config/manager/manager.yaml`, `config/signals/*.yaml`), split into
 * flags. The local stack (and so every benchmark and end-to-end test) starts the manager and the
 * signal-server replicas with their Deployment's, so that their V8
 * heap behaves as it does when deployed: the heap limit decides how much garbage V8 lets pile up
 * between full collections (see the comment at that env entry), which is most of the manager's RSS
 * growth per server.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { REPO_ROOT } from './control-plane.js';

/** The manager's deployment manifest. */
export const MANAGER_MANIFEST = join(REPO_ROOT, 'config', 'manager', 'manager.yaml');
/** The standalone registry's and boot server's deployment manifests, by container name. */
export const SIGNAL_MANIFESTS = {
  registry: join(REPO_ROOT, 'config', 'signals', 'registry.yaml'),
  bootserver: join(REPO_ROOT, 'config', 'signals', 'bootserver.yaml'),
} as const;

interface Container {
  name?: string;
  env?: { name?: string; value?: string }[];
  resources?: { limits?: { memory?: string } };
}

/**
 * The container `name` of the Deployment in `manifest` (a multi-document YAML file).
 * Throws when the file has no Deployment with a container of that name.
 */
export function deploymentContainer(manifest: string = MANAGER_MANIFEST, name = 'manager'): Container {
  for (const doc of parseAllDocuments(readFileSync(manifest, 'utf8'))) {
    const o = doc.toJS() as {
      kind?: string;
      spec?: { template?: { spec?: { containers?: Container[] } } };
    } | null;
    if (o?.kind !== 'Deployment') continue;
    const c = o.spec?.template?.spec?.containers?.find((x) => x.name === name);
    if (c) return c;
  }
  throw new Error(`${manifest}: no Deployment with a container named "${name}"`);
}

/**
 * The flags of the container's `NODE_OPTIONS` (whitespace-separated, as node reads them; quoting is
 * not used there), e.g. `['--max-old-space-size=384']`; `[]` when it sets none. Throws as
 * {@link deploymentContainer}.
 */
export function nodeOptions(manifest: string = MANAGER_MANIFEST, name = 'manager'): string[] {
  const value = deploymentContainer(manifest, name).env?.find((e) => e.name === 'NODE_OPTIONS')?.value ?? '';
  return value.split(/\s+/).filter(Boolean);
}
