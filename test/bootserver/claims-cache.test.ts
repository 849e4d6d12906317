/**
 * The standalone boot server's ServerClaim cache (issue 35: fewer requests that carry nothing new),
 * as `config/signals` runs it: `dist/src/cmd/bootserver.js` as a child process against the run's
 * real API server, a claim-owned SBC whose claim records the attempt's power-on, and the iPXE script
 * fetched from one address. Requests are read from the process's own
 * `metal_api_requests_total{resource="serverclaims",verb="get"}`.
 * - default (`--claims-cache`): once its informer has the claim, a script fetch reads no claim;
 * - `--no-claims-cache`: every fetch reads the claim (the power-on gate, security review S3).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePorts } from '../../src/localstack/control-plane.js';
import type { KubeClient } from '../../src/runtime/client.js';
import {
  type Seeded,
  seedBootTarget,
  storeTestCallbackKey,
  TEST_IMAGE,
} from '../../src/testing/boot-target-seed.js';
import { deleteSeededServers, getFrom, newTestClient } from '../bootsignals/fixture.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster, sharedCluster, testNamespace } from '../harness/shared.js';

after(releaseSharedCluster);

interface BootServer {
  url: string;
  claimGets(): Promise<number>;
  stop(): Promise<void>;
}

describe('standalone boot server: ServerClaim cache', { timeout: 120_000 }, () => {
  let client: KubeClient;
  let ns: Awaited<ReturnType<typeof testNamespace>>;
  let kubeconfigPath: string;
  let key: { namespace: string; name: string };
  const dir = mkdtempSync(join(tmpdir(), 'metal-claims-cache-'));

  before(async () => {
    const cluster = await sharedCluster();
    kubeconfigPath = cluster.kubeconfigPath;
    client = newTestClient(cluster.kubeConfig());
    ns = await testNamespace(cluster.kubeConfig(), 'claims-cache');
    key = await storeTestCallbackKey(client, ns.name);
    writeFileSync(join(dir, 'vmlinuz'), Buffer.alloc(4096, 1));
    writeFileSync(join(dir, 'initrd'), Buffer.alloc(2048, 2));
    writeFileSync(
      join(dir, 'catalog.yaml'),
      `images:\n  ${TEST_IMAGE}:\n    kernel: ${join(dir, 'vmlinuz')}\n    initrd: ${join(dir, 'initrd')}\n    cmdline: console=ttyS0\n`,
    );
  });
  after(async () => {
    if (client && ns) await deleteSeededServers(client, ns.name);
    await ns?.cleanup();
    await client?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function startBootServer(flags: string[]): Promise<BootServer> {
    const [port, metricsPort] = (await freePorts(2)) as [number, number];
    const child: ChildProcess = spawn(
      process.execPath,
      [
        join(process.cwd(), 'dist', 'src', 'cmd', 'bootserver.js'),
        `--kubeconfig=${kubeconfigPath}`,
        `--callback-key-secret=${key.namespace}/${key.name}`,
        `--addr=127.0.0.1:${port}`,
        `--metrics-addr=127.0.0.1:${metricsPort}`,
        '--registry-url=http://127.0.0.1:1',
        `--image-catalog=${join(dir, 'catalog.yaml')}`,
        `--image-cache-dir=${join(dir, `blobs-${port}`)}`,
        ...flags,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } },
    );
    let out = '';
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
    });
    child.stderr!.on('data', (b: Buffer) => {
      out += b.toString();
    });
    const metrics = `http://127.0.0.1:${metricsPort}/metrics`;
    await waitFor('boot server listening', 30_000, async () => {
      if (child.exitCode !== null) throw new Error(`boot server exited: ${out}`);
      try {
        return (await fetch(`http://127.0.0.1:${metricsPort}/readyz`)).status === 200;
      } catch {
        return false;
      }
    });
    return {
      url: `http://127.0.0.1:${port}`,
      async claimGets() {
        const text = await (await fetch(metrics)).text();
        return text
          .split('\n')
          .filter(
            (l) =>
              l.startsWith('metal_api_requests_total{') &&
              l.includes('resource="serverclaims"') &&
              l.includes('verb="get"'),
          )
          .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
      },
      async stop() {
        if (child.exitCode === null) {
          child.kill('SIGTERM');
          await new Promise((ok) => child.once('exit', ok));
        }
      },
    };
  }

  /**
   * Fetches the attempt's script from 127.0.0.1 and returns how many claim GETs the fetch cost;
   * with `busyIsUndefined`, undefined for a 503 (the gate's claim reads are budgeted per owner, a
   * burst of 5 then one per second: a fetch past it is told `AwaitingPowerOn` without a read).
   */
  async function fetchScript(
    bs: BootServer,
    s: Seeded,
    busyIsUndefined = false,
  ): Promise<number | undefined> {
    const before = await bs.claimGets();
    const r = await getFrom(`${bs.url}/ipxe/${s.uuid}`, '127.0.0.1');
    if (busyIsUndefined && r.status === 503) return undefined;
    assert.equal(r.status, 200, r.text);
    assert.match(r.text, /^#!ipxe/);
    assert.ok(r.text.includes(s.token), 'the attempt script, not a local boot');
    return (await bs.claimGets()) - before;
  }

  it('by default: once the claim is cached, a script fetch reads no claim', async () => {
    const s = await seedBootTarget(client, ns.name, { flow: 'claim' });
    const bs = await startBootServer([]);
    try {
      // The informer is started without waiting for it: the first fetches may still read the claim.
      // One fetch a second stays within the gate's read budget while the cache fills.
      let cached = false;
      for (let i = 0; i < 20 && !cached; i++) {
        cached = (await fetchScript(bs, s, true)) === 0;
        if (!cached) await new Promise((ok) => setTimeout(ok, 1_000));
      }
      assert.ok(cached, 'no script fetch without a claim read within 20 s');
      for (let i = 0; i < 3; i++) assert.equal(await fetchScript(bs, s), 0, `fetch ${i + 1}`);
    } finally {
      await bs.stop();
    }
  });

  it('--no-claims-cache: every script fetch reads the claim', async () => {
    const s = await seedBootTarget(client, ns.name, { flow: 'claim' });
    const bs = await startBootServer(['--no-claims-cache']);
    try {
      for (let i = 0; i < 3; i++) assert.ok((await fetchScript(bs, s))! >= 1, `fetch ${i + 1}`);
    } finally {
      await bs.stop();
    }
  });
});
