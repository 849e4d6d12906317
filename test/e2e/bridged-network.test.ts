/**
 * End to end on the bridged test network (src/localstack/test-network.ts): a BIOS VM (SeaBIOS +
 * iPXE) and a UEFI VM (OVMF + iPXE) on one bridge, addressed by a real DHCP server (dnsmasq), boot
 * at the same time. Each gets its own address, the boot server logs each VM's own address, both
 * claims reach `Booted=True` with all three signals for attempt 1, and a fetch of one VM's script
 * from the other VM's address (while that VM is off) is refused (403, no token).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { tokenSubject } from '../../src/bootauth/callback-token.js';
import { waitFor } from '../../src/localstack/control-plane.js';
import { LocalStack } from '../../src/localstack/local-stack.js';
import type { TestNetwork } from '../../src/localstack/test-network.js';
import { OS_IMAGE } from '../../src/localstack/vm-artefacts.js';
import {
  assertBootedAttempt1,
  claimAndWaitBooted,
  deleteClaim,
  discoverSettled,
  managerLines,
  sbcOf,
} from './scenario.js';

let stack: LocalStack;
let net: TestNetwork;
let dir: string;
/** [BIOS VM, UEFI VM] */
let servers: Server[];

function leaseOf(server: Server): string {
  const uuid = server.spec.systemUUID;
  const host = stack.hosts.find((h) => h.identity.uuid === uuid)!;
  const lease = net.leases().find((l) => l.mac === host.identity.macAddress);
  assert.ok(lease, `a DHCP lease for ${host.identity.macAddress}: ${JSON.stringify(net.leases())}`);
  return lease.ip;
}

describe('end to end on the bridged test network (dnsmasq, BIOS + UEFI)', { timeout: 15 * 60_000 }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'metal-e2e-br-'));
    stack = await LocalStack.start({
      servers: 2,
      backend: 'qemu',
      network: 'bridge',
      firmware: ['bios', 'uefi'],
      dir,
      managerArgs: ['--boot-timeout=180s', '--discovery-timeout=240s'],
      progress: (l) => console.log(`# ${l}`),
    });
    net = stack.network!;
    const found = await discoverSettled(stack, 2, 400_000);
    const byUuid = (uuid: string) => found.find((s) => s.spec.systemUUID === uuid)!;
    servers = [byUuid(stack.hosts[0]!.identity.uuid), byUuid(stack.hosts[1]!.identity.uuid)];
  });
  after(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the VMs sit on the bridge with distinct DHCP addresses; the boot server logs each own address', () => {
    assert.ok(stack.network, 'the stack runs on the bridged network');
    const [a, b] = [leaseOf(servers[0]!), leaseOf(servers[1]!)];
    assert.notEqual(a, b);
    for (const [srv, address] of [
      [servers[0]!, a],
      [servers[1]!, b],
    ] as const) {
      const served = managerLines(stack).filter(
        (l) => l.msg === 'iPXE script served' && l.systemUUID === srv.spec.systemUUID,
      );
      assert.ok(served.length >= 1, `discovery script served for ${srv.spec.systemUUID}`);
      assert.deepEqual([...new Set(served.map((l) => l.client))], [address], 'served to the VM own address');
    }
  });

  it("BIOS + iPXE and UEFI + iPXE claims boot to Booted=True; A's script fetched from B's address gets 403 and no token", async () => {
    const [a, b] = servers as [Server, Server];
    const signals = ['IPXEScriptFetched', 'IgnitionDataFetched', 'BootStateReceived'];
    try {
      const booted = claimAndWaitBooted(
        stack,
        'br-bios',
        a.metadata.name!,
        { image: OS_IMAGE, bootPolicy: 'NetBootOnce' },
        400_000,
      );
      booted.catch(() => undefined); // awaited below; a failure before that must not be unhandled
      // While A boots, B is powered off after discovery: its address is free to impersonate.
      await waitFor('A fetched its script', 300_000, async () => {
        const sbc = await sbcOf(stack, a.metadata.name!);
        const c = sbc?.status?.conditions?.find((x) => x.type === 'IPXEScriptFetched');
        return c?.status === 'True' && (c.observedGeneration ?? 0) >= (sbc?.status?.attemptGeneration ?? 1);
      });
      const sbc = (await sbcOf(stack, a.metadata.name!))!;
      const token = stack.callbackKey.tokenFor(tokenSubject(sbc)!);
      assert.ok(token.length >= 16, 'the attempt has a token');
      const res = net.requestFrom(leaseOf(b), `${net.bootServerUrl}/ipxe/${a.spec.systemUUID}`);
      assert.equal(res.status, 403, res.body);
      // Refused for being B's address (client identity), not only because A's fetch pinned the script.
      assert.match(res.body, /UnknownClient/);
      assert.ok(!res.body.includes(token), 'no token in the answer');
      const refused = managerLines(stack).filter(
        (l) => l.systemUUID === a.spec.systemUUID && l.client === leaseOf(b) && /refused/.test(l.msg ?? ''),
      );
      assert.ok(refused.length >= 1, "the refusal is logged with B's address");

      await Promise.all([
        booted,
        claimAndWaitBooted(
          stack,
          'br-uefi',
          b.metadata.name!,
          { image: OS_IMAGE, bootPolicy: 'NetBootOnce' },
          400_000,
        ),
      ]);
      for (const [name, srv] of [
        ['br-bios', a],
        ['br-uefi', b],
      ] as const) {
        const done = await assertBootedAttempt1(stack, name, srv.metadata.name!, signals);
        const fetched = done.status?.conditions?.find((c) => c.type === 'IPXEScriptFetched');
        assert.match(
          fetched?.message ?? '',
          new RegExp(` served to ${leaseOf(srv).replaceAll('.', '\\.')}$`),
        );
      }
    } finally {
      // Claims made here are deleted (and their Servers released) whatever the outcome.
      await deleteClaim(stack, 'br-bios', a.metadata.name!).catch(() => undefined);
      await deleteClaim(stack, 'br-uefi', b.metadata.name!).catch(() => undefined);
    }
  });
});
