/**
 * `metalctl console SERVER`: attaches this terminal to the serial console of a Server through its BMC,
 * over SSH as upstream's `metalctl console` does (log in to the BMC with the BMCSecret's password, run
 * the console entry command, e.g. `console 1`). The decisions live in console-logic.ts.
 *
 * Flow: Server → BMC (`spec.bmcRef`, or the inline `spec.bmc`) → address, BMCSecret → credentials;
 * the Redfish ComputerSystem's `SerialConsole.SSH` gives port and entry command (else the BMC's
 * `spec.consoleProtocol` port, else 22 and `console 1`); the BMC's SSH host key is checked against a
 * known_hosts file (unless `--skip-host-key-validation`); then stdin/stdout are bridged, stdin in raw
 * mode when it is a terminal. `~.` at the start of a line leaves (as in OpenSSH); so does the BMC
 * ending the session.
 *
 * Exit codes: 0 the session ended (escape, or the BMC closed it with status 0); 1 anything refused or
 * failed (the reason on stderr: no such Server, wrong credentials, unknown host key, console busy).
 * Credentials are never printed, logged or put in an error message: only the BMCSecret's name is.
 */
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import type { BMC } from '../api/v1alpha1/bmc.js';
import type { BMCSecret } from '../api/v1alpha1/bmcsecret.js';
import type { Endpoint } from '../api/v1alpha1/endpoint.js';
import type { Server } from '../api/v1alpha1/server.js';
import { RedfishAuthError } from '../bmc/errors.js';
import { RedfishClient } from '../bmc/redfish-client.js';
import { BmcAccessError, bmcSecretCredentials } from '../controllers/bmc-actions/bmc-connections.js';
import type { KubeClient } from '../runtime/client.js';
import { Resources } from '../runtime/resource.js';
import { bmcOfServer, ConsoleError, checkKnownHost, consoleEntry, EscapeFilter } from './console-logic.js';

export interface ConsoleOptions {
  /** SSH port of the BMC's console, overriding what Redfish and the BMC object say. */
  port?: number;
  /** Console number: runs `console N` instead of the reported entry command. */
  serialConsoleNumber?: number;
  /** OpenSSH known_hosts file (default `~/.ssh/known_hosts`). */
  knownHostsFile?: string;
  /** Accept any host key (as upstream's `--skip-host-key-validation`). */
  skipHostKeyValidation?: boolean;
}

/** The terminal the session is bridged to (process.stdin/stdout/stderr; streams in tests). */
export interface ConsoleIo {
  stdin: NodeJS.ReadableStream & { isTTY?: boolean; setRawMode?: (raw: boolean) => unknown };
  stdout: NodeJS.WritableStream & { columns?: number; rows?: number };
  stderr: NodeJS.WritableStream;
}

const SSH_READY_TIMEOUT_MS = 20_000;

/** Runs the console session of Server `name`; resolves to the exit code. Never throws. */
export async function runConsole(
  client: KubeClient,
  name: string,
  o: ConsoleOptions,
  io: ConsoleIo = { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr },
): Promise<number> {
  const say = (line: string): void => {
    io.stderr.write(`${line}\n`);
  };
  try {
    const server = await client.get<Server>(Resources.Server, name);
    if (!server) throw new ConsoleError(`Server ${name} not found`);
    const bmcName = server.spec.bmcRef?.name;
    const bmcObj = bmcName ? await client.get<BMC>(Resources.BMC, bmcName) : undefined;
    const epName = bmcObj?.spec.endpointRef?.name;
    const endpoint = epName ? await client.get<Endpoint>(Resources.Endpoint, epName) : undefined;
    const bmc = bmcOfServer(server, bmcObj, endpoint);
    const secret = await client.get<BMCSecret>(Resources.BMCSecret, bmc.secretName);
    if (!secret) throw new ConsoleError(`BMCSecret ${bmc.secretName} does not exist`);
    let cred: ReturnType<typeof bmcSecretCredentials>;
    try {
      cred = bmcSecretCredentials(secret);
    } catch (err) {
      throw new ConsoleError(err instanceof BmcAccessError ? err.message : String(err));
    }
    const system = bmc.systemUri
      ? await readSystem(bmc.redfishUrl, bmc.systemUri, cred, bmc.secretName, say)
      : undefined;
    const entry = consoleEntry(system, bmc, {
      ...(o.port !== undefined ? { port: o.port } : {}),
      ...(o.serialConsoleNumber !== undefined ? { number: o.serialConsoleNumber } : {}),
    });
    const knownHostsPath = o.knownHostsFile ?? join(homedir(), '.ssh', 'known_hosts');
    let knownHosts = '';
    if (!o.skipHostKeyValidation) {
      try {
        knownHosts = readFileSync(knownHostsPath, 'utf8');
      } catch (err) {
        // A missing file is "no host known": the check below refuses and says what to add.
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
          throw new ConsoleError(`cannot read known_hosts file ${knownHostsPath}: ${(err as Error).message}`);
        }
      }
    }
    return await attach(
      {
        host: bmc.address,
        port: entry.port,
        command: entry.command,
        username: cred.username,
        password: cred.password,
      },
      {
        serverName: name,
        secretName: bmc.secretName,
        verify: o.skipHostKeyValidation
          ? undefined
          : (keyBlob) => {
              const v = checkKnownHost(knownHosts, bmc.address, entry.port, keyTypeOf(keyBlob), keyBlob);
              if (v.ok) return undefined;
              return v.reason === 'changed'
                ? `the BMC's SSH host key differs from the one ${knownHostsPath} records for it: refusing (possible impersonation); if the BMC was re-keyed, replace that entry with:\n  ${v.line}`
                : v.reason === 'revoked'
                  ? `the BMC's SSH host key is marked @revoked in ${knownHostsPath}: refusing`
                  : `the BMC's SSH host key is not in ${knownHostsPath}: check it out of band and add\n  ${v.line}\n(or pass --skip-host-key-validation)`;
            },
      },
      io,
    );
  } catch (err) {
    say(
      err instanceof ConsoleError
        ? err.message
        : `console: ${err instanceof Error ? err.message : String(err)}`,
    );
    return 1;
  }
}

/**
 * GET the ComputerSystem (HTTP Basic, one short budget). A 401 is final (the same credentials would
 * be refused by SSH too); other failures leave the defaults in place, with a note.
 */
async function readSystem(
  url: string,
  systemUri: string,
  cred: { username: string; password: string; ca?: string },
  secretName: string,
  say: (line: string) => void,
): Promise<unknown> {
  const redfish = new RedfishClient({
    endpoint: url,
    username: cred.username,
    password: cred.password,
    auth: 'basic',
    ...(cred.ca ? { ca: cred.ca } : {}),
    requestTimeoutMs: 5_000,
    budgetMs: 10_000,
  });
  try {
    return (await redfish.get(systemUri)).body;
  } catch (err) {
    if (err instanceof RedfishAuthError) {
      throw new ConsoleError(`the BMC refused the credentials of BMCSecret ${secretName} (Redfish HTTP 401)`);
    }
    say(
      `could not read the system's SerialConsole from Redfish (${err instanceof Error ? err.message : String(err)}); using the defaults`,
    );
    return undefined;
  } finally {
    await redfish.close();
  }
}

/** The key type (`ssh-ed25519`, `rsa-sha2-…` keys say `ssh-rsa`) at the start of an SSH public key blob. */
function keyTypeOf(blob: Buffer): string {
  if (blob.length < 4) return '';
  const len = blob.readUInt32BE(0);
  return blob.subarray(4, 4 + len).toString('latin1');
}

interface Target {
  host: string;
  port: number;
  command: string;
  username: string;
  password: string;
}

/** Connects, runs the entry command and bridges `io` until the escape or the BMC's end. */
function attach(
  t: Target,
  ctx: {
    serverName: string;
    secretName: string;
    verify: ((keyBlob: Buffer) => string | undefined) | undefined;
  },
  io: ConsoleIo,
): Promise<number> {
  return new Promise<number>((resolve) => {
    const conn = new ssh2.Client();
    let hostKeyRefusal: string | undefined;
    let settled = false;
    let restoreTerminal = (): void => undefined;
    const finish = (code: number, line?: string): void => {
      if (settled) return;
      settled = true;
      restoreTerminal();
      if (line) io.stderr.write(`${line}\n`);
      conn.end();
      resolve(code);
    };
    conn.on('error', (err: Error & { level?: string }) =>
      finish(1, connectionFailure(err, hostKeyRefusal, t, ctx.secretName)),
    );
    conn.on('close', () => finish(1, `the BMC at ${t.host}:${t.port} closed the connection`));
    conn.on('ready', () =>
      runEntryCommand(conn, t, ctx.serverName, io, finish, (restore) => {
        restoreTerminal = restore;
      }),
    );
    conn.connect({
      host: t.host,
      port: t.port,
      username: t.username,
      password: t.password,
      tryKeyboard: false,
      readyTimeout: SSH_READY_TIMEOUT_MS,
      hostVerifier: (key: Buffer) => {
        if (!ctx.verify) return true;
        hostKeyRefusal = ctx.verify(key);
        return hostKeyRefusal === undefined;
      },
    });
  });
}

/** The line a failed SSH connection ends the console with: the host key refusal, refused credentials, or the error. */
function connectionFailure(
  err: Error & { level?: string },
  hostKeyRefusal: string | undefined,
  t: Target,
  secretName: string,
): string {
  if (hostKeyRefusal) return hostKeyRefusal;
  if (err.level === 'client-authentication') {
    return `the BMC refused the credentials of BMCSecret ${secretName} (SSH password authentication)`;
  }
  return `console connection to ${t.host}:${t.port} failed: ${err.message}`;
}

/**
 * On a ready connection: runs the entry command (in a PTY of the terminal's size on a TTY) and
 * bridges `io` to it; `bridged` gets the function that restores the terminal. Ends through
 * `finish`: 1 when the BMC refuses the command or it exits non-zero, else 0.
 */
function runEntryCommand(
  conn: ssh2.Client,
  t: Target,
  serverName: string,
  io: ConsoleIo,
  finish: (code: number, line?: string) => void,
  bridged: (restore: () => void) => void,
): void {
  const tty = io.stdin.isTTY === true;
  const pty = tty
    ? { term: process.env.TERM ?? 'xterm', cols: io.stdout.columns ?? 80, rows: io.stdout.rows ?? 24 }
    : false;
  conn.exec(t.command, { pty }, (err, stream) => {
    if (err) return finish(1, `the BMC refused "${t.command}": ${err.message}`);
    io.stderr.write(
      `metalctl: serial console of Server ${serverName} (BMC ${t.host}:${t.port}, "${t.command}"); type ~. at the start of a line to leave\n`,
    );
    let remoteExit: number | undefined;
    bridged(bridgeInput(stream, io, tty, finish));
    stream.on('data', (d: Buffer) => io.stdout.write(d));
    stream.stderr.on('data', (d: Buffer) => io.stderr.write(d));
    stream.on('exit', (code: number | null) => {
      remoteExit = code ?? undefined;
    });
    stream.on('close', () => finish(remoteExit === 0 || remoteExit === undefined ? 0 : 1));
  });
}

/**
 * Passes `io.stdin` to the remote `stream` through the `~.` escape filter (raw mode on a TTY; end
 * of input as EOF) and returns the function that detaches stdin and restores the terminal.
 */
function bridgeInput(
  stream: ssh2.ClientChannel,
  io: ConsoleIo,
  tty: boolean,
  finish: (code: number, line?: string) => void,
): () => void {
  const filter = new EscapeFilter();
  const onInput = (chunk: Buffer | string): void => {
    const { data, exit } = filter.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
    if (data.length > 0) stream.write(data);
    if (exit) finish(0, '\r\nmetalctl: console closed (~.)');
  };
  const onEnd = (): void => {
    // As ssh: end of input is passed on as EOF; the session lasts until the BMC ends it.
    stream.end();
  };
  if (tty) io.stdin.setRawMode?.(true);
  io.stdin.on('data', onInput);
  io.stdin.on('end', onEnd);
  io.stdin.resume();
  return () => {
    io.stdin.off('data', onInput);
    io.stdin.off('end', onEnd);
    if (tty) io.stdin.setRawMode?.(false);
    io.stdin.pause();
  };
}
