import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CommanderError } from 'commander';
import { managerHelp, parseManagerConfig } from '../../src/cmd/manager.js';
import { managerBootMethod } from '../../src/controllers/bmc-actions/netboot-via.js';
import { formatDuration, parseDuration } from '../../src/controllers/common/duration.js';

test('manager flags: defaults', () => {
  const c = parseManagerConfig([]);
  assert.equal(c.controllers.defaultBootPolicy, 'NetBootAlways');
  assert.deepEqual(c.controllers.bootCompletionConditions, ['BootStateReceived']);
  assert.equal(c.controllers.bootTimeoutMs, 15 * 60_000);
  assert.equal(c.controllers.bootMaxAttempts, 3);
  assert.equal(c.controllers.discoveryMaxAttempts, 3);
  assert.equal(c.callbackAuth, 'required');
  assert.equal(c.leaderElect, false);
  assert.deepEqual(c.registry, { host: '0.0.0.0', port: 10000, url: undefined });
  assert.deepEqual(c.controllers.scopeLabels, {});
  const help = managerHelp();
  for (const flag of [
    '--boot-timeout',
    '--boot-max-attempts',
    '--discovery-timeout',
    '--callback-auth',
    '--default-boot-policy',
    '--leader-elect',
    '--registry-url',
    '--bootserver-addr',
  ]) {
    assert.ok(help.includes(flag), flag);
  }
  assert.match(help, /--boot-timeout <duration>[\s\S]*default: 15m0s/);
});

test('manager flags: values', () => {
  const c = parseManagerConfig([
    '--default-boot-policy',
    'NetBootOnce',
    '--boot-completion-conditions',
    'IPXEScriptFetched, BootStateReceived',
    '--boot-timeout',
    '1m30s',
    '--boot-max-attempts',
    '5',
    '--discovery-timeout',
    '500ms',
    '--callback-auth',
    'optional',
    '--image-catalog-configmap',
    'metal/catalog',
    '--registry-addr',
    '127.0.0.1:0',
    '--registry-url',
    'http://10.0.0.1:10000',
    '--object-selector',
    'team=a,env=test',
    '--leader-elect',
  ]);
  assert.equal(c.controllers.defaultBootPolicy, 'NetBootOnce');
  assert.deepEqual(c.controllers.bootCompletionConditions, ['IPXEScriptFetched', 'BootStateReceived']);
  assert.equal(c.controllers.bootTimeoutMs, 90_000);
  assert.equal(c.controllers.bootMaxAttempts, 5);
  assert.equal(c.controllers.discoveryTimeoutMs, 500);
  assert.equal(c.callbackAuth, 'optional');
  assert.deepEqual(c.imageCatalogConfigMap, { namespace: 'metal', name: 'catalog' });
  assert.deepEqual(c.registry, { host: '127.0.0.1', port: 0, url: 'http://10.0.0.1:10000' });
  assert.deepEqual(c.controllers.scopeLabels, { team: 'a', env: 'test' });
  assert.equal(c.leaderElect, true);
});

test('manager flags: bad input is a CommanderError', () => {
  for (const argv of [
    ['--boot-timeout', '15'],
    ['--boot-max-attempts', '0'],
    ['--default-boot-policy', 'Sometimes'],
    ['--callback-auth', 'maybe'],
    ['--boot-completion-conditions', 'not a condition'],
    ['--boot-completion-conditions', 'RegistrationReceived'],
    ['--boot-timeout', '0s'],
    ['--netboot-timeout', '0'],
    ['--image-catalog-configmap', 'no-slash'],
    ['--image-catalog', 'a.yaml', '--image-catalog-configmap', 'ns/cm'],
    ['--object-selector', 'team!=a'],
    ['--registry-addr', 'nowhere'],
    ['--no-such-flag'],
  ]) {
    assert.throws(() => parseManagerConfig(argv, { silent: true }), CommanderError, argv.join(' '));
  }
});

test('Go durations', () => {
  assert.equal(parseDuration('15m'), 900_000);
  assert.equal(parseDuration('1h30m'), 5_400_000);
  assert.equal(parseDuration('2.5s'), 2_500);
  assert.equal(parseDuration('250ms'), 250);
  assert.equal(parseDuration('0'), 0);
  for (const bad of ['', '15', 'm', '1d', '-1s', '1s2']) assert.throws(() => parseDuration(bad), Error, bad);
  assert.equal(formatDuration(90_000), '1m30s');
  assert.equal(formatDuration(2_000), '2s');
  assert.equal(formatDuration(250), '250ms');
});

test('manager flags: --log-level and --bmc-max-systems', () => {
  const d = parseManagerConfig([]);
  assert.equal(d.logLevel, process.env.LOG_LEVEL || 'info');
  assert.equal(d.controllers.bmcMaxSystems, 1024);
  const c = parseManagerConfig(['--log-level', 'debug', '--bmc-max-systems', '4']);
  assert.equal(c.logLevel, 'debug');
  assert.equal(c.controllers.bmcMaxSystems, 4);
  assert.throws(() => parseManagerConfig(['--log-level', 'loud'], { silent: true }));
  assert.throws(() => parseManagerConfig(['--bmc-max-systems', '0'], { silent: true }));
});

test('--kubeconfig naming no file: one line on stderr, exit 1, no stack trace (issue 36 item 11)', () => {
  const manager = fileURLToPath(new URL('../../src/cmd/manager.js', import.meta.url));
  const r = spawnSync(
    process.execPath,
    [
      manager,
      ...['--registry-addr', '127.0.0.1:0', '--bootserver-addr', '127.0.0.1:0'],
      ...['--kubeconfig', '/nonexistent/kubeconfig'],
    ],
    {
      encoding: 'utf8',
      timeout: 30_000,
    },
  );
  assert.equal(r.status, 1, r.stderr);
  assert.equal(r.stderr.trim(), 'error: --kubeconfig /nonexistent/kubeconfig: no such file');
});

test('discovery and cleanup boot method: --discovery-boot-method, else VirtualMedia only with --default-boot-method VirtualMedia', () => {
  const method = (args: string[]) => managerBootMethod(parseManagerConfig(args).controllers);
  assert.equal(method([]), 'PXE');
  assert.equal(
    method(['--default-boot-method', 'HTTPBoot']),
    'PXE',
    'HTTPBoot claims: discovery over iPXE as before',
  );
  assert.equal(method(['--default-boot-method', 'VirtualMedia']), 'VirtualMedia');
  assert.equal(method(['--default-boot-method', 'VirtualMedia', '--discovery-boot-method', 'PXE']), 'PXE');
  assert.equal(method(['--discovery-boot-method', 'VirtualMedia']), 'VirtualMedia');
  assert.throws(
    () => parseManagerConfig(['--discovery-boot-method', 'HTTPBoot'], { silent: true }),
    CommanderError,
  );
  assert.match(managerHelp(), /--discovery-boot-method <method>/);
});
