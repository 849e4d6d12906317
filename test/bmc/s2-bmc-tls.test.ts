/**
 * Security review item S2 (issue 15): TLS to BMCs is verified unless the operator says otherwise.
 * A real HTTPS virtual BMC with a self-signed certificate, reached through the manager's own flag
 * parsing and BMC client factory: refused by default, accepted with the CA (flag or BMCSecret key
 * `ca.crt`), accepted with `--bmc-insecure-tls`; the client reports which mode it uses.
 */

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CommanderError } from 'commander';
import { pino } from 'pino';
import { describeTransportSecurity } from '../../src/bmc/bmc.js';
import { RedfishTransportError } from '../../src/bmc/errors.js';
import { parseManagerConfig } from '../../src/cmd/manager.js';
import {
  bmcSecretCredentials,
  classifyBmcFailure,
  defaultBmcFactory,
} from '../../src/controllers/bmc-actions/bmc-connections.js';
import { writeSelfSignedCertificate } from '../../src/localstack/control-plane.js';
import { startVirtualBmc, type VirtualBmc } from '../../src/virtualbmc/server.js';
import { SimHost } from '../../src/virtualbmc/sim.js';
import { simIdentity } from '../../src/virtualbmc/sim-fleet.js';
import { PASSWORD, USER } from './fixture.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');

describe('S2 TLS to BMCs is verified by default', () => {
  let dir: string;
  let cert: string;
  let caFile: string;
  let otherCaFile: string;
  let vbmc: VirtualBmc;
  const log = pino({ level: 'silent' });

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'bmc-s2-'));
    writeSelfSignedCertificate(join(dir, 'key.pem'), join(dir, 'cert.pem'));
    writeSelfSignedCertificate(join(dir, 'other-key.pem'), join(dir, 'other.pem'));
    cert = readFileSync(join(dir, 'cert.pem'), 'utf8');
    caFile = join(dir, 'cert.pem');
    otherCaFile = join(dir, 'other.pem');
    vbmc = await startVirtualBmc({
      hosts: [new SimHost({ identity: simIdentity(0, 's2'), bootServerUrl: 'http://127.0.0.1:9' })],
      username: USER,
      password: PASSWORD,
      tls: { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert },
    });
  });
  after(async () => {
    await vbmc.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** A BMC client exactly as the manager builds it from `args`. */
  const clientFor = (args: string[], ca?: string) => {
    const settings = { ...parseManagerConfig(args).controllers.bmc, callBudgetMs: 3_000 };
    return defaultBmcFactory({
      endpoint: vbmc.url,
      username: USER,
      password: PASSWORD,
      ...(ca ? { ca } : {}),
      settings,
      log,
    });
  };

  it('S2 refuses the self-signed certificate without flags, at once and as a certificate problem', async () => {
    assert.equal(parseManagerConfig([]).controllers.bmc.insecureTLS, false);
    const bmc = clientFor([]);
    try {
      assert.equal(bmc.transportSecurity, 'tls-verified-system-ca');
      const started = performance.now();
      const err = await bmc.listSystems().then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof RedfishTransportError && err.kind === 'tls', String(err));
      assert.ok(performance.now() - started < 1_500, 'certificate errors are not retried');
      assert.equal(classifyBmcFailure(err).reason, 'BMCCertificateRejected');
    } finally {
      await bmc.close();
    }
    assert.equal(
      vbmc.requests().length,
      0,
      'nothing (no credentials) reached the BMC over the unverified connection',
    );
  });

  it('S2 accepts it with --bmc-ca-file, and refuses it with an unrelated CA', async () => {
    const good = clientFor(['--bmc-ca-file', caFile]);
    const wrong = clientFor(['--bmc-ca-file', otherCaFile]);
    try {
      assert.equal(good.transportSecurity, 'tls-verified-ca-bundle');
      assert.equal((await good.listSystems()).length, 1);
      await assert.rejects(
        wrong.listSystems(),
        (e: unknown) => e instanceof RedfishTransportError && e.kind === 'tls',
      );
    } finally {
      await good.close();
      await wrong.close();
    }
  });

  it('S2 accepts it with the CA from the BMCSecret key ca.crt', async () => {
    const cred = bmcSecretCredentials({
      metadata: { name: 'bmc-s2' },
      data: { username: b64(USER), password: b64(PASSWORD), 'ca.crt': b64(cert) },
    });
    assert.equal(cred.ca, cert);
    const bmc = clientFor([], cred.ca);
    try {
      assert.equal(bmc.transportSecurity, 'tls-verified-ca-bundle');
      assert.equal((await bmc.listSystems()).length, 1);
    } finally {
      await bmc.close();
    }
  });

  it('S2 accepts it with --bmc-insecure-tls and says so', async () => {
    const bmc = clientFor(['--bmc-insecure-tls']);
    try {
      assert.equal(bmc.transportSecurity, 'tls-unverified');
      assert.match(describeTransportSecurity(bmc.transportSecurity), /without certificate verification/);
      assert.equal((await bmc.listSystems()).length, 1);
    } finally {
      await bmc.close();
    }
  });

  it('S2 rejects a --bmc-ca-file that is missing or holds no certificate', () => {
    const notPem = join(dir, 'not-pem.txt');
    writeFileSync(notPem, 'hello');
    for (const path of [notPem, join(dir, 'missing.pem')]) {
      assert.throws(
        () => parseManagerConfig(['--bmc-ca-file', path], { silent: true }),
        (e: unknown) => e instanceof CommanderError && e.code === 'manager.invalidCaFile',
      );
    }
  });
});
