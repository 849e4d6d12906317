/**
 * UKI prebuilds (issue 35, src/bootserver/uki-prebuild.ts), against the real API server with the
 * signal servers in-process and real objcopy builds:
 * - which SBCs qualify (pure table: Ready, HTTP boot, not provisioned, not being deleted);
 * - an HTTP-boot SBC turning Ready has its UKI built before any request (`metal_uki_builds_total`
 *   moved with no request made), a PXE SBC seeded before it got none, and the first HEAD and GET
 *   are served from the prebuilt file (no build on request; HEAD tells the file's size);
 * - an attempt change discards the old attempt's file (its token) and prebuilds the new one; the
 *   SBC's deletion discards that one too;
 * - a request while the prebuild runs (objcopy delayed by a second) joins it: one build; beyond
 *   `maxHeld` an SBC is not prebuilt (`bound`), left to the request.
 * Client addresses are distinct loopback addresses (127.0.0.0/8 is all local on Linux).
 */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { Registry } from 'prom-client';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import { ukiInputFor } from '../../src/bootserver/http-boot.js';
import { DEFAULT_EFI_STUB, UkiBuilder } from '../../src/bootserver/uki.js';
import { prebuildAttempt, UkiPrebuilder } from '../../src/bootserver/uki-prebuild.js';
import { BootTargetResolver } from '../../src/bootsignals/boot-target.js';
import { newLogger } from '../../src/runtime/logger.js';
import { Resources } from '../../src/runtime/resource.js';
import {
  getFrom,
  nextAttempt,
  type SignalStackFixture,
  seedBootTarget,
  testCatalog,
  testToken,
  useSignalStack,
  waitCached,
} from '../bootsignals/fixture.js';
import { waitFor } from '../harness/control-plane.js';

let fx: SignalStackFixture;
const net = `127.${randomInt(100, 250)}`;
const noStub = !existsSync(DEFAULT_EFI_STUB) && 'systemd-boot-efi not installed';

const sbcOf = (over: Record<string, unknown>, status: Record<string, unknown> = {}) =>
  ({
    metadata: { name: 's', namespace: 'n', uid: 'u1', generation: 2, ...over },
    spec: { serverRef: { name: 's' }, image: 'x', bootAttempt: 2, bootMethod: 'HTTPBoot', ...over },
    status: { state: 'Ready', attemptGeneration: 2, ...status },
  }) as unknown as ServerBootConfiguration;

describe('UKI prebuild: which SBCs qualify', () => {
  it('only a Ready HTTP-boot SBC that is not provisioned or being deleted, for its current attempt', () => {
    const completed = {
      conditions: [
        { type: 'BootCompleted', status: 'True', observedGeneration: 2, reason: 'x', message: 'x' },
      ],
    };
    const rows: [string, ServerBootConfiguration, string][] = [
      ['ready HTTP boot', sbcOf({}), 'u1/2'],
      ['PXE', sbcOf({ bootMethod: 'PXE' }), 'not HTTP boot'],
      ['no method (PXE)', sbcOf({ bootMethod: undefined }), 'not HTTP boot'],
      ['pending', sbcOf({}, { state: 'Pending' }), 'state Pending'],
      ['no status', { ...sbcOf({}), status: undefined } as ServerBootConfiguration, 'state Pending'],
      ['NetBootOnce completed', sbcOf({ bootPolicy: 'NetBootOnce' }, completed), 'provisioned (NetBootOnce)'],
      ['NetBootAlways completed', sbcOf({ bootPolicy: 'NetBootAlways' }, completed), 'u1/2'],
      ['being deleted', sbcOf({ deletionTimestamp: '2026-01-01T00:00:00Z' }), 'deleting'],
    ];
    for (const [what, sbc, want] of rows) {
      const got = prebuildAttempt(sbc);
      assert.equal('attempt' in got ? got.attempt : got.skip, want, what);
    }
  });
});

describe('UKI prebuild against the API server', () => {
  fx = useSignalStack('ukipre');

  const metric = async (name: string, labels: Record<string, string> = {}) =>
    ((await fx.stack.metrics.getSingleMetric(name)?.get())?.values ?? [])
      .filter((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))
      .reduce((n, v) => n + v.value, 0);

  it('an SBC turning Ready for HTTP boot has its UKI built before the first request, which is served from it', {
    skip: noStub,
  }, async () => {
    const builds0 = await metric('metal_uki_builds_total');
    const built0 = await metric('metal_uki_prebuilds_total', { result: 'built' });
    // PXE first: prebuilds run one at a time in event order, so had it been queued it would count.
    const pxe = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim' });
    const s = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim', bootMethod: 'HTTPBoot' });
    await Promise.all([waitCached(fx.stack, pxe), waitCached(fx.stack, s)]);
    await waitFor(
      'the prebuild',
      15_000,
      async () => (await metric('metal_uki_prebuilds_total', { result: 'built' })) > built0,
    );
    assert.equal(
      (await metric('metal_uki_builds_total')) - builds0,
      1,
      'one build, for the HTTP-boot SBC, before any request',
    );
    assert.equal(await metric('metal_uki_prebuilds_held'), 1);
    const url = `${fx.stack.bootUrl}/httpboot/${s.uuid}/1/uki.efi`;
    // As OVMF does: HEAD for the size first (the headers alone, the file is not read), then GET.
    const head = await getFrom(url, `${net}.1.2`, {}, 'HEAD');
    assert.equal(head.status, 200, head.text);
    assert.equal(head.text, '');
    const res = await getFrom(url, `${net}.1.2`);
    assert.equal(res.status, 200, res.text.slice(0, 200));
    assert.equal(Buffer.byteLength(res.text, 'latin1') > 0, true);
    assert.equal(
      Number(head.headers['content-length']),
      Number(res.headers['content-length']),
      'HEAD tells the size',
    );
    assert.equal(res.text.slice(0, 2), 'MZ');
    assert.ok(res.text.includes(`metal.token=${s.token}`), 'the attempt token in the command line');
    assert.equal((await metric('metal_uki_builds_total')) - builds0, 1, 'the first request built nothing');
    assert.equal(await metric('metal_uki_prebuilds_held'), 0, 'served: no longer held');
  });

  /** A prebuilder of its own over the stack's caches, with its own builder (objcopy `objcopy`). */
  const ownPrebuilder = (opts: { objcopy?: string; maxHeld?: number } = {}) => {
    const { sources } = fx.stack;
    const uki = new UkiBuilder({ objcopy: opts.objcopy });
    const resolver = new BootTargetResolver(sources);
    const catalog = testCatalog();
    const inputs = {
      catalog: () => catalog,
      baseUrl: () => 'http://127.0.0.1:1',
      registryUrl: 'http://127.0.0.1:2',
    };
    const metrics = new Registry();
    const inputFor = (sbc: ServerBootConfiguration, uuid: string, token: string) =>
      ukiInputFor(inputs, sbc, uuid, token);
    const pre = new UkiPrebuilder(
      {
        sbcs: sources.sbcs,
        servers: sources.servers,
        uki,
        token: (sbc, uuid, server) => resolver.targetFor(uuid, server, sbc).callback?.token,
        inputFor,
        log: newLogger('test-prebuild', { level: process.env.LOG_LEVEL ?? 'warn' }),
        metrics,
      },
      { maxHeld: opts.maxHeld },
    );
    return { pre, uki, resolver, inputFor, metrics };
  };

  it("an attempt change discards the old attempt's prebuilt UKI and prebuilds the new one; deletion discards it", {
    skip: noStub,
  }, async () => {
    const { sources } = fx.stack;
    const { pre, uki } = ownPrebuilder();
    pre.start();
    try {
      const s = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim', bootMethod: 'HTTPBoot' });
      const sbc = () => sources.sbcs.get(s.sbc.metadata.name!, s.sbc.metadata.namespace)!;
      const heldFor = (attempt: number) => {
        const st = sbc() && pre.stateOf(sbc());
        return st?.state === 'held' && st.attempt.endsWith(`/${attempt}`) ? st.path : undefined;
      };
      await waitFor('attempt 1 prebuilt', 15_000, () => !!heldFor(1));
      const first = heldFor(1)!;
      assert.ok(readFileSync(first).includes(`metal.token=${s.token}`));
      const next = await nextAttempt(fx.client, s);
      await waitFor('attempt 2 prebuilt', 15_000, () => !!heldFor(2));
      const second = heldFor(2)!;
      assert.notEqual(second, first);
      await waitFor("attempt 1's file removed", 5_000, () => !existsSync(first));
      const text = readFileSync(second);
      assert.ok(text.includes(`metal.token=${next.token}`), "attempt 2's token");
      assert.ok(!text.includes(`metal.token=${s.token}`));
      assert.equal(next.token, testToken(sbc()));
      await fx.client.delete(
        Resources.ServerBootConfiguration,
        s.sbc.metadata.name!,
        s.sbc.metadata.namespace,
      );
      await waitFor('deleted: its file removed', 10_000, () => !existsSync(second));
      assert.equal(pre.stateOf(s.sbc), undefined);
      assert.equal(uki.bytes(), 0, 'nothing kept');
    } finally {
      pre.close();
      uki.close();
    }
  });

  it('a request during the prebuild waits for it: one build; beyond maxHeld an SBC is left to the request', {
    skip: noStub,
  }, async () => {
    const { sources } = fx.stack;
    // Real objcopy, a second late: the prebuild is still running when the "request" comes.
    const dir = mkdtempSync(join(tmpdir(), 'uki-slow-'));
    const slow = join(dir, 'objcopy');
    writeFileSync(slow, '#!/bin/sh\nsleep 1\nexec objcopy "$@"\n', { mode: 0o755 });
    const { pre, uki, resolver, inputFor, metrics } = ownPrebuilder({ objcopy: slow, maxHeld: 1 });
    pre.start();
    try {
      const a = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim', bootMethod: 'HTTPBoot' });
      await waitCached(fx.stack, a);
      const sbcA = sources.sbcs.get(a.sbc.metadata.name!, a.sbc.metadata.namespace)!;
      await waitFor('the prebuild running', 10_000, () => pre.stateOf(sbcA)?.state === 'building');
      const target = resolver.targetFor(a.uuid, sources.servers.get(a.server.metadata.name!)!, sbcA);
      const { input } = await inputFor(sbcA, a.uuid, target.callback!.token);
      assert.equal(uki.state(input), 'building', 'the request comes while the prebuild runs');
      const lease = await uki.lease(input); // what the route does
      lease.release();
      assert.equal(uki.builds, 1, 'the request joined the prebuild');
      assert.equal(pre.stateOf(sbcA)?.state, 'held');
      assert.equal(pre.stateOf(sbcA)?.path, lease.path);

      const b = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim', bootMethod: 'HTTPBoot' });
      await waitCached(fx.stack, b);
      const bound = async () =>
        ((await metrics.getSingleMetric('metal_uki_prebuilds_total')?.get())?.values ?? [])
          .filter((v) => v.labels.result === 'bound')
          .reduce((n, v) => n + v.value, 0);
      await waitFor('the held bound refusing B', 10_000, async () => (await bound()) >= 1);
      assert.equal(uki.builds, 1, 'nothing built for B');
      assert.equal(pre.stateOf(sources.sbcs.get(b.sbc.metadata.name!, b.sbc.metadata.namespace)!), undefined);
    } finally {
      pre.close();
      uki.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
