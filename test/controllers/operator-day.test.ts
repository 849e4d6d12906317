/**
 * An operator's day (issue 36), against the real API server, simulated hosts behind the virtual BMC
 * and a real OCI registry on loopback:
 * - edits of a Booted claim: a boot policy flip never power-cycles; an image or ignition edit
 *   re-provisions only when what would boot differs (the resolved manifest, the Secret's content);
 * - ended boot history entries are immutable;
 * - NetBootAlways survives a reset made at the BMC (persistent override);
 * - `kubectl delete server` of a claimed machine is held until the claim releases it;
 * - a hand-made Server in upstream's shape (systemUUID + bmcRef, no systemURI) is adopted;
 * - a dead BMC: one Warning Event with a stable message, backed-off retries;
 * - /metrics: zero states exported, every family documented;
 * - a claim whose BMC never reports Off is released by `metalctl release --force`, with Warnings.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes, randomUUID as randomUuid } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { BMC } from '../../src/api/v1alpha1/bmc.js';
import { SERVER_STATES, type Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { countsForCurrentAttempt } from '../../src/api/vocabulary.js';
import { getCommand } from '../../src/localstack/commands.js';
import { REPO_ROOT } from '../../src/localstack/control-plane.js';
import { OciRegistry } from '../../src/localstack/oci-registry.js';
import { releaseClaim } from '../../src/localstack/server-ops.js';
import { pushBootImage } from '../../src/oci/push.js';
import { Resources } from '../../src/runtime/resource.js';
import { startVirtualBmc } from '../../src/virtualbmc/server.js';
import { createSimFleet } from '../../src/virtualbmc/sim-fleet.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  API,
  availableServers,
  b64,
  cond,
  createClaim,
  eventsFor,
  eventually,
  getClaim,
  getSbc,
  hostOf,
  overrides,
  reconciles,
  resets,
  resetsSent,
  type Stack,
  servers,
  settled,
  startStack,
} from './fixture.js';

after(releaseSharedCluster);

const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));
/** How long a test watches for a power action that must not come, ms (resync and requeues pass). */
const QUIET_MS = 4_000;

function bootImage(tagline: string) {
  return {
    layers: [
      {
        mediaType: 'application/vnd.ironcore.image.kernel',
        data: Buffer.concat([Buffer.from(`kernel ${tagline}\n`), randomBytes(4096)]),
      },
      {
        mediaType: 'application/vnd.ironcore.image.initramfs',
        data: Buffer.concat([Buffer.from(`initrd ${tagline}\n`), randomBytes(4096)]),
      },
    ],
  };
}

describe("an operator's day", { timeout: 180_000 }, () => {
  let s: Stack;
  let reg: OciRegistry;
  let pool: Server[];
  const take = () => pool.shift()!;

  before(async () => {
    reg = await new OciRegistry().start();
    s = await startStack('claim-edits', {
      hosts: 8,
      args: [
        '--allowed-registries',
        reg.host,
        '--insecure-registries',
        reg.host,
        '--boot-timeout',
        '30s',
        '--server-resync',
        '1s',
      ],
    });
    pool = await availableServers(s, 8, 60_000);
  });
  after(async () => {
    await s?.close();
    await reg?.stop();
  });

  async function booted(name: string): Promise<ServerClaim> {
    return eventually(`${name} Booted`, 40_000, async () => {
      const c = await getClaim(s, name);
      return cond(c, 'Booted')?.status === 'True' ? c : undefined;
    });
  }
  const patch = (name: string, spec: Record<string, unknown>) =>
    s.client.mergePatch(Resources.ServerClaim, name, s.ns, { spec });

  it('a bootPolicy flip on a Booted claim power-cycles nothing, either way', async () => {
    const srv = take();
    const uuid = srv.spec.systemUUID!;
    await createClaim(s, 'flip', { serverRef: srv.metadata.name!, bootPolicy: 'NetBootAlways' });
    const before = await booted('flip');
    const n = resets(s, uuid).length;
    let seen = await reconciles(s, 'serverclaim');
    await patch('flip', { bootPolicy: 'NetBootOnce' });
    // The SBC follows in place, and NetBootOnce's marker makes the boot server answer local boot.
    await eventually('SBC NetBootOnce with BootCompleted for its attempt', 20_000, async () => {
      const sbc = await getSbc(s, 'flip');
      return sbc?.spec.bootPolicy === 'NetBootOnce' && countsForCurrentAttempt(sbc, 'BootCompleted');
    });
    await settled(s, 'serverclaim', seen);
    seen = await reconciles(s, 'serverclaim');
    await patch('flip', { bootPolicy: 'NetBootAlways' });
    await eventually('SBC NetBootAlways', 20_000, async () => {
      return (await getSbc(s, 'flip'))?.spec.bootPolicy === 'NetBootAlways';
    });
    await settled(s, 'serverclaim', seen);
    const after = (await getClaim(s, 'flip'))!;
    assert.deepEqual(resets(s, uuid).slice(n), [], 'no power action after the flips');
    assert.equal(after.status?.boot?.series, before.status?.boot?.series, 'no new series');
    assert.equal(after.status?.boot?.attempt, before.status?.boot?.attempt);
    assert.equal(cond(after, 'Booted')?.status, 'True');
    const sbc = (await getSbc(s, 'flip'))!;
    assert.ok(countsForCurrentAttempt(sbc, 'BootStateReceived'), "the attempt's signals still count");
  });

  it('an ignition Secret with the same content boots the same; different content re-provisions', async () => {
    const srv = take();
    const uuid = srv.spec.systemUUID!;
    const ign = JSON.stringify({ ignition: { version: '3.4.0' }, storage: { files: [] } });
    const other = JSON.stringify({
      ignition: { version: '3.4.0' },
      storage: { files: [{ path: '/etc/motd', contents: { source: 'data:,hi' } }] },
    });
    for (const [name, text] of [
      ['ign-a', ign],
      ['ign-b', ign],
      ['ign-c', other],
    ] as const)
      await s.client.create(Resources.Secret, {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name, namespace: s.ns, labels: s.labels },
        data: { ignition: b64(text) },
      });
    await createClaim(s, 'ign', { serverRef: srv.metadata.name!, ignition: 'ign-a' });
    const first = await booted('ign');
    const n = resets(s, uuid).length;
    const seen = await reconciles(s, 'serverclaim');
    await patch('ign', { ignitionSecretRef: { name: 'ign-b' } });
    await eventually('SBC names ign-b', 20_000, async () => {
      return (await getSbc(s, 'ign'))?.spec.ignitionSecretRef?.name === 'ign-b';
    });
    await settled(s, 'serverclaim', seen);
    assert.deepEqual(resets(s, uuid).slice(n), [], 'same content: no power action');
    assert.equal((await getClaim(s, 'ign'))!.status?.boot?.series, first.status?.boot?.series);
    await patch('ign', { ignitionSecretRef: { name: 'ign-c' } });
    const again = await eventually('series 2 Booted', 40_000, async () => {
      const c = await getClaim(s, 'ign');
      return (c?.status?.boot?.series ?? 0) > (first.status?.boot?.series ?? 1) &&
        cond(c, 'Booted')?.status === 'True'
        ? c
        : undefined;
    });
    assert.ok(resets(s, uuid).length > n, 'different content: re-provisioned');
    assert.ok((again.status?.boot?.attempt ?? 0) > (first.status?.boot?.attempt ?? 0));
  });

  it('an image tag resolving to the booted manifest boots the same; another manifest re-provisions', async () => {
    const srv = take();
    const uuid = srv.spec.systemUUID!;
    const t = { registryUrl: reg.url, repository: 'metal/edit' };
    const img = bootImage('one');
    await pushBootImage(t, img, '1.0');
    await pushBootImage(t, img, '1.0-again');
    await pushBootImage(t, bootImage('two'), '2.0');
    await createClaim(s, 'img', { serverRef: srv.metadata.name!, image: `${reg.host}/metal/edit:1.0` });
    const first = await booted('img');
    const n = resets(s, uuid).length;
    const seen = await reconciles(s, 'serverclaim');
    await patch('img', { image: `${reg.host}/metal/edit:1.0-again` });
    await eventually('SBC names the new tag', 20_000, async () => {
      return (await getSbc(s, 'img'))?.spec.image === `${reg.host}/metal/edit:1.0-again`;
    });
    await settled(s, 'serverclaim', seen);
    assert.deepEqual(resets(s, uuid).slice(n), [], 'same manifest: no power action');
    const mid = (await getClaim(s, 'img'))!;
    assert.equal(mid.status?.boot?.series, first.status?.boot?.series);
    assert.equal(cond(mid, 'Booted')?.status, 'True');
    await patch('img', { image: `${reg.host}/metal/edit:2.0` });
    await eventually('series 2 Booted', 40_000, async () => {
      const c = await getClaim(s, 'img');
      return (c?.status?.boot?.series ?? 0) > (first.status?.boot?.series ?? 1) &&
        cond(c, 'Booted')?.status === 'True'
        ? c
        : undefined;
    });
    assert.ok(resets(s, uuid).length > n, 'another manifest: re-provisioned');
  });

  it('a NetBootOnce Off → On keeps the ended history entry as it was', async () => {
    const srv = take();
    await createClaim(s, 'hist', { serverRef: srv.metadata.name!, bootPolicy: 'NetBootOnce' });
    const first = await booted('hist');
    const entry = first.status?.boot?.history?.at(-1);
    assert.ok(entry?.endedAt && entry.poweredOnAt, JSON.stringify(first.status?.boot));
    await patch('hist', { power: 'Off' });
    await eventually('host Off', 20_000, () => hostOf(s, srv).powerState() === 'Off');
    const seen = await reconciles(s, 'serverclaim');
    await patch('hist', { power: 'On' });
    await eventually('host On again', 20_000, () => hostOf(s, srv).powerState() === 'On');
    await settled(s, 'serverclaim', seen);
    const after = (await getClaim(s, 'hist'))!;
    const same = after.status?.boot?.history?.find((h) => h.attempt === entry.attempt);
    assert.deepEqual(same, entry, 'the ended entry is unchanged');
    assert.ok(Date.parse(same!.poweredOnAt!) <= Date.parse(same!.endedAt!));
  });

  it('/metrics: metal_servers has every state (zeros too), and every family is in docs/OPERATIONS.md', async () => {
    const text = await (await fetch(`http://127.0.0.1:${s.op!.metricsPort}/metrics`)).text();
    for (const state of SERVER_STATES)
      assert.match(text, new RegExp(`^metal_servers\\{state="${state}"\\} \\d+$`, 'm'), state);
    const readme = readFileSync(join(REPO_ROOT, 'docs', 'OPERATIONS.md'), 'utf8');
    const families = [...text.matchAll(/^# TYPE (\w+) /gm)].map((m) => m[1]!);
    const undocumented = families.filter(
      (f) => !/^(process|nodejs)_/.test(f) && !readme.includes(`\`${f}\``),
    );
    assert.deepEqual(undocumented, [], 'exported families missing from docs/OPERATIONS.md');
  });

  it('a BMC where nothing listens: one Warning Event, a stable message, retries backed off', async () => {
    const closed = createServer((c) => c.destroy());
    await new Promise<void>((ok) => closed.listen(0, '127.0.0.1', ok));
    const port = (closed.address() as AddressInfo).port;
    // When each connection came: a round of the BMC controller is a burst of them (the Redfish
    // client's own retries, ms apart); rounds are told apart by a gap of more than 2 s.
    const connectedAt: number[] = [];
    closed.on('connection', () => connectedAt.push(Date.now()));
    const name = `dead-bmc-${s.ns}`;
    try {
      await s.client.create(Resources.BMCSecret, {
        apiVersion: API,
        kind: 'BMCSecret',
        metadata: { name, labels: s.labels },
        data: { username: b64('admin'), password: b64('secret') },
      });
      await s.client.create<BMC>(Resources.BMC, {
        apiVersion: API,
        kind: 'BMC',
        metadata: { name, labels: s.labels },
        spec: {
          access: { ip: '127.0.0.1' },
          bmcSecretRef: { name },
          protocol: { name: 'Redfish', port, scheme: 'http' },
        },
      });
      await eventually('Ready=False', 20_000, async () => {
        return cond(await s.client.get<BMC>(Resources.BMC, name), 'Ready')?.status === 'False';
      });
      const windowStart = Date.now();
      await sleep(20_000);
      const warnings = (await eventsFor(s, 'BMC', name, 'default')).filter((e) => e.type === 'Warning');
      assert.equal(new Set(warnings.map((e) => e.message)).size, 1, JSON.stringify(warnings));
      assert.doesNotMatch(warnings[0]!.message, /\d+ ms/, 'no elapsed time in the message');
      const inWindow = connectedAt.filter((t) => t >= windowStart && t < windowStart + 20_000);
      const rounds: number[][] = [];
      for (const t of inWindow) {
        const last = rounds.at(-1);
        if (last && t - last.at(-1)! <= 2_000) last.push(t);
        else rounds.push([t]);
      }
      const shape = `rounds in 20 s: ${JSON.stringify(rounds.map((r) => [r[0]! - windowStart, r.length]))}`;
      // Backoff 5 s, then 10 s after the first failure (plus the call budgets): at most 3 rounds
      // begin in 20 s, each a handful of connections (9 measured; a hot loop is one long round or many).
      assert.ok(rounds.length <= 3, shape);
      assert.ok(
        rounds.every((r) => r.length <= 20),
        shape,
      );
      // Positive control: the window is long enough for a retry, and one came (a controller that
      // stopped after the first failure would pass the bounds above and fail here).
      assert.ok(rounds.length >= 1, `no retry in 20 s: ${shape}`);
    } finally {
      await s.client.delete(Resources.BMC, name).catch(() => undefined);
      await s.client.delete(Resources.BMCSecret, name).catch(() => undefined);
      closed.close();
    }
  });

  it('NetBootAlways: a reset made at the BMC (not by the operator) boots the image again', async () => {
    const srv = take();
    const host = hostOf(s, srv);
    await createClaim(s, 'always', { serverRef: srv.metadata.name!, bootPolicy: 'NetBootAlways' });
    await booted('always');
    assert.equal(overrides(s, srv.spec.systemUUID!).at(-1)?.BootSourceOverrideEnabled, 'Continuous');
    await eventually('the boot finished', 20_000, () => host.lastBoot?.phase === 'up');
    const before = host.bootCount;
    const sys = s.vbmc.systems.find((x) => x.id === srv.spec.systemUUID)!;
    // As the BMC's web UI or a watchdog would: straight to the BMC, not through the operator.
    const res = await fetch(`${s.vbmc.url}${sys.uri}/Actions/ComputerSystem.Reset`, {
      method: 'POST',
      headers: {
        authorization: `Basic ${Buffer.from('admin:secret').toString('base64')}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify({ ResetType: 'ForceRestart' }),
    });
    assert.equal(res.status, 204);
    const next = await eventually('a new boot', 20_000, () =>
      host.bootCount > before && host.lastBoot?.source ? host.lastBoot : undefined,
    );
    assert.equal(next.source, 'network', 'the live image boots again, not the disk');
    assert.equal(cond(await getClaim(s, 'always'), 'Booted')?.status, 'True');
  });

  it('metalctl get with nothing to show: "No resources found." on stderr, no header-only table', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const { log, error } = console;
    console.log = (...a: unknown[]) => void out.push(a.join(' '));
    console.error = (...a: unknown[]) => void err.push(a.join(' '));
    let code: number;
    try {
      code = await getCommand('claims', undefined, {
        kubeconfig: s.kubeconfigPath,
        dir: mkdtempSync(join(tmpdir(), 'metalctl-')),
        selector: 'nothing=matches',
        namespace: s.ns,
      });
    } finally {
      console.log = log;
      console.error = error;
    }
    assert.equal(code, 0);
    assert.deepEqual(out, [], 'no table');
    assert.deepEqual(err, [`No resources found in ${s.ns} namespace.`]);
  });

  it('deleting a claimed Server is held until the claim releases it: no discovery under the tenant', async () => {
    const srv = take();
    const name = srv.metadata.name!;
    const uuid = srv.spec.systemUUID!;
    await createClaim(s, 'held', { serverRef: name });
    await booted('held');
    const n = resetsSent(s, uuid).length;
    await s.client.delete(Resources.Server, name);
    const held = await eventually('the Server terminating, not gone', 10_000, async () => {
      const x = await s.client.get<Server>(Resources.Server, name);
      return x?.metadata.deletionTimestamp ? x : undefined;
    });
    assert.equal(held.metadata.uid, srv.metadata.uid);
    await eventually('ServerDeletionHeld on Server and claim', 10_000, async () => {
      const a = await eventsFor(s, 'Server', name, 'default');
      const b = await eventsFor(s, 'ServerClaim', 'held');
      return (
        a.some((e) => e.reason === 'ServerDeletionHeld' && e.type === 'Warning') &&
        b.some((e) => e.reason === 'ServerDeletionHeld' && e.type === 'Warning')
      );
    });
    // Positive control: the Server controller runs in the window (resync 1 s), so discovery could start.
    const during = await reconciles(s, 'server');
    await sleep(QUIET_MS);
    assert.ok((await reconciles(s, 'server')) > during, 'the Server controller ran in the window');
    assert.deepEqual(resetsSent(s, uuid).slice(n), [], 'no power action while held');
    const still = (await getClaim(s, 'held'))!;
    assert.equal(cond(still, 'Booted')?.status, 'True');
    assert.equal((await s.client.get<Server>(Resources.Server, name))?.status?.state, 'Reserved');
    await s.client.delete(Resources.ServerClaim, 'held', s.ns);
    await eventually('the held Server deleted after the release', 30_000, async () => {
      const x = await s.client.get<Server>(Resources.Server, name);
      return !x || x.metadata.uid !== srv.metadata.uid;
    });
  });

  it("a hand-made Server in upstream's shape (systemUUID + bmcRef) is adopted and discovered", async () => {
    const fleet = createSimFleet({ count: 1, bootServerUrl: s.op!.bootServerUrl, seed: `${s.ns}-hm` });
    const vbmc = await startVirtualBmc({
      hosts: fleet.hosts,
      username: 'admin',
      password: 'secret',
      port: 0,
    });
    const bmcName = `hm-${s.ns}`;
    const serverName = `handmade-${s.ns}`;
    try {
      const uuid = vbmc.systems[0]!.id;
      await s.client.create<Server>(Resources.Server, {
        apiVersion: API,
        kind: 'Server',
        metadata: { name: serverName, labels: s.labels },
        spec: { systemUUID: uuid, bmcRef: { name: bmcName } },
      });
      await s.client.create(Resources.BMCSecret, {
        apiVersion: API,
        kind: 'BMCSecret',
        metadata: { name: bmcName, labels: s.labels },
        data: { username: b64('admin'), password: b64('secret') },
      });
      await s.client.create<BMC>(Resources.BMC, {
        apiVersion: API,
        kind: 'BMC',
        metadata: { name: bmcName, labels: s.labels },
        spec: {
          access: { ip: '127.0.0.1' },
          bmcSecretRef: { name: bmcName },
          protocol: { name: 'Redfish', port: Number(new URL(vbmc.url).port), scheme: 'http' },
        },
      });
      const found = await eventually('the hand-made Server discovered', 60_000, async () => {
        const x = await s.client.get<Server>(Resources.Server, serverName);
        return x?.status?.state === 'Available' ? x : undefined;
      });
      assert.equal(found.spec.systemURI, vbmc.systems[0]!.uri, 'systemURI filled in from the BMC');
      const bmc = await eventually('the BMC scanned', 20_000, async () => {
        const b = await s.client.get<BMC>(Resources.BMC, bmcName);
        return cond(b, 'DuplicateSystemUUID') ? b : undefined;
      });
      assert.equal(
        cond(bmc, 'DuplicateSystemUUID')?.status,
        'False',
        cond(bmc, 'DuplicateSystemUUID')?.message,
      );
      assert.equal(bmc.status?.ip, '127.0.0.1', 'status.ip (the IP column of kubectl get bmc)');
      const all = await servers(s);
      assert.deepEqual(
        all.filter((x) => x.spec.systemUUID === uuid).map((x) => x.metadata.name),
        [serverName],
        'no second Server for the UUID',
      );
    } finally {
      await fleet.close();
      await vbmc.close();
      await s.client.delete(Resources.BMC, bmcName).catch(() => undefined);
      await s.client.delete(Resources.BMCSecret, bmcName).catch(() => undefined);
      await s.client.delete(Resources.Server, serverName).catch(() => undefined);
    }
  });

  it("a Server's spec.power (deprecated upstream) is removed with a Warning and powers nothing; a claim never copies its own", async () => {
    const srv = take();
    const name = srv.metadata.name!;
    const uuid = srv.spec.systemUUID!;
    const n = resets(s, uuid).length;
    await s.client.mergePatch(Resources.Server, name, undefined, { spec: { power: 'On' } });
    const ev = await eventually('DeprecatedPowerCleared Warning', 20_000, async () =>
      (await eventsFor(s, 'Server', name, 'default')).find((e) => e.reason === 'DeprecatedPowerCleared'),
    );
    assert.equal(ev.type, 'Warning');
    assert.match(ev.message, /spec\.power "On" is deprecated and was not applied/);
    const cleared = await s.client.get<Server>(Resources.Server, name);
    assert.equal(cleared?.spec.power, undefined, 'spec.power removed');
    assert.deepEqual(resets(s, uuid).slice(n), [], 'nothing powered for it');
    assert.equal(hostOf(s, srv).powerState(), 'Off', 'an Available Server stays Off');
    // Claimed: the claim's spec.power decides, the Server's stays unset (upstream's claim controller
    // does not write it either).
    await createClaim(s, 'power-owner', { serverRef: name });
    await booted('power-owner');
    const bound = await s.client.get<Server>(Resources.Server, name);
    assert.equal(bound?.spec.serverClaimRef?.name, 'power-owner');
    assert.equal(bound?.spec.power, undefined, 'no spec.power copied from the claim');
  });

  it('a Server nothing has written status for reads STATE Initial in kubectl get', async () => {
    const name = `no-bmc-${s.ns}`;
    await s.client.create<Server>(Resources.Server, {
      apiVersion: API,
      kind: 'Server',
      metadata: { name, labels: s.labels },
      spec: { systemUUID: randomUuid(), bmcRef: { name: `missing-${s.ns}` } },
    });
    try {
      // Straight after the create, before any controller wrote: the CRD's default is what kubectl shows.
      const table = execFileSync('kubectl', ['--kubeconfig', s.kubeconfigPath, 'get', 'server', name], {
        encoding: 'utf8',
        timeout: 30_000,
      }).split('\n');
      const at = table[0]!.search(/\bSTATE\b/); // not POWERSTATE's
      assert.ok(at >= 0, table[0]);
      assert.equal(table[1]!.slice(at).split(/\s+/)[0], 'Initial', table.join('\n'));
      const x = await s.client.get<Server>(Resources.Server, name);
      assert.equal(x?.status?.state, 'Initial', 'what a client reads, too');
      // And after the controller has written (it cannot reach the BMC that does not exist): still Initial.
      const written = await eventually('the Discovered condition written', 30_000, async () => {
        const y = await s.client.get<Server>(Resources.Server, name);
        return cond(y, 'Discovered') ? y : undefined;
      });
      assert.equal(written.status?.state, 'Initial', cond(written, 'Discovered')?.message);
    } finally {
      await s.client.delete(Resources.Server, name).catch(() => undefined);
    }
  });

  it('a claim whose BMC never reports Off: metalctl release --force releases it, with a Warning', async () => {
    const srv = take();
    const name = srv.metadata.name!;
    await createClaim(s, 'dead', { serverRef: name });
    await booted('dead');
    const sys = s.vbmc.systems.find((x) => x.id === srv.spec.systemUUID)!;
    s.vbmc.setFaults({
      unavailableRequests: 1_000_000,
      retryAfterSeconds: 1,
      onlyPaths: [sys.uri, `${sys.uri}/Actions/ComputerSystem.Reset`],
    });
    try {
      await s.client.delete(Resources.ServerClaim, 'dead', s.ns);
      await eventually('Released=False WaitingForPowerOff', 30_000, async () => {
        const c = await getClaim(s, 'dead');
        return cond(c, 'Released')?.reason === 'WaitingForPowerOff';
      });
      assert.ok(await getClaim(s, 'dead'), 'held by the dead BMC');
      const said = await releaseClaim(s.client, 'dead', s.ns, true);
      assert.match(said, /force-release=true/);
      await eventually('the claim gone', 30_000, async () => !(await getClaim(s, 'dead')));
      const after = (await s.client.get<Server>(Resources.Server, name))!;
      assert.equal(after.spec.serverClaimRef, undefined, 'the Server released');
      const onClaim = await eventsFor(s, 'ServerClaim', 'dead');
      const forced = onClaim.find((e) => e.reason === 'ForcedRelease');
      assert.equal(forced?.type, 'Warning');
      assert.match(forced?.message ?? '', /may still run/);
      const onServer = await eventsFor(s, 'Server', name, 'default');
      assert.ok(onServer.some((e) => e.reason === 'ForcedRelease' && e.type === 'Warning'));
    } finally {
      s.vbmc.setFaults({ unavailableRequests: 0, onlyPaths: [] });
    }
  });
});
