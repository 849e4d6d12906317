#!/usr/bin/env node
/**
 * `virtual-bmc`: starts a virtual BMC (Redfish on 127.0.0.1) with N simulated hosts (`--backend sim`,
 * default) or QEMU VMs with iPXE firmware (`--backend qemu`, accelerator by `--accel`) that
 * network-boot from the given boot server, and logs its URL as one pino JSON line
 * (`{"msg":"virtual BMC ready","url":"http://127.0.0.1:…",…}`). Stops on SIGINT/SIGTERM.
 *
 * `--profile dell|hpe|supermicro|supermicro-x10|dmtf` or `--profile-tree DIR` serve a captured Redfish
 * tree (see `virtualbmc/profile.ts`) instead of the built-in documents.
 *
 * The password comes from `$VIRTUAL_BMC_PASSWORD` unless `--password` is given (command lines are
 * visible to other users).
 */

import { join } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { buildVmArtefacts } from '../localstack/vm-artefacts.js';
import { newLogger } from '../runtime/logger.js';
import { type AccelChoice, accelFromEnv, chooseAccel } from '../virtualbmc/accel-probe.js';
import type { Host } from '../virtualbmc/host.js';
import { resolveProfile, VENDOR_PROFILES } from '../virtualbmc/profile.js';
import { QemuHost, qemuHostIdentity } from '../virtualbmc/qemu.js';
import { startVirtualBmc } from '../virtualbmc/server.js';
import { createSimFleet } from '../virtualbmc/sim-fleet.js';

function integer(min: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`must be an integer >= ${min}`);
    return n;
  };
}

function url(value: string): string {
  try {
    return new URL(value).toString().replace(/\/+$/, '');
  } catch {
    throw new InvalidArgumentError('must be an absolute URL');
  }
}

const program = new Command()
  .name('virtual-bmc')
  .description('Virtual Redfish BMC with simulated hosts that network-boot from a boot server')
  .requiredOption('--boot-server-url <url>', 'boot server base URL (hosts GET <url>/ipxe/<uuid>)', url)
  .option('--systems <n>', 'number of systems', integer(1), 1)
  .addOption(
    new Option('--backend <backend>', 'sim: simulated hosts; qemu: QEMU VMs with iPXE firmware')
      .choices(['sim', 'qemu'])
      .default('sim'),
  )
  .addOption(
    new Option(
      '--accel <accel>',
      'qemu back end: accelerator; auto uses KVM only after a probe boot proved it (default: $METAL_QEMU_ACCEL, else auto)',
    ).choices(['auto', 'kvm', 'tcg']),
  )
  .option('--port <port>', 'TCP port on 127.0.0.1 (0: any free port)', integer(0), 0)
  .option('--username <name>', 'Redfish user name', 'admin')
  .option('--password <password>', 'Redfish password (default: $VIRTUAL_BMC_PASSWORD, else "password")')
  .option('--seed <seed>', 'identity seed: the same seed gives the same UUIDs, serials and MACs', 'sim')
  .addOption(
    new Option('--uuid-case <case>', 'UUID case in the iPXE request path')
      .choices(['lower', 'upper'])
      .default('lower'),
  )
  .addOption(
    new Option('--profile <vendor>', 'serve a captured vendor tree with its write behaviour').choices(
      Object.keys(VENDOR_PROFILES),
    ),
  )
  .option('--profile-tree <dir>', 'serve this captured Redfish tree (generic write behaviour)')
  .option('--power-transition-ms <ms>', 'delay between an accepted Reset and the host acting', integer(0), 0)
  .option('--firmware-ms <ms>', 'simulated power-on to iPXE request time', integer(0), 500)
  .option('--kernel-ms <ms>', 'simulated kernel start to callback time', integer(0), 2_000)
  .addOption(
    new Option('--log-level <level>', 'log level (default: $LOG_LEVEL, else info)').choices([
      'debug',
      'info',
      'warn',
      'error',
    ]),
  );

async function main(): Promise<void> {
  program.parse();
  const o = program.opts<{
    bootServerUrl: string;
    systems: number;
    backend: 'sim' | 'qemu';
    accel?: AccelChoice;
    port: number;
    username: string;
    password?: string;
    seed: string;
    uuidCase: 'lower' | 'upper';
    profile?: string;
    profileTree?: string;
    powerTransitionMs: number;
    firmwareMs: number;
    kernelMs: number;
    logLevel?: string;
  }>();
  const log = newLogger('virtual-bmc', o.logLevel ? { level: o.logLevel } : {});
  let hosts: Host[];
  let closeHosts: () => Promise<unknown>;
  if (o.backend === 'qemu') {
    const artefacts = buildVmArtefacts();
    const verdict = await chooseAccel(o.accel ?? accelFromEnv(), {
      guest: { kernel: join(artefacts, 'vmlinuz'), initrd: join(artefacts, 'initramfs.cpio.gz') },
    });
    log.info(
      { accel: verdict.accel, reason: verdict.reason, cached: verdict.cached },
      'QEMU accelerator chosen',
    );
    const vms = Array.from(
      { length: o.systems },
      (_, i) => new QemuHost(qemuHostIdentity(i), { bootServerUrl: o.bootServerUrl, accel: verdict.accel }),
    );
    hosts = vms;
    closeHosts = () => Promise.all(vms.map((h) => h.close()));
  } else {
    const fleet = createSimFleet({
      count: o.systems,
      bootServerUrl: o.bootServerUrl,
      seed: o.seed,
      uuidCase: o.uuidCase,
      timing: { firmwareMs: o.firmwareMs, kernelMs: o.kernelMs },
      logger: log,
    });
    hosts = fleet.hosts;
    closeHosts = () => fleet.close();
  }
  const bmc = await startVirtualBmc({
    hosts,
    username: o.username,
    password: o.password ?? process.env['VIRTUAL_BMC_PASSWORD'] ?? 'password',
    port: o.port,
    ...(o.profile || o.profileTree ? { profile: resolveProfile((o.profile ?? o.profileTree)!) } : {}),
    faults: { powerTransitionMs: o.powerTransitionMs },
    logger: log,
  });
  log.info(
    { url: bmc.url, systems: bmc.systems.length, bootServerUrl: o.bootServerUrl },
    'virtual BMC ready',
  );
  for (const s of bmc.systems) log.debug({ uri: s.uri, uuid: s.host.identity.uuid }, 'system');

  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'stopping');
    Promise.all([bmc.close(), closeHosts()]).then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

main().catch((err: unknown) => {
  newLogger('virtual-bmc').fatal({ err }, 'virtual-bmc failed');
  process.exit(1);
});
