/**
 * The virtual BMC's serial console: an SSH server (the `ssh2` package) that bridges one session per
 * system to the host's serial port, as real BMCs offer serial-over-LAN through their SSH CLI.
 *
 * Why SSH and not an HTTP Upgrade or WebSocket endpoint: upstream's `metalctl console` speaks SSH to
 * the BMC and runs `console N` there (its `cmd/metalctl/app/console.go`), and real BMCs serve their
 * serial console that way (Redfish `ComputerSystem.SerialConsole.SSH` with `ConsoleEntryCommand`,
 * ComputerSystem.v1_13_0+). An SSH endpoint lets the same `metalctl console` reach the virtual BMC and
 * a real one; an HTTP endpoint would be an invention no real BMC has. `ssh2` is the maintained pure-JS
 * SSH implementation (pinned in package.json); the project writes no protocol code of its own.
 *
 * Contract:
 * - Password authentication only, with the Redfish service's credentials ({@link ConsoleServerOptions.checkCredentials});
 *   any other method, or a wrong password, is refused (SSH `USERAUTH_FAILURE`: the SSH form of a 401).
 * - `exec` of `console N` (N = 1-based position of the system, or its Redfish Id) attaches the channel
 *   to that host's serial port: bytes flow unchanged both ways until either side closes. A `shell`
 *   request or any other command gets a usage line on stderr and exit status 2.
 * - One session per system (Redfish `MaxConcurrentSessions: 1`): while a session holds it, another
 *   `console N` gets `console N is busy: …; retry once it ends` on stderr and exit status
 *   {@link CONSOLE_BUSY_EXIT} (75, EX_TEMPFAIL: the SSH form of a 409 with Retry-After), and the
 *   holding session is left alone.
 * - A host whose serial port cannot be opened (a QEMU VM that is off) gets the reason on stderr and
 *   exit status 1. When the port closes (the VM stopped), the session ends with exit status 0.
 * - Credentials are never logged; the log has the system Id, the remote address and the outcome.
 */
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import ssh2, { type Connection, type ServerChannel, type Session } from 'ssh2';
import type { Host } from './host.js';

const { Server: SshServer, utils: sshUtils } = ssh2;

/** Exit status of a refused second session (BSD sysexits EX_TEMPFAIL: try again later). */
export const CONSOLE_BUSY_EXIT = 75;

/** Exit status of a request that is not `console N` (usage error, as shells use 2). */
export const CONSOLE_USAGE_EXIT = 2;

export interface ConsoleSystem {
  /** Redfish `Id` of the system. */
  id: string;
  host: Host;
}

export interface ConsoleServerOptions {
  /** Address to listen on (the Redfish service's). */
  address: string;
  /** TCP port; 0 picks a free one. */
  port: number;
  /** OpenSSH or PEM private host key; default: a new ed25519 key (clients then see a new key per start). */
  hostKey?: string;
  systems: ReadonlyArray<ConsoleSystem>;
  /** The Redfish service's credential check (constant-time). */
  checkCredentials: (user: string, password: string) => boolean;
  log: Logger;
}

export interface ConsoleServer {
  port: number;
  /** Public host key in known_hosts form, e.g. `ssh-ed25519 AAAA…` (no host part). */
  hostPublicKey: string;
  /** The entry command of system `index` (0-based), as Redfish `ConsoleEntryCommand` reports it. */
  entryCommand(index: number): string;
  /** Systems (Ids) with a session attached now. */
  activeSessions(): string[];
  /** Stops listening and ends every session. */
  close(): Promise<void>;
}

/**
 * Which system an exec command names: `console N` (1-based position) or `console <Id>`
 * (case-insensitive). Returns the 0-based index, or undefined for anything else. Pure.
 */
export function parseConsoleCommand(command: string, ids: ReadonlyArray<string>): number | undefined {
  const m = /^\s*console\s+(\S+)\s*$/.exec(command);
  if (!m) return undefined;
  const arg = m[1]!;
  if (/^[0-9]+$/.test(arg)) {
    const n = Number(arg);
    return n >= 1 && n <= ids.length ? n - 1 : undefined;
  }
  const i = ids.findIndex((id) => id.toLowerCase() === arg.toLowerCase());
  return i >= 0 ? i : undefined;
}

/** Starts the SSH console service; resolves once it listens. */
export async function startConsoleServer(opts: ConsoleServerOptions): Promise<ConsoleServer> {
  const hostKey = opts.hostKey ?? newHostKey();
  const parsed = sshUtils.parseKey(hostKey);
  if (parsed instanceof Error) throw new Error(`console host key: ${parsed.message}`);
  const key = Array.isArray(parsed) ? parsed[0]! : parsed;
  const hostPublicKey = `${key.type} ${key.getPublicSSH().toString('base64')}`;
  const log = opts.log.child({ component: 'virtual-bmc-console' });
  const consoles = new SerialConsoles(opts.systems, log);
  const clients = new Set<{ end: () => void }>();

  const server = new SshServer({ hostKeys: [hostKey] }, (client, info) => {
    const remote = `${info.ip}:${info.port}`;
    clients.add(client);
    client.on('close', () => clients.delete(client));
    serveClient(client, remote, opts.checkCredentials, consoles, log);
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.address, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  log.info({ port }, 'virtual BMC console listening');
  return {
    port,
    hostPublicKey,
    entryCommand: (index) => `console ${index + 1}`,
    activeSessions: () => consoles.active(),
    close: async () => {
      consoles.endAll();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const c of [...clients]) c.end();
      await closed;
    },
  };
}

/** One SSH connection: password login, then sessions whose only command is `console N`. */
function serveClient(
  client: Connection,
  remote: string,
  checkCredentials: ConsoleServerOptions['checkCredentials'],
  consoles: SerialConsoles,
  log: Logger,
): void {
  // A dropped connection or a protocol error ends this client only.
  client.on('error', (err) => log.debug({ remote, err: err.message }, 'console connection error'));
  client.on('authentication', (ctx) => {
    if (ctx.method === 'password' && checkCredentials(ctx.username, ctx.password)) {
      ctx.accept();
      return;
    }
    if (ctx.method === 'password') log.info({ remote }, 'console login refused: wrong credentials');
    ctx.reject(['password']);
  });
  client.on('ready', () => {
    client.on('session', (acceptSession) => serveSession(acceptSession(), remote, consoles));
  });
}

/** One SSH session: terminal requests ignored, a shell refused, `exec` handed to {@link SerialConsoles.attach}. */
function serveSession(session: Session, remote: string, consoles: SerialConsoles): void {
  // Terminal requests are accepted and ignored: the serial line has no window size.
  session.on('pty', (accept) => accept?.());
  session.on('window-change', (accept) => accept?.());
  session.on('env', (accept) => accept?.());
  session.on('shell', (accept) => {
    const ch = accept();
    ch.stderr.write(
      `this BMC offers only its serial consoles: run "console N" (N = 1..${consoles.ids.length})\r\n`,
    );
    ch.exit(CONSOLE_USAGE_EXIT);
    ch.end();
  });
  session.on('exec', (accept, _reject, req) => consoles.attach(accept(), req.command, remote));
}

/** The serial consoles of the systems and which session holds each (at most one per system). */
class SerialConsoles {
  readonly ids: string[];
  private readonly holders = new Map<number, { remote: string; end: () => void }>();

  constructor(
    private readonly systems: ReadonlyArray<ConsoleSystem>,
    private readonly log: Logger,
  ) {
    this.ids = systems.map((s) => s.id);
  }

  /** Systems (Ids) with a session attached now. */
  active(): string[] {
    return [...this.holders.keys()].map((i) => this.ids[i]!);
  }

  /** Ends every attached session (exit status 0). */
  endAll(): void {
    for (const h of [...this.holders.values()]) h.end();
  }

  /**
   * Runs `command` on channel `ch`: attaches it to the named system's serial port, or writes why
   * not on stderr with the exit status of the module's contract (2 usage, 75 busy, 1 no port).
   */
  attach(ch: ServerChannel, command: string, remote: string): void {
    const { ids, holders, log } = this;
    const index = parseConsoleCommand(command, ids);
    if (index === undefined) {
      ch.stderr.write(
        `unknown command ${JSON.stringify(command)}: use "console N" (N = 1..${ids.length})\r\n`,
      );
      ch.exit(CONSOLE_USAGE_EXIT);
      ch.end();
      return;
    }
    const system = this.systems[index]!;
    if (holders.has(index)) {
      log.info({ systemId: system.id, remote }, 'console session refused: busy');
      ch.stderr.write(
        `console ${index + 1} is busy: another session is attached (MaxConcurrentSessions 1); retry once it ends\r\n`,
      );
      ch.exit(CONSOLE_BUSY_EXIT);
      ch.end();
      return;
    }
    let port: Duplex | undefined;
    let done = false;
    const finish = (status: number): void => {
      if (done) return;
      done = true;
      if (holders.get(index)?.end === end) holders.delete(index);
      port?.destroy();
      try {
        ch.exit(status);
        ch.end();
      } catch {
        // The channel is already gone (the client disconnected).
      }
      log.info({ systemId: system.id, remote }, 'console session ended');
    };
    const end = (): void => finish(0);
    // Claimed before the port opens, so two racing requests cannot both attach.
    holders.set(index, { remote, end });
    ch.on('close', end);
    const open = system.host.openSerial;
    if (!open) {
      ch.stderr.write('this system has no serial console\r\n');
      finish(1);
      return;
    }
    open
      .call(system.host)
      .then((p) => {
        if (done) {
          p.destroy();
          return;
        }
        port = p;
        log.info({ systemId: system.id, remote }, 'console session attached');
        p.on('data', (chunk: Buffer) => ch.write(chunk));
        p.on('end', end);
        p.on('close', end);
        p.on('error', end);
        ch.on('data', (chunk: Buffer) => p.write(chunk));
      })
      .catch((err: unknown) => {
        ch.stderr.write(
          `cannot open the serial console: ${err instanceof Error ? err.message : String(err)}\r\n`,
        );
        finish(1);
      });
  }
}

/**
 * A new ed25519 host key (OpenSSH format). ssh2 1.17.0's generator writes a key its own parser
 * rejects ("Malformed OpenSSH private key") about once in 250 (measured: 13 of 3,000), which failed
 * a CI run's virtual BMC start; so a key that does not parse is generated again, at most 8 times
 * (then the last one's parse error is thrown by the caller, as before).
 */
function newHostKey(): string {
  let key = sshUtils.generateKeyPairSync('ed25519').private;
  for (let i = 1; i < 8 && sshUtils.parseKey(key) instanceof Error; i++) {
    key = sshUtils.generateKeyPairSync('ed25519').private;
  }
  return key;
}
