/**
 * config/samples as a user applies it next to a local stack (issue 36 item 11): `kubectl apply -k`
 * works, the sample BMC's Server is the one this repository's virtual BMC serves with the command the
 * file's header gives, and no sample object shares a name with what `npm run local-up` creates.
 * Reads the files as kubectl does (kubectl kustomize); no API server.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { EXAMPLE_CLAIM, EXAMPLE_NS } from '../../src/localstack/commands.js';
import { REPO_ROOT } from '../../src/localstack/control-plane.js';
import { simIdentity } from '../../src/virtualbmc/sim-fleet.js';

const SAMPLES = join(REPO_ROOT, 'config', 'samples');

interface Obj {
  kind: string;
  metadata: { name: string; namespace?: string };
  spec?: Record<string, unknown>;
  stringData?: Record<string, string>;
}

describe('config/samples', () => {
  const built = execFileSync('kubectl', ['kustomize', SAMPLES], { encoding: 'utf8' });
  const objs = parseAllDocuments(built, { version: '1.1' }).map((d) => d.toJSON() as Obj);

  it('kubectl kustomize config/samples gives every object of example.yaml', () => {
    const file = parseAllDocuments(readFileSync(join(SAMPLES, 'example.yaml'), 'utf8'), { version: '1.1' })
      .map((d) => d.toJSON() as Obj)
      .filter(Boolean);
    assert.deepEqual(
      objs.map((o) => `${o.kind}/${o.metadata.name}`).sort(),
      file.map((o) => `${o.kind}/${o.metadata.name}`).sort(),
    );
  });

  it("the sample Server is the first system of the virtual BMC the header starts, with the sample's credentials", () => {
    const header = readFileSync(join(SAMPLES, 'example.yaml'), 'utf8');
    const cmd = /node dist\/src\/cmd\/virtual-bmc\.js (.*?)\\?\n/.exec(header)?.[1] ?? '';
    const flag = (name: string) => new RegExp(`--${name} (\\S+)`).exec(cmd)?.[1];
    const server = objs.find((o) => o.kind === 'Server')!;
    const bmc = objs.find((o) => o.kind === 'BMC')!;
    const secret = objs.find((o) => o.kind === 'BMCSecret')!;
    assert.equal(server.spec?.systemUUID, simIdentity(0, flag('seed')).uuid);
    assert.equal(String((bmc.spec?.protocol as { port: number }).port), flag('port'));
    assert.equal(secret.stringData?.password, flag('password'));
  });

  it('shares no name with the objects `npm run local-up` creates', () => {
    const local = new Set([
      `ServerClaim/${EXAMPLE_NS}/${EXAMPLE_CLAIM}`,
      `Secret/${EXAMPLE_NS}/${EXAMPLE_CLAIM}-ignition`,
    ]);
    for (const o of objs) {
      const key = `${o.kind}/${o.metadata.namespace ?? 'default'}/${o.metadata.name}`;
      assert.ok(!local.has(key), `${key} would overwrite the local stack's`);
    }
  });
});
