/**
 * The floors of `src/`: which folder may import which (docs/ARCHITECTURE.md, "Floors").
 *
 * Contract: {@link floorOf} maps a source path (`src/<folder>/…`, `src/controllers/<kind>/…`) to
 * its {@link Floor}; {@link importAllowed} says whether a file on one floor may import a file on
 * another. A folder imports downwards only: a lower rank in its own column or in the core column;
 * wiring imports anything below it. Controllers and the HTTP servers stand side by side and never
 * import each other: what both need lives in the core column. {@link importEdges} reads the
 * relative imports of the given files (static `import … from` and `export … from`, type-only
 * included, since a type import still couples the floors, and `import()`).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import ts from 'typescript';

/** One floor: its column and rank (lower ranks are imported by higher ones). */
export interface Floor {
  readonly name: string;
  readonly column: 'core' | 'controllers' | 'http' | 'wiring';
  readonly rank: number;
}

/** The table, lowest first. A folder of `src/` missing here is a violation of its own. */
export const FLOORS: readonly Floor[] = [
  { name: 'runtime', column: 'core', rank: 0 },
  { name: 'api', column: 'core', rank: 1 },
  { name: 'bmc', column: 'core', rank: 2 },
  { name: 'oci', column: 'core', rank: 2 },
  { name: 'ignition', column: 'core', rank: 2 },
  { name: 'bootauth', column: 'core', rank: 2 },
  { name: 'inventory', column: 'core', rank: 3 },
  { name: 'controllers/common', column: 'controllers', rank: 4 },
  { name: 'controllers/bmc-actions', column: 'controllers', rank: 5 },
  { name: 'controllers/boot-attempt', column: 'controllers', rank: 6 },
  { name: 'controllers/bmc', column: 'controllers', rank: 7 },
  { name: 'controllers/bmcuser', column: 'controllers', rank: 7 },
  { name: 'controllers/server', column: 'controllers', rank: 7 },
  { name: 'controllers/serverbootconfiguration', column: 'controllers', rank: 7 },
  { name: 'controllers/serverclaim', column: 'controllers', rank: 8 },
  { name: 'controllers/setup.ts', column: 'controllers', rank: 9 },
  { name: 'virtualbmc', column: 'http', rank: 4 },
  { name: 'bootsignals', column: 'http', rank: 4 },
  { name: 'bootserver', column: 'http', rank: 5 },
  { name: 'registry', column: 'http', rank: 5 },
  { name: 'localstack', column: 'wiring', rank: 10 },
  { name: 'cmd', column: 'wiring', rank: 11 },
  // Shared by tests and benchmarks only: nothing in src/ may import it.
  { name: 'testing', column: 'wiring', rank: 12 },
];

/**
 * The floor of a path relative to the repository root, or `undefined` when the path is outside
 * `src/` or its folder is not in {@link FLOORS}.
 */
export function floorOf(path: string): Floor | undefined {
  const parts = normalize(path).split('/');
  if (parts[0] !== 'src' || parts.length < 3) return undefined;
  const name = parts[1] === 'controllers' ? `controllers/${parts[2]}` : (parts[1] as string);
  return FLOORS.find((f) => f.name === name);
}

/** Whether code on floor `from` may import code on floor `to` (same floor: always). */
export function importAllowed(from: Floor, to: Floor): boolean {
  if (from.name === to.name) return true;
  if (to.rank >= from.rank) return false;
  if (from.column === 'wiring') return true;
  return to.column === 'core' || to.column === from.column;
}

/** One relative import: the importing file, the imported file (both repo-relative `.ts`), the line. */
export interface ImportEdge {
  readonly from: string;
  readonly to: string;
  readonly line: number;
}

/** The relative imports of `files` (repo-relative paths under `root`), in file then position order. */
export function importEdges(root: string, files: readonly string[]): ImportEdge[] {
  const edges: ImportEdge[] = [];
  for (const file of files) {
    const text = readFileSync(join(root, file), 'utf8');
    // The compiler's own pre-pass: static imports and re-exports (type-only too), and import().
    for (const ref of ts.preProcessFile(text, true, true).importedFiles) {
      if (!ref.fileName.startsWith('.')) continue;
      const to = relative(root, join(root, dirname(file), ref.fileName)).replace(/\.js$/, '.ts');
      const line = text.slice(0, ref.pos).split('\n').length;
      edges.push({ from: file, to, line });
    }
  }
  return edges;
}

/** The edges among `edges` that break the floors, with the reason for each. */
export function floorViolations(edges: readonly ImportEdge[]): { edge: ImportEdge; reason: string }[] {
  const out: { edge: ImportEdge; reason: string }[] = [];
  for (const edge of edges) {
    const from = floorOf(edge.from);
    const to = floorOf(edge.to);
    if (!from || !to) {
      if (edge.from.startsWith('src/') && edge.to.startsWith('src/')) {
        out.push({ edge, reason: `no floor for ${from ? edge.to : edge.from}` });
      } else if (edge.from.startsWith('src/')) {
        out.push({ edge, reason: 'src/ imports from outside src/' });
      }
      continue;
    }
    if (!importAllowed(from, to)) {
      const why =
        to.rank >= from.rank
          ? `upward: ${from.name} (${from.rank}) → ${to.name} (${to.rank})`
          : `sideways: ${from.column} column → ${to.column} column (${from.name} → ${to.name})`;
      out.push({ edge, reason: why });
    }
  }
  return out;
}

/** Every `.ts` file under `dir`, repo-relative, sorted. */
export function sourceFiles(root: string, dir = 'src'): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(join(root, d), { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.ts')) out.push(p);
    }
  };
  walk(dir);
  return out.map((p) => relative(root, join(root, p))).sort();
}
