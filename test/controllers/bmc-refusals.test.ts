/**
 * Issue 30: a BMC that refuses must not make the manager loop. Real API server, sim virtual BMC.
 *
 * - The recipe: an HTTPBoot claim on a BMC whose system allows `UefiHttp` but has no
 *   `Boot.HttpBootUri` (profile `reportHttpBootUri: false`). That refusal is permanent: the claim
 *   ends with `Booted=False BootMethodUnsupported`, no power action, no attempt used, one Warning;
 *   a spec change (bootMethod PXE) starts again and boots.
 * - A BMC that refuses every power-on for good (503 to every POST/PATCH): the retries back off
 *   (each gap at least the one before, doubling), BMC requests and claim status writes stay within
 *   the stated bound, one aggregated Warning Event, and the attempt's deadline still runs: the claim
 *   reaches AttemptsExhausted within its configured time.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { KubeClient } from '../../src/runtime/client.js';
import { Informer } from '../../src/runtime/informer.js';
import { newLogger } from '../../src/runtime/logger.js';
import { Resources } from '../../src/runtime/resource.js';
import type { RequestRecord } from '../../src/virtualbmc/server.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  API,
  availableServers,
  cond,
  eventually,
  getClaim,
  OS_IMAGE,
  type Stack,
  servers,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

/** Counts the claim's stored versions (every status or spec write the watch delivers). */
async function watchClaimWrites(s: Stack, name: string): Promise<{ count(): number; stop(): void }> {
  const client = new KubeClient(s.kc, { fieldManager: 'metal-test-watch' });
  const inf = new Informer<ServerClaim>(client, Resources.ServerClaim, {
    namespace: s.ns,
    log: newLogger('test-watch', { level: 'warn' }),
  });
  let n = 0;
  inf.on('update', (o, old) => {
    if (o.metadata.name === name && o.metadata.resourceVersion !== old?.metadata.resourceVersion) n++;
  });
  await inf.start();
  return {
    count: () => n,
    stop: () => {
      inf.stop();
      void client.close();
    },
  };
}

/** Accepted ComputerSystem.Reset requests among `reqs`. */
function resetsSince(reqs: RequestRecord[]): string[] {
  return reqs
    .filter((r) => r.method === 'POST' && r.path.endsWith('/Actions/ComputerSystem.Reset') && r.status < 300)
    .map((r) => String((r.body as { ResetType?: string } | undefined)?.ResetType));
}

async function claimEvents(s: Stack, name: string) {
  const { items } = await s.client.list<{
    metadata: Record<string, string>;
    involvedObject?: { kind?: string; name?: string };
    regarding?: { kind?: string; name?: string };
    type: string;
    reason: string;
    count?: number;
    series?: { count?: number };
  }>(Resources.Event, { namespace: s.ns });
  return items.filter((e) => (e.involvedObject ?? e.regarding)?.name === name);
}

async function createHttpBootClaim(s: Stack, name: string, serverRef: string, extra: object = {}) {
  await s.client.create<ServerClaim>(Resources.ServerClaim, {
    apiVersion: API,
    kind: 'ServerClaim',
    metadata: { name, namespace: s.ns, labels: s.labels },
    spec: {
      power: 'On',
      image: OS_IMAGE,
      serverRef: { name: serverRef },
      bootMethod: 'HTTPBoot',
      bootCompletion: { timeout: '60s', maxAttempts: 2 },
      ...extra,
    },
  } as ServerClaim);
}

test('an HTTPBoot claim on a BMC without Boot.HttpBootUri ends BootMethodUnsupported: no hot loop, no power action, no attempt used', {
  timeout: 120_000,
}, async () => {
  await withStack('nohttpuri', { hosts: 1, profile: { reportHttpBootUri: false } }, async (s) => {
    const [srv] = await availableServers(s, 1, 120_000);
    const sys = s.vbmc.systems.find((x) => x.id === srv!.spec.systemUUID!.toLowerCase())!;
    const writes = await watchClaimWrites(s, 'hb');
    const before = s.vbmc.requests().length;
    await createHttpBootClaim(s, 'hb', srv!.metadata.name!);
    const ended = await eventually('Booted=False BootMethodUnsupported', 20_000, async () => {
      const c = await getClaim(s, 'hb');
      return cond(c, 'Booted')?.reason === 'BootMethodUnsupported' ? c : undefined;
    });
    // Watch what follows for 10 s: the series has ended, nothing is asked of the BMC again.
    await new Promise((ok) => setTimeout(ok, 10_000));
    const sysRequests = s.vbmc
      .requests()
      .slice(before)
      .filter((r) => r.path.startsWith(sys.uri));
    const n = writes.count();
    writes.stop();
    assert.ok(sysRequests.length <= 10, `BMC requests to the system: ${sysRequests.length} (at most 10)`);
    assert.ok(n <= 12, `claim writes: ${n} (at most 12)`);
    assert.deepEqual(resetsSince(sysRequests), [], 'no power action');
    assert.equal(sys.host.powerState(), 'Off');
    const c = (await getClaim(s, 'hb'))!;
    const booted = cond(c, 'Booted')!;
    assert.equal(booted.status, 'False');
    assert.match(booted.message, /HttpBootUri/);
    assert.equal(c.status?.boot?.attempt, ended.status?.boot?.attempt, 'no attempt used meanwhile');
    assert.ok(!c.status?.boot?.poweredOnAt, 'no power-on recorded');
    assert.ok(!(c.status?.boot?.history ?? []).some((h) => h.poweredOnAt), 'no attempt powered on');
    const warnings = (await claimEvents(s, 'hb')).filter((e) => e.type === 'Warning');
    assert.equal(warnings.length, 1, `one Warning Event (${JSON.stringify(warnings)})`);
    assert.equal(warnings[0]!.reason, 'BootMethodUnsupported');
    assert.ok((warnings[0]!.series?.count ?? warnings[0]!.count ?? 1) <= 2, 'not counted up');

    // A spec change starts again: with PXE the same server boots.
    await s.client.mergePatch(Resources.ServerClaim, 'hb', s.ns, { spec: { bootMethod: 'PXE' } });
    await eventually('Booted=True after the switch to PXE', 40_000, async () => {
      const x = await getClaim(s, 'hb');
      return cond(x, 'Booted')?.status === 'True';
    });
  });
});

/**
 * Start times of the boot tries in a system's request log: each try is one boot call, which reads the
 * system (GET) and then PATCHes the override (retried inside the call on 503): a PATCH right after a
 * non-PATCH request starts a try. Counted from the requests themselves, so a loaded machine that
 * shortens the pauses between calls cannot merge two tries.
 */
function callStarts(reqs: { method: string; at: number }[]): number[] {
  return reqs
    .filter((r, i) => r.method === 'PATCH' && (i === 0 || reqs[i - 1]!.method !== 'PATCH'))
    .map((r) => r.at);
}

/** Start times of the tries in `times` (ms): a pause over `gapMs` begins a new try (retries inside one call are closer). */
function tries(times: number[], gapMs: number): number[] {
  const starts: number[] = [];
  for (const [i, t] of times.entries()) if (i === 0 || t - times[i - 1]! > gapMs) starts.push(t);
  return starts;
}

test('a BMC that refuses every boot override (503): retries back off, writes stay bounded, the deadline still ends the series', {
  timeout: 180_000,
}, async () => {
  await withStack('refuseall', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1, 120_000);
    const sys = s.vbmc.systems.find((x) => x.id === srv!.spec.systemUUID!.toLowerCase())!;
    // From now on every PATCH (the boot override) is refused 503, Retry-After 1 s, unprocessed.
    s.vbmc.setFaults({ unavailableRequests: 1_000_000, retryAfterSeconds: 1, onlyMethods: ['PATCH'] });
    const writes = await watchClaimWrites(s, 'refused');
    const before = s.vbmc.requests().length;
    const t0 = Date.now();
    await s.client.create<ServerClaim>(Resources.ServerClaim, {
      apiVersion: API,
      kind: 'ServerClaim',
      metadata: { name: 'refused', namespace: s.ns, labels: s.labels },
      spec: {
        power: 'On',
        image: OS_IMAGE,
        serverRef: { name: srv!.metadata.name! },
        bootCompletion: { timeout: '40s', maxAttempts: 1 },
      },
    } as ServerClaim);
    // The attempt's 40 s run from its first power-on request, refused or not (docs/BOOT-ATTEMPTS.md).
    const ended = await eventually('AttemptsExhausted within the attempt timeout', 75_000, async () => {
      const c = await getClaim(s, 'refused');
      return cond(c, 'Booted')?.reason === 'AttemptsExhausted' ? c : undefined;
    });
    const took = Date.now() - t0;
    const n = writes.count();
    writes.stop();
    const reqs = s.vbmc
      .requests()
      .slice(before)
      .filter((r) => r.path.startsWith(sys.uri));
    const patches = reqs.filter((r) => r.method === 'PATCH').map((r) => r.at);
    const starts = callStarts(reqs);
    const gaps = starts.slice(1).map((t, i) => t - starts[i]!);
    const perMinute = (x: number) => (x * 60_000) / took;
    console.log(
      `# refuse-all: ${reqs.length} BMC requests to the system (${patches.length} PATCH) and ${n} claim writes in ${took} ms; tries at +${starts.map((t) => t - starts[0]!).join(', +')} ms`,
    );
    assert.ok(took < 70_000, `ended ${took} ms after creation (40 s timeout + slack)`);
    assert.match(cond(ended, 'Booted')!.message, /never accepted its power-on/);
    assert.deepEqual(resetsSince(reqs), [], 'no power action: every override was refused');
    assert.ok(starts.length >= 3 && starts.length <= 8, `tries: ${starts.length} (3..8 in 40 s)`);
    for (const [i, g] of gaps.entries())
      if (i > 0) assert.ok(g >= gaps[i - 1]! * 0.8, `gaps grow: ${gaps.join(', ')} ms`);
    assert.ok(gaps[gaps.length - 1]! >= 2 * gaps[0]!, `backoff doubles: ${gaps.join(', ')} ms`);
    // The bound: at most 60 BMC requests and 30 claim status writes per minute for this server.
    assert.ok(perMinute(reqs.length) <= 60, `BMC requests/min: ${perMinute(reqs.length).toFixed(1)}`);
    assert.ok(perMinute(n) <= 30, `claim writes/min: ${perMinute(n).toFixed(1)}`);
    const { items } = await s.client.list<{
      metadata: Record<string, string>;
      involvedObject?: { name?: string };
      type: string;
      reason: string;
    }>(Resources.Event, { namespace: 'default' });
    const serverWarnings = items.filter(
      (e) => e.involvedObject?.name === srv!.metadata.name && e.type === 'Warning',
    );
    assert.ok(
      serverWarnings.length <= 1,
      `one aggregated Warning on the Server: ${JSON.stringify(serverWarnings.map((e) => e.reason))}`,
    );
  });
});

test('discovery on a BMC that refuses every boot override: retries back off, Server writes bounded, the attempts still end', {
  timeout: 180_000,
}, async () => {
  await withStack(
    'refusedisc',
    {
      hosts: 1,
      args: ['--discovery-timeout', '20s', '--discovery-max-attempts', '1'],
    },
    async (s) => {
      // Before the Server is discovered: every PATCH (the discovery boot override) is refused 503.
      s.vbmc.setFaults({ unavailableRequests: 1_000_000, retryAfterSeconds: 1, onlyMethods: ['PATCH'] });
      const t0 = Date.now();
      const srv = await eventually('DiscoveryAttemptsExhausted', 90_000, async () => {
        const [x] = await servers(s);
        return cond(x, 'Discovered')?.reason === 'DiscoveryAttemptsExhausted' ? x : undefined;
      });
      const took = Date.now() - t0;
      const sys = s.vbmc.systems[0]!;
      const reqs = s.vbmc.requests().filter((r) => r.path.startsWith(sys.uri));
      const starts = tries(
        reqs.filter((r) => r.method === 'PATCH').map((r) => r.at),
        1_800,
      );
      const gaps = starts.slice(1).map((t, i) => t - starts[i]!);
      console.log(
        `# refuse-discovery: ${reqs.length} BMC requests in ${took} ms, Server resourceVersion ${srv.metadata.resourceVersion}; tries at +${starts.map((t) => t - starts[0]!).join(', +')} ms`,
      );
      assert.ok(starts.length >= 2 && starts.length <= 8, `tries: ${starts.length}`);
      assert.ok(gaps.length === 0 || gaps[gaps.length - 1]! >= gaps[0]!, `gaps do not shrink: ${gaps}`);
      assert.ok((reqs.length * 60_000) / took <= 90, `BMC requests/min: ${(reqs.length * 60_000) / took}`);
      assert.deepEqual(resetsSince(reqs), [], 'never powered on');
    },
  );
});
