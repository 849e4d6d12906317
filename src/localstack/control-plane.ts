/**
 * A real Kubernetes control plane on loopback, for tests and for `local up` (envtest style): etcd and kube-apiserver on free
 * loopback ports, bearer-token auth, a self-signed serving certificate, RBAC authorization, the
 * project's CRDs installed and Established.
 *
 * etcd holds every object, Secrets included, unencrypted: it serves TLS only and requires a client
 * certificate (`--client-cert-auth`, security review N15), so no other local user or process that
 * can reach loopback reads or writes the store. A per-control-plane CA (P-256, openssl) signs etcd's
 * serving certificate and the one client certificate, which only kube-apiserver (and
 * {@link ControlPlane.etcdRequest}) present; all of it lives in the 0700 folder, keys 0600, made
 * once per control plane (an API server restart reuses them). Peer traffic stays on loopback with
 * a single member and no peers.
 *
 * Binaries come from `KUBEBUILDER_ASSETS` when set (the envtest convention), otherwise from
 * `hack/build-control-plane.sh`, which builds them once from their Go modules into a cache folder.
 *
 * With `garbageCollector`, also kube-controller-manager running only the garbage collector.
 *
 * All processes run under `setpriv --pdeathsig KILL`, so even a SIGKILLed test runner leaves no
 * orphan; `stop()` (also run on exit, SIGINT and SIGTERM) kills them and removes the temp folder.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { KubeConfig, type V1CustomResourceDefinition } from '@kubernetes/client-node';
import { parse } from 'yaml';
import { freePorts } from './ports.js';

export interface ControlPlaneOptions {
  /**
   * Install SIGINT/SIGTERM handlers that kill every control plane and exit at once (default true:
   * test runners). False when the caller stops the control plane itself on a signal (the local
   * stack daemon): exiting from here would cut its shutdown short, leaving the test network's
   * namespace and dnsmasq behind. The 'exit' hook is installed either way.
   */
  exitOnSignal?: boolean;
  /** Install `config/crd/*.yaml` and wait until each is Established (default true). */
  installCRDs?: boolean;
  /** Extra kube-apiserver flags (`--name=value`). */
  apiServerArgs?: string[];
  /**
   * Also run kube-controller-manager with only its garbage collector, so owner references work as
   * in a cluster (deleting a BMC deletes its Servers, and theirs their discovery SBCs). Skipped
   * with a warning when the binaries folder has no kube-controller-manager (envtest assets).
   */
  garbageCollector?: boolean;
  /**
   * For a cluster with a node (cluster.ts): kube-apiserver listens on and advertises this address
   * (the node's, reachable from pods) instead of 127.0.0.1, its certificate also names the
   * `kubernetes` Service's ClusterIP and DNS names, and the ServiceAccount admission plugin stays
   * on so pods get their tokens.
   */
  nodeAddress?: string;
}

/** ClusterIP of the `kubernetes` Service: the first address of `--service-cluster-ip-range`. */
export const KUBERNETES_SERVICE_IP = '10.0.0.1';

/** Repo root, from this file's place in `dist/src/localstack/`. */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** Free loopback ports for child processes, outside the ephemeral range (ports.ts). */
export { freePorts };

/** Folder holding `etcd` and `kube-apiserver`, building them first if needed (minutes, once). */
export function controlPlaneBinaries(): string {
  if (process.env.KUBEBUILDER_ASSETS) return process.env.KUBEBUILDER_ASSETS;
  const out = execFileSync('bash', [join(REPO_ROOT, 'hack', 'build-control-plane.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return out.trim().split('\n').pop()!;
}

const live = new Set<ControlPlane>();
let exitHooked = false;
let signalsHooked = false;
function hookExit(exitOnSignal: boolean): void {
  if (!exitHooked) {
    exitHooked = true;
    process.once('exit', () => {
      for (const cp of live) cp.killNow();
    });
  }
  if (!exitOnSignal || signalsHooked) return;
  signalsHooked = true;
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      for (const cp of live) cp.killNow();
      process.exit(128 + (sig === 'SIGINT' ? 2 : 15));
    });
  }
}

export class ControlPlane {
  readonly token = randomBytes(24).toString('hex');
  etcd?: ChildProcess;
  apiServer?: ChildProcess;
  controllerManager?: ChildProcess;
  kubeconfigPath = '';
  server = '';
  caFile = '';
  /** `https://127.0.0.1:<port>`: TLS, a client certificate required ({@link ControlPlane.etcdRequest}). */
  etcdUrl = '';
  private ports: number[] = [];

  private constructor(
    readonly dir: string,
    private readonly bin: string,
    private readonly opts: ControlPlaneOptions,
  ) {}

  /** Starts etcd and kube-apiserver, writes the kubeconfig and (by default) installs the CRDs. */
  static async start(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
    hookExit(opts.exitOnSignal ?? true);
    const bin = controlPlaneBinaries();
    const cp = new ControlPlane(mkdtempSync(join(tmpdir(), 'metal-cp-')), bin, opts);
    live.add(cp);
    try {
      await cp.boot();
    } catch (err) {
      await cp.stop();
      throw err;
    }
    return cp;
  }

  private async boot(): Promise<void> {
    this.ports = await freePorts(3);
    const [etcdClient, etcdPeer, secure] = this.ports as [number, number, number];
    this.etcdUrl = `https://127.0.0.1:${etcdClient}`;
    this.server = `https://${this.opts.nodeAddress ?? '127.0.0.1'}:${secure}`;
    this.writeCredentials();
    const pki = this.etcdPki();
    this.etcd = this.spawnLogged('etcd', join(this.bin, 'etcd'), [
      '--name=default',
      `--data-dir=${join(this.dir, 'etcd')}`,
      `--listen-client-urls=${this.etcdUrl}`,
      `--advertise-client-urls=${this.etcdUrl}`,
      `--cert-file=${pki.serverCert}`,
      `--key-file=${pki.serverKey}`,
      '--client-cert-auth=true',
      `--trusted-ca-file=${pki.ca}`,
      `--listen-peer-urls=http://127.0.0.1:${etcdPeer}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeer}`,
      `--initial-cluster=default=http://127.0.0.1:${etcdPeer}`,
      // Tests need speed, not durability across host crashes.
      '--unsafe-no-fsync=true',
      '--log-level=warn',
    ]);
    await waitFor(
      `etcd ${this.etcdUrl}`,
      30_000,
      async () => (await this.etcdRequest('/health')).status === 200,
    );
    await this.startApiServer();
    if (this.opts.installCRDs !== false) await installCRDs(this.kubeConfig());
    if (this.opts.garbageCollector) await this.startGarbageCollector();
  }

  /**
   * kube-controller-manager with `--controllers=garbagecollector` only: no leader election, no
   * serving port (nothing to scrape here), the admin kubeconfig. Waits 2 s for an early exit (bad
   * flags, no API server) and reports its log then.
   */
  private async startGarbageCollector(): Promise<void> {
    const path = join(this.bin, 'kube-controller-manager');
    if (!existsSync(path)) {
      console.warn(
        `${path} not found: running without a garbage collector (owner references are not followed)`,
      );
      return;
    }
    this.controllerManager = this.spawnLogged('kube-controller-manager', path, [
      `--kubeconfig=${this.kubeconfigPath}`,
      `--authentication-kubeconfig=${this.kubeconfigPath}`,
      `--authorization-kubeconfig=${this.kubeconfigPath}`,
      '--controllers=garbagecollector',
      '--leader-elect=false',
      '--secure-port=0',
      '--use-service-account-credentials=false',
    ]);
    const cm = this.controllerManager;
    await new Promise((ok) => setTimeout(ok, 2_000));
    if (cm.exitCode !== null || cm.signalCode !== null) {
      throw new Error(`kube-controller-manager exited at start:\n${this.logTail('kube-controller-manager')}`);
    }
  }

  /**
   * Writes the serving key, the service-account key, the admin token file and the kubeconfig. They
   * are cluster-admin credentials (security review N15): the folder is 0700 and each secret 0600,
   * whatever the umask or an earlier file's mode.
   */
  private writeCredentials(): void {
    const d = this.dir;
    chmodSync(d, 0o700);
    const secret = (path: string, content: string | Buffer) => {
      writeFileSync(path, content, { mode: 0o600 });
      chmodSync(path, 0o600);
    };
    const node = this.opts.nodeAddress;
    const sans = node
      ? [
          `IP:${node}`,
          `IP:${KUBERNETES_SERVICE_IP}`,
          'DNS:kubernetes.default.svc',
          'DNS:kubernetes.default.svc.cluster.local',
        ]
      : [];
    writeSelfSignedCertificate(join(d, 'serving.key'), join(d, 'serving.crt'), 2, sans);
    chmodSync(join(d, 'serving.key'), 0o600);
    this.caFile = join(d, 'serving.crt');
    const sa = generateKeyPairSync('rsa', { modulusLength: 2048 });
    secret(join(d, 'sa.key'), sa.privateKey.export({ type: 'pkcs8', format: 'pem' }));
    writeFileSync(join(d, 'sa.pub'), sa.publicKey.export({ type: 'spki', format: 'pem' }));
    secret(join(d, 'tokens.csv'), `${this.token},admin,admin-uid,"system:masters"\n`);
    this.kubeconfigPath = join(d, 'kubeconfig');
    secret(this.kubeconfigPath, kubeconfigYaml(this.server, this.caFile, this.token));
  }

  /** Paths of etcd's CA, serving and client certificates and keys in the 0700 folder. */
  private etcdPaths() {
    const d = join(this.dir, 'etcd-pki');
    return {
      dir: d,
      ca: join(d, 'ca.crt'),
      caKey: join(d, 'ca.key'),
      serverCert: join(d, 'server.crt'),
      serverKey: join(d, 'server.key'),
      clientCert: join(d, 'client.crt'),
      clientKey: join(d, 'client.key'),
    };
  }

  /**
   * etcd's PKI (see the file comment), made on first use: a CA, a serving certificate for
   * 127.0.0.1 and a client certificate (CN `kube-apiserver`), each signed by the CA, valid 2 days.
   * Three openssl runs (~30 ms); the CA key could be dropped after signing, but stays 0600 here.
   */
  private etcdPki(): ReturnType<ControlPlane['etcdPaths']> {
    const p = this.etcdPaths();
    if (existsSync(p.clientKey)) return p;
    mkdirSync(p.dir, { recursive: true, mode: 0o700 });
    chmodSync(p.dir, 0o700);
    const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2'];
    const run = (args: string[]) =>
      execFileSync('openssl', ['req', '-x509', ...ec, ...args], { stdio: 'ignore' });
    run(['-subj', '/CN=metal local etcd CA', '-keyout', p.caKey, '-out', p.ca]);
    // `req -x509 -CA` (OpenSSL 3): a new key and a certificate signed by the CA, in one run.
    const leaf = (cn: string, ext: string[], key: string, cert: string) =>
      run([
        '-CA',
        p.ca,
        '-CAkey',
        p.caKey,
        '-subj',
        `/CN=${cn}`,
        '-addext',
        'basicConstraints=critical,CA:FALSE',
        ...ext.flatMap((e) => ['-addext', e]),
        '-keyout',
        key,
        '-out',
        cert,
      ]);
    leaf(
      '127.0.0.1',
      // clientAuth too: etcd's JSON gateway dials etcd's own gRPC port presenting this certificate.
      ['subjectAltName=IP:127.0.0.1,DNS:localhost', 'extendedKeyUsage=serverAuth,clientAuth'],
      p.serverKey,
      p.serverCert,
    );
    leaf('kube-apiserver', ['extendedKeyUsage=clientAuth'], p.clientKey, p.clientCert);
    for (const k of [p.caKey, p.serverKey, p.clientKey]) chmodSync(k, 0o600);
    return p;
  }

  /**
   * One HTTP request to etcd's v3 JSON gateway (`path` such as `/health`, `/v3/kv/range`) over TLS
   * with the control plane's client certificate; `body` is sent as JSON with POST. Never throws on
   * HTTP statuses; rejects on connection or TLS errors (2 s timeout).
   */
  etcdRequest(path: string, body?: unknown): Promise<{ status: number; body: string }> {
    const p = this.etcdPaths();
    return new Promise((ok, fail) => {
      const req = https.request(
        `${this.etcdUrl}${path}`,
        {
          method: body === undefined ? 'GET' : 'POST',
          ca: readFileSync(p.ca),
          cert: readFileSync(p.clientCert),
          key: readFileSync(p.clientKey),
          timeout: 2_000,
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c) => {
            text += c;
          });
          res.on('end', () => ok({ status: res.statusCode ?? 0, body: text }));
        },
      );
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', fail);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  }

  /** Starts kube-apiserver (again) on the same port and waits for `/readyz`. */
  async startApiServer(): Promise<void> {
    const d = this.dir;
    const secure = this.ports[2]!;
    const pki = this.etcdPki();
    this.apiServer = this.spawnLogged('kube-apiserver', join(this.bin, 'kube-apiserver'), [
      `--etcd-servers=${this.etcdUrl}`,
      `--etcd-cafile=${pki.ca}`,
      `--etcd-certfile=${pki.clientCert}`,
      `--etcd-keyfile=${pki.clientKey}`,
      `--secure-port=${secure}`,
      `--bind-address=${this.opts.nodeAddress ?? '127.0.0.1'}`,
      `--advertise-address=${this.opts.nodeAddress ?? '127.0.0.1'}`,
      `--tls-cert-file=${join(d, 'serving.crt')}`,
      `--tls-private-key-file=${join(d, 'serving.key')}`,
      `--token-auth-file=${join(d, 'tokens.csv')}`,
      '--authorization-mode=RBAC',
      `--service-account-key-file=${join(d, 'sa.pub')}`,
      `--service-account-signing-key-file=${join(d, 'sa.key')}`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      '--service-cluster-ip-range=10.0.0.0/24',
      // Without a node no pods run; the ServiceAccount admission plugin would only wait for default accounts.
      ...(this.opts.nodeAddress ? [] : ['--disable-admission-plugins=ServiceAccount']),
      // The node's name is no DNS name here: reach its kubelet (logs, exec) by its address.
      ...(this.opts.nodeAddress ? ['--kubelet-preferred-address-types=InternalIP'] : []),
      '--allow-privileged=true',
      `--cert-dir=${join(d, 'certs')}`,
      ...(this.opts.apiServerArgs ?? []),
    ]);
    await waitFor(`kube-apiserver ${this.server}`, 90_000, async () => {
      const r = await httpGet(`${this.server}/readyz`, this.caFile, this.token);
      return r.status === 200;
    });
  }

  /** Stops kube-apiserver (SIGTERM, then SIGKILL after 10 s) and leaves etcd running. */
  async stopApiServer(): Promise<void> {
    await stopProcess(this.apiServer);
    this.apiServer = undefined;
  }

  /** A KubeConfig for the admin user (token auth). */
  kubeConfig(): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromFile(this.kubeconfigPath);
    return kc;
  }

  /** Stops both processes and removes the temp folder. Idempotent. */
  async stop(): Promise<void> {
    await stopProcess(this.controllerManager);
    this.controllerManager = undefined;
    await stopProcess(this.apiServer);
    await stopProcess(this.etcd);
    this.apiServer = undefined;
    this.etcd = undefined;
    rmSync(this.dir, { recursive: true, force: true });
    live.delete(this);
  }

  /** Synchronous last resort on process exit. */
  killNow(): void {
    for (const p of [this.controllerManager, this.apiServer, this.etcd])
      if (p && p.exitCode === null) p.kill('SIGKILL');
    rmSync(this.dir, { recursive: true, force: true });
  }

  private spawnLogged(name: string, path: string, args: string[]): ChildProcess {
    return spawnLogged(join(this.dir, 'logs'), name, path, args);
  }

  /** Last `lines` lines of a component's log, for failure messages. */
  logTail(name: 'etcd' | 'kube-apiserver' | 'kube-controller-manager', lines = 30): string {
    try {
      return readFileSync(join(this.dir, 'logs', `${name}.log`), 'utf8')
        .split('\n')
        .slice(-lines)
        .join('\n');
    } catch {
      return '';
    }
  }
}

/**
 * Starts `path args` under `setpriv --pdeathsig KILL` (no orphan when this process dies), its
 * stdout and stderr appended to `<logDir>/<name>.log`.
 */
export function spawnLogged(logDir: string, name: string, path: string, args: string[]): ChildProcess {
  mkdirSync(logDir, { recursive: true });
  const fd = openSync(join(logDir, `${name}.log`), 'a');
  const child = spawn('setpriv', ['--pdeathsig', 'KILL', '--', path, ...args], {
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  return child;
}

/**
 * Writes a self-signed P-256 certificate for 127.0.0.1 / localhost and `extraSANs` (openssl
 * `subjectAltName` entries such as `IP:10.0.0.1`) (PEM) and its key, valid for `days` days, with
 * the `openssl` CLI. Throws when openssl fails.
 */
export function writeSelfSignedCertificate(
  keyPath: string,
  certPath: string,
  days = 1,
  extraSANs: string[] = [],
): void {
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      String(days),
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      ['subjectAltName=IP:127.0.0.1,DNS:localhost', ...extraSANs].join(','),
      '-keyout',
      keyPath,
      '-out',
      certPath,
    ],
    { stdio: 'ignore' },
  );
}

/** kubeconfig with one cluster, one token user and one context, all named `metal`. */
export function kubeconfigYaml(server: string, caFile: string, token: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: metal',
    '  cluster:',
    `    server: ${server}`,
    `    certificate-authority: ${caFile}`,
    'users:',
    '- name: metal',
    '  user:',
    `    token: ${token}`,
    'contexts:',
    '- name: metal',
    '  context: {cluster: metal, user: metal}',
    'current-context: metal',
    '',
  ].join('\n');
}

/**
 * Creates (or updates) every CRD under `config/crd/` and waits until each is Established.
 * Sent as raw JSON: client-node's typed serializer drops `x-kubernetes-*` schema extensions.
 */
export async function installCRDs(kc: KubeConfig, dir = join(REPO_ROOT, 'config', 'crd')): Promise<string[]> {
  const server = kc.getCurrentCluster()!.server;
  const base = `${server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions`;
  const request = async (method: string, url: string, body?: unknown) => {
    const r = await apiRequest(kc, method, url, body);
    return { ...r, json: r.json as V1CustomResourceDefinition | undefined };
  };
  const names: string[] = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml')) {
    const crd = parse(readFileSync(resolve(dir, file), 'utf8')) as V1CustomResourceDefinition;
    const name = crd.metadata!.name!;
    names.push(name);
    let res = await request('POST', base, crd);
    if (res.status === 409) {
      const current = await request('GET', `${base}/${name}`);
      crd.metadata!.resourceVersion = current.json?.metadata?.resourceVersion;
      res = await request('PUT', `${base}/${name}`, crd);
    }
    if (res.status >= 300) throw new Error(`installing CRD ${name}: HTTP ${res.status}: ${res.text}`);
  }
  await waitFor('CRDs Established', 30_000, async () => {
    for (const name of names) {
      const crd = (await request('GET', `${base}/${name}`)).json;
      const ok = crd?.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True');
      if (!ok) return false;
    }
    return true;
  });
  return names;
}

/**
 * One raw JSON request to the API server with the kubeconfig's TLS and credentials. `url` may be a
 * path (`/apis/...`). Never throws on HTTP statuses; rejects on connection errors.
 */
export async function apiRequest(
  kc: KubeConfig,
  method: string,
  url: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: unknown; text: string }> {
  const full = url.startsWith('/') ? `${kc.getCurrentCluster()!.server}${url}` : url;
  const opts: https.RequestOptions = {
    method,
    headers: { 'content-type': 'application/json', accept: 'application/json', ...headers },
  };
  await kc.applyToHTTPSOptions(opts);
  return new Promise((ok, fail) => {
    const req = https.request(full, opts, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => {
        text += c;
      });
      res.on('end', () => {
        let json: unknown;
        try {
          json = text ? JSON.parse(text) : undefined;
        } catch {
          json = undefined;
        }
        ok({ status: res.statusCode ?? 0, json, text });
      });
    });
    req.on('error', fail);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** SIGTERM, then SIGKILL after 10 s; resolves once `p` exited (at once when it is not running). */
export async function stopProcess(p: ChildProcess | undefined): Promise<void> {
  if (!p || p.exitCode !== null || p.signalCode !== null) return;
  const exited = new Promise((ok) => p.once('exit', ok));
  p.kill('SIGTERM');
  const timer = setTimeout(() => p.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

/**
 * Polls `check` every 100 ms until it returns true; throws after `timeoutMs` milliseconds. A failed
 * assertion thrown by `check` (code `ERR_ASSERTION`, node:assert) is rethrown at once rather than
 * retried until the timeout; other errors are retried and named in the timeout's message.
 */
export async function waitFor(
  what: string,
  timeoutMs: number,
  check: () => Promise<boolean> | boolean,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < end) {
    try {
      if (await check()) return;
    } catch (err) {
      if ((err as { code?: string }).code === 'ERR_ASSERTION') throw err;
      last = err;
    }
    await new Promise((ok) => setTimeout(ok, 100));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`);
}

function httpGet(url: string, caFile?: string, token?: string): Promise<{ status: number; body: string }> {
  return new Promise((ok, fail) => {
    const u = new URL(url);
    const mod = u.protocol === 'https:' ? https : http;
    const req = mod.get(
      u,
      {
        ca: caFile ? readFileSync(caFile) : undefined,
        headers: token ? { authorization: `Bearer ${token}` } : {},
        timeout: 2_000,
      },
      (res) => {
        let body = '';
        res.on('data', (c) => {
          body += c;
        });
        res.on('end', () => ok({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', fail);
  });
}
