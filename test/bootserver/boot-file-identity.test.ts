/**
 * Who gets an attempt's boot file (iPXE script, UEFI HTTP-boot UKI) and the token in it (issue 13
 * items 3–4, security review S3), against the real API server with the signal servers in-process:
 * - HTTP boot has the script's protections: the power-on gate (nothing before the manager recorded
 *   the power-on of this attempt) and the compare-and-swap pin (of concurrent clients exactly one
 *   gets the token, also from two addresses of the same server);
 * - the default `known-address` identity: an address of another Server is refused, an address the
 *   Server does not have is refused where its addresses identify it, and the first-address pin
 *   applies where nothing usable is known (no addresses, addresses shared with another Server, or a
 *   registration that arrived through a NAT, as from simulated hosts and QEMU user networking);
 * - the registry records the address a registration came from.
 * Client addresses are distinct loopback addresses (127.0.0.0/8 is all local on Linux).
 */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { request } from 'node:http';
import { describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { Resources } from '../../src/runtime/resource.js';
import {
  getFrom,
  recordPowerOn,
  type Seeded,
  type SignalStackFixture,
  sbcCondition,
  seedBootTarget,
  useSignalStack,
  waitCached,
} from '../bootsignals/fixture.js';
import { waitFor } from '../harness/control-plane.js';

let fx: SignalStackFixture;
/** A loopback /16 of this run, so addresses known to Servers of other runs never collide. */
const net = `127.${randomInt(100, 250)}`;

const reasonOf = (text: string) => {
  try {
    return (JSON.parse(text) as { reason?: string }).reason;
  } catch {
    return undefined;
  }
};

/** Stores what discovery would: the NICs' addresses and the address the registration came from. */
async function knownAs(s: Seeded, ips: string[], registeredFrom?: string): Promise<void> {
  await fx.client.mergePatch(
    Resources.Server,
    s.server.metadata.name!,
    undefined,
    {
      status: {
        networkInterfaces: ips.map((ip, i) => ({
          name: `eth${i}`,
          macAddress: `52:54:00:00:00:0${i}`,
          ips: [ip],
        })),
        ...(registeredFrom
          ? {
              registration: {
                receivedAt: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
                clientAddress: registeredFrom,
                data: {},
              },
            }
          : {}),
      },
    },
    { subresource: 'status' },
  );
  await waitFor('addresses cached', 5_000, () => {
    const got = fx.stack.sources.servers.get(s.server.metadata.name!)?.status?.networkInterfaces ?? [];
    return got.length === ips.length;
  });
}

const ukiUrl = (s: Seeded) => `${fx.stack.bootUrl}/httpboot/${s.uuid}/1/uki.efi`;
const scriptUrl = (s: Seeded) => `${fx.stack.bootUrl}/ipxe/${s.uuid}`;

describe('boot file identity and pin', () => {
  fx = useSignalStack('bootid');

  it('HTTP boot: the UKI and its token are served only after the attempt power-on is recorded', async () => {
    for (const flow of ['claim', 'discovery'] as const) {
      const s = await seedBootTarget(fx.client, fx.namespace.name, {
        flow,
        bootMethod: 'HTTPBoot',
        powerOnRecorded: false,
      });
      const me = `${net}.1.${flow === 'claim' ? 2 : 3}`;
      await knownAs(s, [me], me);
      await waitCached(fx.stack, s);
      for (const method of ['HEAD', 'GET']) {
        const early = await getFrom(ukiUrl(s), me, {}, method);
        assert.equal(early.status, 503, `${flow} ${method}: no UKI before the power-on intent`);
        assert.equal(early.headers['retry-after'], '5');
        if (method === 'GET') {
          assert.equal(reasonOf(early.text), 'AwaitingPowerOn');
          assert.ok(!early.text.includes(s.token), 'the token never leaves before the power-on');
        }
      }
      assert.equal((await sbcCondition(fx.client, s, 'HTTPBootFileFetched')).cond, undefined);
      await recordPowerOn(fx.client, s, 1);
      const res = await getFrom(ukiUrl(s), me);
      assert.equal(
        res.status,
        200,
        `${flow}: served once the power-on is recorded: ${res.text.slice(0, 200)}`,
      );
      assert.ok(res.text.includes(`metal.token=${s.token}`), 'the UKI command line carries the token');
    }
  });

  it('HTTP boot: of concurrent clients exactly one gets the UKI (pin by compare-and-swap)', async () => {
    // Two addresses of one server (each would be identified), and nothing known (first address wins).
    for (const [round, known] of [
      [3, true],
      [2, false],
    ] as const) {
      const s = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim', bootMethod: 'HTTPBoot' });
      const addrs = Array.from({ length: known ? 2 : 6 }, (_, i) => `${net}.${round}.${i + 2}`);
      if (known) await knownAs(s, addrs, addrs[0]);
      await waitCached(fx.stack, s);
      const answers = await Promise.all(addrs.map((a) => getFrom(ukiUrl(s), a)));
      const statuses = answers.map((a) => a.status).join(',');
      assert.equal(answers.filter((a) => a.status === 200).length, 1, `round ${round}: ${statuses}`);
      assert.ok(
        answers.every((a) => a.status === 200 || a.status === 403),
        statuses,
      );
      assert.equal(answers.filter((a) => a.text.includes(s.token)).length, 1, 'one client got the token');
      const winner = addrs[answers.findIndex((a) => a.status === 200)]!;
      for (const a of answers.filter((x) => x.status === 403)) assert.equal(reasonOf(a.text), 'ScriptPinned');
      const { cond } = await sbcCondition(fx.client, s, 'HTTPBootFileFetched');
      assert.ok(cond?.message.endsWith(` served to ${winner}`), cond?.message);
      // The pin holds for later requests, HEAD included.
      const loser = addrs.find((a) => a !== winner)!;
      assert.equal((await getFrom(ukiUrl(s), loser, {}, 'HEAD')).status, 403);
      assert.equal((await getFrom(ukiUrl(s), winner)).status, 200, 'the pinned client may fetch again');
    }
  });

  it("known addresses: another server's address and a foreign one are refused; the own address is served", async () => {
    const [a, b] = [
      await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim' }),
      await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim', bootMethod: 'HTTPBoot' }),
    ];
    const [addrA, addrB] = [`${net}.4.2`, `${net}.4.3`];
    await knownAs(a, [addrA], addrA);
    await knownAs(b, [addrB], addrB);
    await Promise.all([waitCached(fx.stack, a), waitCached(fx.stack, b)]);
    for (const [url, token] of [
      [scriptUrl(a), a.token],
      [`${fx.stack.bootUrl}/httpboot/${b.uuid}/1/uki.efi`, b.token],
    ] as const) {
      const other = url.includes(a.uuid) ? addrB : addrA;
      for (const from of [other, `${net}.4.9`]) {
        const res = await getFrom(url, from);
        assert.equal(res.status, 403, `${url} from ${from}`);
        assert.equal(reasonOf(res.text), 'UnknownClient');
        assert.ok(!res.text.includes(token));
      }
    }
    assert.equal(
      (await sbcCondition(fx.client, a, 'IPXEScriptFetched')).cond,
      undefined,
      'no pin from a refusal',
    );
    const own = await getFrom(scriptUrl(a), addrA);
    assert.equal(own.status, 200);
    assert.ok(own.text.includes(a.token));
    assert.equal((await getFrom(ukiUrl(b), addrB)).status, 200);

    // A server with nothing usable known still refuses an address that identifies another server.
    const c = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim' });
    await waitCached(fx.stack, c);
    const res = await getFrom(scriptUrl(c), addrB);
    assert.equal(res.status, 403);
    assert.equal(reasonOf(res.text), 'UnknownClient');
    assert.ok(!res.text.includes(c.token));
  });

  it('nothing usable known (NAT seen at registration, addresses shared): the first address is pinned', async () => {
    const nat = await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim' });
    await knownAs(nat, [`10.${randomInt(100, 250)}.0.5`], '127.0.0.1'); // as simulated hosts register
    const [d, e] = [
      await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim' }),
      await seedBootTarget(fx.client, fx.namespace.name, { flow: 'claim' }),
    ];
    const shared = `${net}.5.15`; // as every QEMU user-network guest says 10.0.2.15
    await knownAs(d, [shared]);
    await knownAs(e, [shared]);
    for (const [i, s] of [nat, d].entries()) {
      await waitCached(fx.stack, s);
      const [first, second] = [`${net}.6.${i * 2 + 2}`, `${net}.6.${i * 2 + 3}`];
      const ok = await getFrom(scriptUrl(s), first);
      assert.equal(ok.status, 200, ok.text);
      assert.ok(ok.text.includes(s.token));
      const pinned = await getFrom(scriptUrl(s), second);
      assert.equal(pinned.status, 403);
      assert.equal(reasonOf(pinned.text), 'ScriptPinned');
      assert.ok(!pinned.text.includes(s.token));
    }
  });

  it('the registry records the address a registration came from', async () => {
    const s = await seedBootTarget(fx.client, fx.namespace.name);
    await waitCached(fx.stack, s);
    const from = `${net}.7.2`;
    const body = JSON.stringify({ systemUUID: s.uuid, data: { networkInterfaces: [] } });
    const status = await new Promise<number>((ok, fail) => {
      const req = request(
        `${fx.stack.registryUrl}/register`,
        {
          method: 'POST',
          localAddress: from,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${s.token}` },
        },
        (res) => {
          res.resume();
          res.on('end', () => ok(res.statusCode ?? 0));
        },
      );
      req.on('error', fail);
      req.end(body);
    });
    assert.equal(status, 201);
    const srv = await fx.client.get<Server>(Resources.Server, s.server.metadata.name!);
    assert.equal(srv?.status?.registration?.clientAddress, from);
  });
});
