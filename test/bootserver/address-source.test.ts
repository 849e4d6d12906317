/**
 * Issue 28 item 3: the address → MAC sources of the boot server (src/bootserver/address-source.ts).
 * Pure parsing of dnsmasq's lease file and `/proc/net/arp`; then the real thing on the bridged test
 * network (src/localstack/test-network.ts): dnsmasq leases an address to a machine on the segment
 * (its own namespace, a veth with a chosen MAC, busybox udhcpc), `DnsmasqLeases` on dnsmasq's own
 * lease file maps that address to that MAC, and `NeighbourTable` does after the machine talked to
 * the host end of the segment. Needs root and dnsmasq (`bridgeNetworkProblem` says why not).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  ChainedSource,
  DnsmasqLeases,
  NeighbourTable,
  parseAddressSource,
  parseDnsmasqLeases,
  parseProcNetArp,
} from '../../src/bootserver/address-source.js';
import { bridgeNetworkProblem, TestNetwork } from '../../src/localstack/test-network.js';

describe('lease and neighbour parsing', () => {
  it('dnsmasq leases: current and infinite ones count, expired ones and the DHCPv6 header do not', () => {
    const now = 1_800_000_000;
    const t = parseDnsmasqLeases(
      [
        `${now + 60} 52:54:00:aa:bb:01 10.0.0.5 host1 01:52:54:00:aa:bb:01`,
        `0 52:54:00:AA:BB:02 10.0.0.6 * *`,
        `${now - 1} 52:54:00:aa:bb:03 10.0.0.7 * *`,
        'duid 00:01:00:01:2c:aa:bb:cc:dd:ee:ff:00:11',
        `${now + 60} 52:54:00:aa:bb:01 10.0.0.8 * *`,
        'garbage',
        '',
      ].join('\n'),
      now,
    );
    assert.equal(t.byAddress.get('10.0.0.5'), '52:54:00:aa:bb:01');
    assert.equal(t.byAddress.get('10.0.0.6'), '52:54:00:aa:bb:02', 'expiry 0: infinite, MAC canonical');
    assert.equal(t.byAddress.get('10.0.0.7'), undefined, 'expired');
    assert.deepEqual(t.byMac.get('52:54:00:aa:bb:01'), ['10.0.0.5', '10.0.0.8']);
  });
  it('/proc/net/arp: complete entries only', () => {
    const t = parseProcNetArp(
      [
        'IP address       HW type     Flags       HW address            Mask     Device',
        '10.251.3.57      0x1         0x2         52:54:00:12:34:56     *        veth0',
        '10.251.3.58      0x1         0x0         00:00:00:00:00:00     *        veth0',
      ].join('\n'),
    );
    assert.equal(t.byAddress.get('10.251.3.57'), '52:54:00:12:34:56');
    assert.equal(t.byAddress.get('10.251.3.58'), undefined);
  });
  it('DnsmasqLeases reads the file again when it changes, and never throws on a missing one', () => {
    const dir = mkdtempSync(join(tmpdir(), 'leases-'));
    try {
      const file = join(dir, 'leases');
      let now = 1_800_000_000_000;
      const src = new DnsmasqLeases(file, () => now);
      assert.equal(src.macOf('10.0.0.5'), undefined, 'missing file: no leases');
      writeFileSync(file, '0 52:54:00:aa:bb:01 10.0.0.5 * *\n');
      now += 11_000;
      assert.equal(src.macOf('10.0.0.5'), '52:54:00:aa:bb:01');
      writeFileSync(file, '0 52:54:00:aa:bb:09 10.0.0.5 * *\n0 52:54:00:aa:bb:01 10.0.0.9 * *\n');
      now += 11_000;
      assert.equal(src.macOf('10.0.0.5'), '52:54:00:aa:bb:09', 're-leased address');
      assert.deepEqual(src.addressesOf('52:54:00:AA:BB:01'), ['10.0.0.9'], 'moved address');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it('NeighbourTable: read once a second, but a new address is looked for again after 100 ms', () => {
    const dir = mkdtempSync(join(tmpdir(), 'arp-'));
    try {
      const file = join(dir, 'arp');
      const head = 'IP address       HW type     Flags       HW address            Mask     Device\n';
      writeFileSync(file, `${head}10.0.0.5 0x1 0x2 52:54:00:aa:bb:01 * eth0\n`);
      let now = 1_000_000;
      const src = new NeighbourTable(file, () => now);
      assert.equal(src.macOf('10.0.0.5'), '52:54:00:aa:bb:01');
      writeFileSync(
        file,
        `${head}10.0.0.5 0x1 0x2 52:54:00:aa:bb:01 * eth0\n10.0.0.6 0x1 0x2 52:54:00:aa:bb:02 * eth0\n`,
      );
      now += 50;
      assert.equal(src.macOf('10.0.0.6'), undefined, 'within 100 ms: the table as read');
      now += 100;
      assert.equal(src.macOf('10.0.0.6'), '52:54:00:aa:bb:02', 'a miss reads the table again');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it('--client-mac-source: none, one source, a chain; a bad entry is an error', () => {
    assert.equal(parseAddressSource('none'), undefined);
    assert.ok(parseAddressSource('dnsmasq-leases=/x') instanceof DnsmasqLeases);
    assert.ok(parseAddressSource('neighbours') instanceof NeighbourTable);
    assert.ok(parseAddressSource('dnsmasq-leases=/x,neighbours') instanceof ChainedSource);
    assert.throws(() => parseAddressSource('dhcpd=/x'), /not dnsmasq-leases/);
    assert.throws(() => parseAddressSource('dnsmasq-leases'), /not dnsmasq-leases/);
  });
});

describe('on the bridged test network (dnsmasq)', { skip: bridgeNetworkProblem() }, () => {
  it('the address dnsmasq leased maps to the MAC that asked for it; the neighbour table agrees', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'metal-tn-leases-'));
    const net = await TestNetwork.create({ tag: 'lease', dir, bootServerPort: 9 });
    try {
      const macs = ['02:28:00:00:00:0a', '02:28:00:00:00:0b'];
      const hosts = macs.map((m) => net.dhcpClient(m));
      const leases = new DnsmasqLeases(net.leaseFile);
      for (const [i, h] of hosts.entries()) {
        assert.match(h.address, /^10\.251\.\d+\.\d+$/);
        assert.equal(
          leases.macOf(h.address),
          macs[i],
          `lease of ${h.address}: ${JSON.stringify(net.leases())}`,
        );
        assert.deepEqual(leases.addressesOf(macs[i]!), [h.address]);
      }
      assert.notEqual(hosts[0]!.address, hosts[1]!.address);
      // The boot server's side of the segment learns the MAC over ARP once the machine talks to it.
      hosts[0]!.run(['/usr/bin/busybox', 'ping', '-c', '1', '-W', '2', net.hostAddress]);
      assert.equal(new NeighbourTable().macOf(hosts[0]!.address), macs[0]);
    } finally {
      await net.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
