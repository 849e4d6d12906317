/**
 * The `dmtf` profile's facts: what the virtual BMC serves for
 * the DMTF public mockup public-rackmount1 (a Contoso 1U rack server).
 * Read from the captured tree `dmtf-public-rackmount1` by `factsFromTree` (`../profile-facts.ts`);
 * `test/virtualbmc/profile-data.test.ts` fails when they differ from what it reads there now.
 */
import type { ProfileFacts } from '../profile-facts.js';

export const DMTF: ProfileFacts = {
  source: 'dmtf-public-rackmount1',
  serviceRoot: {
    odataType: '#ServiceRoot.v1_16_1.ServiceRoot',
    id: 'RootService',
    name: 'Root Service',
    redfishVersion: '1.15.0',
    uuid: '92384634-2938-2342-8820-489239905423',
  },
  system: {
    uri: '/redfish/v1/Systems/437XR1138R2',
    odataType: '#ComputerSystem.v1_22_0.ComputerSystem',
    id: '437XR1138R2',
    name: 'WebFrontEnd483',
    manufacturer: 'Contoso',
    model: '3500',
    serialNumber: '437XR1138R2',
    uuid: '38947555-7742-3448-3784-823347823834',
    powerState: 'On',
    systemType: 'Physical',
    biosVersion: 'P79 v1.45 (12/06/2017)',
    boot: {
      BootSourceOverrideEnabled: 'Once',
      BootSourceOverrideTarget: 'Pxe',
      'BootSourceOverrideTarget@Redfish.AllowableValues': [
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
      BootSourceOverrideMode: 'UEFI',
    },
    reset: {
      advertised: 'inline',
      allowable: [
        'On',
        'ForceOff',
        'GracefulShutdown',
        'GracefulRestart',
        'ForceRestart',
        'Nmi',
        'ForceOn',
        'PushPowerButton',
      ],
    },
    subResources: {
      Bios: {
        uri: '/redfish/v1/Systems/437XR1138R2/Bios',
        odataType: '#Bios.v1_2_2.Bios',
        id: 'Bios',
        name: 'BIOS Configuration Current Settings',
      },
      SecureBoot: {
        uri: '/redfish/v1/Systems/437XR1138R2/SecureBoot',
        odataType: '#SecureBoot.v1_1_1.SecureBoot',
        id: 'SecureBoot',
        name: 'UEFI Secure Boot',
      },
    },
    virtualMediaUri: '/redfish/v1/Systems/437XR1138R2/VirtualMedia',
    managedBy: ['/redfish/v1/Managers/BMC'],
  },
  managers: [
    {
      uri: '/redfish/v1/Managers/BMC',
      odataType: '#Manager.v1_19_0.Manager',
      id: 'BMC',
      name: 'Manager',
      managerType: 'BMC',
      manufacturer: 'Contoso',
      model: 'Joo Janta 200',
      firmwareVersion: '1.45.455b66-rev4',
      uuid: '58893887-8974-2487-2389-841168418919',
    },
  ],
  virtualMedia: {
    '/redfish/v1/Systems/437XR1138R2/VirtualMedia': {
      odataType: '#VirtualMediaCollection.VirtualMediaCollection',
      name: 'Virtual Media Services',
      members: [
        {
          uri: '/redfish/v1/Systems/437XR1138R2/VirtualMedia/CD1',
          odataType: '#VirtualMedia.v1_6_3.VirtualMedia',
          id: 'CD1',
          name: 'Virtual CD',
          mediaTypes: ['CD', 'DVD'],
          ejectAction: false,
        },
      ],
    },
  },
};
