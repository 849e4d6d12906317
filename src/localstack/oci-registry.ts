/**
 * A real OCI registry on loopback: Debian's `docker-registry` (the CNCF distribution registry,
 * `/usr/bin/docker-registry`, package `docker-registry`) with a temp config and storage folder, for
 * the local stack and the tests. Optional HTTP Basic auth from an htpasswd file (bcrypt, made with
 * `htpasswd -nbB` of package `apache2-utils`).
 *
 * Runs under `setpriv --pdeathsig KILL` (no orphan when the parent dies); `stop()` kills it and
 * removes the folder unless `keepData`. `pause()`/`resume()` (SIGSTOP/SIGCONT) make it unreachable
 * without losing its content (tests of a registry outage); `stop()` + `start()` on the same `dir`
 * restarts it with its content.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts } from './control-plane.js';

export const REGISTRY_BINARY = process.env.METAL_REGISTRY_BINARY ?? '/usr/bin/docker-registry';

export interface OciRegistryOptions {
  /** Folder for config and storage (default: a new temp folder). */
  dir?: string;
  /** Port on {@link address} (default: a free one). */
  port?: number;
  /** Address to listen on (default 127.0.0.1); the in-cluster stack uses the node's, which pods reach. */
  address?: string;
  /** HTTP Basic users (htpasswd auth); none = anonymous pull and push. */
  users?: Record<string, string>;
  keepData?: boolean;
  /** Keep the registry's access log and count blob GETs (`blobGets()`, for benchmarks). */
  accessLog?: boolean;
}

export class OciRegistry {
  private child?: ChildProcess;
  readonly dir: string;
  port = 0;
  private output = '';
  /** Blob GETs answered, by digest (with `accessLog`). */
  private readonly blobGetCounts = new Map<string, number>();
  /** The access log's last line while it is still incomplete. */
  private partialLine = '';

  constructor(private readonly o: OciRegistryOptions = {}) {
    this.dir = o.dir ?? mkdtempSync(join(tmpdir(), 'metal-oci-registry-'));
  }

  /** `<address>:<port>`: the registry host of image references. */
  get host(): string {
    return `${this.o.address ?? '127.0.0.1'}:${this.port}`;
  }

  get url(): string {
    return `http://${this.host}`;
  }

  /** Starts the registry and resolves once `GET /v2/` answers (200 or 401). Throws on failure. */
  async start(): Promise<this> {
    this.port ||= this.o.port ?? (await freePorts(1))[0]!;
    mkdirSync(join(this.dir, 'data'), { recursive: true });
    let auth = '';
    if (this.o.users && Object.keys(this.o.users).length) {
      const lines = Object.entries(this.o.users).map(([u, p]) =>
        execFileSync('htpasswd', ['-nbB', u, p], { encoding: 'utf8' }).trim(),
      );
      writeFileSync(join(this.dir, 'htpasswd'), `${lines.join('\n')}\n`);
      auth = `auth:\n  htpasswd:\n    realm: metal-test\n    path: ${join(this.dir, 'htpasswd')}\n`;
    }
    writeFileSync(
      join(this.dir, 'config.yml'),
      `version: 0.1
log:
  level: warn
  accesslog:
    disabled: ${this.o.accessLog ? 'false' : 'true'}
storage:
  filesystem:
    rootdirectory: ${join(this.dir, 'data')}
  delete:
    enabled: true
http:
  addr: ${this.host}
  secret: ${randomBytes(16).toString('hex')}
${auth}`,
    );
    this.output = '';
    const child = spawn(
      'setpriv',
      ['--pdeathsig', 'KILL', '--', REGISTRY_BINARY, 'serve', join(this.dir, 'config.yml')],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    this.child = child;
    const keep = (b: Buffer) => {
      const text = b.toString();
      // Access log lines (combined log format): "GET /v2/<name>/blobs/sha256:… HTTP/1.1" 200. A
      // line may be split across two reads: only whole lines are counted.
      if (this.o.accessLog) {
        const lines = (this.partialLine + text).split('\n');
        this.partialLine = lines.pop() ?? '';
        for (const line of lines) {
          const m = /"GET \/v2\/\S+\/blobs\/(sha256:[0-9a-f]{64}) HTTP/.exec(line);
          if (m) this.blobGetCounts.set(m[1]!, (this.blobGetCounts.get(m[1]!) ?? 0) + 1);
        }
      }
      this.output = (this.output + text).slice(-4000);
    };
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    const end = Date.now() + 15_000;
    for (;;) {
      if (child.exitCode !== null)
        throw new Error(`docker-registry exited with ${child.exitCode}: ${this.output}`);
      try {
        const res = await fetch(`${this.url}/v2/`);
        await res.arrayBuffer();
        if (res.status === 200 || res.status === 401) return this;
      } catch {
        // not listening yet
      }
      if (Date.now() > end) throw new Error(`docker-registry did not answer within 15 s: ${this.output}`);
      await new Promise((ok) => setTimeout(ok, 100));
    }
  }

  /** Process id of the registry (setpriv execs it, so one process); undefined when stopped. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /**
   * Blob GETs answered so far, of `digest` or of all blobs (with `accessLog` only; a line may arrive
   * just after its response).
   */
  blobGets(digest?: string): number {
    if (digest) return this.blobGetCounts.get(digest) ?? 0;
    let n = 0;
    for (const c of this.blobGetCounts.values()) n += c;
    return n;
  }

  /** SIGSTOP: connections hang, nothing is answered (an outage without losing content). */
  pause(): void {
    this.child?.kill('SIGSTOP');
  }

  resume(): void {
    this.child?.kill('SIGCONT');
  }

  /** Kills the registry (and removes its folder unless `keepData` or `keep`). */
  async stop(keep = this.o.keepData ?? false): Promise<void> {
    const c = this.child;
    this.child = undefined;
    if (c && c.exitCode === null) {
      c.kill('SIGCONT');
      const exited = new Promise((ok) => c.once('exit', ok));
      c.kill('SIGKILL');
      await exited;
    }
    if (!keep) rmSync(this.dir, { recursive: true, force: true });
  }
}
