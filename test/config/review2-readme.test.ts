/**
 * Second security review (issue 29): the README's security model states what is true.
 * - N9: it no longer claims the signal servers' ServiceAccounts read only conditions and Events; it
 *   says they may read every Secret and the manager may update every Secret.
 * - N17: `--image-pull-secret` is documented as a cross-tenant grant.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';

const readme = readFileSync(join(process.cwd(), 'README.md'), 'utf8');
const start = readme.indexOf('## Security model');
const section = readme.slice(start, readme.indexOf('\n## ', start + 1));

describe('second security review: README security model', () => {
  it('N9: the Secret access of the manager and the signal servers is stated, not denied', () => {
    assert.doesNotMatch(section, /ServiceAccounts can read and write only conditions and Events/);
    assert.match(section, /may `update` every Secret/);
    assert.match(section, /may `get`\/`list`\/`watch`\s+every Secret/);
  });

  it('N17: --image-pull-secret is documented as a cross-tenant grant', () => {
    assert.match(section, /`--image-pull-secret` is a cross-tenant grant/);
  });
});
