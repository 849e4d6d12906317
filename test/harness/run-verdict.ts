/**
 * What makes a test run count as failed beyond node's exit code (issue 34): a skipped or todo
 * test (CI runs everything or says why not, loudly), a suite that failed with no test of its own
 * (a `describe` body that threw: its tests vanished), and fewer tests than the expected count kept
 * in `test/expected-test-count` (a missing `../shared` or a file that stopped loading removes tests
 * without failing any). Pure: `run-tests.ts` feeds it the lines of `summary-reporter.ts`.
 */
import type { SummaryLine } from './summary-reporter.js';

export interface RunVerdict {
  /** Tests (not suites) that ran to an outcome, skipped and todo ones included. */
  total: number;
  passed: number;
  failed: number;
  /** Human-readable reasons the run fails; empty when it may pass. */
  problems: string[];
  /** Set when the run had more tests than expected: the count to write into the file. */
  raiseTo?: number;
}

/** `expected`: the minimum number of tests, or undefined to skip the count check (a subset run). */
export function judgeRun(
  lines: SummaryLine[],
  expected: number | undefined,
  countFile = 'test/expected-test-count',
  /** A run filtered by name (`--test-name-pattern`): node reports the tests left out as skipped. */
  filtered = false,
): RunVerdict {
  const tests = lines.filter((l) => l.kind === 'test');
  const problems: string[] = [];
  const where = (l: SummaryLine) => `${l.name}${l.file ? ` (${l.file})` : ''}`;
  for (const l of tests) {
    if (l.skip !== undefined && !filtered) problems.push(`skipped: ${where(l)}: ${l.skip}`);
    if (l.todo !== undefined) problems.push(`todo: ${where(l)}: ${l.todo}`);
  }
  for (const l of lines)
    if (l.kind === 'suite' && !l.ok && l.error) problems.push(`suite failed: ${where(l)}: ${l.error}`);
  const total = tests.length;
  const passed = tests.filter((l) => l.ok && l.skip === undefined && l.todo === undefined).length;
  const failed = tests.filter((l) => !l.ok).length;
  if (expected !== undefined && total < expected)
    problems.push(
      `${total} tests ran, expected at least ${expected} (${countFile}): tests vanished (a suite that ` +
        `failed to load, a missing ../shared), or were removed on purpose: then \`echo ${total} > ${countFile}\``,
    );
  const v: RunVerdict = { total, passed, failed, problems };
  if (expected !== undefined && total > expected) v.raiseTo = total;
  return v;
}
