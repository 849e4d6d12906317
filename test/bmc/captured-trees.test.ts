/**
 * Issue 16 item 1: the parsers over each Redfish tree in `../shared/redfish-mockups/` (see its
 * NOTICE.md): DMTF public-rackmount1 and the libredfish captures of a Dell PowerEdge R750 (iDRAC 9),
 * an HPE ProLiant DL385 Gen10 Plus v2 (iLO 5) and a Supermicro SYS-821GE-TNHR. Read from the shared
 * folder through `loadProfileTree`, the same loader the virtual BMC serves them with.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  isServicePath,
  parseCollection,
  parseComputerSystem,
  parseManager,
  parseResetActionInfo,
  parseServiceRoot,
  parseSettingsUri,
} from '../../src/bmc/parse.js';
import { quirksForManufacturer } from '../../src/bmc/vendor.js';
import { loadProfileTree } from '../../src/virtualbmc/profile-tree.js';

/**
 * The shared folder, `../shared` relative to the working directory (the repository root in CI);
 * METAL_SHARED_DIR names another one (test/config/mutations.test.ts points it at a missing folder
 * to show every test here fails then).
 */
const MOCKUPS = `${process.env.METAL_SHARED_DIR ?? '../shared'}/redfish-mockups`;

interface Expected {
  dir: string;
  root: { redfishVersion: string; vendor: string | undefined; uuid: string | undefined };
  systemUri: string;
  system: {
    uuid: string;
    manufacturer: string;
    model: string;
    serialNumber: string;
    vendor: string;
    memoryGiB: number;
    processorCount: number;
  };
  boot: { target: string; enabled: string; mode: string; allowedTargets: string[] };
  reset: { target: string; allowed: string[] | undefined; actionInfoUri: string | undefined };
  /** ResetTypes of the ActionInfo resource, when the reset action points to one. */
  actionInfo?: string[];
  odataEtag: RegExp | undefined;
  manager: { uri: string; uuid: string | undefined; model: string; firmwareVersion: string };
  managerEtag: RegExp | undefined;
  /** SettingsObject of the Bios resource (Redfish Settings: changes wait there for the next reset). */
  biosSettingsUri: string;
  sessions: number;
}

const TREES: Record<string, Expected> = {
  dmtf: {
    dir: 'dmtf-public-rackmount1',
    root: { redfishVersion: '1.15.0', vendor: undefined, uuid: '92384634-2938-2342-8820-489239905423' },
    systemUri: '/redfish/v1/Systems/437XR1138R2',
    system: {
      uuid: '38947555-7742-3448-3784-823347823834',
      manufacturer: 'Contoso',
      model: '3500',
      serialNumber: '437XR1138R2',
      vendor: 'Generic',
      memoryGiB: 96,
      processorCount: 2,
    },
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
    reset: {
      target: '/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset',
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
    },
    odataEtag: undefined,
    manager: {
      uri: '/redfish/v1/Managers/BMC',
      uuid: '58893887-8974-2487-2389-841168418919',
      model: 'Joo Janta 200',
      firmwareVersion: '1.45.455b66-rev4',
    },
    managerEtag: undefined,
    biosSettingsUri: '/redfish/v1/Systems/437XR1138R2/Bios/Settings',
    sessions: 2,
  },
  dell: {
    dir: 'libredfish-dell',
    root: { redfishVersion: '1.13.1', vendor: 'Dell', uuid: undefined },
    systemUri: '/redfish/v1/Systems/System.Embedded.1',
    system: {
      uuid: '4c4c4544-0035-3410-8050-c6c04f314733',
      manufacturer: 'Dell Inc.',
      model: 'PowerEdge R750',
      serialNumber: 'CNIVC0014M0388',
      vendor: 'Dell',
      memoryGiB: 512,
      processorCount: 2,
    },
    boot: {
      target: 'None',
      enabled: 'Disabled',
      mode: 'UEFI',
      allowedTargets: [
        'None',
        'Pxe',
        'Floppy',
        'Cd',
        'Hdd',
        'BiosSetup',
        'Utilities',
        'UefiTarget',
        'SDCard',
        'UefiHttp',
      ],
    },
    reset: {
      target: '/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset',
      allowed: [
        'On',
        'ForceOff',
        'ForceRestart',
        'GracefulRestart',
        'GracefulShutdown',
        'PushPowerButton',
        'Nmi',
        'PowerCycle',
      ],
      actionInfoUri: undefined,
    },
    // iDRAC puts no @odata.etag into the ComputerSystem body.
    odataEtag: undefined,
    manager: {
      uri: '/redfish/v1/Managers/iDRAC.Embedded.1',
      uuid: '3347314f-c0c6-5080-3410-00354c4c4544',
      model: '15G Monolithic',
      firmwareVersion: '6.00.30.00',
    },
    managerEtag: undefined,
    biosSettingsUri: '/redfish/v1/Systems/System.Embedded.1/Bios/Settings',
    sessions: 3,
  },
  hpe: {
    dir: 'libredfish-hpe',
    root: { redfishVersion: '1.6.0', vendor: 'HPE', uuid: '9aec7545-83e2-5c89-914f-dc8d329ec957' },
    systemUri: '/redfish/v1/Systems/1',
    system: {
      // iLO reports the SMBIOS UUID in upper case; the canonical form is lower case.
      uuid: '34383350-3131-584d-5133-303230393953',
      manufacturer: 'HPE',
      model: 'ProLiant DL385 Gen10 Plus v2',
      serialNumber: 'MXQ302099S',
      vendor: 'HPE',
      memoryGiB: 1024,
      processorCount: 2,
    },
    boot: {
      target: 'None',
      enabled: 'Disabled',
      mode: 'UEFI',
      allowedTargets: [
        'None',
        'Cd',
        'Hdd',
        'Usb',
        'SDCard',
        'Utilities',
        'Diags',
        'BiosSetup',
        'Pxe',
        'UefiShell',
        'UefiHttp',
        'UefiTarget',
      ],
    },
    reset: {
      target: '/redfish/v1/Systems/1/Actions/ComputerSystem.Reset',
      allowed: [
        'On',
        'ForceOff',
        'GracefulShutdown',
        'ForceRestart',
        'Nmi',
        'PushPowerButton',
        'GracefulRestart',
      ],
      actionInfoUri: undefined,
    },
    // Weak ETags, eight upper-case hex digits.
    odataEtag: /^W\/"[0-9A-F]{8}"$/,
    manager: {
      uri: '/redfish/v1/Managers/1',
      uuid: '96df3e5c-31a7-5c18-afd7-8b27aaecb6f1',
      model: 'iLO 5',
      firmwareVersion: 'iLO 5 v2.72',
    },
    managerEtag: /^W\/"[0-9A-F]{8}"$/,
    // Linked in lower case and with a trailing slash, as captured.
    biosSettingsUri: '/redfish/v1/systems/1/bios/settings/',
    sessions: 2,
  },
  supermicro: {
    dir: 'libredfish-supermicro',
    root: { redfishVersion: '1.11.0', vendor: undefined, uuid: '00000000-0000-0000-0000-7cc25550a8ff' },
    systemUri: '/redfish/v1/Systems/1',
    system: {
      // Built from the BMC's MAC address, upper case.
      uuid: '00000000-0000-0000-0000-7cc25550a8ff',
      manufacturer: 'Supermicro',
      model: 'SYS-821GE-TNHR',
      serialNumber: 'S889914X3710910',
      vendor: 'Supermicro',
      memoryGiB: 2048,
      processorCount: 2,
    },
    boot: {
      target: 'Pxe',
      enabled: 'Disabled',
      mode: 'UEFI',
      // `UsbCd` is Supermicro's own value: not a DMTF BootSource, so it is not offered.
      allowedTargets: ['None', 'Pxe', 'Floppy', 'Cd', 'Usb', 'Hdd', 'BiosSetup', 'UefiBootNext', 'UefiHttp'],
    },
    reset: {
      target: '/redfish/v1/Systems/1/Actions/ComputerSystem.Reset',
      allowed: undefined,
      actionInfoUri: '/redfish/v1/Systems/1/ResetActionInfo',
    },
    actionInfo: [
      'On',
      'ForceOff',
      'GracefulShutdown',
      'GracefulRestart',
      'ForceRestart',
      'Nmi',
      'ForceOn',
      'PowerCycle',
    ],
    // Strong ETags: 32 hex digits.
    odataEtag: /^"[0-9a-f]{32}"$/,
    manager: {
      uri: '/redfish/v1/Managers/1',
      uuid: '00000000-0000-0000-0000-7cc25550a8ff',
      model: 'ASPEED',
      firmwareVersion: '11.01.01',
    },
    managerEtag: /^"[0-9a-f]{32}"$/,
    biosSettingsUri: '/redfish/v1/Systems/1/Bios/SD',
    sessions: 2,
  },
};

for (const [name, x] of Object.entries(TREES)) {
  describe(`captured Redfish tree: ${name} (${x.dir})`, () => {
    // Loaded by the first test, not in the describe body: a missing ../shared then fails each test
    // (ENOENT) instead of failing the suite before it defines any (node then counts 0 tests).
    let loaded: ReturnType<typeof loadProfileTree> | undefined;
    const tree = () => {
      loaded ??= loadProfileTree(`${MOCKUPS}/${x.dir}`);
      return loaded;
    };
    const body = (path: string) => {
      const b = tree().get(path);
      assert.ok(b, `${x.dir} has ${path}`);
      return b;
    };

    it('service root: version, vendor, UUID and the collection links', () => {
      const root = parseServiceRoot(body('/redfish/v1/'), '/redfish/v1/');
      assert.deepEqual({ redfishVersion: root.redfishVersion, vendor: root.vendor, uuid: root.uuid }, x.root);
      assert.equal(root.systemsUri, '/redfish/v1/Systems');
      assert.equal(root.managersUri, '/redfish/v1/Managers');
      assert.equal(root.sessionsUri, '/redfish/v1/SessionService/Sessions');
    });

    it('Systems, Managers and Sessions collections', () => {
      const systems = parseCollection(body('/redfish/v1/Systems'), '/redfish/v1/Systems');
      assert.deepEqual(
        systems.map((s) => s.uri),
        [x.systemUri],
      );
      const managers = parseCollection(body('/redfish/v1/Managers'), '/redfish/v1/Managers');
      assert.deepEqual(
        managers.map((m) => m.uri),
        [x.manager.uri],
      );
      const sessions = parseCollection(
        body('/redfish/v1/SessionService/Sessions'),
        '/redfish/v1/SessionService/Sessions',
      );
      assert.equal(sessions.length, x.sessions);
      for (const s of sessions) assert.ok(isServicePath(s.uri), s.uri);
    });

    it('ComputerSystem: identity, canonical UUID, summaries and the vendor it maps to', () => {
      const sys = parseComputerSystem(body(x.systemUri), x.systemUri);
      assert.equal(sys.info.uri, x.systemUri);
      assert.equal(sys.info.uuid, x.system.uuid);
      assert.equal(sys.info.manufacturer, x.system.manufacturer);
      assert.equal(sys.info.model, x.system.model);
      assert.equal(sys.info.serialNumber, x.system.serialNumber);
      assert.equal(sys.info.powerState, 'On');
      assert.equal(sys.info.memoryGiB, x.system.memoryGiB);
      assert.equal(sys.info.processorCount, x.system.processorCount);
      assert.equal(quirksForManufacturer(sys.info.manufacturer).vendor, x.system.vendor);
    });

    it('boot settings and the allowable boot targets', () => {
      const { boot } = parseComputerSystem(body(x.systemUri), x.systemUri).info;
      assert.deepEqual(boot, x.boot);
    });

    it('reset action: target, allowable values inline or through @Redfish.ActionInfo', () => {
      const sys = parseComputerSystem(body(x.systemUri), x.systemUri);
      assert.deepEqual(sys.reset, x.reset);
      if (x.actionInfo) {
        const uri = sys.reset!.actionInfoUri!;
        assert.deepEqual(parseResetActionInfo(body(uri), uri), x.actionInfo);
      }
    });

    it('ETags in the style of the vendor, and no SettingsObject on the system itself', () => {
      const sys = parseComputerSystem(body(x.systemUri), x.systemUri);
      if (x.odataEtag) assert.match(sys.odataEtag ?? '', x.odataEtag);
      else assert.equal(sys.odataEtag, undefined);
      const etag = body(x.manager.uri)['@odata.etag'];
      if (x.managerEtag) assert.match(String(etag), x.managerEtag);
      else assert.equal(etag, undefined);
      assert.equal(sys.settingsUri, undefined);
    });

    it('Bios settings object: the SettingsObject link is a path on the service', () => {
      const sys = body(x.systemUri);
      const biosUri = (sys['Bios'] as { '@odata.id': string })['@odata.id'];
      assert.equal(parseSettingsUri(body(biosUri), biosUri), x.biosSettingsUri);
      assert.ok(tree().get(x.biosSettingsUri), 'the settings object itself was captured');
    });

    it('Manager: id, UUID, type and firmware', () => {
      const m = parseManager(body(x.manager.uri), x.manager.uri);
      assert.equal(m.uri, x.manager.uri);
      assert.equal(m.uuid, x.manager.uuid);
      assert.equal(m.managerType, 'BMC');
      assert.equal(m.model, x.manager.model);
      assert.equal(m.firmwareVersion, x.manager.firmwareVersion);
    });
  });
}
