/**
 * The `hpe` profile's facts: what the virtual BMC serves for
 * an HPE ProLiant DL385 Gen10 Plus v2 (iLO 5), captured by NVIDIA/libredfish.
 * Read from the captured tree `libredfish-hpe` by `factsFromTree` (`../profile-facts.ts`);
 * `test/virtualbmc/profile-data.test.ts` fails when they differ from what it reads there now.
 */
import type { ProfileFacts } from '../profile-facts.js';

export const HPE: ProfileFacts = {
  source: 'libredfish-hpe',
  serviceRoot: {
    odataType: '#ServiceRoot.v1_5_1.ServiceRoot',
    id: 'RootService',
    name: 'HPE RESTful Root Service',
    redfishVersion: '1.6.0',
    uuid: '9aec7545-83e2-5c89-914f-dc8d329ec957',
    vendor: 'HPE',
    product: 'ProLiant DL385 Gen10 Plus v2',
  },
  system: {
    uri: '/redfish/v1/Systems/1',
    odataType: '#ComputerSystem.v1_13_0.ComputerSystem',
    id: '1',
    name: 'Computer System',
    manufacturer: 'HPE',
    model: 'ProLiant DL385 Gen10 Plus v2',
    serialNumber: 'MXQ302099S',
    uuid: '34383350-3131-584D-5133-303230393953',
    powerState: 'On',
    systemType: 'Physical',
    biosVersion: 'A42 v2.60 (08/11/2022)',
    boot: {
      BootSourceOverrideEnabled: 'Disabled',
      BootSourceOverrideMode: 'UEFI',
      BootSourceOverrideTarget: 'None',
      'BootSourceOverrideTarget@Redfish.AllowableValues': [
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
      advertised: 'inline',
      allowable: [
        'On',
        'ForceOff',
        'GracefulShutdown',
        'ForceRestart',
        'Nmi',
        'PushPowerButton',
        'GracefulRestart',
      ],
    },
    subResources: {
      SecureBoot: {
        uri: '/redfish/v1/Systems/1/SecureBoot',
        odataType: '#SecureBoot.v1_0_0.SecureBoot',
        id: 'SecureBoot',
        name: 'SecureBoot',
      },
    },
    managedBy: ['/redfish/v1/Managers/1'],
  },
  managers: [
    {
      uri: '/redfish/v1/Managers/1',
      odataType: '#Manager.v1_5_1.Manager',
      id: '1',
      name: 'Manager',
      managerType: 'BMC',
      model: 'iLO 5',
      firmwareVersion: 'iLO 5 v2.72',
      uuid: '96df3e5c-31a7-5c18-afd7-8b27aaecb6f1',
      virtualMediaUri: '/redfish/v1/Managers/1/VirtualMedia',
    },
  ],
  virtualMedia: {
    '/redfish/v1/Managers/1/VirtualMedia': {
      odataType: '#VirtualMediaCollection.VirtualMediaCollection',
      name: 'Virtual Media Services',
      members: [
        {
          uri: '/redfish/v1/Managers/1/VirtualMedia/2',
          odataType: '#VirtualMedia.v1_3_0.VirtualMedia',
          id: '2',
          name: 'VirtualMedia',
          mediaTypes: ['CD', 'DVD'],
          ejectAction: true,
        },
      ],
    },
  },
};
