/**
 * `node dist/hack/house/metrics.js [--limit 80]`: the house figures of docs/ARCHITECTURE.md, read
 * from `src/` as committed (the tracked `.ts` files under `src/`, found by walking the folder).
 *
 * Prints, one block each: the functions longer than `--limit` lines (default 80; declarations,
 * methods, arrow functions and function expressions, counted from the first line of the node to its
 * last, so an outer function includes the functions it holds), the imports that break the floors
 * (hack/house/floors.ts), the five largest files, and the totals. Exit status 0 always: these are
 * figures, not a gate (test/config/floors.test.ts is the gate for the floors).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { floorViolations, importEdges, sourceFiles } from './floors.js';

/** One function-like node: where it starts, its name as a reader would say it, its length in lines. */
interface FunctionSpan {
  readonly file: string;
  readonly line: number;
  readonly name: string;
  readonly lines: number;
}

function nameOf(node: ts.Node, sf: ts.SourceFile): string {
  const named = node as ts.Node & { name?: ts.Node };
  if (named.name) return named.name.getText(sf);
  const parent = node.parent;
  if (parent && ts.isVariableDeclaration(parent)) return parent.name.getText(sf);
  if (parent && ts.isPropertyAssignment(parent)) return parent.name.getText(sf);
  if (parent && ts.isCallExpression(parent))
    return `(callback of ${parent.expression.getText(sf).slice(0, 40)})`;
  return '(anonymous)';
}

/** The function-like nodes of `files` with their lengths in lines, longest first. */
function functionSpans(root: string, files: readonly string[]): FunctionSpan[] {
  const spans: FunctionSpan[] = [];
  for (const file of files) {
    const sf = ts.createSourceFile(
      file,
      readFileSync(join(root, file), 'utf8'),
      ts.ScriptTarget.ES2022,
      true,
    );
    const visit = (node: ts.Node): void => {
      if (ts.isFunctionLike(node) && (node as ts.FunctionLikeDeclaration).body) {
        const start = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line;
        const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line;
        spans.push({ file, line: start + 1, name: nameOf(node, sf), lines: end - start + 1 });
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  return spans.sort((a, b) => b.lines - a.lines);
}

function main(): void {
  const root = process.cwd();
  const i = process.argv.indexOf('--limit');
  const limit = i > 0 ? Number(process.argv[i + 1]) : 80;
  const files = sourceFiles(root);
  const long = functionSpans(root, files).filter((s) => s.lines > limit);
  console.log(`functions over ${limit} lines in src/: ${long.length}`);
  for (const s of long) console.log(`  ${String(s.lines).padStart(4)}  ${s.file}:${s.line}  ${s.name}`);
  const violations = floorViolations(importEdges(root, files));
  console.log(`imports that break the floors: ${violations.length}`);
  for (const v of violations) console.log(`  ${v.edge.from}:${v.edge.line} → ${v.edge.to}  (${v.reason})`);
  const sizes = files
    .map((f) => ({ f, n: readFileSync(join(root, f), 'utf8').split('\n').length - 1 }))
    .sort((a, b) => b.n - a.n);
  console.log('largest files:');
  for (const { f, n } of sizes.slice(0, 5)) console.log(`  ${String(n).padStart(5)}  ${f}`);
  const total = sizes.reduce((s, x) => s + x.n, 0);
  console.log(`src/: ${files.length} files, ${total} lines`);
}

main();
