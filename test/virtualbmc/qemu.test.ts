/**
 * End-to-end tests of the QEMU back end: a real VM network-boots through iPXE from a stand-in
 * boot server on 127.0.0.1 and runs the busybox test image built by hack/build-vm-artefacts.sh.
 *
 * Needs qemu-system-x86 and ipxe-qemu (hack/install-packages.sh, which this test runs when they
 * are missing). TCG boots take ~10 s on an idle 2-core machine; the timeouts allow for load.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { canonicalSystemUUID } from '../../src/api/system-uuid.js';
import type { BootDevice } from '../../src/virtualbmc/host.js';
import { QemuHost, qemuHostIdentity, qemuPrerequisiteProblems } from '../../src/virtualbmc/qemu.js';
import { sshExec } from './ssh-session.js';

const execFileP = promisify(execFile);
const BOOT_TIMEOUT_MS = 120_000;
const TOKEN = 't0k';

function repoRoot(): string {
  for (let dir = process.env.METAL_REPO_ROOT ?? process.cwd(); ; dir = path.dirname(dir)) {
    if (existsSync(path.join(dir, 'hack', 'build-vm-artefacts.sh'))) return dir;
    if (path.dirname(dir) === dir) {
      throw new Error('run the tests from the repository (hack/build-vm-artefacts.sh not found above cwd)');
    }
  }
}

let artefacts: Promise<string> | undefined;

/** Installs missing packages (once) and builds or reuses the VM artefacts; resolves with their folder. */
/** The KVM probe boots the same kernel and initramfs (accel auto: KVM only when that probe runs). */
function probeGuestIn(dir: string): { kernel: string; initrd: string } {
  return { kernel: path.join(dir, 'vmlinuz'), initrd: path.join(dir, 'initramfs.cpio.gz') };
}

function vmArtefacts(): Promise<string> {
  artefacts ??= (async () => {
    const root = repoRoot();
    if (qemuPrerequisiteProblems().length > 0) {
      await execFileP('bash', [path.join(root, 'hack', 'install-packages.sh')], { timeout: 600_000 });
      const problems = qemuPrerequisiteProblems();
      if (problems.length > 0) {
        throw new Error(`QEMU is not usable after hack/install-packages.sh: ${problems.join('; ')}`);
      }
    }
    const started = Date.now();
    const { stdout } = await execFileP('bash', [path.join(root, 'hack', 'build-vm-artefacts.sh')], {
      timeout: 600_000,
    });
    const dir = stdout.trim().split('\n').at(-1) ?? '';
    assert.ok(existsSync(path.join(dir, 'vmlinuz')), `no vmlinuz in ${dir}`);
    assert.ok(existsSync(path.join(dir, 'initramfs.cpio.gz')), `no initramfs in ${dir}`);
    console.log(`# VM artefacts: ${dir} (${Date.now() - started} ms)`);
    return dir;
  })();
  return artefacts;
}

/** Prints the end of the VM's serial log, which says what the guest did. */
async function dumpSerial(host: QemuHost, label: string): Promise<void> {
  const log = await fs.readFile(host.serialLogPath, 'utf8').catch(() => '(no serial log)');
  console.log(`# --- serial log of ${label} (last 60 lines) ---`);
  for (const line of log.split('\n').slice(-60)) console.log(`# ${line}`);
  if (host.lastExit) console.log(`# last QEMU exit: ${JSON.stringify(host.lastExit)}`);
}

/** Waits until `check` holds (polling every 100 ms); throws naming `what` after `timeoutMs`. */
async function poll(what: string, timeoutMs: number, check: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Waits until the VM's serial log matches `re` (read every 200 ms). */
async function waitForSerial(host: QemuHost, re: RegExp, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!re.test(await fs.readFile(host.serialLogPath, 'utf8').catch(() => ''))) {
    if (Date.now() > deadline) throw new Error(`serial log matching ${re}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function waitForState(host: QemuHost, state: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (host.powerState() !== state) {
    if (Date.now() > deadline) {
      throw new Error(`power state still ${host.powerState()} after ${timeoutMs} ms, wanted ${state}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Asserts that `server` saw the full os-mode boot of `uuid`, in order; returns the /bootstate request. */
function assertOsBootSequence(server: StandInBootServer, uuid: string) {
  const seq = [
    (r: { method: string; path: string }) => r.method === 'GET' && r.path === '/ipxe',
    (r: { method: string; path: string }) => r.method === 'GET' && r.path.toLowerCase() === `/ipxe/${uuid}`,
    (r: { method: string; path: string }) => r.method === 'GET' && r.path === '/vmlinuz',
    (r: { method: string; path: string }) => r.method === 'GET' && r.path === '/initramfs.cpio.gz',
    (r: { method: string; path: string }) => r.method === 'GET' && r.path === `/ignition/${uuid}`,
    (r: { method: string; path: string }) => r.method === 'POST' && r.path === '/bootstate',
  ];
  let from = 0;
  const indices: number[] = [];
  for (const [i, match] of seq.entries()) {
    const idx = server.requests.findIndex((r, j) => j >= from && match(r));
    assert.ok(idx >= 0, `step ${i} of the boot sequence missing; saw ${server.summary()}`);
    indices.push(idx);
    from = idx + 1;
  }
  const ignition = server.requests[indices[4]!]!;
  assert.equal(ignition.query.get('token'), TOKEN, 'ignition fetched with the attempt token');
  const post = server.requests[indices[5]!]!;
  assert.equal(post.headers.authorization, `Bearer ${TOKEN}`);
  assert.match(String(post.headers['content-type']), /^application\/json/);
  const body = JSON.parse(post.body) as { systemUUID: string; booted: boolean };
  assert.deepEqual(body, { systemUUID: uuid, booted: true });
  assert.equal(canonicalSystemUUID(body.systemUUID), body.systemUUID, 'UUID sent in canonical lower case');
  return post;
}

test('QEMU VM network-boots through iPXE in os mode and posts /bootstate; ACPI power button ends it', async (t) => {
  const dir = await vmArtefacts();
  const server = await StandInBootServer.start(dir, { token: TOKEN });
  t.after(() => server.close());
  const identity = qemuHostIdentity(1, { uuid: '0A1B2C3D-4E5F-6A7B-8C9D-0E1F2A3B4C5D'.toLowerCase() });
  server.configure(identity.uuid, { mode: 'os' });
  const host = new QemuHost(identity, { bootServerUrl: server.url, probeGuest: probeGuestIn(dir) });
  t.after(() => host.close());
  try {
    const started = Date.now();
    await host.powerOn('Pxe');
    assert.equal(host.powerState(), 'On');
    const post = await server.waitFor((r) => r.method === 'POST' && r.path === '/bootstate', BOOT_TIMEOUT_MS);
    console.log(`# power on → POST /bootstate: ${((post.at - started) / 1000).toFixed(1)} s`);
    assertOsBootSequence(server, identity.uuid);

    const offAt = Date.now();
    await host.gracefulShutdown();
    await waitForState(host, 'Off', 60_000);
    console.log(`# ACPI power button → VM off: ${((Date.now() - offAt) / 1000).toFixed(1)} s`);
    assert.equal(host.lastExit?.requested, false, 'the guest powered itself off');
    assert.match(await fs.readFile(host.serialLogPath, 'utf8'), /metal: ACPI power button pressed/);
  } catch (err) {
    await dumpSerial(host, identity.uuid);
    throw err;
  }
});

test('QEMU VM in probe mode posts /register with its UUID, MAC, memory and CPU count', async (t) => {
  const dir = await vmArtefacts();
  const server = await StandInBootServer.start(dir, { token: TOKEN });
  t.after(() => server.close());
  const identity = qemuHostIdentity(2, { memoryMiB: 512, cpus: 1, serialNumber: 'SN-PROBE-2' });
  server.configure(identity.uuid, { mode: 'probe' });
  const host = new QemuHost(identity, { bootServerUrl: server.url, probeGuest: probeGuestIn(dir) });
  t.after(() => host.close());
  try {
    const started = Date.now();
    await host.powerOn('Pxe');
    const reg = await server.waitFor((r) => r.method === 'POST' && r.path === '/register', BOOT_TIMEOUT_MS);
    console.log(`# power on → POST /register: ${((reg.at - started) / 1000).toFixed(1)} s`);
    assert.match(String(reg.headers['content-type']), /^application\/json/);
    const payload = JSON.parse(reg.body) as RegistrationPayload;
    assert.equal(payload.systemUUID, identity.uuid);
    const d = payload.data;
    assert.equal(d.systemInfo.systemInformation.uuid, identity.uuid);
    assert.equal(d.systemInfo.systemInformation.serialNumber, identity.serialNumber);
    assert.equal(d.systemInfo.systemInformation.manufacturer, identity.manufacturer);
    assert.equal(d.systemInfo.systemInformation.productName, identity.model);
    const nic = d.networkInterfaces.find((n) => n.macAddress === identity.macAddress);
    assert.ok(nic, `no interface with MAC ${identity.macAddress}: ${JSON.stringify(d.networkInterfaces)}`);
    assert.ok(nic.ipAddresses.includes('10.0.2.15'), `DHCP address missing: ${nic.ipAddresses}`);
    assert.ok(d.nics.some((n) => n.mac === identity.macAddress && /^0000:/.test(n.pciAddress)));
    const memoryBytes = d.memory.reduce((sum, m) => sum + m.size, 0);
    assert.equal(memoryBytes, identity.memoryMiB * 1024 * 1024, 'installed memory from SMBIOS type 17');
    const threads = d.cpu.reduce((sum, c) => sum + c.totalHardwareThreads, 0);
    assert.equal(threads, identity.cpus);
    assert.ok(d.cpu[0]?.model, 'CPU model name');
    const vda = d.storage.find((s) => s.name === 'vda');
    assert.ok(vda, `no vda in ${JSON.stringify(d.storage)}`);
    assert.equal(vda.sizeBytes, 8 * 1024 ** 3);
  } catch (err) {
    await dumpSerial(host, identity.uuid);
    throw err;
  }
});

test('QEMU VM booting from disk makes no network request; None falls back to the network; reset reboots', async (t) => {
  const dir = await vmArtefacts();
  const server = await StandInBootServer.start(dir, { token: TOKEN });
  t.after(() => server.close());
  const identity = qemuHostIdentity(3);
  server.configure(identity.uuid, { mode: 'os', callback: 'skip' });
  const host = new QemuHost(identity, { bootServerUrl: server.url, probeGuest: probeGuestIn(dir) });
  t.after(() => host.close());
  const ignitionFetches = () => server.requests.filter((r) => r.path === `/ignition/${identity.uuid}`).length;
  try {
    // None = the machine's own order: the empty disk first, then the network. Its time to the first
    // request sizes the disk-only window below: the positive control that a network boot fits in it.
    const t0 = Date.now();
    await host.powerOn('None');
    const nonePid = host.pid;
    await server.waitFor(() => server.requests.length > 0, BOOT_TIMEOUT_MS);
    const toNetworkMs = server.requests[0]!.at - t0;
    await server.waitFor(() => ignitionFetches() === 1, BOOT_TIMEOUT_MS);
    // The agent's decision, not a fixed wait: past this line it would have posted /bootstate.
    await waitForSerial(host, /metal\.callback=skip, not posting \/bootstate/, 60_000);
    assert.ok(!server.requests.some((r) => r.path === '/bootstate'), 'metal.callback=skip posts nothing');
    assert.match(await fs.readFile(host.serialLogPath, 'utf8'), /metal\.callback=skip/);

    // Hdd: a device change restarts QEMU, and the VM stays on the empty disk: nothing reaches the
    // network in twice the time the None boot took to its first request (at least 15 s).
    await host.reset('Hdd');
    assert.notEqual(host.pid, nonePid, 'a boot device change restarts QEMU');
    const hddPid = host.pid;
    const mark = server.requests.length;
    await new Promise((r) => setTimeout(r, Math.max(15_000, 2 * toNetworkMs)));
    assert.equal(host.powerState(), 'On');
    assert.equal(server.requests.length, mark, `unexpected requests: ${server.summary()}`);

    // Back to None (a restart again), then the same device: a QMP system_reset of the running VM,
    // which boots again.
    await host.reset('None');
    assert.notEqual(host.pid, hddPid, 'a boot device change restarts QEMU');
    const againPid = host.pid;
    await server.waitFor(() => ignitionFetches() === 2, BOOT_TIMEOUT_MS);
    await host.reset('None' satisfies BootDevice);
    assert.equal(host.pid, againPid, 'same boot device: no restart');
    await server.waitFor(() => ignitionFetches() === 3, BOOT_TIMEOUT_MS);

    await host.forceOff();
    assert.equal(host.powerState(), 'Off');
    assert.equal(host.lastExit?.requested, true);
  } catch (err) {
    await dumpSerial(host, identity.uuid);
    throw err;
  }
});

test('virtual BMC Redfish API drives a QEMU VM: Pxe/Once override, Reset On, POST /bootstate', async (t) => {
  const dir = await vmArtefacts();
  const server = await StandInBootServer.start(dir, { token: TOKEN });
  t.after(() => server.close());
  const identity = qemuHostIdentity(4);
  server.configure(identity.uuid, { mode: 'os' });
  const host = new QemuHost(identity, { bootServerUrl: server.url, probeGuest: probeGuestIn(dir) });
  t.after(() => host.close());
  const { startVirtualBmc } = (await import('../../src/virtualbmc/server.js')) as {
    startVirtualBmc(o: {
      hosts: QemuHost[];
      username: string;
      password: string;
      port: number;
    }): Promise<{ url: string; close(): Promise<void> }>;
  };
  const bmc = await startVirtualBmc({ hosts: [host], username: 'admin', password: 'secret', port: 0 });
  t.after(() => bmc.close());
  const auth = `Basic ${Buffer.from('admin:secret').toString('base64')}`;
  const redfish = async (method: string, p: string, body?: unknown) => {
    const res = await fetch(new URL(p, bmc.url), {
      method,
      headers: { authorization: auth, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    assert.ok(res.ok, `${method} ${p}: HTTP ${res.status} ${text}`);
    return text ? (JSON.parse(text) as Record<string, unknown>) : {};
  };
  try {
    const systems = (await redfish('GET', '/redfish/v1/Systems')) as { Members: { '@odata.id': string }[] };
    const systemPath = systems.Members[0]?.['@odata.id'];
    assert.ok(systemPath, 'one system');
    const system = await redfish('GET', systemPath);
    assert.equal(String(system.UUID).toLowerCase(), identity.uuid);
    assert.equal(system.PowerState, 'Off');
    await redfish('PATCH', systemPath, {
      Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once' },
    });
    const resetAt = Date.now();
    await redfish('POST', `${systemPath}/Actions/ComputerSystem.Reset`, { ResetType: 'On' });
    const post = await server.waitFor((r) => r.method === 'POST' && r.path === '/bootstate', BOOT_TIMEOUT_MS);
    console.log(`# Redfish Reset(On) → POST /bootstate: ${((post.at - resetAt) / 1000).toFixed(1)} s`);
    assertOsBootSequence(server, identity.uuid);
    assert.equal(host.bootDevice, 'Pxe');
    const after = await redfish('GET', systemPath);
    assert.equal(after.PowerState, 'On');

    // The serial console through the BMC's SSH endpoint (as metalctl console attaches): a command typed
    // into the test image's console shell runs in the VM; its output reaches the session and the
    // serial log keeps getting everything (chardev logfile).
    const ssh = (after.SerialConsole as { SSH: { Port: number; ConsoleEntryCommand: string } }).SSH;
    const session = await sshExec(ssh.Port, 'admin', 'secret', ssh.ConsoleEntryCommand);
    try {
      await waitForSerial(host, /idling/, 30_000);
      session.write('echo metal-console-$((6*7))\r');
      // The typed line comes back as the guest tty's echo; only the shell's run of it prints 42.
      await poll('the echo of the typed command', 30_000, () =>
        session.out().includes('echo metal-console-$((6*7))'),
      );
      await poll('the command output in the session', 60_000, () =>
        session.out().includes('metal-console-42'),
      );
      await waitForSerial(host, /metal-console-42/, 10_000);
      assert.match(await fs.readFile(host.serialLogPath, 'utf8'), /metal: os: boot state reported/);
    } finally {
      session.end();
    }
  } catch (err) {
    await dumpSerial(host, identity.uuid);
    throw err;
  }
});

interface RegistrationPayload {
  systemUUID: string;
  data: {
    systemInfo: {
      systemInformation: { uuid: string; serialNumber: string; manufacturer: string; productName: string };
    };
    cpu: { totalHardwareThreads: number; model: string }[];
    networkInterfaces: { name: string; macAddress: string; ipAddresses: string[] }[];
    nics: { mac: string; pciAddress: string }[];
    memory: { size: number }[];
    storage: { name: string; sizeBytes: number }[];
  };
}

/** One request the stand-in boot server received. */
interface SeenRequest {
  /** Date.now() when the request was complete. */
  at: number;
  method: string;
  path: string;
  query: URLSearchParams;
  headers: http.IncomingHttpHeaders;
  body: string;
}

interface MachineConfig {
  mode: 'os' | 'probe';
  callback?: 'skip';
}

/**
 * A boot server and registry stand-in on 127.0.0.1 that renders the iPXE scripts of the real boot
 * server's contract (kernel command-line keys of hack/vm/init), serves the artefacts and records
 * every request in order.
 */
class StandInBootServer {
  readonly requests: SeenRequest[] = [];
  private readonly machines = new Map<string, MachineConfig>();
  private waiters: (() => void)[] = [];

  private constructor(
    private readonly server: http.Server,
    private readonly artefactDir: string,
    private readonly token: string,
  ) {}

  static async start(artefactDir: string, options: { token: string }): Promise<StandInBootServer> {
    let self: StandInBootServer | undefined;
    const server = http.createServer((req, res) => {
      self?.handle(req, res).catch((err: Error) => {
        res.statusCode = 500;
        res.end(err.message);
      });
    });
    self = new StandInBootServer(server, artefactDir, options.token);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return self;
  }

  /** Base URL as this process reaches it. */
  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Base URL as a QEMU guest reaches it. */
  get guestUrl(): string {
    return `http://10.0.2.2:${(this.server.address() as AddressInfo).port}`;
  }

  configure(uuid: string, config: MachineConfig): void {
    this.machines.set(uuid.toLowerCase(), config);
  }

  /** Resolves with the first recorded request matching `pred`. @throws Error after `timeoutMs`. */
  async waitFor(pred: (r: SeenRequest) => boolean, timeoutMs: number): Promise<SeenRequest> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.requests.find(pred);
      if (hit) return hit;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no matching request within ${timeoutMs} ms; saw ${this.summary()}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 1000));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  summary(): string {
    return this.requests.length === 0
      ? '(no requests)'
      : this.requests.map((r) => `${r.method} ${r.path}`).join(', ');
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const url = new URL(req.url ?? '/', 'http://stand-in');
    const seen: SeenRequest = {
      at: Date.now(),
      method: req.method ?? '',
      path: url.pathname,
      query: url.searchParams,
      headers: req.headers,
      body: Buffer.concat(chunks).toString('utf8'),
    };
    this.requests.push(seen);
    for (const w of this.waiters.splice(0)) w();

    const base = this.guestUrl;
    const text = (status: number, body: string, type = 'text/plain') => {
      res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
      res.end(body);
    };
    const p = url.pathname;
    if (req.method === 'GET' && p === '/ipxe') {
      return text(200, `#!ipxe\nchain ${base}/ipxe/\${uuid}\n`);
    }
    const ipxe = /^\/ipxe\/([^/]+)$/.exec(p);
    if (req.method === 'GET' && ipxe) {
      const uuid = canonicalSystemUUID(ipxe[1]);
      const m = uuid ? this.machines.get(uuid) : undefined;
      if (!uuid || !m) return text(404, '#!ipxe\nexit\n');
      const args = [
        `metal.mode=${m.mode}`,
        `metal.registry=${base}`,
        `metal.token=${this.token}`,
        `ignition.config.url=${base}/ignition/${uuid}?token=${this.token}`,
        ...(m.callback ? [`metal.callback=${m.callback}`] : []),
        'console=ttyS0',
      ];
      return text(
        200,
        `#!ipxe\nkernel ${base}/vmlinuz ${args.join(' ')}\ninitrd ${base}/initramfs.cpio.gz\nboot\n`,
      );
    }
    if (req.method === 'GET' && (p === '/vmlinuz' || p === '/initramfs.cpio.gz')) {
      const body = await fs.readFile(path.join(this.artefactDir, p.slice(1)));
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length });
      res.end(body);
      return;
    }
    if (req.method === 'GET' && p.startsWith('/ignition/')) {
      if (url.searchParams.get('token') !== this.token) return text(401, 'unauthorized');
      return text(200, JSON.stringify({ ignition: { version: '3.4.0' } }), 'application/json');
    }
    if (req.method === 'POST' && (p === '/bootstate' || p === '/register')) {
      return text(p === '/register' ? 201 : 200, '{}', 'application/json');
    }
    text(404, 'not found');
  }
}
