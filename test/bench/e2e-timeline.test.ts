/**
 * bench/e2e-timeline.ts on one hand-made run (pure logic, no stack): the steps add up to the total,
 * BMC time is never counted as ours (a log line written after the first BMC request does not split
 * it), a repeated step adds up, and a run without its ignition request is refused by name.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildTimeline, type LogEvent, type RunEvidence } from '../../bench/e2e-timeline.js';
import type { RequestRecord } from '../../src/virtualbmc/server.js';

const UUID = '5e1f0000-0000-4000-8000-000000000000';
const SYS = `/redfish/v1/Systems/${UUID}`;

function bmc(method: string, path: string, at: number, answeredAt: number): RequestRecord {
  return { at, answeredAt, method, path, status: 200, auth: 'session', ifMatch: undefined, body: undefined };
}

function served(method: string, url: string, end: number, ms: number): LogEvent {
  return { t: end, msg: 'request served', method, url, ms };
}

/** A UEFI HTTP boot: t0 = 1000; the SBC Ready line comes 3 ms after the first BMC request. */
function run(): RunEvidence {
  return {
    claim: 'c1',
    systemUUID: UUID,
    t0: 1000,
    sbcCreated: 1030,
    booted: 9000,
    bmc: [
      bmc('GET', SYS, 1050, 1052),
      bmc('PATCH', SYS, 1055, 1060),
      bmc('GET', SYS, 1062, 1063),
      bmc('POST', `${SYS}/Actions/ComputerSystem.Reset`, 1064, 1120),
      bmc('GET', SYS, 1125, 1126), // the re-read after the Reset: not on the boot's path
    ],
    log: [
      { t: 1020, msg: 'bound', name: 'c1' },
      { t: 1053, msg: 'boot configuration evaluated', name: 'c1', state: 'Ready' },
      served('HEAD', `/httpboot/${UUID}/1/uki.efi`, 5150, 150),
      { t: 5210, msg: 'HTTP boot file served', systemUUID: UUID },
      served('GET', `/httpboot/${UUID}/1/uki.efi`, 6700, 1500),
      served('GET', `/ignition/${UUID}?…`, 8910, 10),
      served('POST', '/bootstate', 8990, 6),
    ],
  };
}

describe('e2e timeline', () => {
  it('cuts a run into steps that add up, with BMC time never ours', () => {
    const steps = buildTimeline(run());
    const ms = (label: string) => steps.find((s) => s.label.startsWith(label))?.ms;
    assert.equal(
      steps.reduce((a, s) => a + s.ms, 0),
      8000,
      'the steps add up to t0 → Booted',
    );
    assert.equal(ms('ours: → claim Bound'), 20);
    assert.equal(ms('ours: → SBC created'), 10);
    assert.equal(ms('ours: → SBC Ready'), 20, 'clamped to the first BMC request at 1050');
    assert.equal(ms('BMC: answering GET/PATCH'), 2 + 5 + 1, 'three answers before the Reset');
    assert.equal(ms('ours: → next BMC request'), 3 + 2 + 1, 'three gaps');
    assert.equal(ms('BMC: answering the Reset'), 56);
    assert.equal(ms('ours: HEAD uki.efi answered'), 150);
    assert.equal(ms('ours: GET uki.efi → body starts'), 10);
    assert.equal(ms('ours: ignition served'), 10);
    assert.equal(ms('ours: /bootstate received'), 9000 - 8984);
    const ours = steps.filter((s) => s.ours).reduce((a, s) => a + s.ms, 0);
    assert.equal(ours, 20 + 10 + 20 + 0 + 6 + 150 + 10 + 10 + 16);
  });

  it('names the missing mark of an incomplete run', () => {
    const ev = run();
    ev.log = ev.log.filter((l) => !l.url?.startsWith('/ignition/'));
    assert.throws(() => buildTimeline(ev), /no ignition request/);
  });
});
