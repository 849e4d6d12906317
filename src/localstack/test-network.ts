/**
 * The test network: a layer-2 segment the project makes for its VMs, with a real DHCP server, so
 * each VM gets its own address and the boot server sees it.
 *
 * Layout (all inside one network namespace `metaltn-<tag>-<pid>`, except the host end of the veth):
 *
 * ```
 *  host namespace                 │ namespace metaltn-<tag>-<pid>
 *  boot server, registry          │   br0 10.251.N.2/24 ── dnsmasq (DHCP, TFTP)
 *  listen on 10.251.N.1 ── veth ──┼── veth peer ┘ │ │
 *                                 │             tap0 tap1 … (one per VM; QEMU runs in here)
 * ```
 *
 * dnsmasq (Debian `dnsmasq-base`) answers, by what the client says it is (RFC 2131 DHCP; option 60
 * vendor class and option 77 user class; PXE/UEFI client classes of RFC 4578 and UEFI 2.x §24):
 * - iPXE (user class `iPXE`): boot file `<boot server>/ipxe`, the chain script;
 * - UEFI PXE without iPXE (`PXEClient:Arch:00007|00009`): TFTP of Debian's iPXE EFI binary
 *   (`ipxe` package, `snponly.efi`), which then asks again as iPXE;
 * - BIOS PXE without iPXE: TFTP of `undionly.kpxe`;
 * - UEFI HTTP boot (`HTTPClient`): option 60 `HTTPClient` and, in option 67, the URL set for that
 *   MAC by {@link TestNetwork.setHttpBootUri} (what the virtual BMC's `Boot.HttpBootUri` says),
 *   else nothing (the client finds no boot file).
 *
 * With `dhcp: false` no dnsmasq runs: the segment has no DHCP server (and no TFTP), as a provisioning
 * network that boots only by virtual media; its machines take static addresses ({@link
 * TestNetwork.staticIpArg}) from their boot media's kernel command line.
 *
 * Set-up is idempotent per process (same name); {@link TestNetwork.close} removes the namespace,
 * which takes the veth pair, bridge and taps with it, and ends dnsmasq. Namespaces left by a process
 * that died (its pid in the name no longer runs) are removed at the next start. Creating namespaces
 * needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN); {@link bridgeNetworkProblem} says why it cannot run,
 * and callers fall back to QEMU user networking.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Debian `dnsmasq-base`. */
export const DNSMASQ = '/usr/sbin/dnsmasq';
/** Debian `ipxe`: iPXE for UEFI on the firmware's own network driver (SNP), and for BIOS PXE (UNDI). */
export const IPXE_EFI_TFTP = '/usr/lib/ipxe/snponly.efi';
export const IPXE_BIOS_TFTP = '/usr/lib/ipxe/undionly.kpxe';
/** Every namespace this module makes starts with it, so stale ones are told apart from anyone else's. */
const NAME_PREFIX = 'metaltn-';
const IP = '/usr/sbin/ip';

export interface TestNetworkOptions {
  /** Part of the namespace name (`metaltn-<tag>-<pid>`), e.g. who made it; letters and digits, ≤ 6. */
  tag?: string;
  /** Work folder for the dnsmasq configuration, leases and TFTP root (created). */
  dir: string;
  /** Port of the boot server on {@link TestNetwork.hostAddress}, for the iPXE boot file URL. */
  bootServerPort: number;
  /**
   * Run dnsmasq (DHCP, TFTP) on the bridge (default true). False: a segment with no DHCP server at
   * all, as a provisioning network that boots only by virtual media; machines on it use static
   * addresses ({@link TestNetwork.staticAddress}).
   */
  dhcp?: boolean;
}

/** One DHCP lease as dnsmasq records it. */
export interface Lease {
  expires: number;
  mac: string;
  ip: string;
}

/** Why the bridged test network cannot be made here, or undefined when it can. */
export function bridgeNetworkProblem(): string | undefined {
  if (process.getuid?.() !== 0) return 'not root: network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN';
  if (!existsSync(DNSMASQ)) return `${DNSMASQ} is missing (Debian package dnsmasq-base)`;
  if (!existsSync('/dev/net/tun')) return '/dev/net/tun is missing';
  const probe = `${NAME_PREFIX}probe-${process.pid}`;
  try {
    ip(['netns', 'add', probe]);
    ip(['netns', 'exec', probe, IP, 'link', 'add', 'br0', 'type', 'bridge']);
    return undefined;
  } catch (err) {
    return `cannot create a network namespace with a bridge: ${firstLine(err)}`;
  } finally {
    try {
      ip(['netns', 'del', probe]);
    } catch {
      // It was never made.
    }
  }
}

/**
 * Removes namespaces named `metaltn-<tag>-<pid>` whose pid no longer runs,
 * killing what still runs inside (our dnsmasq and QEMU). Returns the names removed.
 */
export function removeStaleNamespaces(): string[] {
  const removed: string[] = [];
  for (const name of listNamespaces()) {
    const m = /^metaltn-[a-z0-9]{1,6}-(\d+)$/.exec(name);
    if (!m || pidAlive(Number(m[1]))) continue;
    killNamespaceProcesses(name);
    try {
      ip(['netns', 'del', name]);
      removed.push(name);
    } catch {
      // Another process removed it first.
    }
  }
  return removed;
}

export class TestNetwork {
  private taps = 0;
  /** Namespaces of {@link TestNetwork.dhcpClient} machines, removed by {@link TestNetwork.close}. */
  private readonly clients: string[] = [];
  private readonly httpBootUris = new Map<string, string>();
  private dnsmasq: ChildProcess | undefined;
  /** Serialises dnsmasq restarts (see {@link TestNetwork.setHttpBootUri}). */
  private restarts: Promise<void> = Promise.resolve();
  private closed = false;

  private constructor(
    /** The namespace holding bridge, taps, dnsmasq and the VMs. */
    readonly netns: string,
    /** The host end of the veth: where boot server and registry listen. */
    readonly hostAddress: string,
    /** The bridge's address: dnsmasq (DHCP server identifier, TFTP). */
    readonly dhcpAddress: string,
    readonly subnet: string,
    private readonly opts: TestNetworkOptions,
    private readonly hostVeth: string,
  ) {}

  /**
   * Makes namespace, bridge, veth pair and starts dnsmasq; first removes stale namespaces.
   * @throws Error naming the failing `ip`/`dnsmasq` step (the half-made namespace is removed).
   */
  static async create(opts: TestNetworkOptions): Promise<TestNetwork> {
    removeStaleNamespaces();
    const tag =
      (opts.tag ?? 'tn')
        .toLowerCase()
        .replace(/[^a-z0-9]/g, '')
        .slice(0, 6) || 'tn';
    const netns = `${NAME_PREFIX}${tag}-${process.pid}`;
    if (listNamespaces().includes(netns)) ip(['netns', 'del', netns]);
    const octet = freeSubnetOctet();
    const subnet = `10.251.${octet}.0/24`;
    const hostAddress = `10.251.${octet}.1`;
    const dhcpAddress = `10.251.${octet}.2`;
    // Interface names are limited to 15 bytes.
    const suffix = (process.pid % 0xfffff).toString(16);
    const hostVeth = `mh${tag.slice(0, 3)}${suffix}`;
    const nsVeth = `mn${tag.slice(0, 3)}${suffix}`;
    const net = new TestNetwork(netns, hostAddress, dhcpAddress, subnet, opts, hostVeth);
    try {
      ip(['netns', 'add', netns]);
      const inNs = (...args: string[]) => ip(['-n', netns, ...args]);
      inNs('link', 'set', 'lo', 'up');
      inNs('link', 'add', 'br0', 'type', 'bridge', 'forward_delay', '0', 'stp_state', '0');
      inNs('addr', 'add', `${dhcpAddress}/24`, 'dev', 'br0');
      inNs('link', 'set', 'br0', 'up');
      ip(['link', 'add', hostVeth, 'type', 'veth', 'peer', 'name', nsVeth, 'netns', netns]);
      inNs('link', 'set', nsVeth, 'master', 'br0', 'up');
      ip(['addr', 'add', `${hostAddress}/24`, 'dev', hostVeth]);
      ip(['link', 'set', hostVeth, 'up']);
      if (opts.dhcp !== false) await net.startDnsmasq();
    } catch (err) {
      await net.close();
      throw new Error(`test network ${netns}: ${firstLine(err)}`);
    }
    return net;
  }

  /** Whether dnsmasq serves DHCP on this network (the `dhcp` option). */
  get dhcp(): boolean {
    return this.opts.dhcp !== false;
  }

  /**
   * The static address of machine `index` (0-based): `.10` upwards, below dnsmasq's pool (`.50`–`.250`)
   * and apart from the bridge (`.2`) and the host end (`.1`). Pure.
   * @throws RangeError for an index outside 0–39.
   */
  staticAddress(index: number): string {
    if (!Number.isInteger(index) || index < 0 || index > 39)
      throw new RangeError(`static address index ${index}: 0-39`);
    return this.hostAddress.replace(/\.1$/, `.${10 + index}`);
  }

  /**
   * The kernel `ip=` value (nfsroot syntax, as `metal.ironcore.dev/boot-ip` holds it) of machine
   * `index` on this /24 segment: its static address, the host end as gateway, interface eth0, no autoconf.
   */
  staticIpArg(index: number): string {
    return `${this.staticAddress(index)}::${this.hostAddress}:255.255.255.0::eth0:off`;
  }

  /** Base URL of the boot server as the VMs reach it. */
  get bootServerUrl(): string {
    return `http://${this.hostAddress}:${this.opts.bootServerPort}`;
  }

  /** Creates the next tap device on the bridge (owned by this namespace); returns its name. */
  addTap(): string {
    const name = `tap${this.taps++}`;
    ip(['-n', this.netns, 'tuntap', 'add', 'dev', name, 'mode', 'tap']);
    ip(['-n', this.netns, 'link', 'set', name, 'master', 'br0', 'up']);
    return name;
  }

  /**
   * The UEFI HTTP boot URL DHCP offers to `mac` (undefined: none), as the BMC's `Boot.HttpBootUri`
   * would make the firmware use. dnsmasq re-reads its option file on SIGHUP.
   */
  setHttpBootUri(mac: string, uri: string | undefined): void {
    const key = mac.toLowerCase();
    if (uri === undefined) this.httpBootUris.delete(key);
    else this.httpBootUris.set(key, uri);
    this.writeHostFiles();
    // Not SIGHUP: dnsmasq 2.90 (Debian 12) dies of a general protection fault in libc on its second
    // reload of this tagged dhcp-optsfile (seen in `bench:e2e --shapes uefi-http`, run 2). A restart
    // keeps the leases (dnsmasq reads its lease file at start) and takes well under the seconds
    // OVMF spends before its DHCP request.
    if (this.dnsmasq) this.restarts = this.restarts.then(() => this.restartDnsmasq());
  }

  /** Ends the running dnsmasq (SIGTERM, then SIGKILL after 3 s) and starts it again; errors go to stderr. */
  private async restartDnsmasq(): Promise<void> {
    if (this.closed) return;
    try {
      await this.stopDnsmasq();
      if (!this.closed) await this.spawnDnsmasq();
    } catch (err) {
      process.stderr.write(`test network ${this.netns}: restarting dnsmasq failed: ${firstLine(err)}\n`);
    }
  }

  private async stopDnsmasq(): Promise<void> {
    const d = this.dnsmasq;
    if (!d || d.exitCode !== null || d.signalCode !== null) return;
    const gone = new Promise((ok) => d.once('exit', ok));
    d.kill('SIGTERM');
    const timer = new Promise((ok) => setTimeout(ok, 3000).unref());
    if ((await Promise.race([gone.then(() => true), timer.then(() => false)])) === false) {
      d.kill('SIGKILL');
      await gone;
    }
  }

  /** dnsmasq's current leases (empty before the first). */
  leases(): Lease[] {
    let text = '';
    try {
      text = readFileSync(join(this.opts.dir, 'dnsmasq.leases'), 'utf8');
    } catch {
      return [];
    }
    return text
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(' '))
      .map(([expires, mac, ip]) => ({
        expires: Number(expires),
        mac: (mac ?? '').toLowerCase(),
        ip: ip ?? '',
      }));
  }

  /**
   * An HTTP GET from `address` on the bridge, as a machine holding that address would send it (a
   * test of address-based trust; the address must be free, e.g. its VM powered off): the address
   * is added to the bridge for the duration of the request, and Node.js inside the namespace sends
   * it with that source address.
   * @returns status and body; throws when the request cannot be sent within 15 s.
   */
  requestFrom(address: string, url: string): { status: number; body: string } {
    if (!/^10\.251\.\d+\.\d+$/.test(address) || !address.startsWith(this.subnet.replace(/0\/24$/, ''))) {
      throw new Error(`${address} is not an address of ${this.subnet}`);
    }
    ip(['-n', this.netns, 'addr', 'add', `${address}/32`, 'dev', 'br0']);
    try {
      const script = `const u=new URL(${JSON.stringify(url)});require('node:http').get({host:u.hostname,port:u.port,path:u.pathname+u.search,localAddress:${JSON.stringify(address)}},(r)=>{let b='';r.setEncoding('utf8');r.on('data',(c)=>b+=c);r.on('end',()=>{process.stdout.write(JSON.stringify({status:r.statusCode,body:b}))})}).on('error',(e)=>{process.stderr.write(e.message);process.exit(1)})`;
      const out = execFileSync(IP, ['netns', 'exec', this.netns, process.execPath, '-e', script], {
        encoding: 'utf8',
        timeout: 15_000,
      });
      return JSON.parse(out) as { status: number; body: string };
    } finally {
      ip(['-n', this.netns, 'addr', 'del', `${address}/32`, 'dev', 'br0']);
    }
  }

  /** dnsmasq's lease file (what a boot server's `--client-mac-source dnsmasq-leases=<file>` reads). */
  get leaseFile(): string {
    return join(this.opts.dir, 'dnsmasq.leases');
  }

  /**
   * A machine on the segment that gets its address over DHCP from dnsmasq, as a host's firmware does,
   * without a VM: a namespace of its own (`metaltn-dhc<k>-<pid>`) whose `eth0` (MAC `mac`) is a veth
   * on the bridge, configured by busybox `udhcpc`. `run` executes a command inside it.
   * @returns the leased address; throws when no lease arrives within ~10 s.
   */
  dhcpClient(mac: string): { address: string; netns: string; run(args: string[]): string } {
    if (!/^([0-9a-f]{2}:){5}[0-9a-f]{2}$/i.test(mac)) throw new Error(`${mac} is not a MAC address`);
    const k = this.clients.length;
    const ns = `${NAME_PREFIX}dhc${k}-${process.pid}`;
    ip(['netns', 'add', ns]);
    this.clients.push(ns);
    ip(['-n', this.netns, 'link', 'add', `dhc${k}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
    ip(['-n', this.netns, 'link', 'set', `dhc${k}`, 'master', 'br0', 'up']);
    ip(['-n', ns, 'link', 'set', 'lo', 'up']);
    ip(['-n', ns, 'link', 'set', 'eth0', 'address', mac.toLowerCase()]);
    ip(['-n', ns, 'link', 'set', 'eth0', 'up']);
    const script = join(this.opts.dir, 'udhcpc.script');
    writeFileSync(
      script,
      '#!/bin/sh\n[ "$1" = bound ] || [ "$1" = renew ] || exit 0\nexec /usr/sbin/ip addr replace "$ip/24" dev "$interface"\n',
      { mode: 0o755 },
    );
    const run = (args: string[]) =>
      execFileSync(IP, ['netns', 'exec', ns, ...args], { encoding: 'utf8', timeout: 20_000, stdio: 'pipe' });
    run(['/usr/bin/busybox', 'udhcpc', '-i', 'eth0', '-n', '-q', '-t', '5', '-T', '2', '-s', script]);
    const m = /inet (\d+\.\d+\.\d+\.\d+)\//.exec(ip(['-n', ns, '-4', 'addr', 'show', 'eth0']));
    if (!m?.[1]) throw new Error(`dhcp client ${mac}: no address after udhcpc`);
    return { address: m[1], netns: ns, run };
  }

  /** Path of dnsmasq's log (DHCP and TFTP transactions). */
  get dnsmasqLog(): string {
    return join(this.opts.dir, 'dnsmasq.log');
  }

  /** Ends dnsmasq and everything else in the namespace, removes the namespace (and with it veth, bridge, taps). Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.restarts;
    await this.stopDnsmasq();
    for (const ns of this.clients) {
      try {
        ip(['netns', 'del', ns]);
      } catch {
        // Already gone.
      }
    }
    if (listNamespaces().includes(this.netns)) {
      killNamespaceProcesses(this.netns);
      try {
        ip(['netns', 'del', this.netns]);
      } catch {
        // Already gone.
      }
    }
    try {
      ip(['link', 'del', this.hostVeth]);
    } catch {
      // The veth went with the namespace.
    }
  }

  private writeHostFiles(): void {
    const hosts: string[] = [];
    const opts: string[] = [];
    let i = 0;
    for (const [mac, uri] of this.httpBootUris) {
      hosts.push(`${mac},set:hb${i}`);
      opts.push(`tag:hb${i},tag:httpclient,option:bootfile-name,"${uri.replaceAll('"', '')}"`);
      i++;
    }
    writeFileSync(join(this.opts.dir, 'dhcp-hosts'), hosts.map((l) => `${l}\n`).join(''));
    writeFileSync(join(this.opts.dir, 'dhcp-opts'), opts.map((l) => `${l}\n`).join(''));
  }

  private async startDnsmasq(): Promise<void> {
    const dir = this.opts.dir;
    mkdirSync(dir, { recursive: true });
    const tftp = join(dir, 'tftp');
    rmSync(tftp, { recursive: true, force: true });
    mkdirSync(tftp);
    symlinkSync(IPXE_EFI_TFTP, join(tftp, 'ipxe.efi'));
    symlinkSync(IPXE_BIOS_TFTP, join(tftp, 'undionly.kpxe'));
    rmSync(join(dir, 'dnsmasq.leases'), { force: true });
    this.writeHostFiles();
    const range = this.dhcpAddress.replace(/\.2$/, '');
    const conf = [
      'port=0', // no DNS
      'interface=br0',
      'bind-interfaces',
      'except-interface=lo',
      `dhcp-range=${range}.50,${range}.250,255.255.255.0,1h`,
      'dhcp-authoritative',
      'dhcp-option=option:router', // no gateway: nothing leaves this segment
      `dhcp-leasefile=${join(dir, 'dnsmasq.leases')}`,
      `dhcp-hostsfile=${join(dir, 'dhcp-hosts')}`,
      `dhcp-optsfile=${join(dir, 'dhcp-opts')}`,
      'log-dhcp',
      `log-facility=${this.dnsmasqLog}`,
      'enable-tftp',
      `tftp-root=${tftp}`,
      'dhcp-userclass=set:ipxe,iPXE',
      'dhcp-match=set:ipxe,175',
      'dhcp-vendorclass=set:efi,PXEClient:Arch:00007',
      'dhcp-vendorclass=set:efi,PXEClient:Arch:00009',
      'dhcp-vendorclass=set:httpclient,HTTPClient',
      'dhcp-option-force=tag:httpclient,option:vendor-class,HTTPClient',
      `dhcp-boot=tag:ipxe,${this.bootServerUrl}/ipxe`,
      `dhcp-boot=tag:!ipxe,tag:efi,ipxe.efi,,${this.dhcpAddress}`,
      `dhcp-boot=tag:!ipxe,tag:!efi,tag:!httpclient,undionly.kpxe,,${this.dhcpAddress}`,
      '',
    ].join('\n');
    writeFileSync(join(dir, 'dnsmasq.conf'), conf);
    await this.spawnDnsmasq();
  }

  /** Starts dnsmasq on the written configuration; throws when it exits at once (configuration error). */
  private async spawnDnsmasq(): Promise<void> {
    const confFile = join(this.opts.dir, 'dnsmasq.conf');
    const proc = spawn(
      '/usr/bin/setpriv',
      [
        '--pdeathsig',
        'KILL',
        '--',
        IP,
        'netns',
        'exec',
        this.netns,
        DNSMASQ,
        '--keep-in-foreground',
        `--conf-file=${confFile}`,
        '--pid-file=',
        '--user=root',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    this.dnsmasq = proc;
    let stderr = '';
    proc.stderr?.setEncoding('utf8');
    proc.stderr?.on('data', (c: string) => {
      stderr = (stderr + c).slice(-2000);
    });
    // dnsmasq reports configuration errors and exits at once; give it a moment to do so.
    const exited = await new Promise<boolean>((ok) => {
      const t = setTimeout(() => ok(false), 500);
      proc.once('exit', () => {
        clearTimeout(t);
        ok(true);
      });
    });
    if (exited) throw new Error(`dnsmasq exited at start: ${stderr.trim()}`);
  }
}

function ip(args: string[]): string {
  return execFileSync(IP, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 10_000 });
}

function listNamespaces(): string[] {
  try {
    return ip(['netns', 'list'])
      .split('\n')
      .map((l) => l.split(' ')[0] ?? '')
      .filter((n) => n.startsWith(NAME_PREFIX));
  } catch {
    return [];
  }
}

function killNamespaceProcesses(netns: string): void {
  let pids: number[] = [];
  try {
    pids = ip(['netns', 'pids', netns]).split('\n').filter(Boolean).map(Number);
  } catch {
    return;
  }
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** A third octet for 10.251.N.0/24 that no interface or route of the host namespace uses. */
function freeSubnetOctet(): number {
  const used = `${ip(['-o', 'addr'])}\n${ip(['route'])}`;
  for (let k = 0; k < 250; k++) {
    const octet = ((process.pid + k) % 250) + 1;
    if (!used.includes(`10.251.${octet}.`)) return octet;
  }
  throw new Error('no free 10.251.N.0/24 subnet');
}

function firstLine(err: unknown): string {
  const e = err as { stderr?: string; message?: string };
  return (e.stderr?.trim() || e.message || String(err)).split('\n')[0] ?? '';
}
