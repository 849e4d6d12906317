/**
 * A `node --test` reporter (the custom-reporter protocol of node:test: an async generator over the
 * run's events) that writes one JSON line per finished test or suite, for `run-tests.ts` to judge
 * the run by: how many tests ran, which were skipped or left todo, which suites failed before any
 * of their tests existed (a `describe` body that throws defines no tests, and node's own summary
 * then says `# tests 0, # fail 0`).
 *
 * Line shape: `{ "kind": "test" | "suite", "ok": boolean, "name", "file", "skip"?: string, "todo"?: string, "error"?: string }`.
 */

interface TestEventData {
  name: string;
  file?: string;
  skip?: string | boolean;
  todo?: string | boolean;
  details?: {
    type?: string;
    error?: { message?: string; failureType?: string; cause?: { message?: string } };
  };
}

export interface SummaryLine {
  kind: 'test' | 'suite';
  ok: boolean;
  name: string;
  file?: string;
  skip?: string;
  todo?: string;
  error?: string;
}

const reason = (v: string | boolean | undefined) =>
  v === undefined || v === false ? undefined : v === true ? '(no reason given)' : v;

export default async function* summaryReporter(
  source: AsyncIterable<{ type: string; data: TestEventData }>,
): AsyncGenerator<string> {
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const d = event.data;
    const line: SummaryLine = {
      kind: d.details?.type === 'suite' ? 'suite' : 'test',
      ok: event.type === 'test:pass',
      name: d.name,
      file: d.file,
      skip: reason(d.skip),
      todo: reason(d.todo),
    };
    // A suite that failed only because tests in it failed says so itself; those tests count already.
    if (!line.ok && d.details?.error?.failureType !== 'subtestsFailed') {
      const e = d.details?.error;
      line.error = (e?.cause?.message ?? e?.message ?? '').split('\n')[0]?.slice(0, 300);
    }
    yield `${JSON.stringify(line)}\n`;
  }
}
