/**
 * The cleanup boot on release (src/controllers/server/cleanup.ts) against the real API server with
 * simulated hosts: a released Server runs the cleanup image through the boot-attempt engine and is
 * Available (and bindable by a waiting claim) only after its completion signal; a cleanup image that
 * never reports leaves the Server in Error, unclaimable, with the reason shown by `metalctl get
 * servers`; `automatedCleaningMode: disabled` makes it Available at once, as without cleanup.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import { BootSignal } from '../../src/api/vocabulary.js';
import { recordSignal } from '../../src/bootsignals/signal-condition.js';
import { serverProblems } from '../../src/localstack/server-view.js';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  cond,
  createClaim,
  eventsFor,
  eventually,
  getClaim,
  managerMetric,
  OS_IMAGE,
  PROBE_IMAGE,
  pokeClaim,
  resetsSent,
  type Stack,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

const CLEANUP_IMAGE = 'test/cleanup:1.0';
/** A cleanup image whose agent boots but never posts /bootstate (a wipe that failed). */
const SILENT_CLEANUP_IMAGE = 'test/cleanup-silent:1.0';

/** The fixture's catalog plus the two cleanup images. */
function cleanupCatalog(): string {
  const dir = mkdtempSync(join(tmpdir(), 'metal-cleanup-'));
  writeFileSync(join(dir, 'vmlinuz'), randomBytes(1024));
  writeFileSync(join(dir, 'initrd'), randomBytes(1024));
  const entry = (mode: string, extra = '') =>
    `    kernel: ${join(dir, 'vmlinuz')}\n    initrd: ${join(dir, 'initrd')}\n    cmdline: console=ttyS0${extra}\n    mode: ${mode}\n`;
  const path = join(dir, 'images.yaml');
  writeFileSync(
    path,
    [
      'images:',
      `  ${OS_IMAGE}:\n${entry('os')}`,
      `  ${PROBE_IMAGE}:\n${entry('probe')}`,
      `  ${CLEANUP_IMAGE}:\n${entry('os', ' metal.erase=metadata')}`,
      `  ${SILENT_CLEANUP_IMAGE}:\n${entry('os', ' metal.erase=metadata metal.callback=skip')}`,
    ].join('\n'),
  );
  return path;
}

const getServer = (s: Stack, name: string) => s.client.get<Server>(Resources.Server, name);

/**
 * Records every `status.state` the Server goes through, in order, from a watch that starts at the
 * Server's current resourceVersion (a watch delivers every change; polling can miss a state that
 * lasts milliseconds, such as Available right before a waiting claim binds), until the returned stop
 * function is called (at most 90 s); resolves the list then. `stop(upTo)` first waits (at most 10 s)
 * until the watch delivered `upTo`'s resourceVersion: a poll often reads a version the watch has
 * not delivered yet, and stopping then would miss the state the poll saw.
 */
async function watchStates(s: Stack, name: string): Promise<(upTo?: Server) => Promise<string[]>> {
  const first = await getServer(s, name);
  const seen: string[] = [first?.status?.state ?? '?'];
  let delivered = Number(first?.metadata.resourceVersion ?? 0);
  const abort = new AbortController();
  const bound = setTimeout(() => abort.abort(), 90_000);
  const stream = s.client
    .watch(
      Resources.Server,
      {
        resourceVersion: first?.metadata.resourceVersion ?? '0',
        fieldSelector: `metadata.name=${name}`,
        timeoutSeconds: 90,
      },
      (type, obj: Server) => {
        if (type !== 'ADDED' && type !== 'MODIFIED') return;
        delivered = Math.max(delivered, Number(obj.metadata.resourceVersion ?? 0));
        const st = obj.status?.state ?? '?';
        if (seen[seen.length - 1] !== st) seen.push(st);
      },
      abort.signal,
    )
    .catch(() => undefined);
  return async (upTo?: Server) => {
    const want = Number(upTo?.metadata.resourceVersion ?? 0);
    // (etcd revisions: one counter, so a later change of this Server has a larger number.)
    const end = Date.now() + 10_000;
    while (delivered < want && Date.now() < end) await new Promise((ok) => setTimeout(ok, 20));
    abort.abort();
    clearTimeout(bound);
    await stream;
    return seen;
  };
}

/**
 * Whether the Server is Available or already Reserved by the claim `claim` that waited for it (the
 * waiting claim binds within milliseconds, so a poll for Available alone can miss it).
 */
function availableOrTakenBy(x: Server | undefined, claim: string): boolean {
  const st = x?.status?.state;
  return st === 'Available' || (st === 'Reserved' && x?.spec.serverClaimRef?.name === claim);
}

/** Claims `server` and waits until it is Booted. */
async function bootTenant(s: Stack, claim: string, server: string): Promise<void> {
  await createClaim(s, claim, { serverRef: server });
  await eventually(
    `${claim} Booted`,
    30_000,
    async () => cond(await getClaim(s, claim), 'Booted')?.status === 'True',
  );
}

test('release runs the cleanup boot; Available (and bound by the waiting claim) only after its completion signal', {
  timeout: 120_000,
}, async () => {
  await withStack(
    'cleanup-ok',
    {
      hosts: 1,
      args: [
        '--image-catalog',
        cleanupCatalog(),
        '--cleanup-image',
        CLEANUP_IMAGE,
        '--cleanup-timeout',
        '20s',
      ],
    },
    async (s) => {
      const [srv] = await availableServers(s, 1);
      const name = srv!.metadata.name!;
      await bootTenant(s, 'tenant', name);
      // The next tenant waits for this very Server.
      await createClaim(s, 'next', { serverRef: name, power: 'Off' });
      const stop = await watchStates(s, name);
      await s.client.delete(Resources.ServerClaim, 'tenant', s.ns);

      // During the cleanup: the SBC of the cleanup image, the Server not claimable.
      const sbc = await eventually('cleanup SBC referenced by the Server', 20_000, async () => {
        const x = await getServer(s, name);
        const ref = x?.spec.bootConfigurationRef;
        if (x?.status?.state !== 'Cleaning' || !ref?.name.startsWith('cleanup-')) return undefined;
        return s.client.get<ServerBootConfiguration>(
          Resources.ServerBootConfiguration,
          ref.name,
          ref.namespace,
        );
      });
      assert.equal(sbc.spec.image, CLEANUP_IMAGE);
      assert.equal(sbc.metadata.labels?.['metal.ironcore.dev/boot-purpose'], 'cleanup');
      assert.equal(cond(await getClaim(s, 'next'), 'Bound')?.status, 'False', 'not bound while cleaning');

      // Available can last milliseconds (the waiting claim binds it at once): the watch above saw it.
      const cleaned = await eventually('Available after the cleanup', 30_000, async () => {
        const x = await getServer(s, name);
        return availableOrTakenBy(x, 'next') ? x : undefined;
      });
      const states = await stop(cleaned);
      // (Then Reserved again: the waiting claim binds it.)
      assert.deepEqual(
        states.slice(0, 3),
        ['Reserved', 'Cleaning', 'Available'],
        `Reserved → Cleaning → Available, never Available before the cleanup: ${states.join(' → ')}`,
      );
      const c = cond(cleaned, 'Cleaned');
      assert.equal(c?.status, 'True');
      assert.equal(c?.reason, 'CleanupCompleted');
      assert.match(c!.message, /test\/cleanup:1\.0 reported completion \(BootStateReceived\) in attempt 1/);
      assert.equal(cleaned.status?.cleanup?.attempt, 1);
      assert.ok(cleaned.status?.cleanup?.completedAt, 'status.cleanup.completedAt');
      assert.ok(cleaned.status?.cleanup?.poweredOnAt, 'the cleanup attempt was powered on');
      // Events are written after the status that they report: wait for them, then check.
      const reasons = await eventually('CleanupStarted and CleanupCompleted Events', 15_000, async () => {
        const r = (await eventsFor(s, 'Server', name, 'default')).map((e) => e.reason);
        return r.includes('CleanupStarted') && r.includes('CleanupCompleted') ? r : undefined;
      });
      assert.ok(!reasons.includes('Released'), 'no plain release to Available');
      // The power-off of the completed cleanup is told in the CleanupCompleted Event.
      const completed = (await eventsFor(s, 'Server', name, 'default')).find(
        (e) => e.reason === 'CleanupCompleted',
      );
      assert.match(completed!.message, /; Available, (powered off: ForceOff sent to the BMC|Off already)/);

      await eventually('the waiting claim binds the cleaned Server', 20_000, async () => {
        const n = await getClaim(s, 'next');
        return cond(n, 'Bound')?.status === 'True' && n?.spec.serverRef?.name === name;
      });
      assert.equal(
        await s.client.get(Resources.ServerBootConfiguration, sbc.metadata.name!, sbc.metadata.namespace),
        undefined,
        'the cleanup SBC is deleted',
      );
    },
  );
});

test('a cleanup that never reports: Error, unclaimable, reason in get servers; disabled + retry makes it Available', {
  timeout: 120_000,
}, async () => {
  await withStack(
    'cleanup-fail',
    {
      hosts: 1,
      args: [
        '--image-catalog',
        cleanupCatalog(),
        '--cleanup-image',
        SILENT_CLEANUP_IMAGE,
        '--cleanup-timeout',
        '2s',
        '--cleanup-max-attempts',
        '2',
      ],
    },
    async (s) => {
      const [srv] = await availableServers(s, 1);
      const name = srv!.metadata.name!;
      await bootTenant(s, 'tenant', name);
      await createClaim(s, 'next', { serverRef: name, power: 'Off' });
      await s.client.delete(Resources.ServerClaim, 'tenant', s.ns);

      const failed = await eventually('Error after the cleanup attempts', 40_000, async () => {
        const x = await getServer(s, name);
        return x?.status?.state === 'Error' ? x : undefined;
      });
      const c = cond(failed, 'Cleaned');
      assert.equal(c?.status, 'False');
      assert.equal(c?.reason, 'CleanupAttemptsExhausted');
      assert.match(c!.message, /cleanup attempt 2\/2 timed out after 2s/);
      assert.match(c!.message, /missing \[BootStateReceived\]/);
      assert.equal(failed.status?.cleanup?.attempt, 2);
      assert.ok(
        serverProblems(failed).includes('error:CleanupAttemptsExhausted'),
        serverProblems(failed).join(','),
      );
      // Events are written after the status that they report: wait for the Warning, then check.
      const ev = await eventually('a Warning CleanupAttemptsExhausted Event', 15_000, async () => {
        const e = await eventsFor(s, 'Server', name, 'default');
        return e.some((x) => x.type === 'Warning' && x.reason === 'CleanupAttemptsExhausted') ? e : undefined;
      });
      assert.ok(
        ev.some((e) => e.reason === 'CleanupTimedOut'),
        'attempt 1 timed out and was retried',
      );
      await eventually('powered off, cleanup SBC gone', 15_000, async () => {
        const x = await getServer(s, name);
        return x?.status?.powerState === 'Off' && !x.spec.bootConfigurationRef;
      });
      // Not handed to the next tenant: two more reconciles of its claim (they ran), then idle.
      await pokeClaim(s, 'next');
      assert.equal(cond(await getClaim(s, 'next'), 'Bound')?.status, 'False');
      assert.equal((await getServer(s, name))?.status?.state, 'Error');

      // The operator's way out: skip the cleanup for this Server and retry.
      await s.client.mergePatch(Resources.Server, name, undefined, {
        metadata: { annotations: { 'metal.ironcore.dev/operation': 'retry' } },
        spec: { automatedCleaningMode: 'disabled' },
      });
      const avail = await eventually('Available after disabled + retry', 20_000, async () => {
        const x = await getServer(s, name);
        return availableOrTakenBy(x, 'next') ? x : undefined;
      });
      assert.equal(cond(avail, 'Cleaned')?.reason, 'CleanupDisabled', 'says the disks were not erased');
      await eventually('the waiting claim binds', 20_000, async () => {
        return cond(await getClaim(s, 'next'), 'Bound')?.status === 'True';
      });
    },
  );
});

test('automatedCleaningMode disabled: Available right after release, no cleanup boot', {
  timeout: 90_000,
}, async () => {
  await withStack(
    'cleanup-off',
    {
      hosts: 1,
      args: ['--image-catalog', cleanupCatalog(), '--cleanup-image', CLEANUP_IMAGE],
    },
    async (s) => {
      const [srv] = await availableServers(s, 1);
      const name = srv!.metadata.name!;
      await s.client.mergePatch(Resources.Server, name, undefined, {
        spec: { automatedCleaningMode: 'disabled' },
      });
      await bootTenant(s, 'tenant', name);
      const stop = await watchStates(s, name);
      await s.client.delete(Resources.ServerClaim, 'tenant', s.ns);
      const released = await eventually('Available after release', 20_000, async () => {
        const x = await getServer(s, name);
        return x?.status?.state === 'Available' ? x : undefined;
      });
      const states = await stop(released);
      assert.ok(!states.includes('Cleaning'), `no Cleaning state: ${states.join(' → ')}`);
      const x = await getServer(s, name);
      assert.equal(cond(x, 'Cleaned'), undefined, 'no Cleaned condition when cleanup never ran');
      assert.equal(x?.status?.cleanup, undefined);
      const reasons = await eventually('a Released Event', 15_000, async () => {
        const r = (await eventsFor(s, 'Server', name, 'default')).map((e) => e.reason);
        return r.includes('Released') ? r : undefined;
      });
      assert.ok(!reasons.includes('CleanupStarted'), reasons.join(','));
    },
  );
});

test('a cleanup completion stored while the manager cannot see it, then the deadline: Available, no second boot', {
  timeout: 120_000,
}, async () => {
  // As deadline-fresh-read.test.ts for claims: the deadline is decided on the API server's objects.
  await withStack(
    'cleanup-held',
    {
      hosts: 1,
      pausableApi: true,
      args: [
        ...['--image-catalog', cleanupCatalog(), '--cleanup-image', SILENT_CLEANUP_IMAGE],
        ...['--cleanup-timeout', '10s', '--cleanup-max-attempts', '2'],
      ],
    },
    async (s) => {
      const [srv] = await availableServers(s, 1);
      const name = srv!.metadata.name!;
      const uuid = srv!.spec.systemUUID;
      await bootTenant(s, 'tenant', name);
      const resetsBefore = resetsSent(s, uuid).length;
      await s.client.delete(Resources.ServerClaim, 'tenant', s.ns);
      // The release powers off, then the cleanup powers on (its intent written before the BMC is asked).
      const cleaning = await eventually('cleanup attempt 1 powered on', 20_000, async () => {
        const x = await getServer(s, name);
        const c = x?.status?.cleanup;
        const on = resetsSent(s, uuid)
          .slice(resetsBefore)
          .some((t) => !/Off|Shutdown/.test(t));
        return on && x?.status?.state === 'Cleaning' && c?.poweredOnAt && c.deadline ? x : undefined;
      });
      const resetsAtPowerOn = resetsSent(s, uuid).length;
      const c = cleaning.status!.cleanup!;
      // Held past both deadlines: the netboot one applies when the script fetch came after the hold began.
      const first = Math.min(Date.parse(c.deadline!), Date.parse(c.netbootDeadline ?? c.deadline!));
      const deadline = Date.parse(c.deadline!);
      // The power-on's reconcile ends with the power state read back; a request of it still in flight
      // when the hold begins would keep the deadline's reconcile from running in the hold.
      await eventually('the power state read back', 10_000, async () => {
        return (await getServer(s, name))?.status?.powerState === 'On';
      });
      await sleep(1_000);
      assert.ok(Date.now() < first - 2_000, 'held before the deadline (too slow a machine?)');
      s.api!.pause();
      try {
        const ref = cleaning.spec.bootConfigurationRef!;
        const sbc = await s.client.get<ServerBootConfiguration>(
          Resources.ServerBootConfiguration,
          ref.name,
          ref.namespace,
        );
        await recordSignal(s.client, 'test', sbc!, {
          type: BootSignal.BootStateReceived,
          status: 'True',
          reason: 'Test',
          message: 'the cleanup image reported completion (written while the manager is held)',
        });
        await sleep(Math.max(0, deadline - Date.now() + 2_500));
      } finally {
        s.api!.resume();
      }
      const done = await eventually('Available after the cleanup', 20_000, async () => {
        const x = await getServer(s, name);
        return x?.status?.state === 'Available' ? x : undefined;
      });
      assert.equal(cond(done, 'Cleaned')?.status, 'True');
      assert.equal(done.status?.cleanup?.attempt, 1, 'attempt 1 completed, not a second attempt');
      await sleep(1_000);
      const powerOns = resetsSent(s, uuid)
        .slice(resetsAtPowerOn)
        .filter((t) => !/Off|Shutdown/.test(t));
      assert.deepEqual(
        powerOns,
        [],
        'no power-on or cycle after the held time (the power-off of Available only)',
      );
      const averted = await managerMetric(
        s,
        'metal_boot_deadline_rechecks_total',
        'flow="cleanup"',
        'result="averted"',
      );
      assert.ok(
        averted >= 1,
        `the held deadline step was averted by the fresh Server and SBC (averted: ${averted})`,
      );
    },
  );
});
