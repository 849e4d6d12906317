/**
 * A captured Redfish tree (a "mockup": `<path>/index.json` is the body of `GET /redfish/v1/<path>`) as
 * the virtual BMC's resource model. Two layouts are read: `DIR/redfish/v1/...` (NVIDIA libredfish
 * mockups) and `DIR/...` rooted at `/redfish/v1` (DMTF public mockups). Read-only; the live parts
 * (systems' power and boot state, sessions) are layered on by `server.ts`.
 *
 * Bodies are kept as parsed JSON; lookups are by path, exact first, then case-insensitive (HPE's iLO
 * links some resources in lower case, e.g. `/redfish/v1/systems/1/bios/settings`).
 */

import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

type Json = Record<string, unknown>;

export interface ProfileTree {
  /** Directory read. */
  dir: string;
  /** Body of a captured resource by its path (no trailing slash except `/redfish/v1/`), or `undefined`. */
  get(path: string): Json | undefined;
  /** All captured paths, sorted. */
  paths(): string[];
  /** URI of the (first) captured ComputerSystem, e.g. `/redfish/v1/Systems/System.Embedded.1`. */
  systemUri: string;
  /** URI of the (first) captured Manager, e.g. `/redfish/v1/Managers/iDRAC.Embedded.1`. */
  managerUri: string | undefined;
}

/** Reads a captured tree; throws an `Error` naming the directory when it holds no ServiceRoot or no system. */
export function loadProfileTree(dir: string): ProfileTree {
  const base = existsSync(join(dir, 'redfish', 'v1', 'index.json')) ? join(dir, 'redfish', 'v1') : dir;
  if (!existsSync(join(base, 'index.json'))) {
    throw new Error(`${dir}: no index.json of a Redfish service root (redfish/v1/index.json or index.json)`);
  }
  const exact = new Map<string, Json>();
  const walk = (folder: string, rel: string): void => {
    for (const name of readdirSync(folder).sort()) {
      const full = join(folder, name);
      if (statSync(full).isDirectory()) walk(full, `${rel}/${name}`);
      else if (name === 'index.json') {
        const body = JSON.parse(readFileSync(full, 'utf8')) as unknown;
        if (typeof body === 'object' && body !== null && !Array.isArray(body)) {
          exact.set(normalise(`/redfish/v1${rel}`), body as Json);
        }
      }
    }
  };
  walk(base, '');
  const folded = new Map<string, Json>();
  for (const [p, body] of exact) if (!folded.has(p.toLowerCase())) folded.set(p.toLowerCase(), body);
  const get = (path: string): Json | undefined => {
    const p = normalise(path);
    return exact.get(p) ?? folded.get(p.toLowerCase());
  };
  const firstMember = (collection: string): string | undefined => {
    const members = get(collection)?.['Members'];
    const first = Array.isArray(members) ? (members[0] as Json | undefined) : undefined;
    const id = first?.['@odata.id'];
    return typeof id === 'string' ? normalise(id) : undefined;
  };
  const systemUri = firstMember('/redfish/v1/Systems');
  if (systemUri === undefined || get(systemUri) === undefined) {
    throw new Error(`${dir}: the captured tree has no ComputerSystem under /redfish/v1/Systems`);
  }
  return {
    dir,
    get,
    paths: () => [...exact.keys()].sort(),
    systemUri,
    managerUri: firstMember('/redfish/v1/Managers'),
  };
}

/** `/redfish/v1/` for the root, otherwise the path without trailing slashes. */
export function normalise(path: string): string {
  const p = path.replace(/\/+$/, '');
  return p === '/redfish/v1' ? '/redfish/v1/' : p;
}
