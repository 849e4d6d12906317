/**
 * The Node.js options the manager's container runs with: the `NODE_OPTIONS` of the `manager`
 * container of the Deployment in `config/manager/manager.yaml`, split into flags. The local stack
 * (and so every benchmark and end-to-end test) starts the manager's node with them, so that its V8
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

interface Container {
  name?: string;
  env?: { name?: string; value?: string }[];
  resources?: { limits?: { memory?: string } };
}

/**
 * The `manager` container of the Deployment in `manifest` (a multi-document YAML file).
 * Throws when the file has no Deployment with a container named `manager`.
 */
export function managerContainer(manifest: string = MANAGER_MANIFEST): Container {
  for (const doc of parseAllDocuments(readFileSync(manifest, 'utf8'))) {
    const o = doc.toJS() as {
      kind?: string;
      spec?: { template?: { spec?: { containers?: Container[] } } };
    } | null;
    if (o?.kind !== 'Deployment') continue;
    const c = o.spec?.template?.spec?.containers?.find((x) => x.name === 'manager');
    if (c) return c;
  }
  throw new Error(`${manifest}: no Deployment with a container named "manager"`);
}

/**
 * The flags of the manager container's `NODE_OPTIONS` (whitespace-separated, as node reads them;
 * quoting is not used there), e.g. `['--max-old-space-size=384']`; `[]` when it sets none. Throws as
 * {@link managerContainer}.
 */
export function managerNodeOptions(manifest: string = MANAGER_MANIFEST): string[] {
  const value = managerContainer(manifest).env?.find((e) => e.name === 'NODE_OPTIONS')?.value ?? '';
  return value.split(/\s+/).filter(Boolean);
}
