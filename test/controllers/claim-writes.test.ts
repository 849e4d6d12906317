/**
 * The API writes of one claim from creation to Booted (issue 17), against the real API server, the
 * in-process registry and boot server and a simulated host: every version of the claim and of its
 * Server is recorded from a watch, so the test sees each write, not a poll's sample.
 *
 * - Bound, the first series (status.boot, BootConfigurationReady) and its power-on intent are one
 *   status write (the first write is held while the SBC is evaluated, claim-attempt.ts);
 * - a signal that only adds to what the SBC already shows (IgnitionDataFetched after the netboot was
 *   observed) writes nothing on the claim; the Booted write's history still has its time;
 * - the Server gets serverClaimRef, bootConfigurationRef and power in one spec write, and its
 *   `Booted=False Booting` in the Reserved write;
 * - the first /ignition serves the ignition Secret the SBC controller validated without reading it
 *   again; an edit is served by the next fetch.
 *
 * The host fetches its script but not its ignition (fault), so the test fetches the ignition itself
 * and waits until the claim controller has reconciled that change before it posts /bootstate: the
 * two signals are never folded into one reconcile by timing.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { attemptSignals } from '../../src/controllers/common/boot-configuration.js';
import { Informer } from '../../src/runtime/informer.js';
import { Resources, type SecretObject } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  availableServers,
  b64,
  cond,
  createClaim,
  currentToken,
  eventually,
  getSbc,
  setSimFaults,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

/** A counter of the manager's `/metrics` (summed over label sets matching `labels`). */
async function metric(port: number, name: string, ...labels: string[]): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) || !labels.every((l) => line.includes(l))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

test('one claim to Booted: binding + series + power-on intent in one write, no write mirroring a signal, one Server spec write', {
  timeout: 90_000,
}, async () => {
  await withStack('claim-writes', { hosts: 1 }, async (s) => {
    const claims = new Informer<ServerClaim>(s.client, Resources.ServerClaim, { namespace: s.ns });
    const servers = new Informer<Server>(s.client, Resources.Server);
    try {
      const [srv] = await availableServers(s, 1);
      const serverName = srv!.metadata.name!;
      const uuid = srv!.spec.systemUUID;
      setSimFaults(s, { failIgnitionFetch: true });
      const claimVersions: ServerClaim[] = [];
      const serverVersions: Server[] = [];
      claims.on('add', (c) => claimVersions.push(c));
      claims.on('update', (c) => claimVersions.push(c));
      servers.on('update', (x) => {
        if (x.metadata.name === serverName) serverVersions.push(x);
      });
      await Promise.all([claims.start(), servers.start()]);
      const ignition = (marker: string) => ({
        ignition: b64(
          JSON.stringify({ ignition: { version: '3.4.0' }, passwd: { users: [{ name: marker }] } }),
        ),
      });
      await s.client.create<SecretObject>(Resources.Secret, {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: 'w-ignition', namespace: s.ns, labels: s.labels },
        data: ignition('validated'),
      });
      await createClaim(s, 'w', { serverRef: serverName, timeout: '60s', ignition: 'w-ignition' });

      const port = s.op!.metricsPort!;
      const reconciles = () => metric(port, 'controller_runtime_reconcile_total', 'controller="serverclaim"');
      const idle = async () =>
        (await metric(port, 'workqueue_depth', 'name="serverclaim"')) === 0 &&
        (await metric(port, 'controller_runtime_active_workers', 'controller="serverclaim"')) === 0;
      await eventually('netboot observed on the claim', 20_000, async () => {
        const c = claims.get('w', s.ns);
        return c?.status?.boot?.phase === 'AwaitingSignals' && (await idle());
      });
      const before = await reconciles();
      const versionsBefore = claimVersions.length;
      const data = (await currentToken(s, 'w'))!;
      const ignitionUrl = `${s.op!.bootServerUrl}/ignition/${uuid}?token=${encodeURIComponent(data.token)}`;
      const secretReads = () =>
        metric(port, 'metal_api_requests_total', 'origin="other"', 'resource="secrets"', 'verb="get"');
      const readsBefore = await secretReads();
      const ign = await fetch(ignitionUrl);
      assert.equal(ign.status, 200);
      assert.match(await ign.text(), /validated/);
      assert.equal(
        (await secretReads()) - readsBefore,
        0,
        'the first fetch serves the Secret the SBC controller validated: no second read',
      );
      await eventually('IgnitionDataFetched reconciled by the claim controller', 20_000, async () => {
        const sbc = await getSbc(s, 'w');
        return (
          !!sbc &&
          attemptSignals(sbc, ['IgnitionDataFetched']).missing.length === 0 &&
          (await reconciles()) > before &&
          (await idle())
        );
      });
      assert.equal(
        claimVersions.length,
        versionsBefore,
        `no claim write for IgnitionDataFetched: ${JSON.stringify(claimVersions.slice(versionsBefore).map((c) => cond(c, 'Booted')?.message))}`,
      );
      const post = await fetch(`${s.op!.registryUrl}/bootstate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${data.token}` },
        body: JSON.stringify({ systemUUID: uuid, booted: true }),
      });
      assert.equal(post.status, 200);
      const booted = await eventually('Booted=True', 20_000, () => {
        const c = claims.get('w', s.ns);
        return cond(c, 'Booted')?.status === 'True' ? c : undefined;
      });
      // An edit is served from the next fetch on (the hand-over is used once).
      await s.client.mergePatch(Resources.Secret, 'w-ignition', s.ns, { data: ignition('edited') });
      const again = await fetch(ignitionUrl);
      assert.equal(again.status, 200);
      assert.match(await again.text(), /edited/, 'the edited Secret is served');
      assert.equal((await secretReads()) - readsBefore, 1, 'read fresh for the second fetch');
      const record = booted.status?.boot?.history?.at(-1);
      assert.deepEqual(
        Object.keys(record?.signals ?? {}).sort(),
        ['BootStateReceived', 'IPXEScriptFetched', 'IgnitionDataFetched'],
        'the history has every signal of the attempt',
      );

      // The claim's first status write holds the binding, the first series and its power-on intent.
      const withStatus = claimVersions.filter((c) => c.status && Object.keys(c.status).length > 0);
      const first = withStatus[0]!;
      assert.equal(cond(first, 'Bound')?.status, 'True', 'first status write: Bound');
      assert.equal(first.status?.boot?.attempt, 1, 'first status write: the series and its attempt');
      assert.ok(first.status?.boot?.poweredOnAt, 'first status write: the power-on intent');
      assert.equal(cond(first, 'BootConfigurationReady')?.status, 'True');
      assert.equal(cond(first, 'Booted')?.reason, 'Booting');
      // Status writes: binding + series + power-on intent, netboot observed, Booted.
      const statusWrites = new Set(withStatus.map((c) => JSON.stringify(c.status))).size;
      assert.ok(statusWrites <= 3, `claim status versions: ${statusWrites}`);

      // The Reserved write carries the Server's Booted (Booting) for the claim: no write of its own.
      const reserved = serverVersions.find((x) => x.status?.state === 'Reserved');
      assert.equal(cond(reserved, 'Booted')?.reason, 'Booting', 'Booted=Booting rides in the Reserved write');
      const bootedCopies = new Set(
        serverVersions
          .filter((x) => x.spec.serverClaimRef)
          .map((x) => `${cond(x, 'Booted')?.status}/${cond(x, 'Booted')?.reason}`),
      );
      assert.deepEqual([...bootedCopies], ['undefined/undefined', 'False/Booting', 'True/BootCompleted']);

      // One Server spec write for the binding and the SBC reference; no spec.power (deprecated upstream:
      // the claim's own spec.power decides).
      const bound = serverVersions.find((x) => x.spec.serverClaimRef);
      assert.equal(bound?.spec.bootConfigurationRef?.name, 'w', 'bootConfigurationRef with the binding');
      assert.equal(bound?.spec.power, undefined, 'no spec.power copied onto the Server');
      const specs = new Set(
        serverVersions.filter((x) => x.spec.serverClaimRef).map((x) => JSON.stringify(x.spec)),
      );
      assert.equal(specs.size, 1, `Server spec versions while claimed: ${[...specs].join(' | ')}`);
    } finally {
      claims.stop();
      servers.stop();
    }
  });
});

test('a power-on the BMC may have applied (answered too late) is written as pending on the claim', {
  timeout: 90_000,
}, async () => {
  await withStack('claim-pending', { hosts: 1 }, async (s) => {
    const claims = new Informer<ServerClaim>(s.client, Resources.ServerClaim, { namespace: s.ns });
    const messages: string[] = [];
    try {
      const [srv] = await availableServers(s, 1);
      claims.on('update', (c) => {
        const m = cond(c, 'Booted')?.message;
        if (m && messages.at(-1) !== m) messages.push(m);
      });
      await claims.start();
      // The power-on is carried out but answered after every request timeout of the call budget: the
      // manager cannot tell whether the BMC acted (maybeApplied) and keeps the stored intent.
      s.vbmc.setFaults({
        slowRequests: 3,
        slowResponseMs: 5_000,
        onlyMethods: ['POST'],
        onlyPaths: ['/Actions/ComputerSystem.Reset'],
      });
      await createClaim(s, 'p', { serverRef: srv!.metadata.name!, timeout: '60s' });
      await eventually('the pending power-on on the claim, then its completion', 30_000, () => {
        const i = messages.findIndex((m) => /power-on pending: BMC/.test(m));
        return i >= 0 && /completed/.test(messages.at(-1) ?? '');
      });
    } catch (err) {
      throw new Error(`${(err as Error).message}; Booted messages: ${JSON.stringify(messages)}`);
    } finally {
      claims.stop();
    }
  });
});
