/**
 * Where the captured Redfish trees live for tests (not used by the product): `$METAL_REDFISH_MOCKUPS`,
 * else `redfish-mockups` in the folder beside the repository that holds the project's reference
 * material. Tests read the trees and check the named vendor profiles (src/virtualbmc/profiles/)
 * against them; the product's named profiles do not need them.
 */
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The captured trees' folder (it may not exist: callers fail visibly when it is missing). */
export function mockupsDir(): string {
  const env = process.env['METAL_REDFISH_MOCKUPS'];
  if (env) return env;
  // dist/src/testing/mockups.js (or src/testing/mockups.ts) → repository root.
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4 && !existsSync(join(dir, 'package.json')); i++) dir = dirname(dir);
  return resolve(dir, '..', 'shared', 'redfish-mockups');
}
