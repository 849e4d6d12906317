/**
 * Issue 28 item 1: the system's NICs from `ComputerSystem.EthernetInterfaces`, parsed over each
 * captured vendor tree in `../shared/redfish-mockups/` (DMTF public-rackmount1, libredfish Dell
 * iDRAC 9, HPE iLO 5, Supermicro) and read by `RedfishBMC` from the virtual BMC, which reports its
 * host's real MAC (the MAC the sim host registers and QEMU gives the VM's NIC).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  parseCollection,
  parseEthernetInterface,
  parseEthernetInterfacesUri,
  RedfishParseError,
} from '../../src/bmc/parse.js';
import { loadProfileTree } from '../../src/virtualbmc/profile-tree.js';
import { startFixture } from './fixture.js';

const MOCKUPS = '../shared/redfish-mockups';

const TREES: Record<string, { dir: string; macs: string[]; link: Record<string, string | undefined> }> = {
  dmtf: {
    dir: 'dmtf-public-rackmount1',
    // VLAN1 repeats its parent NIC's MAC; ToManager is the host interface to the BMC.
    macs: ['12:44:6a:3b:04:11', 'aa:bb:cc:dd:ee:00', '12:44:6a:3b:04:11', 'aa:bb:cc:dd:ee:fe'],
    link: { '12446A3B0411': 'LinkUp' },
  },
  dell: {
    dir: 'libredfish-dell',
    macs: [
      '70:b5:e8:f0:52:dc',
      'e4:3d:1a:13:27:f1',
      'e4:3d:1a:13:27:f0',
      '70:b5:e8:f0:52:dd',
      'b8:3f:d2:90:97:c4',
    ],
    // iDRAC reports upper-case MACs and no LinkStatus on a disabled slot NIC.
    link: { 'NIC.Embedded.1-1-1': 'LinkDown', 'NIC.Slot.5-1': undefined },
  },
  hpe: {
    dir: 'libredfish-hpe',
    macs: [
      '50:7c:6f:11:f2:a6',
      '50:7c:6f:11:f2:a7',
      '50:7c:6f:11:f2:a8',
      '50:7c:6f:11:f2:a9',
      '88:e9:a4:87:42:c8',
      '88:e9:a4:80:9d:a2',
      'b8:3f:d2:d7:f7:4a',
    ],
    // iLO 5 leaves LinkStatus null.
    link: { '1': undefined },
  },
  supermicro: {
    dir: 'libredfish-supermicro',
    macs: [
      '94:6d:ae:91:fb:22',
      '94:6d:ae:91:09:c2',
      '94:6d:ae:91:6a:9a',
      '94:6d:ae:91:67:6a',
      '94:6d:ae:91:dd:1a',
      '94:6d:ae:91:75:9a',
      '94:6d:ae:91:75:ba',
      '94:6d:ae:91:73:8a',
      '7c:c2:55:79:3f:8e',
      '7c:c2:55:79:3f:8f',
      '94:6d:ae:b2:b1:4e',
      'be:3a:f2:b6:05:9f',
    ],
    link: { '1': 'LinkDown', ToManager: undefined },
  },
};

for (const [name, x] of Object.entries(TREES)) {
  it(`captured tree ${name}: EthernetInterfaces link, members, canonical MACs and link state`, () => {
    const tree = loadProfileTree(`${MOCKUPS}/${x.dir}`);
    const uri = parseEthernetInterfacesUri(tree.get(tree.systemUri), tree.systemUri);
    assert.equal(uri, `${tree.systemUri}/EthernetInterfaces`);
    const members = parseCollection(tree.get(uri!), uri!);
    const nics = members.map((m) => parseEthernetInterface(tree.get(m.uri), m.uri));
    assert.deepEqual(
      nics.map((n) => n?.macAddress),
      x.macs,
    );
    for (const [id, link] of Object.entries(x.link)) {
      assert.equal(nics.find((n) => n?.id === id)?.linkStatus, link, `${id} LinkStatus`);
    }
  });
}

describe('parseEthernetInterface', () => {
  it('falls back to PermanentMACAddress; a member without a usable MAC says nothing', () => {
    const r = '/redfish/v1/Systems/1/EthernetInterfaces/x';
    assert.equal(
      parseEthernetInterface({ PermanentMACAddress: 'AA-BB-CC-DD-EE-01' }, r)?.macAddress,
      'aa:bb:cc:dd:ee:01',
    );
    assert.equal(parseEthernetInterface({ Id: 'x', MACAddress: '00:00:00:00:00:00' }, r), undefined);
    assert.equal(parseEthernetInterface({ Id: 'x', MACAddress: 'not-a-mac' }, r), undefined);
    assert.equal(parseEthernetInterface({ Id: 'x' }, r), undefined);
    assert.throws(() => parseEthernetInterface([], r), RedfishParseError);
  });
  it('a system without the link has no NICs; a link to another origin is refused', () => {
    const r = '/redfish/v1/Systems/1';
    assert.equal(parseEthernetInterfacesUri({ Id: '1' }, r), undefined);
    assert.throws(
      () => parseEthernetInterfacesUri({ EthernetInterfaces: { '@odata.id': '//evil.example/x' } }, r),
      RedfishParseError,
    );
  });
});

describe('RedfishBMC.ethernetInterfaces against the virtual BMC', () => {
  it("reports each host's own MAC, the one it registers", async () => {
    const f = await startFixture({ systems: 2 });
    try {
      for (let i = 0; i < 2; i++) {
        const nics = await f.bmc.ethernetInterfaces(f.uri(i));
        assert.deepEqual(
          nics.map((n) => [n.macAddress, n.linkStatus]),
          [[f.hosts[i]!.identity.macAddress, 'LinkUp']],
        );
      }
    } finally {
      await f.close();
    }
  });
  it('a BMC that reports no NIC: []', async () => {
    const f = await startFixture({ profile: { omitEthernetInterfaces: true } });
    try {
      assert.deepEqual(await f.bmc.ethernetInterfaces(f.uri()), []);
    } finally {
      await f.close();
    }
  });
});
