/**
 * What `metalctl --version` prints: the package version (package.json at the repository root),
 * the git commit when the checkout has one, and the API group/version served.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { API_VERSION } from '../api/v1alpha1/schema.js';
import { REPO_ROOT } from './control-plane.js';

/** `metalctl 0.1.0 (commit abc1234, metal.ironcore.dev/v1alpha1)`; the commit is left out outside a git checkout. */
export function metalctlVersion(root = REPO_ROOT): string {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version?: string };
  let commit = '';
  try {
    commit = execFileSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 2_000,
    }).trim();
  } catch {
    // Not a git checkout (an image or a tarball): the package version alone.
  }
  return `metalctl ${pkg.version ?? 'unknown'} (${commit ? `commit ${commit}, ` : ''}${API_VERSION})`;
}
