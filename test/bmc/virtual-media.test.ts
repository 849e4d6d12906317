/**
 * RedfishBMC.insertMedia / ejectMedia against the virtual BMC serving each vendor's captured tree
 * (../shared/redfish-mockups, read by relative path) and the built-in documents: the CD is found
 * where the vendor puts it (HPE Manager slot 2, Dell's System collection, Supermicro's Manager, DMTF
 * System CD1), present media is ejected before a new insert, Supermicro's insert carries no
 * Inserted/WriteProtected, an image the BMC cannot read fails the insert, and a system without
 * virtual media gets VirtualMediaNotSupportedError. No cluster.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { RedfishHttpError, VirtualMediaNotSupportedError } from '../../src/bmc/errors.js';
import { RedfishBMC } from '../../src/bmc/redfish-bmc.js';
import { resolveProfile, type ServiceProfile } from '../../src/virtualbmc/profile.js';
import { startVirtualBmc, type VirtualBmc } from '../../src/virtualbmc/server.js';
import { SimHost } from '../../src/virtualbmc/sim.js';
import { simIdentity } from '../../src/virtualbmc/sim-fleet.js';

const IMAGE = Buffer.alloc(64 * 1024, 7);
let images: Server;
let base = '';

before(async () => {
  // A minimal image server with single-range support, as the boot server has.
  images = createServer((req, res) => {
    if (!req.url?.startsWith('/ok/')) return void res.writeHead(404).end();
    const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
    if (!m) return void res.writeHead(200, { 'content-length': IMAGE.length }).end(IMAGE);
    const [a, b] = [Number(m[1]), Math.min(Number(m[2]), IMAGE.length - 1)];
    res.writeHead(206, { 'content-range': `bytes ${a}-${b}/${IMAGE.length}` }).end(IMAGE.subarray(a, b + 1));
  });
  await new Promise<void>((ok) => images.listen(0, '127.0.0.1', ok));
  base = `http://127.0.0.1:${(images.address() as AddressInfo).port}`;
});
after(() => new Promise<void>((ok) => images.close(() => ok())));

async function withBmc(
  profile: Partial<ServiceProfile>,
  f: (bmc: RedfishBMC, vbmc: VirtualBmc, systemUri: string) => Promise<void>,
): Promise<void> {
  const host = new SimHost({ identity: simIdentity(0, 'vmedia'), bootServerUrl: base });
  const vbmc = await startVirtualBmc({ hosts: [host], username: 'admin', password: 'secret', profile });
  const bmc = new RedfishBMC({ endpoint: vbmc.url, username: 'admin', password: 'secret' });
  try {
    await f(bmc, vbmc, vbmc.systems[0]!.uri);
  } finally {
    await bmc.close();
    await vbmc.close();
  }
}

const posts = (vbmc: VirtualBmc) =>
  vbmc
    .requests()
    .filter((r) => (r.method === 'POST' || r.method === 'PATCH') && r.path.includes('VirtualMedia'))
    .map((r) => ({ method: r.method, path: r.path, status: r.status, body: r.body }));

describe('virtual media per vendor', () => {
  const cases: Array<[string, Partial<ServiceProfile>, RegExp, boolean]> = [
    ['built-in', {}, /\/Systems\/[^/]+\/VirtualMedia\/CD1$/, true],
    ['dmtf', resolveProfile('dmtf'), /^\/redfish\/v1\/Systems\/437XR1138R2\/VirtualMedia\/CD1$/, true],
    ['dell', resolveProfile('dell'), /^\/redfish\/v1\/Systems\/System\.Embedded\.1\/VirtualMedia\/1$/, true],
    ['hpe', resolveProfile('hpe'), /^\/redfish\/v1\/Managers\/1\/VirtualMedia\/2$/, true],
    [
      'supermicro',
      resolveProfile('supermicro'),
      /^\/redfish\/v1\/Managers\/1\/VirtualMedia\/VirtualMedia1$/,
      false,
    ],
  ];
  for (const [name, profile, where, flags] of cases) {
    it(`${name}: finds the CD, inserts, ejects before a new insert, ejects`, async () => {
      await withBmc(profile, async (bmc, vbmc, systemUri) => {
        const first = await bmc.insertMedia(systemUri, `${base}/ok/a.iso`);
        assert.match(first.device.uri, where);
        assert.equal(first.inserted, true);
        assert.equal(first.device.inserted, true);
        assert.equal(first.device.writeProtected, true);
        const insert = posts(vbmc).find((p) => p.path.endsWith('InsertMedia'));
        assert.deepEqual(
          insert?.body,
          flags
            ? { Image: `${base}/ok/a.iso`, Inserted: true, WriteProtected: true }
            : { Image: `${base}/ok/a.iso` },
        );
        vbmc.clearRequests();
        const same = await bmc.insertMedia(systemUri, `${base}/ok/a.iso`);
        assert.equal(same.inserted, false, 'the same image is not inserted again');
        assert.deepEqual(posts(vbmc), []);
        const second = await bmc.insertMedia(systemUri, `${base}/ok/b.iso`);
        assert.equal(second.ejected, true);
        const seq = posts(vbmc).map((p) => `${p.method} ${p.path.split('/').pop()} ${p.status}`);
        assert.equal(seq.length, 2, seq.join('; '));
        assert.match(
          seq[0]!,
          name === 'supermicro' || name === 'dmtf'
            ? /^PATCH (VirtualMedia1|CD1) 204$/
            : /^POST VirtualMedia\.EjectMedia 204$/,
        );
        assert.match(seq[1]!, /^POST VirtualMedia\.InsertMedia 204$/);
        const out = await bmc.ejectMedia(systemUri);
        assert.equal(out.ejected, true);
        assert.equal((await bmc.ejectMedia(systemUri)).ejected, false, 'an empty drive is left alone');
      });
    });
  }

  it('an image the BMC cannot read fails the insert with 400', async () => {
    await withBmc({}, async (bmc, _vbmc, systemUri) => {
      await assert.rejects(bmc.insertMedia(systemUri, `${base}/missing.iso`), (err: unknown) => {
        assert.ok(err instanceof RedfishHttpError);
        assert.equal(err.status, 400);
        assert.match(err.message, /cannot be read: .*HTTP 404/);
        return true;
      });
    });
  });

  it('a system without virtual media: VirtualMediaNotSupportedError', async () => {
    await withBmc({ virtualMedia: false }, async (bmc, _vbmc, systemUri) => {
      await assert.rejects(bmc.insertMedia(systemUri, `${base}/ok/a.iso`), VirtualMediaNotSupportedError);
    });
  });
});
