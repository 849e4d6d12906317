#!/usr/bin/env node
/**
 * metalctl: the local stack and a fleet view.
 *
 * - `local up [--servers 2] [--backend qemu|sim] [--accel auto|kvm|tcg]`: builds what is missing, starts (as a background
 *   daemon) control plane, manager, virtual BMC with N machines, BMC objects and image catalog,
 *   waits for discovery, applies an example ServerClaim and shows a live table until it is Booted.
 * - `local down`, `local status`; `local serve` is the daemon itself.
 * - `get servers|claims [NAME] [-o wide|json|yaml] [-l SEL] [-n NS|-A]`: kubectl-like columns;
 *   `describe server NAME`; `boots <claim> [--watch]`: the claim's attempts with their durations.
 * - `cordon|uncordon <server>`: the maintenance taint; `retry server|claim <name>`: the retry annotation;
 *   `release <claim> [--force]`: deletes the claim (`--force`: also when the BMC never reports Off).
 * - `console <server>`: the serial console through the BMC (SSH, as upstream); `~.` leaves.
 *
 * Exit codes: 0 success, 1 failure (the reason is printed), 2 bad usage.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import {
  bootsCommand,
  consoleCommand,
  cordonCommand,
  describeCommand,
  getCommand,
  localDown,
  localServe,
  localStatus,
  localUp,
  releaseCommand,
  retryCommand,
} from '../localstack/commands.js';
import { serveInCluster } from '../localstack/in-cluster-serve.js';
import { defaultLocalDir } from '../localstack/local-state.js';
import { metalctlVersion } from '../localstack/version.js';
import { VENDOR_PROFILES } from '../virtualbmc/profile.js';

const int = (min: number) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`must be an integer >= ${min}`);
  return n;
};

const program = new Command('metalctl')
  .description('metal-operator: local stack and fleet view')
  .version(metalctlVersion(), '--version', 'print the metalctl version and the API it serves')
  .showHelpAfterError();
const local = program.command('local').description('run the whole system on this machine');
const dirOpt = () =>
  new Option('--dir <path>', 'state and work folder of the local stack').default(defaultLocalDir());

const accelOpt = () =>
  new Option(
    '--accel <accel>',
    'QEMU accelerator; auto: KVM only after a probe boot proved it runs guests here (default: $METAL_QEMU_ACCEL, else auto)',
  ).choices(['auto', 'kvm', 'tcg']);

const machineOpts = () => [
  new Option('--firmware <firmware>', 'firmware of the QEMU VMs (default uefi)').choices(['bios', 'uefi']),
  new Option(
    '--boot-method <method>',
    'how claims network-boot: pxe (iPXE script), http (UEFI HTTP boot of a UKI) or vmedia (the BMC inserts the attempt ISO, no DHCP needed; UEFI); default: http where the network and firmware allow it',
  ).choices(['pxe', 'http', 'vmedia', 'auto']),
  new Option(
    '--network <network>',
    'user: QEMU user networking; bridge: a namespace with a bridge and dnsmasq (needs root); default: bridge where allowed',
  ).choices(['user', 'bridge', 'auto']),
  new Option(
    '--cleanup',
    "cleanup boot on release: the manager gets --cleanup-image with the pushed metal/cleanup:latest (erases each disk's first and last MiB)",
  ),
  new Option(
    '--in-cluster',
    'run the operator as users do: a single-node cluster (kubelet, containerd) on this machine, the image built from the Dockerfile, kubectl apply -k config/default; QEMU VMs (BIOS, PXE) reach it through NodePorts (needs root)',
  ),
];

local
  .command('up')
  .description(
    'start the local stack (or reuse a running one), boot an example claim, show the fleet until it is Booted',
  )
  .addOption(dirOpt())
  .option('--servers <n>', 'machines behind the virtual BMC', int(1), 2)
  .addOption(
    new Option('--backend <backend>', 'qemu: VMs with iPXE firmware; sim: simulated hosts')
      .choices(['qemu', 'sim'])
      .default('qemu'),
  )
  .addOption(accelOpt())
  .addOption(machineOpts()[0]!)
  .addOption(machineOpts()[1]!)
  .addOption(machineOpts()[2]!)
  .addOption(machineOpts()[3]!)
  .addOption(machineOpts()[4]!)
  .addOption(
    new Option(
      '--bmc-profile <vendor>',
      'virtual BMC serves this captured vendor tree with its write behaviour',
    ).choices(Object.keys(VENDOR_PROFILES)),
  )
  .option('--timeout <seconds>', 'give up after this many seconds', int(1), 900)
  .option('--no-claim', 'do not apply the example ServerClaim')
  .action(async (o) => process.exit(await localUp(o)));

local
  .command('serve', { hidden: true })
  .addOption(dirOpt())
  .option('--servers <n>', 'machines', int(1), 2)
  .addOption(new Option('--backend <backend>').choices(['qemu', 'sim']).default('qemu'))
  .addOption(accelOpt())
  .addOption(machineOpts()[0]!)
  .addOption(machineOpts()[1]!)
  .addOption(machineOpts()[2]!)
  .addOption(machineOpts()[3]!)
  .addOption(machineOpts()[4]!)
  .addOption(new Option('--bmc-profile <vendor>').choices(Object.keys(VENDOR_PROFILES)))
  .action(async (o) => (o.inCluster ? serveInCluster(o) : localServe(o)));

local
  .command('down')
  .description('stop everything local up started')
  .addOption(dirOpt())
  .action(async (o) => process.exit(await localDown(o)));

local
  .command('status')
  .description('where the local stack runs, and its servers and claims')
  .addOption(dirOpt())
  .action(async (o) => process.exit(await localStatus(o)));

const kubeconfigOpt = () =>
  new Option(
    '--kubeconfig <path>',
    'kubeconfig (default: KUBECONFIG, else the local stack, else ~/.kube/config)',
  );

program
  .command('get')
  .description(
    'list servers or claims with kubectl-like columns (BMC, PROBLEM: why a Server is not simply usable)',
  )
  .argument('<what>', 'servers | claims')
  .argument('[name]', 'only this object')
  .addOption(
    new Option(
      '-o, --output <format>',
      'wide: servers add hardware columns, claims image, policy, method and message; json | yaml: the objects',
    ).choices(['wide', 'json', 'yaml']),
  )
  .option('-l, --selector <selector>', 'label selector (k=v,k2!=v2,k3 in (a,b))')
  .option('-n, --namespace <ns>', 'claims of this namespace only')
  .option('-A, --all-namespaces', 'claims of all namespaces (the default)')
  .addOption(kubeconfigOpt())
  .addOption(dirOpt())
  .action(async (what, name, o) => process.exit(await getCommand(what, name, o)));

program
  .command('describe')
  .description(
    'one Server: hardware (CPU, memory, NICs with MAC/IP/speed, disks), BMC, taints, conditions, last Events',
  )
  .argument('<what>', 'server')
  .argument('<name>', 'Server name')
  .addOption(kubeconfigOpt())
  .addOption(dirOpt())
  .action(async (what, name, o) => process.exit(await describeCommand(what, name, o)));

program
  .command('boots')
  .description("timeline of a claim's boot signals, attempt by attempt")
  .argument('<claim>', 'ServerClaim name')
  .option(
    '-n, --namespace <ns>',
    'namespace of the claim (default: the only namespace with a claim of that name)',
  )
  .option('--watch', 'keep following until the claim is Booted (exit 0) or out of attempts (exit 2)')
  .addOption(kubeconfigOpt())
  .addOption(dirOpt())
  .action(async (claim, o) => process.exit(await bootsCommand(claim, o)));

program
  .command('cordon')
  .description(
    'taint a Server metal.ironcore.dev/maintenance[=reason]:NoBind: no new claims; unclaimed, it goes to state Maintenance (no power actions)',
  )
  .argument('<server>', 'Server name')
  .option('--reason <text>', 'taint value: why (label-value syntax, at most 63 characters)')
  .option('--evict', 'effect Evict: also release the claim bound to it (powered off, Event Evicted)')
  .addOption(kubeconfigOpt())
  .addOption(dirOpt())
  .action(async (server, o) => process.exit(await cordonCommand(server, true, o)));

program
  .command('uncordon')
  .description('remove the maintenance taint: the Server returns to Available')
  .argument('<server>', 'Server name')
  .addOption(kubeconfigOpt())
  .addOption(dirOpt())
  .action(async (server, o) => process.exit(await cordonCommand(server, false, o)));

program
  .command('retry')
  .description(
    'annotate metal.ironcore.dev/operation=retry: a claim starts a new series of boot attempts, a Server in Error its discovery',
  )
  .argument('<kind>', 'server | claim')
  .argument('<name>', 'object name')
  .option('-n, --namespace <ns>', 'namespace of the claim', 'default')
  .option('--reprovision', 'a Booted claim too: its retry network-boots the running machine again')
  .addOption(kubeconfigOpt())
  .addOption(dirOpt())
  .action(async (kind, name, o) => process.exit(await retryCommand(kind, name, o)));

program
  .command('release')
  .description(
    'delete a ServerClaim: its Server is released once the BMC reports it Off; --force releases it without that (a dead BMC), recorded in a Warning Event',
  )
  .argument('<claim>', 'ServerClaim name')
  .option('-n, --namespace <ns>', 'namespace of the claim', 'default')
  .option(
    '--force',
    'annotate metal.ironcore.dev/force-release=true first: released even if the machine may still run',
  )
  .addOption(kubeconfigOpt())
  .addOption(dirOpt())
  .action(async (claim, o) => process.exit(await releaseCommand(claim, o)));

program
  .command('console')
  .description(
    "attach to a Server's serial console through its BMC (SSH with the BMCSecret's credentials, as upstream); type ~. at the start of a line to leave",
  )
  .argument('<server>', 'Server name')
  .option(
    '--port <port>',
    'SSH port of the BMC (default: Redfish SerialConsole.SSH.Port, else BMC spec.consoleProtocol.port, else 22)',
    int(1),
  )
  .option(
    '--serial-console-number <n>',
    'run "console N" (default: Redfish ConsoleEntryCommand, else console 1)',
    int(1),
  )
  .option(
    '--known-hosts-file <path>',
    'OpenSSH known_hosts file holding the BMC host key (default ~/.ssh/known_hosts; as upstream)',
  )
  .option('--skip-host-key-validation', "accept any BMC host key (as upstream's flag)")
  .addOption(kubeconfigOpt())
  .addOption(dirOpt())
  .action(async (server, o) => process.exit(await consoleCommand(server, o)));

await program.parseAsync();
