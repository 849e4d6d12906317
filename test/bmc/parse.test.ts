import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import {
  canonicalMac,
  parseCollection,
  parseComputerSystem,
  parseManager,
  parsePowerState,
  parseRedfishError,
  parseResetActionInfo,
  parseServiceRoot,
  parseSession,
  parseSettingsUri,
  parseSystemUUID,
  RedfishParseError,
} from '../../src/bmc/parse.js';

// Tests run with cwd = repository root; the mockups are shared, read-only reference data.
const MOCKUP = '../shared/redfish-mockups/dmtf-public-rackmount1';

function mockup(path: string): Record<string, unknown> {
  return JSON.parse(readFileSync(`${MOCKUP}/${path}/index.json`, 'utf8')) as Record<string, unknown>;
}

const SYSTEM_URI = '/redfish/v1/Systems/437XR1138R2';

describe('Redfish parsing of the DMTF public-rackmount1 mockup', () => {
  it('reads the service root links and canonical UUID', () => {
    const root = parseServiceRoot(mockup(''), '/redfish/v1/');
    assert.equal(root.redfishVersion, '1.15.0');
    assert.equal(root.uuid, '92384634-2938-2342-8820-489239905423');
    assert.equal(root.systemsUri, '/redfish/v1/Systems');
    assert.equal(root.managersUri, '/redfish/v1/Managers');
    assert.equal(root.sessionsUri, '/redfish/v1/SessionService/Sessions');
    assert.equal(root.vendor, undefined);
  });

  it('lists the members of the Systems, Managers and Sessions collections', () => {
    assert.deepEqual(parseCollection(mockup('Systems'), '/redfish/v1/Systems'), [
      { id: '437XR1138R2', uri: SYSTEM_URI },
    ]);
    assert.deepEqual(parseCollection(mockup('Managers'), '/redfish/v1/Managers'), [
      { id: 'BMC', uri: '/redfish/v1/Managers/BMC' },
    ]);
    assert.deepEqual(
      parseCollection(mockup('SessionService/Sessions'), '/redfish/v1/SessionService/Sessions').map(
        (m) => m.id,
      ),
      ['1234567890ABCDEF', '1234567890ABCDEG'],
    );
  });

  it('reads identity, power state, boot settings and summaries of a ComputerSystem', () => {
    const sys = parseComputerSystem(mockup('Systems/437XR1138R2'), SYSTEM_URI);
    assert.deepEqual(sys.info, {
      id: '437XR1138R2',
      uri: SYSTEM_URI,
      uuid: '38947555-7742-3448-3784-823347823834',
      serialNumber: '437XR1138R2',
      manufacturer: 'Contoso',
      model: '3500',
      powerState: 'On',
      boot: {
        target: 'Pxe',
        enabled: 'Once',
        mode: 'UEFI',
        allowedTargets: [
          'None',
          'Pxe',
          'Cd',
          'Usb',
          'Hdd',
          'BiosSetup',
          'Utilities',
          'Diags',
          'SDCard',
          'UefiTarget',
        ],
      },
      memoryGiB: 96,
      processorCount: 2,
    });
    assert.deepEqual(sys.reset, {
      target: `${SYSTEM_URI}/Actions/ComputerSystem.Reset`,
      allowed: [
        'On',
        'ForceOff',
        'GracefulShutdown',
        'GracefulRestart',
        'ForceRestart',
        'Nmi',
        'ForceOn',
        'PushPowerButton',
      ],
      actionInfoUri: undefined,
    });
    assert.equal(sys.settingsUri, undefined);
  });

  it('canonicalises an upper-case or braced system UUID to lower case', () => {
    const body = { ...mockup('Systems/437XR1138R2'), UUID: '{38947555-7742-3448-3784-82334782383A}' };
    assert.equal(parseSystemUUID(body, SYSTEM_URI), '38947555-7742-3448-3784-82334782383a'.toLowerCase());
  });

  it('rejects a system without UUID with a typed error naming resource and field (C01)', () => {
    const body = mockup('Systems/437XR1138R2');
    delete body['UUID'];
    assert.throws(
      () => parseComputerSystem(body, SYSTEM_URI),
      (err: unknown) =>
        err instanceof RedfishParseError &&
        err.resource === SYSTEM_URI &&
        err.field === 'UUID' &&
        err.problem === 'missing' &&
        err.message.includes(SYSTEM_URI) &&
        err.message.includes('UUID'),
    );
  });

  it('rejects a UUID that is not a UUID, showing the value', () => {
    const body = { ...mockup('Systems/437XR1138R2'), UUID: 'Not Settable' };
    assert.throws(
      () => parseSystemUUID(body, SYSTEM_URI),
      (err: unknown) =>
        err instanceof RedfishParseError && err.problem === 'invalid' && err.message.includes('Not Settable'),
    );
  });

  it('reads a boot target and power state outside the DMTF enums as reported (issue 16, tolerant reading)', () => {
    const body = mockup('Systems/437XR1138R2');
    (body['Boot'] as Record<string, unknown>)['BootSourceOverrideTarget'] = 'UsbKey';
    (body['Boot'] as Record<string, unknown>)['BootSourceOverrideEnabled'] = 'OnceThenOff';
    body['PowerState'] = 'Sleeping';
    const sys = parseComputerSystem(body, SYSTEM_URI);
    assert.equal(sys.info.boot.target, 'UsbKey');
    assert.equal(sys.info.boot.enabled, 'OnceThenOff');
    assert.equal(sys.info.powerState, 'Sleeping');
    (body['Boot'] as Record<string, unknown>)['BootSourceOverrideTarget'] = 42;
    delete body['PowerState'];
    const odd = parseComputerSystem(body, SYSTEM_URI);
    assert.equal(odd.info.boot.target, undefined, 'a non-string value counts as not reported');
    assert.equal(odd.info.powerState, undefined);
  });

  it('reads PowerState without needing a UUID, and rejects unknown power states', () => {
    const body = mockup('Systems/437XR1138R2');
    delete body['UUID'];
    assert.equal(parsePowerState(body, SYSTEM_URI), 'On');
    assert.throws(
      () => parsePowerState({ ...body, PowerState: 'Sleeping' }, SYSTEM_URI),
      (err: unknown) =>
        err instanceof RedfishParseError && err.field === 'PowerState' && err.problem === 'invalid',
    );
  });

  it('drops unknown entries of allowable-value lists instead of failing', () => {
    const body = mockup('Systems/437XR1138R2');
    const actions = body['Actions'] as Record<string, Record<string, unknown>>;
    actions['#ComputerSystem.Reset']!['ResetType@Redfish.AllowableValues'] = [
      'On',
      'OemWarmBoot',
      'ForceOff',
    ];
    assert.deepEqual(parseComputerSystem(body, SYSTEM_URI).reset?.allowed, ['On', 'ForceOff']);
  });

  it('reads a Manager and its settings object', () => {
    const body = mockup('Managers/BMC');
    assert.deepEqual(parseManager(body, '/redfish/v1/Managers/BMC'), {
      id: 'BMC',
      uri: '/redfish/v1/Managers/BMC',
      uuid: '58893887-8974-2487-2389-841168418919',
      managerType: 'BMC',
      manufacturer: 'Contoso',
      model: 'Joo Janta 200',
      firmwareVersion: '1.45.455b66-rev4',
    });
    assert.equal(parseSettingsUri(body, '/redfish/v1/Managers/BMC'), '/redfish/v1/Managers/BMC/Settings');
  });

  it('reads the @Redfish.Settings SettingsObject of the BIOS resource', () => {
    assert.equal(
      parseSettingsUri(mockup('Systems/437XR1138R2/Bios'), `${SYSTEM_URI}/Bios`),
      `${SYSTEM_URI}/Bios/Settings`,
    );
  });

  it('reads a Session', () => {
    const uri = '/redfish/v1/SessionService/Sessions/1234567890ABCDEF';
    assert.deepEqual(parseSession(mockup('SessionService/Sessions/1234567890ABCDEF'), uri), {
      id: '1234567890ABCDEF',
      userName: 'Administrator',
      uri,
    });
  });

  it('canonicalises the MAC addresses of the EthernetInterfaces', () => {
    const nic = mockup('Systems/437XR1138R2/EthernetInterfaces/12446A3B0411');
    assert.equal(canonicalMac(nic['MACAddress']), '12:44:6a:3b:04:11');
    assert.equal(canonicalMac('12-44-6A-3B-04-11'), '12:44:6a:3b:04:11');
    assert.equal(canonicalMac('12:44:6A'), undefined);
  });

  it('reads allowable reset types from an ActionInfo resource', () => {
    const info = {
      Parameters: [
        { Name: 'ResetType', Required: true, AllowableValues: ['On', 'ForceOff', 'PushPowerButton'] },
      ],
    };
    assert.deepEqual(parseResetActionInfo(info, '/x/ResetActionInfo'), ['On', 'ForceOff', 'PushPowerButton']);
    assert.throws(() => parseResetActionInfo({ Parameters: [] }, '/x'), RedfishParseError);
  });

  it('extracts message ids from Redfish error bodies, including the iLO 4 spelling', () => {
    assert.deepEqual(
      parseRedfishError({
        error: {
          code: 'iLO.0.10.ExtendedInfo',
          message: 'See @Message.ExtendedInfo',
          '@Message.ExtendedInfo': [{ MessageID: 'iLO.0.10.InvalidOperationForSystemState' }],
        },
      }),
      {
        code: 'iLO.0.10.ExtendedInfo',
        message: 'See @Message.ExtendedInfo',
        messageIds: ['iLO.0.10.InvalidOperationForSystemState'],
      },
    );
    assert.deepEqual(parseRedfishError('<html>busy</html>'), {
      code: undefined,
      message: undefined,
      messageIds: [],
    });
  });

  it('rejects a collection whose Members is not a list', () => {
    assert.throws(
      () => parseCollection({ Members: { '@odata.id': '/x' } }, '/redfish/v1/Systems'),
      (err: unknown) => err instanceof RedfishParseError && err.field === 'Members',
    );
  });
});
