/**
 * The official Butane translator and Ignition validator behind src/ignition/ (the real
 * hack/ignition-tools binary, built by hack/build-ignition-tools.sh, which hack/test.sh runs).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { IgnitionTools } from '../../src/ignition/ignition-tools.js';
import { type IgnitionError, IgnitionRenderer } from '../../src/ignition/served-ignition.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const FCOS_15 = `variant: fcos
version: 1.5.0
passwd:
  users:
    - name: core
      groups: [wheel]
      ssh_authorized_keys:
        - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample core@example
storage:
  files:
    - path: /etc/hostname
      mode: 0644
      contents:
        inline: metal-host
systemd:
  units:
    - name: hello.service
      enabled: true
      contents: |
        [Unit]
        Description=hello
        [Service]
        ExecStart=/bin/echo hi
        [Install]
        WantedBy=multi-user.target
`;
const HOOK = {
  registryUrl: 'http://127.0.0.1:10000',
  uuid: '4c4c4544-0000-0000-0000-000000000001',
  token: 't'.repeat(43),
  attempt: 1,
};

type Cfg = {
  ignition: { version: string };
  passwd: { users: { name: string; groups: string[]; sshAuthorizedKeys: string[] }[] };
  storage: { files: { path: string; mode?: number; contents: { source: string } }[] };
  systemd: { units: { name: string; enabled?: boolean }[] };
};

describe('ignition tools (github.com/coreos/ignition/v2 v2.27.0)', () => {
  const tools = new IgnitionTools();
  const renderer = new IgnitionRenderer(tools);

  it('translates fcos 1.5 with files, units and a user; the result and the served config validate', async () => {
    const stored = await renderer.stored({ format: b64('fcos'), ignition: b64(FCOS_15) }, 'ns/a@1', 'a');
    const cfg = stored.config as unknown as Cfg;
    assert.equal(cfg.ignition.version, '3.4.0');
    assert.deepEqual(cfg.passwd.users[0]?.groups, ['wheel']);
    assert.match(cfg.passwd.users[0]!.sshAuthorizedKeys[0]!, /^ssh-ed25519 /);
    assert.deepEqual(cfg.storage.files[0], {
      path: '/etc/hostname',
      mode: 0o644,
      contents: { compression: '', source: 'data:,metal-host' },
    });
    assert.equal(cfg.systemd.units[0]?.name, 'hello.service');
    const served = JSON.parse(await renderer.render(stored, HOOK)) as Cfg;
    assert.deepEqual(
      served.systemd.units.map((u) => u.name),
      ['hello.service', 'metal-bootstate.service'],
    );
    assert.equal((await tools.validate(JSON.stringify(served))).ok, true);
  });

  it('Butane warnings do not fail (upstream semantics)', async () => {
    // Butane warns on a decimal-looking mode (`644` is not octal 0644) but translates it.
    const res = await tools.translate(
      'variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/x\n      mode: 644\n      contents:\n        inline: x\n',
    );
    assert.equal(res.ok, true, JSON.stringify(res));
    assert.ok(
      res.report.some((e) => e.kind === 'warning'),
      JSON.stringify(res.report),
    );
  });

  it('an invalid Butane config: InvalidButane with the translator report', async () => {
    await assert.rejects(
      renderer.stored(
        {
          format: b64('fcos'),
          ignition: b64('variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: etc/x\n'),
        },
        'ns/b@1',
        'b',
      ),
      (err: IgnitionError) =>
        err.reason === 'InvalidButane' &&
        /\$\.storage\.files\.0\.path \(line 5, column \d+\): path not absolute/.test(err.message),
    );
  });

  it('an invalid stored Ignition, and a hook that clashes with the stored units: InvalidIgnition', async () => {
    await assert.rejects(
      renderer.stored(
        { ignition: b64('{"ignition":{"version":"3.4.0"},"systemd":{"units":[{"name":"x"}]}}x') },
        'ns/c@1',
        'c',
      ),
      (err: IgnitionError) => err.reason === 'InvalidIgnition',
    );
    const clash = await renderer.stored(
      {
        ignition: b64(
          JSON.stringify({
            ignition: { version: '3.4.0' },
            systemd: { units: [{ name: 'metal-bootstate.service', enabled: false }] },
          }),
        ),
      },
      'ns/d@1',
      'd',
    );
    await assert.rejects(
      renderer.render(clash, HOOK),
      (err: IgnitionError) =>
        err.reason === 'InvalidIgnition' && /boot callback merged in.*duplicate/i.test(err.message),
    );
    assert.ok(await renderer.render(clash, undefined), 'valid without the hook');
  });

  it('a missing binary is IgnitionToolsUnavailable (retryable), not a config error', async () => {
    const broken = new IgnitionRenderer(new IgnitionTools('/nonexistent/ignition-tools'));
    await assert.rejects(
      broken.stored({ format: b64('fcos'), ignition: b64(FCOS_15) }, 'ns/e@1', 'e'),
      (err: IgnitionError) => err.reason === 'IgnitionToolsUnavailable' && err.retryable,
    );
  });
});
