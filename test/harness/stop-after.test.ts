/**
 * stopAfter (the core of the controller tests' withStack): the stop runs on every path, the body's
 * error stays the error, a stop failure after it is reported to the sink and never replaces it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { stopAfter } from './stop-after.js';

const table: Array<{
  name: string;
  body: 'passes' | 'fails';
  stop: 'passes' | 'fails';
  /** What stopAfter settles with, and what reaches the sink. */
  want: { result?: string; error?: string; sunk: string[] };
}> = [
  { name: 'both pass', body: 'passes', stop: 'passes', want: { result: 'done', sunk: [] } },
  { name: 'body fails', body: 'fails', stop: 'passes', want: { error: 'body broke', sunk: [] } },
  {
    name: 'body fails, then the stop',
    body: 'fails',
    stop: 'fails',
    want: { error: 'body broke', sunk: ['stop broke'] },
  },
  { name: 'only the stop fails', body: 'passes', stop: 'fails', want: { error: 'stop broke', sunk: [] } },
];

for (const row of table) {
  test(`stopAfter: ${row.name}`, async () => {
    let stops = 0;
    const sunk: string[] = [];
    const run = stopAfter(
      'resource',
      async () => {
        stops++;
        if (row.stop === 'fails') throw new Error('stop broke');
      },
      async (r) => {
        assert.equal(r, 'resource');
        if (row.body === 'fails') throw new Error('body broke');
        return 'done';
      },
      (err) => sunk.push((err as Error).message),
    );
    if (row.want.error) await assert.rejects(run, { message: row.want.error });
    else assert.equal(await run, row.want.result);
    assert.equal(stops, 1, 'stopped exactly once');
    assert.deepEqual(sunk, row.want.sunk);
  });
}
