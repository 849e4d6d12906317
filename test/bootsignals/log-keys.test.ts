/**
 * The boot server's JSON log lines as a log shipper reads them (issue 36 item 11): every key once per
 * line (JSON.parse keeps only the last of a repeated key, so the HTTP server's name hid the Server's),
 * with the Server's name and system UUID on the request's lines. Real API server, in-process servers.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { newLogger } from '../../src/runtime/logger.js';
import { releaseSharedCluster } from '../harness/shared.js';
import { seedBootTarget, useSignalStack, waitCached } from './fixture.js';

after(releaseSharedCluster);

/** Top-level keys of one JSON object text, repeated ones included (a scan, not JSON.parse). */
function topLevelKeys(line: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i];
    if (ch === '"') {
      let j = i + 1;
      while (line[j] !== '"') j += line[j] === '\\' ? 2 : 1;
      if (depth === 1 && line[j + 1] === ':') keys.push(JSON.parse(line.slice(i, j + 1)) as string);
      i = j;
    } else if (ch === '{' || ch === '[') depth++;
    else if (ch === '}' || ch === ']') depth--;
  }
  return keys;
}

describe('boot-server log lines', () => {
  const lines: string[] = [];
  const fx = useSignalStack('logkeys', () => ({
    log: newLogger('test-signals', { level: 'debug', destination: { write: (l: string) => lines.push(l) } }),
  }));

  it('a script request logs the Server and its system UUID, each key once per line', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name);
    await waitCached(fx.stack, s);
    const mark = lines.length;
    const res = await fetch(`${fx.stack.bootUrl}/ipxe/${s.uuid}`);
    assert.equal(res.status, 200);
    await res.text();
    const mine = lines.slice(mark).filter((l) => l.includes(s.uuid));
    assert.ok(mine.length > 0, `no log line names ${s.uuid}`);
    for (const l of lines.slice(mark)) {
      const keys = topLevelKeys(l);
      const repeated = keys.filter((k, i) => keys.indexOf(k) !== i);
      assert.deepEqual(repeated, [], `a key repeated in ${l}`);
    }
    const parsed = mine.map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.ok(
      parsed.some((p) => p.server === s.server.metadata.name && p.systemUUID === s.uuid),
      `a line with server=${s.server.metadata.name} and systemUUID: ${mine.join('\n')}`,
    );
    assert.ok(parsed.every((p) => p.component === 'bootserver' || p.component === undefined));
  });
});
