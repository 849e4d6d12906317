/**
 * The `dell` profile's facts: what the virtual BMC serves for
 * a Dell PowerEdge R750 (iDRAC 9), captured by NVIDIA/libredfish.
 * Read from the captured tree `libredfish-dell` by `factsFromTree` (`../profile-facts.ts`);
 * `test/virtualbmc/profile-data.test.ts` fails when they differ from what it reads there now.
 */
import type { ProfileFacts } from '../profile-facts.js';

export const DELL: ProfileFacts = {
  source: 'libredfish-dell',
  serviceRoot: {
    odataType: '#ServiceRoot.v1_10_0.ServiceRoot',
    id: 'RootService',
    name: 'Root Service',
    redfishVersion: '1.13.1',
    vendor: 'Dell',
    product: 'Integrated Dell Remote Access Controller',
  },
  system: {
    uri: '/redfish/v1/Systems/System.Embedded.1',
    odataType: '#ComputerSystem.v1_16_0.ComputerSystem',
    id: 'System.Embedded.1',
    name: 'System',
    manufacturer: 'Dell Inc.',
    model: 'PowerEdge R750',
    serialNumber: 'CNIVC0014M0388',
    uuid: '4c4c4544-0035-3410-8050-c6c04f314733',
    powerState: 'On',
    systemType: 'Physical',
    biosVersion: '1.8.2',
    boot: {
      BootSourceOverrideEnabled: 'Disabled',
      BootSourceOverrideMode: 'UEFI',
      BootSourceOverrideTarget: 'None',
      'BootSourceOverrideTarget@Redfish.AllowableValues': [
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
      advertised: 'inline',
      allowable: [
        'On',
        'ForceOff',
        'ForceRestart',
        'GracefulRestart',
        'GracefulShutdown',
        'PushPowerButton',
        'Nmi',
        'PowerCycle',
      ],
    },
    subResources: {
      Bios: {
        uri: '/redfish/v1/Systems/System.Embedded.1/Bios',
        odataType: '#Bios.v1_2_0.Bios',
        id: 'Bios',
        name: 'BIOS Configuration Current Settings',
      },
      SecureBoot: {
        uri: '/redfish/v1/Systems/System.Embedded.1/SecureBoot',
        odataType: '#SecureBoot.v1_1_0.SecureBoot',
        id: 'SecureBoot',
        name: 'UEFI Secure Boot',
      },
    },
    virtualMediaUri: '/redfish/v1/Systems/System.Embedded.1/VirtualMedia',
    managedBy: ['/redfish/v1/Managers/iDRAC.Embedded.1'],
  },
  managers: [
    {
      uri: '/redfish/v1/Managers/iDRAC.Embedded.1',
      odataType: '#Manager.v1_12_0.Manager',
      id: 'iDRAC.Embedded.1',
      name: 'Manager',
      managerType: 'BMC',
      model: '15G Monolithic',
      firmwareVersion: '6.00.30.00',
      uuid: '3347314f-c0c6-5080-3410-00354c4c4544',
      virtualMediaUri: '/redfish/v1/Managers/iDRAC.Embedded.1/VirtualMedia',
    },
  ],
  virtualMedia: {
    '/redfish/v1/Systems/System.Embedded.1/VirtualMedia': {
      odataType: '#VirtualMediaCollection.VirtualMediaCollection',
      name: 'VirtualMedia Collection',
      members: [
        {
          uri: '/redfish/v1/Systems/System.Embedded.1/VirtualMedia/1',
          odataType: '#VirtualMedia.v1_4_0.VirtualMedia',
          id: '1',
          name: 'VirtualMedia Instance 1',
          mediaTypes: ['CD', 'DVD', 'USBStick'],
          ejectAction: true,
        },
        {
          uri: '/redfish/v1/Systems/System.Embedded.1/VirtualMedia/2',
          odataType: '#VirtualMedia.v1_4_0.VirtualMedia',
          id: '2',
          name: 'VirtualMedia Instance 2',
          mediaTypes: ['CD', 'DVD', 'USBStick'],
          ejectAction: true,
        },
      ],
    },
    '/redfish/v1/Managers/iDRAC.Embedded.1/VirtualMedia': {
      odataType: '#VirtualMediaCollection.VirtualMediaCollection',
      name: 'Virtual Media Services',
      members: [
        {
          uri: '/redfish/v1/Managers/iDRAC.Embedded.1/VirtualMedia/CD',
          odataType: '#VirtualMedia.v1_4_0.VirtualMedia',
          id: 'CD',
          name: 'Virtual CD',
          mediaTypes: ['CD', 'DVD'],
          ejectAction: true,
        },
      ],
    },
  },
};
