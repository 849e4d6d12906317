/**
 * Boot-flow cases C04 (driven by the claim controller), C05–C09 (../shared/cases/boot-flow-cases.md) against the real API server, the
 * in-process registry and boot server, and simulated hosts behind the virtual BMC.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { OPERATION_ANNOTATION } from '../../src/api/v1alpha1/boot-policy.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { attemptSignals } from '../../src/controllers/common/boot-configuration.js';
import { Resources, type SecretObject } from '../../src/runtime/resource.js';
import { managerCallbackKey } from '../harness/callback-token.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  b64,
  cond,
  createClaim,
  currentToken,
  eventsFor,
  eventually,
  getClaim,
  getSbc,
  hostOf,
  MISSING_IMAGE,
  OS_IMAGE,
  overrides,
  overridesSent,
  pokeClaim,
  pokeServer,
  reconciles,
  resets,
  resetsSent,
  setSimFaults,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));

test('C04 (claim controller): Off then On starts attempt 2 with token B in script and ignition; A gets 409, a made-up token 401', {
  timeout: 60_000,
}, async () => {
  // A deadline no loaded machine reaches: a timed-out attempt 2 would be retried as attempt 3 with
  // token C, and this case is about the rotation on Off → On, not about retries (C08 is).
  await withStack('c04', { hosts: 1, args: ['--boot-timeout', '60s'] }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const uuid = srv!.spec.systemUUID;
    const boot = s.op!.bootServerUrl;
    const registry = s.op!.registryUrl;
    await createClaim(s, 'c04', { serverRef: srv!.metadata.name!, bootPolicy: 'NetBootAlways' });
    await eventually(
      'attempt 1 Booted',
      15_000,
      async () => cond(await getClaim(s, 'c04'), 'Booted')?.status === 'True',
    );
    const callback = async () => (await currentToken(s, 'c04'))!;
    const a = await callback();
    const sbcA = (await getSbc(s, 'c04'))!;
    assert.equal(a.attempt, sbcA.spec.bootAttempt);
    // Attempt 1's ignition carries token A.
    const ignA = await fetch(`${boot}/ignition/${uuid}?token=${encodeURIComponent(a.token)}`);
    assert.equal(ignA.status, 200);
    assert.ok(
      (await ignA.text()).includes(encodeURIComponent(`METAL_TOKEN=${a.token}`)),
      'ignition carries token A',
    );

    // Power Off, then On: the claim controller starts the next attempt and rotates the token.
    const host = hostOf(s, srv!);
    await s.client.mergePatch(Resources.ServerClaim, 'c04', s.ns, { spec: { power: 'Off' } });
    await eventually('host off', 10_000, () => host.powerState() === 'Off');
    await s.client.mergePatch(Resources.ServerClaim, 'c04', s.ns, { spec: { power: 'On' } });
    const b = await eventually('attempt 2 with a new token', 15_000, async () => {
      const d = await callback();
      const sbc = await getSbc(s, 'c04');
      return d.attempt > a.attempt && sbc?.spec.bootAttempt === d.attempt ? d : undefined;
    });
    assert.notEqual(b.token, a.token);
    await eventually(
      'attempt 2 Booted',
      15_000,
      async () => cond(await getClaim(s, 'c04'), 'Booted')?.status === 'True',
    );
    const script = await (await fetch(`${boot}/ipxe/${uuid}`)).text();
    assert.match(script, new RegExp(`metal.token=${b.token}`), 'the script carries token B');
    assert.doesNotMatch(script, new RegExp(a.token));
    const ignB = await fetch(`${boot}/ignition/${uuid}?token=${encodeURIComponent(b.token)}`);
    assert.equal(ignB.status, 200);
    const ignBText = await ignB.text();
    assert.ok(ignBText.includes(encodeURIComponent(`METAL_TOKEN=${b.token}`)), 'ignition carries token B');
    assert.ok(!ignBText.includes(a.token), 'and not token A');
    assert.equal((await fetch(`${boot}/ignition/${uuid}?token=${encodeURIComponent(a.token)}`)).status, 409);
    const post = (token: string) =>
      fetch(`${registry}/bootstate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({ systemUUID: uuid, booted: true }),
      }).then((r) => r.status);
    assert.equal(await post(a.token), 409, 'token A after the rotation');
    assert.equal(await post('made-up'), 401);
    assert.equal(await post(b.token), 200, 'token B');
    // One Event per step, on the object its reader looks at (issue 17): the first series is told
    // by Bound and its attempt; the power-on of each attempt only on the claim, not on the Server.
    const claimEvents = await eventsFor(s, 'ServerClaim', 'c04');
    const series = claimEvents.filter((e) => e.reason === 'BootSeriesStarted');
    assert.equal(series.length, 1, 'only the second series (power on) has a BootSeriesStarted');
    assert.match(series[0]!.message, /^series 2 \(power on/);
    // A fresh claim's opening attempt is told once, by the Event that ends it: binding, power-on
    // and outcome; no Bound Event and no BootAttemptStarted of its own.
    assert.deepEqual(
      claimEvents.filter((e) => e.reason === 'Bound'),
      [],
    );
    const completed = claimEvents.filter((e) => e.reason === 'BootCompleted');
    assert.match(
      completed[0]!.message,
      new RegExp(
        `^bound Server ${srv!.metadata.name}; powered on \\d{4}-\\d\\d-\\d\\dT[^;]+; attempt 1/3 completed \\(`,
      ),
    );
    const started = claimEvents.filter((e) => e.reason === 'BootAttemptStarted');
    assert.equal(started.length, 1, `only the later series' attempt has one: ${JSON.stringify(started)}`);
    assert.match(started[0]!.message, /^attempt 2 \(1\/3 of series 2\): power action/);
    assert.doesNotMatch(started[0]!.message, /bound Server/, 'the later series says no binding');
    // The claim's SBC became Ready for both attempts: no Event of its own (the claim's Events tell it).
    const sbcEvents = await eventsFor(s, 'ServerBootConfiguration', 'c04');
    assert.deepEqual(
      sbcEvents.filter((e) => e.type === 'Normal'),
      [],
      'no Normal Event on the claim-owned SBC',
    );
    const serverEvents = await eventsFor(s, 'Server', srv!.metadata.name!, 'default');
    // The discovery's power-on is told by its Discovered Event; the claim's by the claim's Events.
    assert.deepEqual(
      serverEvents.filter((e) => e.reason === 'BootStarted'),
      [],
      'no BootStarted on the Server for discovery attempt 1 or the claim',
    );
    assert.match(
      serverEvents.find((e) => e.reason === 'Discovered')?.message ?? '',
      /^registration received in attempt 1 \(\d+\.\d s after power-on\)/,
    );
  });
});

test('C05: no power-on and no boot override before the boot configuration is Ready', {
  timeout: 60_000,
}, async () => {
  await withStack('c05', { hosts: 2 }, async (s) => {
    const [srv] = await availableServers(s, 2);
    const uuid = srv!.spec.systemUUID;
    const before = { resets: resetsSent(s, uuid).length, overrides: overridesSent(s, uuid).length };
    await createClaim(s, 'c05', { serverRef: srv!.metadata.name!, image: MISSING_IMAGE, power: 'On' });
    const sbc = await eventually('SBC in Error', 10_000, async () => {
      const b = await getSbc(s, 'c05');
      return b?.status?.state === 'Error' ? b : undefined;
    });
    assert.equal(cond(sbc, 'Ready')?.reason, 'ImageNotFound');
    const claim = await eventually('claim shows why', 10_000, async () => {
      const c = await getClaim(s, 'c05');
      return cond(c, 'BootConfigurationReady')?.reason === 'ImageNotFound' && cond(c, 'Booted')
        ? c
        : undefined;
    });
    assert.equal(cond(claim, 'BootConfigurationReady')?.status, 'False');
    assert.match(cond(claim, 'BootConfigurationReady')!.message, /does-not-exist/);
    assert.equal(cond(claim, 'Booted')?.status, 'False');
    assert.match(cond(claim, 'Booted')!.message, /waiting for the boot configuration \(ImageNotFound/);
    // Longer than the boot timeout (2 s): no deadline runs, nothing reaches the BMC; and the claim
    // controller reconciled the claim in that time (two more reconciles, then idle).
    await sleep(2_500);
    await pokeClaim(s, 'c05');
    assert.deepEqual(resetsSent(s, uuid).slice(before.resets), [], 'no power action');
    assert.deepEqual(overridesSent(s, uuid).slice(before.overrides), [], 'no boot override');
    const later = await getClaim(s, 'c05');
    assert.equal(later?.status?.boot?.poweredOnAt, undefined);
    assert.equal(later?.status?.boot?.deadline, undefined);
    assert.equal(hostOf(s, srv!).powerState(), 'Off');

    // Fixing the image makes it Ready; only then the server is powered on, and it boots.
    await s.client.mergePatch(Resources.ServerClaim, 'c05', s.ns, { spec: { image: OS_IMAGE } });
    await eventually(
      'Booted after the fix',
      15_000,
      async () => cond(await getClaim(s, 'c05'), 'Booted')?.status === 'True',
    );
    // The positive control of the window above: the same claim, once Ready, did reach the BMC
    // (the power-on and the boot override both).
    assert.deepEqual(resetsSent(s, uuid).slice(before.resets), ['On']);
    assert.ok(overridesSent(s, uuid).length > before.overrides, 'a boot override once Ready');

    // The same class of fault from the ignition side: a Butane config the official translator rejects.
    const other = s.vbmc.systems.find((x) => x.id !== uuid)!;
    const mark = { resets: resetsSent(s, other.id).length, overrides: overridesSent(s, other.id).length };
    await s.client.create<SecretObject>(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'butane', namespace: s.ns },
      data: {
        format: b64('fcos'),
        ignition: b64('variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: etc/relative\n'),
      },
    });
    await createClaim(s, 'c05-butane', { serverRef: `${s.bmcName}-${other.id}`, ignition: 'butane' });
    const bad = await eventually('InvalidButane on the claim', 10_000, async () => {
      const c = cond(await getClaim(s, 'c05-butane'), 'BootConfigurationReady');
      return c?.reason === 'InvalidButane' ? c : undefined;
    });
    assert.match(bad.message, /path not absolute/);
    // As long as the first sub-case's window (beyond the 2 s boot timeout): no reset, no override.
    await sleep(2_500);
    await pokeClaim(s, 'c05-butane');
    assert.deepEqual(resetsSent(s, other.id).slice(mark.resets), [], 'no power action');
    assert.deepEqual(overridesSent(s, other.id).slice(mark.overrides), [], 'no boot override');
    // Positive control of this window: the same claim with a Butane config the translator accepts
    // reaches the BMC with both, so the two checks above could have seen them.
    await s.client.create<SecretObject>(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'butane-ok', namespace: s.ns },
      data: { format: b64('fcos'), ignition: b64('variant: fcos\nversion: 1.5.0\n') },
    });
    await s.client.mergePatch(Resources.ServerClaim, 'c05-butane', s.ns, {
      spec: { ignitionSecretRef: { name: 'butane-ok' } },
    });
    await eventually('the fixed Butane claim reaches the BMC', 15_000, () => {
      const sent = {
        resets: resetsSent(s, other.id).slice(mark.resets),
        overrides: overridesSent(s, other.id),
      };
      return sent.resets.includes('On') && sent.overrides.length > mark.overrides;
    });
  });
});

test('C06: NetBootOnce survives power cycles; NetBootAlways network-boots again', {
  timeout: 60_000,
}, async () => {
  await withStack('c06', { hosts: 2 }, async (s) => {
    const [a, b] = await availableServers(s, 2);
    await createClaim(s, 'once', { serverRef: a!.metadata.name!, bootPolicy: 'NetBootOnce' });
    await createClaim(s, 'always', { serverRef: b!.metadata.name!, bootPolicy: 'NetBootAlways' });
    await eventually('both Booted', 20_000, async () => {
      const [o, al] = [await getClaim(s, 'once'), await getClaim(s, 'always')];
      return cond(o, 'Booted')?.status === 'True' && cond(al, 'Booted')?.status === 'True';
    });
    const onceSbc = await eventually('BootCompleted on the NetBootOnce SBC', 5_000, async () => {
      const x = await getSbc(s, 'once');
      return x && attemptSignals(x, ['BootCompleted']).missing.length === 0 ? x : undefined;
    });
    const alwaysSbc = (await getSbc(s, 'always'))!;
    const hostA = hostOf(s, a!);
    const hostB = hostOf(s, b!);
    const mark = {
      aOverrides: overrides(s, a!.spec.systemUUID).length,
      bOverrides: overrides(s, b!.spec.systemUUID).length,
      bResets: resets(s, b!.spec.systemUUID).length,
      aResets: resets(s, a!.spec.systemUUID).length,
      aBoots: hostA.bootCount,
      bBoots: hostB.bootCount,
    };

    for (const n of ['once', 'always'])
      await s.client.mergePatch(Resources.ServerClaim, n, s.ns, { spec: { power: 'Off' } });
    await eventually(
      'both hosts off',
      10_000,
      () => hostA.powerState() === 'Off' && hostB.powerState() === 'Off',
    );
    for (const n of ['once', 'always'])
      await s.client.mergePatch(Resources.ServerClaim, n, s.ns, { spec: { power: 'On' } });

    // NetBootOnce: on again, from disk, without an override; the boot server would say "local boot".
    await eventually(
      'NetBootOnce host booted again',
      10_000,
      () => hostA.bootCount > mark.aBoots && hostA.lastBoot?.phase === 'up',
    );
    assert.equal(hostA.lastBoot?.source, 'disk');
    assert.equal(hostA.lastBoot?.device, 'None');
    assert.deepEqual(overrides(s, a!.spec.systemUUID).slice(mark.aOverrides), [], 'no network-boot override');
    assert.deepEqual(resets(s, a!.spec.systemUUID).slice(mark.aResets), ['ForceOff', 'On']);
    const script = await (await fetch(`${s.op!.bootServerUrl}/ipxe/${a!.spec.systemUUID}`)).text();
    assert.match(script, /^exit$/m);
    assert.doesNotMatch(script, /kernel/);
    const onceAfter = (await getSbc(s, 'once'))!;
    assert.equal(onceAfter.spec.bootAttempt, onceSbc.spec.bootAttempt, 'no new attempt');
    assert.equal(cond(await getClaim(s, 'once'), 'Booted')?.status, 'True');

    // NetBootAlways: the override is set again and the image boots again, tracked as a new attempt.
    await eventually(
      'NetBootAlways host network-booted again',
      10_000,
      () => hostB.bootCount > mark.bBoots && hostB.lastBoot?.source === 'network',
    );
    assert.deepEqual(
      resets(s, b!.spec.systemUUID).slice(mark.bResets),
      ['ForceOff', 'On'],
      'plain power-on with the override, no retry',
    );
    const bOverrides = overrides(s, b!.spec.systemUUID).slice(mark.bOverrides);
    // The persistent (Continuous) override of NetBootAlways still holds from the first boot: at most
    // one re-assertion, never a Once override; the host network-booted (above).
    assert.ok(bOverrides.length <= 1, JSON.stringify(bOverrides));
    for (const o of bOverrides) assert.equal(o.BootSourceOverrideEnabled, 'Continuous');
    await eventually('NetBootAlways claim Booted again for a new attempt', 10_000, async () => {
      const x = await getSbc(s, 'always');
      return (
        (x?.spec.bootAttempt ?? 0) > (alwaysSbc.spec.bootAttempt ?? 0) &&
        cond(await getClaim(s, 'always'), 'Booted')?.status === 'True'
      );
    });
    const always = await getClaim(s, 'always');
    const alwaysNow = await getSbc(s, 'always');
    assert.deepEqual(
      [always?.status?.boot?.series, always?.status?.boot?.attempt, always?.status?.boot?.firstAttempt],
      [2, alwaysNow?.spec.bootAttempt, alwaysNow?.spec.bootAttempt],
      'a new series, completed in its first attempt; one attempt numbering: the claim shows the SBC bootAttempt',
    );
  });
});

test('C07: OS up, final callback missing: the claim records which signals arrived and which is missing, then retries', {
  timeout: 60_000,
}, async () => {
  await withStack('c07', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const uuid = srv!.spec.systemUUID;
    setSimFaults(s, { neverCallBack: true });
    const before = resets(s, uuid).length;
    await createClaim(s, 'c07', { serverRef: srv!.metadata.name!, timeout: '2s', maxAttempts: 2 });
    const first = (await eventually(
      'attempt 1 running',
      10_000,
      async () => (await getSbc(s, 'c07'))?.spec.bootAttempt,
    ))!;
    // poweredOnAt is the intent, written just before the BMC is asked: wait for the request too.
    const claim = await eventually('attempt 2 started after the deadline', 15_000, async () => {
      const c = await getClaim(s, 'c07');
      return c?.status?.boot?.attempt === 2 &&
        c.status.boot.poweredOnAt &&
        resets(s, uuid).length - before === 2
        ? c
        : undefined;
    });
    const booted = cond(claim, 'Booted')!;
    assert.equal(booted.status, 'False');
    assert.equal(booted.reason, 'TimedOut');
    assert.match(
      booted.message,
      /attempt 1\/2 timed out after 2(\.0)?s: arrived \[IPXEScriptFetched, IgnitionDataFetched\], missing \[BootStateReceived\]/,
    );
    const events = await eventsFor(s, 'ServerClaim', 'c07');
    const timedOut = events.find((e) => e.reason === 'BootTimedOut');
    assert.equal(timedOut?.type, 'Warning');
    assert.match(
      timedOut!.message,
      /arrived \[IPXEScriptFetched, IgnitionDataFetched\], missing \[BootStateReceived\]; starting attempt 2\/2/,
    );
    // The retry is a new attempt: new token, a power cycle with the override.
    const sbc = (await getSbc(s, 'c07'))!;
    assert.equal(sbc.spec.bootAttempt, first + 1);
    assert.deepEqual(resets(s, uuid).slice(before), ['On', 'ForceRestart']);
  });
});

test('C08: bounded retries: exactly maxAttempts attempts, each with a fresh token and a power cycle, then AttemptsExhausted', {
  timeout: 60_000,
}, async () => {
  await withStack('c08', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const uuid = srv!.spec.systemUUID;
    setSimFaults(s, { neverCallBack: true });
    const mark = { resets: resets(s, uuid).length, overrides: overrides(s, uuid).length };
    await createClaim(s, 'c08', { serverRef: srv!.metadata.name!, timeout: '2s', maxAttempts: 3 });
    const tokens = new Set<string>();
    const exhausted = await eventually('AttemptsExhausted', 20_000, async () => {
      const t = await currentToken(s, 'c08');
      if (t) tokens.add(t.token);
      const c = await getClaim(s, 'c08');
      return cond(c, 'Booted')?.reason === 'AttemptsExhausted' ? c : undefined;
    });
    assert.equal(cond(exhausted, 'Booted')?.status, 'False');
    assert.equal(exhausted.status?.boot?.attempt, 3);
    assert.deepEqual(
      resets(s, uuid).slice(mark.resets),
      ['On', 'ForceRestart', 'ForceRestart'],
      'one power action per attempt',
    );
    const ovr = overrides(s, uuid).slice(mark.overrides);
    // NetBootAlways (the default policy) sets a persistent override (issue 36 item 5): set once,
    // it still holds for the next attempts' power cycles, so it is not sent again per attempt.
    assert.ok(ovr.length >= 1 && ovr.length <= 3, `network-boot overrides: ${JSON.stringify(ovr)}`);
    for (const o of ovr) assert.equal(o.BootSourceOverrideEnabled, 'Continuous');
    const sbc = (await getSbc(s, 'c08'))!;
    // Three attempts, three distinct tokens, one observed per 2 s attempt (polled every 50 ms):
    // the last attempt's is current, the two before it are genuine but stale (409 to a host).
    const key = (await managerCallbackKey(s.client, s.ns))!;
    const subject = { uid: sbc.metadata.uid!, attempt: sbc.spec.bootAttempt! };
    assert.equal(tokens.size, 3, 'a fresh token observed for each attempt');
    assert.deepEqual(
      [...tokens].map((t) => key.verify(t, subject)).sort(),
      ['current', 'stale', 'stale'],
      'the current token and two earlier ones of this SBC',
    );
    const ev = (await eventsFor(s, 'ServerClaim', 'c08')).filter((e) => e.reason === 'AttemptsExhausted');
    assert.equal(ev.length, 1);
    assert.equal(ev[0]?.type, 'Warning');

    // Nothing more happens: no power action, no override, no new attempt — past one more attempt's
    // deadline (2 s) and two more reconciles of the exhausted claim.
    await sleep(2_500);
    await pokeClaim(s, 'c08');
    assert.equal(resets(s, uuid).length - mark.resets, 3);
    assert.equal(overrides(s, uuid).length - mark.overrides, ovr.length);
    assert.equal((await getSbc(s, 'c08'))?.spec.bootAttempt, sbc.spec.bootAttempt);

    // The retry annotation starts a fresh series (and is consumed).
    await s.client.mergePatch(Resources.ServerClaim, 'c08', s.ns, {
      metadata: { annotations: { [OPERATION_ANNOTATION]: 'retry' } },
    });
    const retried = await eventually('fresh series', 10_000, async () => {
      const c = await getClaim(s, 'c08');
      return c?.status?.boot?.series === 2 &&
        c.status.boot.poweredOnAt &&
        resets(s, uuid).length - mark.resets === 4
        ? c
        : undefined;
    });
    assert.equal(retried.metadata.annotations?.[OPERATION_ANNOTATION], undefined);
    // One attempt numbering: the fresh series continues the SBC's numbers (attempts 1-3 were series 1).
    assert.deepEqual([retried.status?.boot?.attempt, retried.status?.boot?.firstAttempt], [4, 4]);
    assert.equal((await getSbc(s, 'c08'))?.spec.bootAttempt, 4);
    assert.deepEqual(resets(s, uuid).slice(mark.resets), [
      'On',
      'ForceRestart',
      'ForceRestart',
      'ForceRestart',
    ]);
  });
});

test('C09: slow and failing BMC: one power action, retried after Retry-After, no blocked worker, the Server says what is pending', {
  timeout: 60_000,
}, async () => {
  // One worker per controller: a reconcile that waited for the BMC would hold up every other claim.
  await withStack('c09', { hosts: 2, args: ['--workers', '1'] }, async (s) => {
    const [a, b] = await availableServers(s, 2);
    await createClaim(s, 'slow', { serverRef: a!.metadata.name! });
    await eventually(
      'Booted',
      15_000,
      async () => cond(await getClaim(s, 'slow'), 'Booted')?.status === 'True',
    );
    const uuid = a!.spec.systemUUID;
    const sysA = s.vbmc.systems.find((x) => x.id === uuid)!;
    const mark = resets(s, uuid).length;
    const logMark = s.vbmc.requests().length;
    // Reset answers 204 but PowerState keeps its value for 90 s; the first two power POSTs get 503
    // with Retry-After: 1 (GETs, PATCHes and session logins are not touched).
    s.vbmc.setFaults({
      powerTransitionMs: 90_000,
      unavailableRequests: 2,
      retryAfterSeconds: 1,
      onlyMethods: ['POST'],
      onlyPaths: ['/Actions/ComputerSystem.Reset'],
    });
    const t0 = Date.now();
    await s.client.mergePatch(Resources.ServerClaim, 'slow', s.ns, { spec: { power: 'Off' } });
    const pending = await eventually('PowerActionPending on the Server', 15_000, async () => {
      const srv = await s.client.get<Server>(Resources.Server, a!.metadata.name!);
      const c = cond(srv, 'PowerActionPending');
      return c?.status === 'True' && c.reason === 'WaitingForPowerOff' ? c : undefined;
    });
    assert.match(pending.message, /Off requested at .*; BMC (still )?reports On/);
    const posts = s.vbmc
      .requests()
      .slice(logMark)
      .filter((r) => r.method === 'POST' && r.path === `${sysA.uri}/Actions/ComputerSystem.Reset`);
    assert.deepEqual(
      posts.map((r) => [r.status, (r.body as { ResetType?: string } | undefined)?.ResetType ?? null]),
      [
        [503, null],
        [503, null],
        [204, 'ForceOff'],
      ],
      '503, 503, then the ForceOff accepted',
    );
    for (let i = 1; i < posts.length; i++) {
      const gap = posts[i]!.at - posts[i - 1]!.at;
      assert.ok(gap >= 950, `retry ${i} came ${gap} ms after the 503, before its Retry-After of 1 s`);
    }

    // Meanwhile, with the one worker, another claim needs a power-on and gets it within seconds.
    const bUuid = b!.spec.systemUUID;
    const bMark = resets(s, bUuid).length;
    const tb = Date.now();
    await createClaim(s, 'other', { serverRef: b!.metadata.name! });
    await eventually('the other claim powered on', 10_000, () =>
      resets(s, bUuid).slice(bMark).includes('On') ? true : undefined,
    );
    const waited = Date.now() - tb;
    assert.ok(waited < 10_000, `the other claim's power-on took ${waited} ms`);
    const other = await getClaim(s, 'other');
    assert.ok(other?.status?.boot?.poweredOnAt, 'the other claim recorded its power-on');

    // Well past the first action, it is not repeated while the BMC catches up. Positive control:
    // the Server controller reconciled in the window (it could have repeated the action).
    const reconcilesBefore = await reconciles(s, 'server');
    await sleep(Math.max(0, 7_000 - (Date.now() - t0)));
    await pokeServer(s, a!.metadata.name!, 1);
    assert.ok((await reconciles(s, 'server')) > reconcilesBefore, 'the Server controller ran in the window');
    assert.deepEqual(
      resets(s, uuid).slice(mark),
      ['ForceOff'],
      'the action is not repeated while the BMC catches up',
    );
    const srv = await s.client.get<Server>(Resources.Server, a!.metadata.name!);
    assert.equal(cond(srv, 'PowerActionPending')?.status, 'True');
    assert.equal(srv?.status?.powerState, 'On');
  });
});
