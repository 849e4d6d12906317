/**
 * The manager's V8 heap settings come from its Deployment (config/manager/manager.yaml) and are
 * the ones the local stack starts the manager with: the heap limit is set, stays within 75 % of
 * the container's memory limit, and takes effect in this node; the boot server's young generation
 * is capped (4 MiB semi-spaces); a manifest without NODE_OPTIONS gives no flags, one without a
 * manager container is refused.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  deploymentContainer,
  MANAGER_MANIFEST,
  nodeOptions,
  SIGNAL_MANIFESTS,
} from '../../src/localstack/deployment-node-options.js';

const MiB = 1024 * 1024;

/** `512Mi` → bytes (the binary suffixes a memory limit uses here). */
function quantityBytes(q: string): number {
  const m = /^(\d+)(Ki|Mi|Gi)?$/.exec(q);
  assert.ok(m, `memory quantity ${q}`);
  return Number(m[1]) * ({ Ki: 1024, Mi: MiB, Gi: 1024 * MiB }[m[2] ?? ''] ?? 1);
}

describe('deployment node options', () => {
  const deployed: [string, string][] = [
    [MANAGER_MANIFEST, 'manager'],
    ...Object.entries(SIGNAL_MANIFESTS).map(([name, file]): [string, string] => [file, name]),
  ];
  for (const [file, name] of deployed)
    it(`the ${name} Deployment bounds the old generation within 75 % of the memory limit`, () => {
      const flags = nodeOptions(file, name);
      const heap = flags.map((f) => /^--max-old-space-size=(\d+)$/.exec(f)).find(Boolean);
      assert.ok(heap, `--max-old-space-size in ${JSON.stringify(flags)}`);
      const limit = deploymentContainer(file, name).resources?.limits?.memory;
      assert.ok(limit, `the ${name} container has a memory limit`);
      assert.ok(Number(heap[1]) * MiB <= 0.75 * quantityBytes(limit), `${heap[0]} vs limits.memory ${limit}`);
    });

  it('the flags take effect in this node (heap limit of old + young generation)', () => {
    const flags = nodeOptions();
    const oldSpaceMiB = Number(flags.find((f) => f.startsWith('--max-old-space-size='))?.split('=')[1]);
    const out = execFileSync(
      process.execPath,
      [...flags, '-e', 'console.log(require("v8").getHeapStatistics().heap_size_limit)'],
      { encoding: 'utf8' },
    );
    const limitMiB = Number(out.trim()) / MiB;
    // The young generation (two semi-spaces and their large-object space) comes on top.
    assert.ok(limitMiB >= oldSpaceMiB && limitMiB <= oldSpaceMiB + 64, `heap_size_limit ${limitMiB} MiB`);
  });

  it("the boot server Deployment keeps V8's young generation small (4 MiB semi-spaces, issue 35)", () => {
    const flags = nodeOptions(SIGNAL_MANIFESTS.bootserver, 'bootserver');
    const oldSpaceMiB = Number(flags.find((f) => f.startsWith('--max-old-space-size='))?.split('=')[1]);
    const out = execFileSync(
      process.execPath,
      [...flags, '-e', 'console.log(require("v8").getHeapStatistics().heap_size_limit)'],
      { encoding: 'utf8' },
    );
    // Young generation: two semi-spaces and a new large-object space of one semi-space each.
    const youngMiB = Number(out.trim()) / MiB - oldSpaceMiB;
    assert.ok(youngMiB <= 3 * 4, `young generation ${youngMiB} MiB (${flags.join(' ')})`);
  });

  it('no NODE_OPTIONS: no flags; no manager container: an error naming the file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'node-options-'));
    try {
      const plain = join(dir, 'plain.yaml');
      writeFileSync(
        plain,
        'apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n---\napiVersion: apps/v1\nkind: Deployment\n' +
          'spec: {template: {spec: {containers: [{name: manager, env: [{name: A, value: b}]}]}}}\n',
      );
      assert.deepEqual(nodeOptions(plain), []);
      const other = join(dir, 'other.yaml');
      writeFileSync(
        other,
        'apiVersion: apps/v1\nkind: Deployment\nspec: {template: {spec: {containers: [{name: registry}]}}}\n',
      );
      assert.throws(() => nodeOptions(other), /other\.yaml: no Deployment with a container named "manager"/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
