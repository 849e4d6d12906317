/**
 * The `supermicro` profile's facts: what the virtual BMC serves for
 * a Supermicro SYS-821GE-TNHR, captured by NVIDIA/libredfish.
 * Read from the captured tree `libredfish-supermicro` by `factsFromTree` (`../profile-facts.ts`);
 * `test/virtualbmc/profile-data.test.ts` fails when they differ from what it reads there now.
 */
import type { ProfileFacts } from '../profile-facts.js';

export const SUPERMICRO: ProfileFacts = {
  source: 'libredfish-supermicro',
  serviceRoot: {
    odataType: '#ServiceRoot.v1_9_0.ServiceRoot',
    id: 'ServiceRoot',
    name: 'Root Service',
    redfishVersion: '1.11.0',
    uuid: '00000000-0000-0000-0000-7CC25550A8FF',
  },
  system: {
    uri: '/redfish/v1/Systems/1',
    odataType: '#ComputerSystem.v1_14_0.ComputerSystem',
    id: '1',
    name: 'System',
    manufacturer: 'Supermicro',
    model: 'SYS-821GE-TNHR',
    serialNumber: 'S889914X3710910',
    uuid: '00000000-0000-0000-0000-7CC25550A8FF',
    powerState: 'On',
    systemType: 'Physical',
    biosVersion: '1.4',
    boot: {
      BootSourceOverrideEnabled: 'Disabled',
      BootSourceOverrideMode: 'UEFI',
      BootSourceOverrideTarget: 'Pxe',
      'BootSourceOverrideTarget@Redfish.AllowableValues': [
        'None',
        'Pxe',
        'Floppy',
        'Cd',
        'Usb',
        'Hdd',
        'BiosSetup',
        'UsbCd',
        'UefiBootNext',
        'UefiHttp',
      ],
    },
    reset: {
      advertised: 'action-info',
      actionInfo: {
        uri: '/redfish/v1/Systems/1/ResetActionInfo',
        odataType: '#ActionInfo.v1_1_2.ActionInfo',
        id: 'ResetActionInfo',
        name: 'Reset Action Info',
      },
      allowable: [
        'On',
        'ForceOff',
        'GracefulShutdown',
        'GracefulRestart',
        'ForceRestart',
        'Nmi',
        'ForceOn',
        'PowerCycle',
      ],
    },
    serialConsole: {
      MaxConcurrentSessions: 1,
      SSH: {
        ServiceEnabled: true,
        Port: 22,
        SharedWithManagerCLI: true,
        ConsoleEntryCommand: 'cd system1/sol1; start',
        HotKeySequenceDisplay: 'press <Enter>, <Esc>, and then <T> to terminate session',
      },
      IPMI: {
        HotKeySequenceDisplay: 'Press ~.  - terminate connection',
        ServiceEnabled: true,
        Port: 623,
      },
    },
    subResources: {
      SecureBoot: {
        uri: '/redfish/v1/Systems/1/SecureBoot',
        odataType: '#SecureBoot.v1_1_0.SecureBoot',
        id: 'Security Boot',
        name: 'SecureBoot',
      },
      Bios: {
        uri: '/redfish/v1/Systems/1/Bios',
        odataType: '#Bios.v1_1_1.Bios',
        id: 'Bios',
        name: 'BIOS Configuration Current Settings',
      },
    },
    virtualMediaUri: '/redfish/v1/Managers/1/VirtualMedia',
    managedBy: ['/redfish/v1/Managers/1'],
  },
  managers: [
    {
      uri: '/redfish/v1/Managers/1',
      odataType: '#Manager.v1_11_0.Manager',
      id: '1',
      name: 'Manager',
      managerType: 'BMC',
      model: 'ASPEED',
      firmwareVersion: '11.01.01',
      uuid: '00000000-0000-0000-0000-7CC25550A8FF',
      virtualMediaUri: '/redfish/v1/Managers/1/VirtualMedia',
    },
  ],
  virtualMedia: {
    '/redfish/v1/Managers/1/VirtualMedia': {
      odataType: '#VirtualMediaCollection.VirtualMediaCollection',
      name: 'Virtual Media Collection',
      members: [
        {
          uri: '/redfish/v1/Managers/1/VirtualMedia/VirtualMedia1',
          odataType: '#VirtualMedia.v1_4_1.VirtualMedia',
          id: 'VirtualMedia1',
          name: 'Virtual Removable Media',
          mediaTypes: ['CD', 'DVD', 'Floppy', 'USBStick'],
          ejectAction: false,
        },
        {
          uri: '/redfish/v1/Managers/1/VirtualMedia/VirtualMedia2',
          odataType: '#VirtualMedia.v1_4_1.VirtualMedia',
          id: 'VirtualMedia2',
          name: 'Virtual Removable Media',
          mediaTypes: ['CD', 'DVD', 'Floppy', 'USBStick'],
          ejectAction: false,
        },
        {
          uri: '/redfish/v1/Managers/1/VirtualMedia/VirtualMedia3',
          odataType: '#VirtualMedia.v1_4_1.VirtualMedia',
          id: 'VirtualMedia3',
          name: 'Virtual Removable Media',
          mediaTypes: ['CD', 'DVD', 'Floppy', 'USBStick'],
          ejectAction: false,
        },
      ],
    },
  },
};
