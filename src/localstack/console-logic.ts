/**
 * The decisions behind `metalctl console SERVER`, apart from their I/O (console-command.ts):
 * - {@link bmcOfServer}: Server → BMC address, Redfish endpoint, BMCSecret name and BMC console port,
 *   as the manager resolves them (src/controllers/bmc-actions/bmc-connections.ts; upstream
 *   `internal/cmd/console/console.go`: inline `spec.bmc` or `spec.bmcRef`).
 * - {@link consoleEntry}: the SSH port and the command to run there, from the system's Redfish
 *   `SerialConsole.SSH` (ComputerSystem.v1_13_0+ `HostSerialConsole`), else the BMC's
 *   `spec.consoleProtocol`, else upstream's defaults (port 22, `console 1`).
 * - {@link checkKnownHost}: the BMC's SSH host key against an OpenSSH known_hosts file.
 * - {@link EscapeFilter}: the `~.` escape (at the start of a line, as OpenSSH's) that ends the session.
 * All are pure: no network, no file system; they throw or return, never print.
 */
import { createHmac } from 'node:crypto';
import type { BMC } from '../api/v1alpha1/bmc.js';
import type { Endpoint } from '../api/v1alpha1/endpoint.js';
import type { Server } from '../api/v1alpha1/server.js';
import { endpointUrl } from '../controllers/bmc-actions/bmc-connections.js';

/** A reason `metalctl console` cannot go on; the message is printed as is (it never holds a credential). */
export class ConsoleError extends Error {
  override name = 'ConsoleError';
}

/** Where a Server's BMC is, as far as the Kubernetes objects tell. */
export interface BmcOfServer {
  /** Host name or IP (no brackets). */
  address: string;
  /** Redfish service root, `scheme://host:port`. */
  redfishUrl: string;
  /** Redfish URI of the ComputerSystem (`spec.systemURI`), if known. */
  systemUri: string | undefined;
  /** Name of the BMCSecret with username and password. */
  secretName: string;
  /** `spec.consoleProtocol` of the BMC object when it is SSH: its port. */
  consolePort: number | undefined;
}

/**
 * The BMC behind `server`: its `spec.bmcRef` BMC (`bmc`, with its `endpoint` when it uses
 * `spec.endpointRef`), else the inline `spec.bmc`. Throws {@link ConsoleError} naming what is missing.
 */
export function bmcOfServer(
  server: Server,
  bmc: BMC | undefined,
  endpoint: Endpoint | undefined,
): BmcOfServer {
  const name = server.metadata.name ?? '';
  const systemUri = server.spec.systemURI || undefined;
  const ref = server.spec.bmcRef?.name;
  if (ref) {
    if (!bmc) throw new ConsoleError(`BMC ${ref} (spec.bmcRef of Server ${name}) does not exist`);
    const address = bmc.spec.access?.ip || endpoint?.spec?.ip || bmc.spec.hostname;
    if (!address) {
      throw new ConsoleError(
        bmc.spec.endpointRef?.name && !endpoint
          ? `Endpoint ${bmc.spec.endpointRef.name} of BMC ${ref} does not exist`
          : `BMC ${ref} has no address (spec.access.ip, an Endpoint's spec.ip or spec.hostname)`,
      );
    }
    const secretName = bmc.spec.bmcSecretRef?.name;
    if (!secretName) throw new ConsoleError(`BMC ${ref} has no spec.bmcSecretRef`);
    const cp = bmc.spec.consoleProtocol;
    return {
      address,
      redfishUrl: endpointUrl(address, bmc.spec.protocol),
      systemUri,
      secretName,
      consolePort: cp && cp.name !== 'IPMI' ? cp.port : undefined,
    };
  }
  const inline = server.spec.bmc;
  if (inline) {
    const secretName = inline.bmcSecretRef?.name;
    if (!secretName) throw new ConsoleError(`Server ${name} has no spec.bmc.bmcSecretRef`);
    return {
      address: inline.address,
      redfishUrl: endpointUrl(inline.address, inline.protocol),
      systemUri,
      secretName,
      consolePort: undefined,
    };
  }
  throw new ConsoleError(`Server ${name} has neither spec.bmcRef nor spec.bmc: no BMC to open a console on`);
}

/** Upstream's SSH port and console number when nothing else says (its `metalctl console` defaults). */
export const DEFAULT_CONSOLE_PORT = 22;
export const DEFAULT_CONSOLE_NUMBER = 1;

export interface ConsoleEntry {
  port: number;
  /** What to run after logging in, e.g. `console 1`. */
  command: string;
  /** Where the values came from, for the one line metalctl prints before attaching. */
  source: 'redfish' | 'bmc-spec' | 'default';
}

/**
 * SSH port and entry command. Order: `override` (flags), the Redfish system's
 * `SerialConsole.SSH.{Port,ConsoleEntryCommand}` when `ServiceEnabled` is not false, the BMC object's
 * console port, then {@link DEFAULT_CONSOLE_PORT} and `console <number>`.
 * Throws {@link ConsoleError} when Redfish says the SSH console is disabled and no override is given.
 */
export function consoleEntry(
  system: unknown,
  bmc: Pick<BmcOfServer, 'consolePort'>,
  override: { port?: number; number?: number },
): ConsoleEntry {
  const ssh = sshConsoleOf(system);
  if (ssh?.enabled === false && override.port === undefined) {
    throw new ConsoleError(
      'the BMC reports its SSH serial console disabled (SerialConsole.SSH.ServiceEnabled false)',
    );
  }
  const command =
    override.number !== undefined
      ? `console ${override.number}`
      : (ssh?.command ?? `console ${DEFAULT_CONSOLE_NUMBER}`);
  if (override.port !== undefined) return { port: override.port, command, source: 'default' };
  if (ssh?.port !== undefined) return { port: ssh.port, command, source: 'redfish' };
  if (bmc.consolePort !== undefined) return { port: bmc.consolePort, command, source: 'bmc-spec' };
  return { port: DEFAULT_CONSOLE_PORT, command, source: 'default' };
}

function sshConsoleOf(system: unknown): { enabled?: boolean; port?: number; command?: string } | undefined {
  if (typeof system !== 'object' || system === null) return undefined;
  const sc = (system as Record<string, unknown>)['SerialConsole'];
  if (typeof sc !== 'object' || sc === null) return undefined;
  const ssh = (sc as Record<string, unknown>)['SSH'];
  if (typeof ssh !== 'object' || ssh === null) return undefined;
  const o = ssh as Record<string, unknown>;
  const port = o['Port'];
  const command = o['ConsoleEntryCommand'];
  return {
    ...(typeof o['ServiceEnabled'] === 'boolean' ? { enabled: o['ServiceEnabled'] } : {}),
    ...(Number.isInteger(port) && (port as number) > 0 && (port as number) < 65536
      ? { port: port as number }
      : {}),
    ...(typeof command === 'string' && command.trim() !== '' ? { command: command.trim() } : {}),
  };
}

/** `host` or `[host]:port` as OpenSSH writes it in known_hosts (the bracket form for a port other than 22). */
export function knownHostName(host: string, port: number): string {
  return port === 22 ? host : `[${host}]:${port}`;
}

export type HostKeyVerdict =
  | { ok: true }
  | { ok: false; reason: 'unknown' | 'changed' | 'revoked'; line: string };

/**
 * Whether the server's host key `keyBlob` (the SSH wire form, as known_hosts holds it in base64) is the
 * one `knownHosts` (the file's text) records for `host`:`port`. Understands plain and comma-separated
 * host names, the `[host]:port` form, hashed names (`|1|salt|hmac`, OpenSSH HashKnownHosts) and
 * `@revoked`; other marker lines (`@cert-authority`) and wildcard patterns are not matched.
 * On refusal, `line` is the entry to add after checking the key out of band.
 */
export function checkKnownHost(
  knownHosts: string,
  host: string,
  port: number,
  keyType: string,
  keyBlob: Buffer,
): HostKeyVerdict {
  const name = knownHostName(host, port);
  const key64 = keyBlob.toString('base64');
  const line = `${name} ${keyType} ${key64}`;
  let sawOther = false;
  for (const raw of knownHosts.split('\n')) {
    const fields = raw.trim().split(/\s+/);
    if (fields.length < 3 || fields[0]!.startsWith('#')) continue;
    let marker: string | undefined;
    if (fields[0]!.startsWith('@')) marker = fields.shift();
    if (marker !== undefined && marker !== '@revoked') continue;
    const [hosts, type, blob] = fields as [string, string, string];
    if (!hostsMatch(hosts, name)) continue;
    if (marker === '@revoked') {
      if (blob === key64) return { ok: false, reason: 'revoked', line };
      continue;
    }
    if (type === keyType && blob === key64) return { ok: true };
    if (type === keyType) sawOther = true;
  }
  return { ok: false, reason: sawOther ? 'changed' : 'unknown', line };
}

function hostsMatch(field: string, name: string): boolean {
  if (field.startsWith('|1|')) {
    const [, , salt64, hash64] = field.split('|');
    if (!salt64 || !hash64) return false;
    const mac = createHmac('sha1', Buffer.from(salt64, 'base64')).update(name).digest('base64');
    return mac === hash64;
  }
  return field.split(',').some((h) => h === name);
}

/**
 * The escape of an interactive session: `~.` typed at the start of a line (after Enter, or as the
 * first input) ends it; `~~` sends one `~`; `~` followed by anything else sends both. Feed it each
 * chunk read from the terminal; forward `data` to the console. Stateful across chunks.
 */
export class EscapeFilter {
  private atLineStart = true;
  private pendingTilde = false;

  push(chunk: Buffer): { data: Buffer; exit: boolean } {
    const out: number[] = [];
    for (const b of chunk) {
      if (this.pendingTilde) {
        this.pendingTilde = false;
        if (b === 0x2e /* . */) return { data: Buffer.from(out), exit: true };
        if (b === 0x7e /* ~ */) {
          out.push(0x7e);
          this.atLineStart = false;
          continue;
        }
        out.push(0x7e);
      } else if (this.atLineStart && b === 0x7e) {
        this.pendingTilde = true;
        continue;
      }
      out.push(b);
      this.atLineStart = b === 0x0d || b === 0x0a;
    }
    return { data: Buffer.from(out), exit: false };
  }
}
