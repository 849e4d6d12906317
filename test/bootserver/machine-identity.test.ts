/**
 * Issue 28 against the real API server with the signal servers in-process: the machine is known by
 * the NICs its BMC reports (`status.bmcNetworkInterfaces`), and a boot-file client by the MAC the
 * boot network's DHCP server gave its address (a dnsmasq lease file, read by the real
 * `DnsmasqLeases`; the test writes the file as dnsmasq would).
 * - the attack: a host at address A that learned a new Server's UUID gets no discovery script (its
 *   lease names its own MAC), its `/register` of {mac m2, ip A} is 409 with nothing stored, a
 *   `MachineIdentity` condition and a Warning Event; the real host, leased H for m1, gets the script;
 * - a re-leased address: the Server's registered address now leased to another machine gets nothing;
 * - an address change between attempts: the host still boots from its new lease, the old address
 *   gets nothing;
 * - a refused fetch sets the SBC's `FetchRefused` (who, why, when, no token) and one Warning Event.
 * Client addresses are distinct loopback addresses (127.0.0.0/8 is all local on Linux).
 */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { DnsmasqLeases } from '../../src/bootserver/address-source.js';
import { bootsCommand } from '../../src/localstack/commands.js';
import { Resources } from '../../src/runtime/resource.js';
import {
  getFrom,
  nextAttempt,
  type Seeded,
  type SignalStackFixture,
  sbcCondition,
  seedBootTarget,
  useSignalStack,
  waitCached,
} from '../bootsignals/fixture.js';
import { waitFor } from '../harness/control-plane.js';
import { releaseSharedCluster } from '../harness/shared.js';

after(releaseSharedCluster);

const dir = mkdtempSync(join(tmpdir(), 'metal-leases-'));
const leaseFile = join(dir, 'dnsmasq.leases');
writeFileSync(leaseFile, '');
let fx: SignalStackFixture;
const net = `127.${randomInt(100, 250)}`;
let macSeq = randomInt(0, 0xffff);
const newMac = () => {
  macSeq++;
  return `02:28:00:${(macSeq >> 8).toString(16).padStart(2, '0')}:${(macSeq & 0xff).toString(16).padStart(2, '0')}:01`;
};

/** dnsmasq's lease file: `<expiry> <mac> <ip> <hostname> <client-id>`. */
const leases = new Map<string, string>();
function lease(ip: string, mac: string | undefined): void {
  if (mac) leases.set(ip, mac);
  else leases.delete(ip);
  const exp = Math.floor(Date.now() / 1000) + 3600;
  writeFileSync(leaseFile, [...leases].map(([i, m]) => `${exp} ${m} ${i} * 01:${m}\n`).join(''));
}

const reasonOf = (text: string) => {
  try {
    return (JSON.parse(text) as { reason?: string }).reason;
  } catch {
    return undefined;
  }
};

/** What discovery's Initial pass stores: the NICs the BMC reports. */
async function bmcReports(
  s: Seeded,
  macs: string[],
  registered?: { mac: string; ip: string },
): Promise<void> {
  await fx.client.mergePatch(
    Resources.Server,
    s.server.metadata.name!,
    undefined,
    {
      status: {
        bmcNetworkInterfaces: macs.map((m, i) => ({
          name: `NIC${i}`,
          macAddress: m,
          carrierStatus: 'LinkUp',
        })),
        ...(registered
          ? {
              networkInterfaces: [{ name: 'eth0', macAddress: registered.mac, ips: [registered.ip] }],
              registration: {
                receivedAt: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
                clientAddress: registered.ip,
                data: {},
              },
            }
          : {}),
      },
    },
    { subresource: 'status' },
  );
  await waitFor('BMC NICs cached', 5_000, () => {
    const srv = fx.stack.sources.servers.get(s.server.metadata.name!);
    return (srv?.status?.bmcNetworkInterfaces?.length ?? 0) === macs.length;
  });
}

function register(s: Seeded, from: string, data: unknown): Promise<{ status: number; text: string }> {
  const body = JSON.stringify({ systemUUID: s.uuid, data });
  return new Promise((ok, fail) => {
    const req = request(
      `${fx.stack.registryUrl}/register`,
      {
        method: 'POST',
        localAddress: from,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${s.token}` },
      },
      (res) => {
        let text = '';
        res.on('data', (c) => {
          text += c;
        });
        res.on('end', () => ok({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', fail);
    req.end(body);
  });
}

async function warningEvents(kind: string, name: string, namespace: string, reason: string) {
  const { items } = await fx.client.list<{
    metadata: { name?: string };
    reason: string;
    type: string;
    message?: string;
    note?: string;
    count?: number;
    involvedObject?: { kind?: string; name?: string };
  }>(Resources.Event, { namespace });
  return items.filter(
    (e) =>
      e.type === 'Warning' &&
      e.reason === reason &&
      e.involvedObject?.kind === kind &&
      e.involvedObject?.name === name,
  );
}

const scriptUrl = (s: Seeded) => `${fx.stack.bootUrl}/ipxe/${s.uuid}`;

describe('machine identity: BMC NICs, DHCP leases, refusals', () => {
  fx = useSignalStack('machid', () => ({ clientMacSource: new DnsmasqLeases(leaseFile) }));

  it('the attack: the spoofer gets no discovery script, its /register is 409 and stores nothing; the real host boots', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'discovery' });
    const m1 = newMac();
    const attackerMac = newMac();
    const [A, H] = [`${net}.1.2`, `${net}.1.3`];
    await bmcReports(s, [m1]);
    await waitCached(fx.stack, s);
    lease(A, attackerMac); // the attacker's own DHCP lease

    const stolen = await getFrom(scriptUrl(s), A);
    assert.equal(stolen.status, 403, `the spoofer gets nothing: ${stolen.text}`);
    assert.equal(reasonOf(stolen.text), 'MACMismatch');
    assert.ok(!stolen.text.includes(s.token));

    // Had it got the token (a static address before the host's DHCP): its inventory is refused.
    const reg = await register(s, A, {
      networkInterfaces: [{ name: 'eth0', macAddress: '02:aa:bb:cc:dd:ee', ipAddresses: [A] }],
    });
    assert.equal(reg.status, 409, reg.text);
    assert.equal(reasonOf(reg.text), 'UnknownNICs');
    const srv = await fx.client.get<Server>(Resources.Server, s.server.metadata.name!);
    assert.equal(srv?.status?.registration, undefined, 'nothing stored');
    assert.equal(srv?.status?.networkInterfaces, undefined, 'no networkInterfaces');
    const mi = srv?.status?.conditions?.find((c) => c.type === 'MachineIdentity');
    assert.equal(mi?.reason, 'RegistrationMACMismatch', JSON.stringify(mi));
    assert.ok(mi?.message.includes('02:aa:bb:cc:dd:ee') && mi.message.includes(A), mi?.message);
    await waitFor('RegistrationRefused Event', 10_000, async () => {
      return (
        (await warningEvents('Server', s.server.metadata.name!, 'default', 'RegistrationRefused')).length > 0
      );
    });

    lease(H, m1); // the real host's DHCP
    const real = await getFrom(scriptUrl(s), H);
    assert.equal(real.status, 200, real.text);
    assert.ok(real.text.includes(s.token));
    const ok = await register(s, H, {
      networkInterfaces: [{ name: 'eth0', macAddress: m1.toUpperCase(), ipAddresses: [H] }],
    });
    assert.equal(ok.status, 201, `the real host's inventory is stored: ${ok.text}`);
  });

  it('a claim: the script goes to the host leased for its BMC MAC only, never to an address re-leased to another machine', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim' });
    const m1 = newMac();
    const [old, now] = [`${net}.2.2`, `${net}.2.3`];
    // Discovery registered `old`; the lease expired and dnsmasq gave `old` to another machine.
    await bmcReports(s, [m1], { mac: m1, ip: old });
    await waitCached(fx.stack, s);
    lease(old, newMac());
    lease(now, m1);
    const other = await getFrom(scriptUrl(s), old);
    assert.equal(other.status, 403, `the re-leased address gets nothing: ${other.text}`);
    assert.equal(reasonOf(other.text), 'MACMismatch');
    assert.ok(!other.text.includes(s.token));
    const real = await getFrom(scriptUrl(s), now);
    assert.equal(real.status, 200, real.text);

    // The refusal is visible on the SBC (who, why, when; no token) and as one Warning on the claim.
    const { cond } = await sbcCondition(fx.client, s, 'FetchRefused');
    assert.equal(cond?.status, 'True');
    assert.equal(cond?.reason, 'MACMismatch');
    assert.ok(cond?.message.includes(old) && /attempt 1/.test(cond.message), cond?.message);
    assert.match(cond!.message, / at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ /);
    assert.ok(!cond!.message.includes(s.token), 'no token in the condition');
    // `metalctl boots` shows it under the claim's attempt.
    const printed: string[] = [];
    const log = console.log;
    console.log = (line: string) => printed.push(line);
    try {
      await bootsCommand(s.claim!.metadata.name!, {
        namespace: fx.namespace.name,
        kubeconfig: fx.cluster.kubeconfigPath,
        dir,
      });
    } finally {
      console.log = log;
    }
    assert.ok(
      printed.some((l) => l.startsWith('  refused: MACMismatch: attempt 1:') && l.includes(old)),
      printed.join('\n'),
    );
    for (let i = 0; i < 3; i++) assert.equal((await getFrom(scriptUrl(s), old)).status, 403);
    await waitFor('one aggregated FetchRefused Warning on the claim', 15_000, async () => {
      const evs = await warningEvents(
        'ServerClaim',
        s.claim!.metadata.name!,
        fx.namespace.name,
        'FetchRefused',
      );
      return evs.length === 1 && (evs[0]!.count ?? 1) >= 2;
    });
  });

  it('a pin refusal is visible too: FetchRefused ScriptPinned names the second client, a BMC without NICs keeps the old rule', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim' });
    await bmcReports(s, []);
    await waitCached(fx.stack, s);
    const [first, second] = [`${net}.4.2`, `${net}.4.3`];
    assert.equal((await getFrom(scriptUrl(s), first)).status, 200, 'no NICs known: the first client gets it');
    const pinned = await getFrom(scriptUrl(s), second);
    assert.equal(reasonOf(pinned.text), 'ScriptPinned');
    await waitFor(
      'FetchRefused ScriptPinned written',
      5_000,
      async () => (await sbcCondition(fx.client, s, 'FetchRefused')).cond?.reason === 'ScriptPinned',
    );
    const { cond } = await sbcCondition(fx.client, s, 'FetchRefused');
    assert.ok(cond!.message.includes(second) && !cond!.message.includes(s.token), cond!.message);
  });

  it('an address change between attempts: the host still boots from its new lease, the old address gets nothing', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim' });
    const m1 = newMac();
    const [first, second] = [`${net}.3.2`, `${net}.3.3`];
    await bmcReports(s, [m1], { mac: m1, ip: first });
    await waitCached(fx.stack, s);
    lease(first, m1);
    assert.equal((await getFrom(scriptUrl(s), first)).status, 200, 'attempt 1 from its lease');

    const { token } = await nextAttempt(fx.client, s);
    lease(first, undefined);
    lease(second, m1);
    await waitFor('attempt 2 cached', 10_000, () => {
      const sbc = fx.stack.sources.sbcs.get(s.sbc.metadata.name!, s.sbc.metadata.namespace);
      return sbc?.spec.bootAttempt === 2;
    });
    const stale = await getFrom(scriptUrl(s), first);
    assert.equal(stale.status, 403, `the old address gets nothing: ${stale.text}`);
    assert.equal(reasonOf(stale.text), 'UnknownClient');
    const moved = await getFrom(scriptUrl(s), second);
    assert.equal(moved.status, 200, `the host boots from its new address: ${moved.text}`);
    assert.ok(moved.text.includes(token), "attempt 2's token");
  });
});
