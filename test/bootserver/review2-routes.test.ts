/**
 * Second security review (issue 29), boot-server route items, against the real API server with the
 * signal servers in-process. Each test is named after its item:
 * - N2: an HTTP-boot attempt's token is not served by `/ipxe/{uuid}` (to any address), and the
 *   first-address pin spans both routes.
 * - N4: 100 unauthenticated `/ipxe` GETs cost a bounded number of live API reads (owner reads
 *   budgeted per owner, refreshes paced per SBC), and an address asking for unknown servers is
 *   throttled (429 after its 404 budget).
 * - N16: `/ipxe` answers an unknown UUID as it answers a known server without boot configuration.
 * - N7: a burst of HTTP-boot requests needing 40 distinct UKIs gets complete files or 503 +
 *   `Retry-After`, never a 500 for a file deleted before it was sent (UKI prebuilds off in this
 *   suite, so every UKI is built on request; prebuilds: uki-prebuild.test.ts).
 * Client addresses are distinct loopback addresses (127.0.0.0/8 is all local on Linux).
 */
import assert from 'node:assert/strict';
import { randomInt, randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import { notPinnedElsewhere } from '../../src/bootserver/attempt-pin.js';
import { DEFAULT_EFI_STUB, UkiBuilder } from '../../src/bootserver/uki.js';
import { Resources } from '../../src/runtime/resource.js';
import {
  getFrom,
  type SignalStackFixture,
  seedBootTarget,
  useSignalStack,
  waitCached,
} from '../bootsignals/fixture.js';

let fx: SignalStackFixture;
const net = `127.${randomInt(100, 250)}`;

const reasonOf = (text: string) => {
  try {
    return (JSON.parse(text) as { reason?: string }).reason;
  } catch {
    return undefined;
  }
};

describe('second security review: boot-server routes', () => {
  // No prebuilds: N7 is about the request path's build bound, which prebuilt files would bypass.
  fx = useSignalStack('review2', { prebuildUki: false });

  it('N2: an HTTP-boot attempt pinned to one address gives its token to no other address by /ipxe', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim', bootMethod: 'HTTPBoot' });
    await waitCached(fx.stack, s);
    const [first, other] = [`${net}.1.2`, `${net}.1.3`];
    const uki = await getFrom(`${fx.stack.bootUrl}/httpboot/${s.uuid}/1/uki.efi`, first);
    assert.equal(uki.status, 200, uki.text.slice(0, 200));
    for (const from of [other, first]) {
      const script = await getFrom(`${fx.stack.bootUrl}/ipxe/${s.uuid}`, from);
      assert.ok(!script.text.includes(s.token), `no token by /ipxe from ${from}: ${script.status}`);
      assert.equal(script.status, 409, script.text);
      assert.equal(reasonOf(script.text), 'NotPXEBoot');
    }
  });

  it('N2: the pin spans both routes (either fetch condition excludes other clients from both)', () => {
    const log = pino({ level: 'silent' });
    const pinned = (type: string) =>
      ({
        metadata: { name: 's', namespace: 'n', generation: 1 },
        spec: { bootAttempt: 1 },
        status: {
          attemptGeneration: 1,
          conditions: [
            {
              type,
              status: 'True',
              observedGeneration: 1,
              reason: 'x',
              message: 'x for attempt 1 served to 10.0.0.1',
            },
          ],
        },
      }) as unknown as ServerBootConfiguration;
    for (const [by, other] of [
      ['IPXEScriptFetched', 'HTTPBootFileFetched'],
      ['HTTPBootFileFetched', 'IPXEScriptFetched'],
    ] as const) {
      assert.throws(
        () => notPinnedElsewhere(other, '10.0.0.2', log)(pinned(by)),
        /already served/,
        `${by} pins ${other}`,
      );
      notPinnedElsewhere(other, '10.0.0.1', log)(pinned(by));
    }
  });

  it('N7: 40 concurrent HTTP boots of distinct UKIs: complete files or 503 + Retry-After, never 500', async () => {
    const seeded = await Promise.all(
      Array.from({ length: 40 }, () =>
        seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim', bootMethod: 'HTTPBoot' }),
      ),
    );
    await Promise.all(seeded.map((s) => waitCached(fx.stack, s)));
    const answers = await Promise.all(
      seeded.map((s, i) => getFrom(`${fx.stack.bootUrl}/httpboot/${s.uuid}/1/uki.efi`, `${net}.7.${i + 2}`)),
    );
    const statuses = answers.map((a) => a.status);
    assert.deepEqual(
      statuses.filter((x) => x !== 200 && x !== 503),
      [],
      `statuses: ${statuses.join(',')}; ${answers.find((a) => a.status !== 200 && a.status !== 503)?.text.slice(0, 200)}`,
    );
    for (const a of answers) {
      if (a.status === 503) {
        assert.equal(reasonOf(a.text), 'BootFileBusy', a.text);
        assert.ok(Number(a.headers['retry-after']) > 0);
      } else {
        assert.equal(Buffer.byteLength(a.text, 'latin1') > 0, true);
        assert.equal(a.text.slice(0, 2), 'MZ', 'a complete PE file');
      }
    }
    assert.ok(
      statuses.includes(503),
      `40 distinct builds at once exceed the build bound (2 running + 8 queued): ${statuses.join(',')}`,
    );
    assert.ok(statuses.filter((x) => x === 200).length >= 2, `some are built: ${statuses.join(',')}`);
  });

  it('N7: of 40 concurrent UKI builds none returns a file that is already gone', {
    skip: !existsSync(DEFAULT_EFI_STUB) && 'systemd-boot-efi not installed',
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'uki-n7-'));
    const kernel = join(dir, 'vmlinuz');
    const initrd = join(dir, 'initrd');
    writeFileSync(kernel, Buffer.alloc(256 * 1024, 1));
    writeFileSync(initrd, Buffer.alloc(16 * 1024, 2));
    const b = new UkiBuilder();
    try {
      const got = await Promise.allSettled(
        Array.from({ length: 40 }, (_, i) => b.get({ kernel, initrd, cmdline: `metal.token=t${i}` })),
      );
      const files = got.flatMap((g) => (g.status === 'fulfilled' ? [g.value] : []));
      const gone = files.filter((f) => !existsSync(f));
      assert.deepEqual(gone, [], `${gone.length} of ${files.length} returned files already deleted`);
      for (const g of got)
        if (g.status === 'rejected') assert.equal((g.reason as Error).constructor.name, 'UkiBusy');
      // A lease keeps its file however many builds follow; released files go by LRU.
      const small = new UkiBuilder({ maxEntries: 2 });
      try {
        const held = await small.lease({ kernel, initrd, cmdline: 'held' });
        for (let i = 0; i < 4; i++) await small.get({ kernel, initrd, cmdline: `later${i}` });
        assert.ok(existsSync(held.path), 'the leased file is kept');
        held.release();
        await small.get({ kernel, initrd, cmdline: 'after' });
        for (let i = 0; i < 50 && existsSync(held.path); i++) await new Promise((ok) => setTimeout(ok, 20));
        assert.ok(!existsSync(held.path), 'released, it is evicted (the removal is asynchronous)');
      } finally {
        small.close();
      }
    } finally {
      b.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  /** Live GETs the signal servers sent to the API server so far. */
  const apiGets = async () =>
    ((await fx.stack.metrics.getSingleMetric('metal_api_requests_total')?.get())?.values ?? [])
      .filter((v) => v.labels.verb === 'get')
      .reduce((n, v) => n + v.value, 0);

  it('N4: 100 GETs of /ipxe cost a bounded number of API reads; unknown UUIDs are throttled', async () => {
    // (a) The power-on is not recorded: every GET used to read the claim.
    const waiting = await seedBootTarget(fx.client, fx.namespace.name, {
      flow: 'claim',
      powerOnRecorded: false,
    });
    await waitCached(fx.stack, waiting);
    for (const [s, reason, from] of [[waiting, 'AwaitingPowerOn', `${net}.8.2`]] as const) {
      const before = await apiGets();
      const t0 = Date.now();
      for (let i = 0; i < 100; i++) {
        const r = await getFrom(`${fx.stack.bootUrl}/ipxe/${s.uuid}`, from);
        assert.equal(r.status, 503, r.text);
        assert.equal(reasonOf(r.text), reason);
      }
      const reads = (await apiGets()) - before;
      const seconds = Math.ceil((Date.now() - t0) / 1000);
      assert.ok(reads <= 6 + 3 * seconds, `${reason}: 100 GETs in ${seconds} s cost ${reads} API reads`);
    }
    // (c) Unknown UUIDs from one address: answered (local boot, N16), then 429 once its budget is spent.
    const from = `${net}.8.4`;
    const statuses: number[] = [];
    for (let i = 0; i < 80; i++)
      statuses.push((await getFrom(`${fx.stack.bootUrl}/ipxe/${randomUUID()}`, from)).status);
    assert.equal(statuses[0], 200);
    assert.ok(statuses.includes(429), `statuses: ${[...new Set(statuses)].join(',')}`);
  });

  it('N16: /ipxe does not tell which UUIDs exist', async () => {
    const known = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim' });
    await waitCached(fx.stack, known);
    // A known Server whose boot configuration is gone (no attempt in progress: local boot).
    await fx.client.mergePatch(Resources.Server, known.server.metadata.name!, undefined, {
      spec: { bootConfigurationRef: null },
    });
    for (
      let i = 0;
      i < 100 && fx.stack.sources.servers.get(known.server.metadata.name!)?.spec.bootConfigurationRef;
      i++
    )
      await new Promise((ok) => setTimeout(ok, 50));
    const a = await getFrom(`${fx.stack.bootUrl}/ipxe/${known.uuid}`, `${net}.9.2`);
    const b = await getFrom(`${fx.stack.bootUrl}/ipxe/${randomUUID()}`, `${net}.9.2`);
    assert.equal(a.status, 200, a.text);
    assert.deepEqual([b.status, b.text], [a.status, a.text], 'the same answer for an unknown UUID');
  });
});
