/**
 * Second security review (issue 29): the security model (docs/SECURITY.md) states what is true.
 * - N9: it states the Secret access the manifests grant (test/config/rbac.test.ts and deploy.test.ts
 *   check the manifests themselves): no listing or writing of Secrets, the registry only the callback
 *   key, and that the NetworkPolicy's default boot-network ipBlock is every address.
 * - N17: `--image-pull-secret` is documented as a cross-tenant grant.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';

const readme = readFileSync(join(process.cwd(), 'docs', 'SECURITY.md'), 'utf8');
const start = readme.indexOf('## Security model');
const section = readme.slice(start, readme.indexOf('\n## ', start + 1));

describe('second security review: docs/SECURITY.md security model', () => {
  it('N9: the Secret access of the manager and the signal servers is stated as the manifests grant it', () => {
    assert.doesNotMatch(section, /ServiceAccounts can read and write only conditions and Events/);
    assert.doesNotMatch(section, /may `update` every Secret/);
    assert.doesNotMatch(section, /`list`\/`watch`\s+every Secret/);
    assert.match(section, /no `list`, `watch`, `update` or\s+`delete` anywhere/);
    assert.match(section, /the registry may read one Secret, the callback key/);
    assert.match(section, /default\s+is every address/);
  });

  it('N17: --image-pull-secret is documented as a cross-tenant grant', () => {
    assert.match(section, /`--image-pull-secret` is a cross-tenant grant/);
  });
});
