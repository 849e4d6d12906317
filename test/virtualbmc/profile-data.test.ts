/**
 * The named vendor profiles are the project's own data (`src/virtualbmc/profiles/`): they resolve and
 * serve with no captured tree anywhere (METAL_REDFISH_MOCKUPS naming a folder that does not exist, a
 * working directory with no `../shared`), while a tree-folder profile that is missing fails naming it;
 * and each profile's facts equal what `factsFromTree` reads from its captured tree today, so the data
 * cannot drift from the trees silently. That check reads `../shared/redfish-mockups` (or
 * METAL_REDFISH_MOCKUPS) and fails, naming the folder, where it is missing, as the other captured-tree
 * tests do.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { RedfishBMC } from '../../src/bmc/redfish-bmc.js';
import { mockupsDir } from '../../src/testing/mockups.js';
import { resolveProfile, VENDOR_PROFILES, type VendorProfileName } from '../../src/virtualbmc/profile.js';
import { factsFromTree } from '../../src/virtualbmc/profile-facts.js';
import { loadProfileTree } from '../../src/virtualbmc/profile-tree.js';

const CLI = fileURLToPath(new URL('../../src/cmd/virtual-bmc.js', import.meta.url));
const NAMES = Object.keys(VENDOR_PROFILES) as VendorProfileName[];
const scratch = mkdtempSync(join(tmpdir(), 'profile-data-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** Runs `fn` with METAL_REDFISH_MOCKUPS set to `dir`, restoring it afterwards. */
function withMockups<T>(dir: string, fn: () => T): T {
  const before = process.env['METAL_REDFISH_MOCKUPS'];
  process.env['METAL_REDFISH_MOCKUPS'] = dir;
  try {
    return fn();
  } finally {
    if (before === undefined) delete process.env['METAL_REDFISH_MOCKUPS'];
    else process.env['METAL_REDFISH_MOCKUPS'] = before;
  }
}

describe('named profiles without captured trees', () => {
  const missing = join(scratch, 'no-such-mockups');

  for (const name of NAMES) {
    it(`${name} resolves from the project's data with METAL_REDFISH_MOCKUPS naming no folder`, () => {
      const p = withMockups(missing, () => resolveProfile(name));
      const facts = VENDOR_PROFILES[name].facts;
      assert.ok(p.tree, 'a resource model');
      assert.equal(p.tree.systemUri, facts.system.uri);
      const sys = p.tree.get(p.tree.systemUri);
      assert.equal(sys?.['Manufacturer'], facts.system.manufacturer);
      assert.equal(sys?.['UUID'], facts.system.uuid);
      assert.ok((p.resetTypes ?? []).length > 0, 'reset types from the data');
      assert.deepEqual(p.bootTargets, facts.system.boot['BootSourceOverrideTarget@Redfish.AllowableValues']);
      for (const [k, v] of Object.entries(VENDOR_PROFILES[name].behaviour))
        assert.deepEqual(p[k as keyof typeof p], v, k);
    });
  }

  it('a tree-folder profile that does not exist fails naming it; an empty folder names what is missing', () => {
    withMockups(missing, () => {
      assert.throws(
        () => resolveProfile(join(missing, 'libredfish-dell')),
        /unknown BMC profile .*no-such-mockups.*nor a folder/,
      );
      const empty = mkdtempSync(join(scratch, 'empty-'));
      assert.throws(() => resolveProfile(empty), /no index\.json of a Redfish service root/);
    });
  });

  it('virtual-bmc --profile dell serves Dell from a folder with no ../shared', async () => {
    const cwd = mkdtempSync(join(scratch, 'clone-'));
    assert.ok(!existsSync(join(cwd, '..', 'shared')));
    const child = spawn(
      process.execPath,
      [CLI, '--boot-server-url', 'http://127.0.0.1:9', '--systems', '1', '--profile', 'dell'],
      {
        cwd,
        env: { ...process.env, VIRTUAL_BMC_PASSWORD: 'pw', METAL_REDFISH_MOCKUPS: missing },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    try {
      let url: string | undefined;
      for await (const line of createInterface({ input: child.stdout! })) {
        const entry = JSON.parse(line) as Record<string, unknown>;
        if (entry['msg'] === 'virtual BMC ready') {
          url = String(entry['url']);
          break;
        }
      }
      assert.ok(url, 'ready line printed');
      const bmc = new RedfishBMC({ endpoint: url, username: 'admin', password: 'pw' });
      try {
        const [ref] = await bmc.listSystems();
        assert.equal(ref?.uri, '/redfish/v1/Systems/System.Embedded.1');
        const sys = await bmc.getSystem(ref.uri);
        assert.equal(sys.manufacturer, 'Dell Inc.');
        assert.equal(sys.model, 'PowerEdge R750');
        assert.ok(sys.boot.allowedTargets?.includes('UefiHttp'));
        const [mgr] = await bmc.listManagers();
        assert.equal(mgr?.uri, '/redfish/v1/Managers/iDRAC.Embedded.1');
      } finally {
        await bmc.close();
      }
    } finally {
      child.kill('SIGKILL');
    }
  });
});

describe("named profiles' data equals what the captured trees say", () => {
  for (const name of NAMES) {
    const { tree, facts } = VENDOR_PROFILES[name];
    it(`${name}: src/virtualbmc/profiles data = factsFromTree(${tree})`, () => {
      const dir = join(mockupsDir(), tree);
      assert.ok(
        existsSync(dir),
        `${dir}: the captured tree is missing (../shared/redfish-mockups or METAL_REDFISH_MOCKUPS)`,
      );
      const derived = factsFromTree(loadProfileTree(dir), tree);
      assert.deepEqual(
        facts,
        derived,
        `the data of ${name} drifted from ${tree}: write factsFromTree's output`,
      );
    });
  }
});
