/**
 * `local up` reuses a running stack only when it has the asked-for shape: the pure rule
 * (shapeDifferences) for every property, and the CLI refusing, with the difference named, a second
 * `local up` with another `--bmc-profile` or `--servers` on a running sim stack (nothing restarted:
 * the first daemon keeps running).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { REPO_ROOT } from '../../src/localstack/control-plane.js';
import { alive, readLocalState } from '../../src/localstack/local-state.js';
import { type StackShape, shapeDifferences } from '../../src/localstack/stack-shape.js';

const bridgedHttp: StackShape = {
  firmware: 'uefi',
  network: { requested: 'auto', resolved: 'bridge' },
  bootMethod: { requested: 'auto', resolved: 'http' },
  bmcProfile: 'none',
};
const qemu = (shape: StackShape) => ({ backend: 'qemu', servers: 2, shape });

test('shapeDifferences: the defaults match a default stack; each other flag is named', () => {
  assert.deepEqual(shapeDifferences(qemu(bridgedHttp), { backend: 'qemu', servers: 2 }), []);
  assert.deepEqual(
    shapeDifferences(qemu(bridgedHttp), {
      backend: 'qemu',
      servers: 2,
      firmware: 'uefi',
      network: 'bridge',
      bootMethod: 'http',
    }),
    [],
    'explicit values equal to what auto chose',
  );
  const each: [Record<string, string | number>, RegExp][] = [
    [{ firmware: 'bios' }, /^--firmware: the running stack has uefi, this command asks for bios$/],
    [
      { network: 'user' },
      /^--network: the running stack has bridge \(asked: auto\), this command asks for user$/,
    ],
    [
      { bootMethod: 'pxe' },
      /^--boot-method: the running stack has http \(asked: auto\), this command asks for pxe$/,
    ],
    [{ bmcProfile: 'dell' }, /^--bmc-profile: the running stack has none, this command asks for dell$/],
    [{ servers: 3 }, /^--servers: the running stack has 2, this command asks for 3$/],
    [{ backend: 'sim' }, /^--backend: the running stack has qemu, this command asks for sim$/],
  ];
  for (const [flag, message] of each) {
    const d = shapeDifferences(qemu(bridgedHttp), { backend: 'qemu', servers: 2, ...flag });
    assert.match(d[0] ?? '', message);
    // BIOS firmware also changes what the default boot method (auto) means: PXE, not HTTP boot.
    const also = flag.firmware
      ? ['--boot-method: the running stack has http (asked: auto), this command asks for auto (pxe here)']
      : [];
    assert.deepEqual(d.slice(1), also, JSON.stringify(flag));
  }
});

test('shapeDifferences: auto accepts what auto chose here, not an explicit other choice', () => {
  const userPxe: StackShape = {
    firmware: 'uefi',
    network: { requested: 'user', resolved: 'user' },
    bootMethod: { requested: 'pxe', resolved: 'pxe' },
    bmcProfile: 'none',
  };
  // Started with --network user: auto would have made the bridge (where allowed), so no reuse.
  assert.deepEqual(
    shapeDifferences(qemu(userPxe), { backend: 'qemu', servers: 2, bootMethod: 'pxe' }).map(
      (d) => d.split(':')[0],
    ),
    ['--network'],
  );
  // Started with auto on a machine without namespaces: auto resolves to user here, so it matches;
  // and auto's boot method there is PXE.
  const autoUser: StackShape = {
    ...userPxe,
    network: { requested: 'auto', resolved: 'user' },
    bootMethod: { requested: 'auto', resolved: 'pxe' },
  };
  assert.deepEqual(shapeDifferences(qemu(autoUser), { backend: 'qemu', servers: 2 }), []);
  // BIOS on the bridge: auto's boot method is PXE, so a PXE stack matches and an HTTP ask does not.
  const biosBridge: StackShape = {
    firmware: 'bios',
    network: { requested: 'bridge', resolved: 'bridge' },
    bootMethod: { requested: 'auto', resolved: 'pxe' },
    bmcProfile: 'none',
  };
  assert.deepEqual(shapeDifferences(qemu(biosBridge), { backend: 'qemu', servers: 2, firmware: 'bios' }), []);
  assert.equal(
    shapeDifferences(qemu(biosBridge), { backend: 'qemu', servers: 2, firmware: 'bios', bootMethod: 'http' })
      .length,
    1,
  );
  // The sim back end has no firmware, network or boot method; the BMC profile still counts.
  const sim = {
    backend: 'sim',
    servers: 5,
    shape: { ...bridgedHttp, network: { requested: 'auto', resolved: 'user' } },
  };
  assert.deepEqual(shapeDifferences(sim, { backend: 'sim', servers: 5, firmware: 'bios' }), []);
  assert.equal(shapeDifferences(sim, { backend: 'sim', servers: 5, bmcProfile: 'hpe' }).length, 1);
});

const run = promisify(execFile);
const METALCTL = join(REPO_ROOT, 'dist', 'src', 'cmd', 'metalctl.js');
async function metalctl(...args: string[]): Promise<{ code: number; out: string }> {
  try {
    const r = await run(process.execPath, [METALCTL, ...args], { encoding: 'utf8', timeout: 300_000 });
    return { code: 0, out: r.stdout + r.stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

test('local up refuses to reuse a running stack started with another --bmc-profile or --servers, naming the difference', {
  timeout: 400_000,
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'metal-tests2-shape-'));
  const up = (servers: number, ...extra: string[]) =>
    metalctl(
      'local',
      'up',
      '--dir',
      dir,
      '--backend',
      'sim',
      '--servers',
      String(servers),
      '--no-claim',
      '--timeout',
      '240',
      ...extra,
    );
  try {
    const first = await up(1);
    assert.equal(first.code, 0, first.out);
    const pid = readLocalState(dir)!.pid;
    assert.equal(readLocalState(dir)?.shape?.bmcProfile, 'none');

    const again = await up(1);
    assert.equal(again.code, 0, again.out);
    assert.match(again.out, /reusing the running local stack/);

    const dell = await up(1, '--bmc-profile', 'dell');
    assert.equal(dell.code, 1, dell.out);
    assert.match(dell.out, /--bmc-profile: the running stack has none, this command asks for dell/);
    assert.match(dell.out, /local down/, 'says how to get the other shape');
    const more = await up(2);
    assert.equal(more.code, 1, more.out);
    assert.match(more.out, /--servers: the running stack has 1, this command asks for 2/);
    assert.ok(alive(pid), 'the running stack is left alone');
    assert.equal(readLocalState(dir)?.pid, pid);
  } finally {
    await metalctl('local', 'down', '--dir', dir);
    rmSync(dir, { recursive: true, force: true });
  }
});
