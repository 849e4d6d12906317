/**
 * The operator views against the real API server and a sim fleet: `metalctl get|describe|cordon`
 * run as the CLI a user types (child processes), `boots` finding a claim's namespace.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { promisify } from 'node:util';
import { claimNamespace } from '../../src/localstack/commands.js';
import { REPO_ROOT } from '../../src/localstack/control-plane.js';
import { binaryQuantity } from '../../src/localstack/server-view.js';
import { availableServers, createClaim, eventually, SCOPE_LABEL, withStack } from '../controllers/fixture.js';
import { releaseSharedCluster } from '../harness/shared.js';

after(releaseSharedCluster);

const run = promisify(execFile);
const metalctl = (kubeconfig: string, ...args: string[]) =>
  run(
    process.execPath,
    [join(REPO_ROOT, 'dist', 'src', 'cmd', 'metalctl.js'), ...args, '--kubeconfig', kubeconfig],
    {
      encoding: 'utf8',
      env: { ...process.env, KUBECONFIG: '' },
    },
  );

test('metalctl get/describe/cordon on a sim fleet; boots finds the claim namespace', {
  timeout: 90_000,
}, async () => {
  await withStack('views', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const name = srv!.metadata.name!;
    const host = s.vbmc.systems.find((x) => x.id === srv!.spec.systemUUID)!.host as unknown as {
      identity: { memoryMiB: number; macAddress: string };
    };
    const sel = `${SCOPE_LABEL}=${s.scope}`;
    const cordon = await metalctl(s.kubeconfigPath, 'cordon', name, '--reason', 'disk-swap');
    assert.match(cordon.stdout, /cordoned \(taint metal\.ironcore\.dev\/maintenance=disk-swap:NoBind\)/);
    const wide = await eventually('Maintenance in get -o wide', 15_000, async () => {
      const r = await metalctl(s.kubeconfigPath, 'get', 'servers', '-l', sel, '-o', 'wide');
      return /Maintenance/.test(r.stdout) ? r.stdout : undefined;
    });
    const [head, row] = wide.trim().split('\n');
    assert.match(head!, /\bBMC\b.*\bMEMORY\b.*\bPROBLEM$/);
    assert.match(
      row!,
      new RegExp(
        `^${name}\\s.*\\s${s.bmcName}\\s+Maintenance\\s.*\\s${binaryQuantity(host.identity.memoryMiB * 1024 * 1024)}\\s.*cordoned:disk-swap$`,
      ),
    );
    const json = JSON.parse((await metalctl(s.kubeconfigPath, 'get', 'server', name, '-o', 'json')).stdout);
    assert.equal(json.metadata.name, name);
    const described = await eventually('MaintenanceStarted in describe', 10_000, async () => {
      const r = await metalctl(s.kubeconfigPath, 'describe', 'server', name);
      return /MaintenanceStarted/.test(r.stdout) ? r.stdout : undefined;
    });
    assert.match(
      described,
      new RegExp(`^Memory:\\s+${binaryQuantity(host.identity.memoryMiB * 1024 * 1024)}$`, 'm'),
    );
    assert.match(described, new RegExp(`${host.identity.macAddress}\\s+\\S+\\s+1000Mb/s`));
    assert.match(described, /^Taints:\s+metal\.ironcore\.dev\/maintenance=disk-swap:NoBind$/m);
    assert.match(described, new RegExp(`^BMC:\\s+${s.bmcName} \\(Ready=True`, 'm'));
    await assert.rejects(
      metalctl(s.kubeconfigPath, 'describe', 'server', 'no-such-server'),
      (e: { code?: number; stderr?: string }) => {
        assert.equal(e.code, 1);
        assert.match(e.stderr ?? '', /Server no-such-server not found/);
        return true;
      },
    );
    assert.match((await metalctl(s.kubeconfigPath, 'uncordon', name)).stdout, /uncordoned/);
    await createClaim(s, 'findme', { serverRef: name, timeout: '20s' });
    assert.equal(await claimNamespace(s.client, 'findme'), s.ns);
    assert.match(
      (await metalctl(s.kubeconfigPath, '--version')).stdout,
      /^metalctl \d+\.\d+\.\d+ .*metal\.ironcore\.dev\/v1alpha1\)$/m,
    );
  });
});
