/**
 * The floors of src/ (docs/ARCHITECTURE.md, "Floors"; the table is hack/house/floors.ts): every
 * relative import in src/ runs downwards, controllers and the HTTP servers never import each other,
 * and every folder of src/ has a floor. Read from the files as committed, so a new upward import
 * fails here; the synthetic edges below prove the check can fail.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { describe, it } from 'node:test';
import { FLOORS, floorOf, floorViolations, importEdges, sourceFiles } from '../../hack/house/floors.js';

const root = process.cwd();

describe('floors of src/', () => {
  it('no import in src/ runs up or sideways', () => {
    const edges = importEdges(root, sourceFiles(root));
    assert.ok(edges.length > 500, `read ${edges.length} imports: the reader found too few`);
    assert.deepEqual(
      floorViolations(edges).map((v) => `${v.edge.from}:${v.edge.line} → ${v.edge.to} (${v.reason})`),
      [],
    );
  });

  it('every folder of src/ and of src/controllers/ has a floor', () => {
    const folders = readdirSync('src', { withFileTypes: true })
      .filter((e) => e.isDirectory() && e.name !== 'controllers')
      .map((e) => e.name);
    const controllers = readdirSync('src/controllers').map((n) => `controllers/${n}`);
    for (const name of [...folders, ...controllers]) {
      assert.ok(
        FLOORS.some((f) => f.name === name),
        `src/${name} has no floor in hack/house/floors.ts`,
      );
    }
  });

  it('refuses an upward, a sideways and an unknown edge (the check can fail)', () => {
    const v = floorViolations([
      { from: 'src/api/vocabulary.ts', to: 'src/controllers/common/config.ts', line: 1 },
      { from: 'src/controllers/serverclaim/serverclaim.ts', to: 'src/bootserver/server.ts', line: 2 },
      { from: 'src/bootserver/server.ts', to: 'src/controllers/common/metrics.ts', line: 3 },
      { from: 'src/controllers/server/server.ts', to: 'src/controllers/serverclaim/serverclaim.ts', line: 4 },
      { from: 'src/newfolder/x.ts', to: 'src/api/vocabulary.ts', line: 5 },
      { from: 'src/cmd/manager.ts', to: 'src/controllers/setup.ts', line: 6 },
      { from: 'src/controllers/serverclaim/serverclaim.ts', to: 'src/inventory/server-index.ts', line: 7 },
    ]);
    assert.deepEqual(
      v.map((x) => x.edge.line),
      [1, 2, 3, 4, 5],
    );
    assert.equal(floorOf('src/controllers/setup.ts')?.name, 'controllers/setup.ts');
  });
});
