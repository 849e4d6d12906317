/**
 * A registration payload the size a real machine's metalprobe posts: the simulated host's payload
 * (sim.ts `registrationData`, whose primary NIC and identity stay as they are, so the registry's
 * NIC check and the mapping see the same host) grown with what a large server reports — every
 * socket's CPU with its full flag list, unconfigured NIC ports (no address: the registry's NIC
 * check ignores them) and their ethtool details, NVMe and SATA disks with partitions, PCI devices,
 * DIMMs and SMBIOS (DMI) tables (most of a real payload) — until its JSON reaches `kib` KiB. Deterministic: the same
 * identity and size give the same payload. Used by the simulated hosts (`payloadKib`) and by
 * bench/apiserver-cost.ts.
 */
import type { HostIdentity } from './host.js';

type Json = Record<string, unknown>;

/** Linux's /proc/cpuinfo flags of an Ice Lake server CPU, as metalprobe reports them per socket. */
export const CPU_FLAGS =
  'fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf pni pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch cpuid_fault epb cat_l3 cdp_l3 invpcid_single intel_ppin ssbd mba ibrs ibpb stibp ibrs_enhanced tpr_shadow vnmi flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm cqm mpx rdt_a avx512f avx512dq rdseed adx smap clflushopt clwb intel_pt avx512cd avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local dtherm ida arat pln pts pku ospke avx512_vnni md_clear flush_l1d arch_capabilities'.split(
    ' ',
  );

const hex = (n: number, width: number) => n.toString(16).padStart(width, '0');
/** A locally administered MAC per host and port, distinct from the host's primary one. */
const portMac = (id: HostIdentity, port: number) =>
  `06:${id.macAddress.split(':').slice(1, 4).join(':')}:${hex(port >> 8, 2)}:${hex(port & 0xff, 2)}`;

function socket(id: HostIdentity, n: number): Json {
  return {
    id: n,
    totalCores: id.cpus,
    totalHardwareThreads: id.cpus * 2,
    vendor: 'GenuineIntel',
    model: 'Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz',
    capabilities: CPU_FLAGS,
    cores: Array.from({ length: id.cpus }, (_, c) => ({
      id: c,
      totalHardwareThreads: 2,
      logicalProcessors: [c * 2, c * 2 + 1],
    })),
    caches: [
      { level: 1, type: 'data', sizeBytes: 49152, logicalProcessors: [0, 1] },
      { level: 2, type: 'unified', sizeBytes: 1310720, logicalProcessors: [0, 1] },
      { level: 3, type: 'unified', sizeBytes: 50331648, logicalProcessors: [] },
    ],
  };
}

function port(id: HostIdentity, n: number): { iface: Json; nic: Json } {
  const name = `ens${1 + (n >> 1)}f${n & 1}`;
  const mac = portMac(id, n);
  return {
    iface: { name, macAddress: mac, ipAddresses: [], carrierStatus: n % 3 === 0 ? 'up' : 'down' },
    nic: {
      name,
      mac,
      pciAddress: `0000:${hex(0x17 + (n >> 1), 2)}:00.${n & 1}`,
      speed: n % 3 === 0 ? '25000Mb/s' : 'Unknown!',
      driver: 'mlx5_core',
      firmwareVersion: '22.31.1014 (MT_0000000359)',
      linkModes: [
        '1000baseKX/Full',
        '10000baseKR/Full',
        '25000baseCR/Full',
        '25000baseKR/Full',
        '25000baseSR/Full',
      ],
      supportedPorts: ['FIBRE', 'Backplane'],
      lldp: { chassisID: `mac ${mac}`, portID: `Ethernet${n}`, systemName: `leaf-${n % 4}` },
    },
  };
}

function disk(id: HostIdentity, n: number): Json {
  const nvme = n % 2 === 0;
  const name = nvme ? `nvme${n >> 1}n1` : `sd${String.fromCharCode(97 + ((n >> 1) % 26))}`;
  return {
    path: `/dev/${name}`,
    name,
    rotational: !nvme,
    removable: false,
    readOnly: false,
    vendor: nvme ? 'Samsung' : 'ATA',
    model: nvme ? 'SAMSUNG MZQL23T8HCLS-00A07' : 'ST8000NM017B-2TJ103',
    serial: `${id.serialNumber}-D${n}`,
    wwid: `eui.${hex(n, 4)}${id.uuid.replace(/-/g, '').slice(0, 24)}`,
    physicalBlockSize: 4096,
    logicalBlockSize: 512,
    hWSectorSize: 512,
    sizeBytes: nvme ? 3840755982336 : 8001563222016,
    numaNodeID: n % 2,
    partitions: Array.from({ length: 3 }, (_, p) => ({
      name: `${name}${nvme ? 'p' : ''}${p + 1}`,
      sizeBytes: [536870912, 1073741824, 3838145396736][p],
      type: ['vfat', 'ext4', 'xfs'][p],
      uuid: `${hex(n, 8)}-${hex(p, 4)}-4000-8000-${id.uuid.slice(-12)}`,
    })),
  };
}

function pciDevice(n: number): Json {
  const classes = [
    ['0200', 'Ethernet controller', '15b3', 'Mellanox Technologies', '101d', 'MT2892 Family [ConnectX-6 Dx]'],
    [
      '0108',
      'Non-Volatile memory controller',
      '144d',
      'Samsung Electronics Co Ltd',
      'a80a',
      'NVMe SSD Controller PM9A3',
    ],
    ['0604', 'PCI bridge', '8086', 'Intel Corporation', '347a', 'Ice Lake PCIe Root Port'],
    ['0880', 'System peripheral', '8086', 'Intel Corporation', '3452', 'Ice Lake Memory Map/VT-d'],
  ] as const;
  const [cls, className, vendor, vendorName, product, productName] = classes[n % classes.length]!;
  return {
    address: `0000:${hex(n >> 3, 2)}:${hex(n & 7, 2)}.0`,
    class: { id: cls, name: className },
    vendor: { id: vendor, name: vendorName },
    product: { id: product, name: productName },
    subsystem: { id: '0001', name: 'Generic' },
    revision: '0x00',
    driver: n % 4 === 0 ? 'mlx5_core' : n % 4 === 1 ? 'nvme' : 'pcieport',
    numaNode: n % 2,
  };
}

function dimm(n: number): Json {
  return {
    size: 34359738368,
    deviceLocator: `CPU${n % 2}_DIMM_${String.fromCharCode(65 + ((n >> 1) % 8))}${n >> 4}`,
    bankLocator: `NODE ${n % 2}`,
    memoryType: 'DDR4',
    speed: '3200 MT/s',
    vendor: 'Samsung',
    serialNumber: `S${hex(n * 7919, 8)}`,
    partNumber: 'M393A4K40EB3-CWE',
    configuredMemorySpeed: '3200 MT/s',
    minimumVoltage: '1.2 V',
    maximumVoltage: '1.2 V',
    configuredVoltage: '1.2 V',
  };
}

function dmiTable(n: number): Json {
  const types = [
    'Cache Information',
    'Port Connector Information',
    'System Slot Information',
    'Onboard Devices Extended Information',
    'Memory Device Mapped Address',
  ];
  return {
    handle: `0x${hex(0x1000 + n, 4)}`,
    type: 7 + (n % types.length),
    description: types[n % types.length],
    fields: {
      'Socket Designation': `Slot ${n}`,
      'Internal Reference Designator': `J${n}`,
      'External Connector Type': n % 2 ? 'RJ-45' : 'None',
      'Bus Address': `0000:${hex(n, 2)}:00.0`,
      Characteristics: ['3.3 V is provided', 'PME signal is supported', 'Hot-plug devices are supported'],
    },
  };
}

/**
 * `base` (the sim host's payload for `id`) grown towards `kib` KiB as described in the file
 * comment: two sockets, then rounds of PCI devices, DMI tables and a DIMM, with a NIC port every
 * third round (at most 8, a dual-port card per riser) and a disk every second round (at most 24)
 * until the size is reached (the last round may pass it by ~2 KiB). `kib` 0: `base`.
 */
export function metalprobeLikePayload(base: Json, id: HostIdentity, kib: number): Json {
  if (kib <= 0) return base;
  const data = structuredClone(base) as Json & Record<string, unknown[]>;
  data.cpu = [socket(id, 0), socket(id, 1)];
  data.pciDevices ??= [];
  data.dmiTables ??= [];
  // The size is kept up to date item by item (a comma and the item's JSON): stringifying the whole
  // payload every round would cost a thousand hosts seconds of CPU at their first registration.
  let size = JSON.stringify(data).length;
  const push = (list: unknown[], ...items: unknown[]) => {
    for (const item of items) {
      list.push(item);
      size += JSON.stringify(item).length + 1;
    }
  };
  for (let i = 0; size < kib * 1024 && i < 4096; i++) {
    if (i % 3 === 0 && i < 24) {
      const p = port(id, i / 3);
      push(data.networkInterfaces!, p.iface);
      push(data.nics!, p.nic);
    }
    if (i % 2 === 0 && i < 48) push(data.storage!, disk(id, i / 2));
    push(data.pciDevices, pciDevice(3 * i), pciDevice(3 * i + 1), pciDevice(3 * i + 2));
    push(data.dmiTables, dmiTable(2 * i), dmiTable(2 * i + 1));
    if (i < 32) push(data.memory!, dimm(i));
  }
  return data;
}
