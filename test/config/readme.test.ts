/**
 * Security review S17: docs/SECURITY.md (linked from the README) states the security model (who can reach what, which token proves
 * what, what an attacker on the boot network can and cannot do, what is by design) and how to turn
 * on TLS; the flags it names exist.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { it } from 'node:test';
import { managerHelp } from '../../src/cmd/manager.js';

it('S17: docs/SECURITY.md has a Security model section with the facts by design and the TLS flags', () => {
  const readme = readFileSync(join(process.cwd(), 'docs', 'SECURITY.md'), 'utf8');
  const start = readme.indexOf('## Security model');
  assert.ok(start >= 0, 'a "## Security model" section');
  const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
  for (const must of [
    /who can reach what/i,
    /which token proves what/i,
    /attacker on the boot network can/i,
    /cannot/,
    /plain HTTP/,
    /\/proc\/cmdline/,
    /--callback-auth=optional/,
    /--tls-cert-file/,
  ])
    assert.match(section, must);
  const help = managerHelp();
  for (const flag of ['--tls-cert-file', '--tls-key-file', '--registry-url', '--bootserver-url'])
    assert.ok(help.includes(flag), flag);
});
