/**
 * A BMC in memory, for tests and benchmarks (not the product: nothing in `src/` outside this folder
 * imports it). It implements the {@link BMC} seam the controllers call through (`BmcFactory`,
 * controllers/bmc-actions/bmc-connections.ts), so a controller's decisions can be tested without a
 * Redfish server, a network or a clock worth waiting for.
 *
 * Contract:
 * - Every call is recorded in {@link FakeBmc.calls} (method, arguments without the call options) in
 *   arrival order, also the calls that are then refused or fail.
 * - The power methods decide as `RedfishBMC` does (redfish-bmc.ts): `powerOn` skips an `On` (`already`)
 *   or `PoweringOn` (`in-progress`) system, `forceOff` an `Off` one, `restart` of an `Off` system sends
 *   `On`; a ResetType the system does not allow throws `ResetTypeNotSupportedError`. What a sent action
 *   does to `PowerState` is the system's {@link FakeSystem.follow}: `immediate` (the goal at once),
 *   `transitional` (`PoweringOn`/`PoweringOff`), `lag` (unchanged: a BMC that reports late).
 * - `setBootOverride` throws `BootTargetNotSupportedError` for a target outside
 *   {@link FakeSystem.allowedTargets} and `HttpBootUriNotSupportedError` when the system has no
 *   `HttpBootUri`; it changes only what differs (`changed: false` when nothing does).
 * - Virtual media (`insertMedia`/`ejectMedia`) and accounts exist unless turned off in
 *   {@link FakeBmcOptions}: then the methods are `undefined`, as on a BMC client without them.
 * - {@link FakeBmc.refuse}, {@link FakeBmc.fail} and {@link FakeBmc.delay} change how the next calls of
 *   one method behave (all of them unless `times` is given); rules add up (a delay, then a failure).
 *   They apply after the call is recorded and before it acts, so a refused call changes nothing. A delayed call honours its
 *   `signal` (rejects with the signal's reason when aborted).
 */
import type {
  AccountServiceInfo,
  AccountWrite,
  BMC,
  BootOverride,
  BootOverrideResult,
  BootSettings,
  BootSourceOverrideTarget,
  CallOptions,
  ComputerSystemInfo,
  EthernetInterfaceInfo,
  ManagerAccountInfo,
  ManagerInfo,
  MediaResult,
  NewAccount,
  PowerActionResult,
  PowerState,
  ResetType,
  ResourceRef,
  RestartOptions,
  TransportSecurity,
  VirtualMediaDevice,
} from '../bmc/bmc.js';
import {
  BootTargetNotSupportedError,
  HttpBootUriNotSupportedError,
  RedfishHttpError,
  ResetTypeNotSupportedError,
} from '../bmc/errors.js';

/** The methods of {@link BMC} a rule can be set for (every one but `close`). */
export type FakeMethod = Exclude<
  { [K in keyof BMC]-?: NonNullable<BMC[K]> extends (...a: never[]) => unknown ? K : never }[keyof BMC],
  'close'
>;

/** One recorded call: the method and its arguments, without the trailing call options. */
export interface FakeCall {
  method: FakeMethod | 'close';
  args: unknown[];
}

/** One simulated ComputerSystem. */
export interface FakeSystem {
  /** Redfish URI, e.g. `/redfish/v1/Systems/1`. */
  uri: string;
  /** Canonical lower-case UUID. */
  uuid: string;
  powerState: PowerState;
  /** See the module contract. Default `immediate`. */
  follow: 'immediate' | 'transitional' | 'lag';
  /** `ResetType@Redfish.AllowableValues`. Default: On, ForceOff, GracefulShutdown, GracefulRestart, ForceRestart. */
  allowedResets: ResetType[];
  boot: BootSettings;
  nics: EthernetInterfaceInfo[];
  /** The virtual CD. */
  media: VirtualMediaDevice;
}

export interface FakeBmcOptions {
  /** Systems (missing fields get defaults); default one system `/redfish/v1/Systems/1`. */
  systems?: Array<Partial<FakeSystem>>;
  /** Default true: `insertMedia`/`ejectMedia` exist. */
  virtualMedia?: boolean;
  /** Default true: the account methods exist. */
  accounts?: boolean;
  /** The AccountService's policy. */
  accountPolicy?: Omit<AccountServiceInfo, 'accountsUri'>;
  transportSecurity?: TransportSecurity;
}

/** How the next calls of a method behave; see {@link FakeBmc.refuse}, {@link FakeBmc.fail}, {@link FakeBmc.delay}. */
interface Rule {
  /** Thrown instead of acting (made per call). */
  error?: () => unknown;
  delayMs?: number;
  /** Calls left; `undefined`: every call. */
  left: number | undefined;
}

const DEFAULT_RESETS: ResetType[] = ['On', 'ForceOff', 'GracefulShutdown', 'GracefulRestart', 'ForceRestart'];
const ACCOUNTS_URI = '/redfish/v1/AccountService/Accounts';
const MANAGER_URI = '/redfish/v1/Managers/1';

interface StoredAccount extends ManagerAccountInfo {
  password: string;
}

export class FakeBmc implements BMC {
  readonly calls: FakeCall[] = [];
  readonly systems: FakeSystem[];
  readonly transportSecurity?: TransportSecurity;
  /** Accounts by URI, passwords included (the real BMC never shows them). */
  readonly accounts = new Map<string, StoredAccount>();
  closed = false;
  insertMedia?: (systemUri: string, image: string, opts?: CallOptions) => Promise<MediaResult>;
  ejectMedia?: (systemUri: string, opts?: CallOptions) => Promise<MediaResult>;
  getAccountService?: (opts?: CallOptions) => Promise<AccountServiceInfo>;
  listAccounts?: (opts?: CallOptions) => Promise<ManagerAccountInfo[]>;
  getAccount?: (uri: string, opts?: CallOptions) => Promise<ManagerAccountInfo>;
  createAccount?: (account: NewAccount, opts?: CallOptions) => Promise<ManagerAccountInfo>;
  updateAccount?: (uri: string, write: AccountWrite, opts?: CallOptions) => Promise<void>;
  deleteAccount?: (uri: string, opts?: CallOptions) => Promise<void>;
  private readonly rules = new Map<FakeMethod, Rule[]>();
  private nextAccountId = 1;

  constructor(private readonly opts: FakeBmcOptions = {}) {
    this.systems = (opts.systems ?? [{}]).map((s, i) => fakeSystem(s, i));
    if (opts.transportSecurity) this.transportSecurity = opts.transportSecurity;
    if (opts.virtualMedia !== false) {
      this.insertMedia = (uri, image, o) =>
        this.call('insertMedia', [uri, image], o, () => this.insert(uri, image));
      this.ejectMedia = (uri, o) => this.call('ejectMedia', [uri], o, () => this.eject(uri));
    }
    if (opts.accounts !== false) this.installAccounts();
  }

  /** Makes the next `times` calls of `method` (default: all) fail with HTTP `status` (a Redfish refusal). */
  refuse(method: FakeMethod, status = 400, opts: { messageIds?: string[]; times?: number } = {}): this {
    const info = { code: undefined, message: `refused by the fake BMC`, messageIds: opts.messageIds ?? [] };
    return this.rule(method, {
      error: () => new RedfishHttpError('FAKE', method, status, info),
      left: opts.times,
    });
  }

  /** Makes the next `times` calls of `method` (default: all) throw what `error` makes (any BMC layer error). */
  fail(method: FakeMethod, error: () => unknown, times?: number): this {
    return this.rule(method, { error, left: times });
  }

  /** Makes the next `times` calls of `method` (default: all) answer `ms` later. */
  delay(method: FakeMethod, ms: number, times?: number): this {
    return this.rule(method, { delayMs: ms, left: times });
  }

  /** Drops every rule: the BMC answers normally again. */
  heal(): this {
    this.rules.clear();
    return this;
  }

  /** The recorded calls of `method`, arguments only. */
  callsOf(method: FakeMethod | 'close'): unknown[][] {
    return this.calls.filter((c) => c.method === method).map((c) => c.args);
  }

  /** The system at `uri`; throws `RedfishHttpError` 404 for another. */
  system(uri: string): FakeSystem {
    const s = this.systems.find((x) => x.uri === uri);
    if (!s)
      throw new RedfishHttpError('GET', uri, 404, {
        code: undefined,
        message: 'no such system',
        messageIds: [],
      });
    return s;
  }

  listSystems(o?: CallOptions): Promise<ResourceRef[]> {
    return this.call('listSystems', [], o, () =>
      this.systems.map((s) => ({ id: lastSegment(s.uri), uri: s.uri })),
    );
  }

  listManagers(o?: CallOptions): Promise<ResourceRef[]> {
    return this.call('listManagers', [], o, () => [{ id: '1', uri: MANAGER_URI }]);
  }

  getSystem(uri: string, o?: CallOptions): Promise<ComputerSystemInfo> {
    return this.call('getSystem', [uri], o, () => {
      const s = this.system(uri);
      return {
        id: lastSegment(uri),
        uri,
        uuid: s.uuid,
        serialNumber: `SN-${lastSegment(uri)}`,
        manufacturer: 'Fake',
        model: 'Fake BMC',
        powerState: s.powerState,
        boot: { ...s.boot },
        memoryGiB: 16,
        processorCount: 1,
      };
    });
  }

  systemUUID(uri: string, o?: CallOptions): Promise<string> {
    return this.call('systemUUID', [uri], o, () => this.system(uri).uuid);
  }

  ethernetInterfaces(uri: string, o?: CallOptions): Promise<EthernetInterfaceInfo[]> {
    return this.call('ethernetInterfaces', [uri], o, () => this.system(uri).nics.map((n) => ({ ...n })));
  }

  getManager(uri: string, o?: CallOptions): Promise<ManagerInfo> {
    return this.call('getManager', [uri], o, () => ({
      id: lastSegment(uri),
      uri,
      uuid: undefined,
      managerType: 'BMC',
      manufacturer: 'Fake',
      model: 'Fake BMC',
      firmwareVersion: '1.0',
    }));
  }

  powerState(uri: string, o?: CallOptions): Promise<PowerState> {
    return this.call('powerState', [uri], o, () => this.system(uri).powerState);
  }

  powerOn(uri: string, o?: CallOptions): Promise<PowerActionResult> {
    return this.call('powerOn', [uri], o, () => {
      const s = this.system(uri);
      if (s.powerState === 'On') return skipped(s, 'already');
      if (s.powerState === 'PoweringOn') return skipped(s, 'in-progress');
      return this.send(s, this.choose(s, ['On', 'ForceOn', 'PushPowerButton']));
    });
  }

  gracefulShutdown(
    uri: string,
    o?: CallOptions & { fallbackToForceOff?: boolean },
  ): Promise<PowerActionResult> {
    return this.call('gracefulShutdown', [uri], o, () => {
      const s = this.system(uri);
      if (s.powerState === 'Off') return skipped(s, 'already');
      if (s.powerState === 'PoweringOff') return skipped(s, 'in-progress');
      return this.send(
        s,
        this.choose(s, ['GracefulShutdown', ...(o?.fallbackToForceOff ? ['ForceOff' as const] : [])]),
      );
    });
  }

  forceOff(uri: string, o?: CallOptions): Promise<PowerActionResult> {
    return this.call('forceOff', [uri], o, () => {
      const s = this.system(uri);
      if (s.powerState === 'Off') return skipped(s, 'already');
      return this.send(s, this.choose(s, ['ForceOff']));
    });
  }

  restart(uri: string, o?: RestartOptions): Promise<PowerActionResult> {
    return this.call('restart', [uri], o, () => {
      const s = this.system(uri);
      if (s.powerState === 'PoweringOn' || s.powerState === 'PoweringOff') return skipped(s, 'in-progress');
      if (s.powerState === 'Off') return this.send(s, this.choose(s, ['On', 'ForceOn', 'PushPowerButton']));
      const force: ResetType[] = ['ForceRestart', 'PowerCycle'];
      return this.send(
        s,
        this.choose(s, o?.graceful ? ['GracefulRestart', ...(o.fallbackToForce ? force : [])] : force),
      );
    });
  }

  reset(uri: string, resetType: ResetType, o?: CallOptions): Promise<PowerActionResult> {
    return this.call('reset', [uri, resetType], o, () => {
      const s = this.system(uri);
      return this.send(s, this.choose(s, [resetType]));
    });
  }

  resetManager(uri: string, resetType: ResetType = 'GracefulRestart', o?: CallOptions): Promise<void> {
    return this.call('resetManager', [uri, resetType], o, () => undefined);
  }

  setBootOverride(uri: string, want: BootOverride, o?: CallOptions): Promise<BootOverrideResult> {
    return this.call('setBootOverride', [uri, want], o, () => {
      const s = this.system(uri);
      const allowed = s.boot.allowedTargets;
      if (allowed && !allowed.includes(want.target))
        throw new BootTargetNotSupportedError(uri, want.target, allowed);
      if (want.httpBootUri !== undefined && s.boot.httpBootUri === undefined)
        throw new HttpBootUriNotSupportedError(uri);
      const sent: BootOverrideResult['sentFields'] = {};
      if (s.boot.target !== want.target) sent.BootSourceOverrideTarget = want.target;
      if (s.boot.enabled !== want.enabled) sent.BootSourceOverrideEnabled = want.enabled;
      if (want.httpBootUri !== undefined && s.boot.httpBootUri !== want.httpBootUri)
        sent.HttpBootUri = want.httpBootUri;
      const ignored: BootOverrideResult['ignored'] = [];
      if (want.mode !== undefined && s.boot.mode === undefined) ignored.push('mode');
      else if (want.mode !== undefined && s.boot.mode !== want.mode) sent.BootSourceOverrideMode = want.mode;
      if (Object.keys(sent).length === 0)
        return { changed: false, patchedUri: undefined, sentFields: {}, ignored };
      s.boot = {
        ...s.boot,
        target: want.target,
        enabled: want.enabled,
        ...(sent.BootSourceOverrideMode ? { mode: want.mode } : {}),
        ...(sent.HttpBootUri ? { httpBootUri: want.httpBootUri } : {}),
      };
      return { changed: true, patchedUri: uri, sentFields: sent, ignored };
    });
  }

  async close(): Promise<void> {
    this.calls.push({ method: 'close', args: [] });
    this.closed = true;
  }

  private rule(method: FakeMethod, rule: Rule): this {
    const list = this.rules.get(method) ?? [];
    list.push(rule);
    this.rules.set(method, list);
    return this;
  }

  /** Records, applies every live rule of the method (delays first, then the first error), then acts. */
  private async call<T>(
    method: FakeMethod,
    args: unknown[],
    o: CallOptions | undefined,
    act: () => T,
  ): Promise<T> {
    this.calls.push({ method, args });
    const live = this.rules.get(method) ?? [];
    for (const r of live) if (r.left !== undefined) r.left--;
    this.rules.set(
      method,
      live.filter((r) => r.left === undefined || r.left > 0),
    );
    const delayMs = live.reduce((sum, r) => sum + (r.delayMs ?? 0), 0);
    if (delayMs > 0) await sleep(delayMs, o?.signal);
    const failing = live.find((r) => r.error);
    if (failing?.error) throw failing.error();
    o?.signal?.throwIfAborted();
    return act();
  }

  private choose(s: FakeSystem, wanted: ResetType[]): ResetType {
    const type = wanted.find((t) => s.allowedResets.includes(t));
    if (!type) throw new ResetTypeNotSupportedError(s.uri, wanted, s.allowedResets);
    return type;
  }

  private send(s: FakeSystem, type: ResetType): PowerActionResult {
    const observed = s.powerState;
    const goal = resetGoal(type, observed);
    if (goal && s.follow === 'immediate') s.powerState = goal;
    else if (goal && s.follow === 'transitional') s.powerState = goal === 'On' ? 'PoweringOn' : 'PoweringOff';
    return { observed, sent: type, skipped: undefined };
  }

  private insert(uri: string, image: string): MediaResult {
    const s = this.system(uri);
    if (s.media.inserted && s.media.image === image)
      return { device: { ...s.media }, ejected: false, inserted: false };
    const ejected = s.media.inserted;
    s.media = { ...s.media, inserted: true, image, writeProtected: true };
    return { device: { ...s.media }, ejected, inserted: true };
  }

  private eject(uri: string): MediaResult {
    const s = this.system(uri);
    const ejected = s.media.inserted;
    s.media = { ...s.media, inserted: false, image: undefined };
    return { device: { ...s.media }, ejected, inserted: false };
  }

  private installAccounts(): void {
    const notFound = (uri: string) =>
      new RedfishHttpError('GET', uri, 404, { code: undefined, message: 'no such account', messageIds: [] });
    const pub = ({ password: _pw, ...a }: StoredAccount): ManagerAccountInfo => ({ ...a });
    this.getAccountService = (o) =>
      this.call('getAccountService', [], o, () => ({
        accountsUri: ACCOUNTS_URI,
        ...this.opts.accountPolicy,
      }));
    this.listAccounts = (o) => this.call('listAccounts', [], o, () => [...this.accounts.values()].map(pub));
    this.getAccount = (uri, o) =>
      this.call('getAccount', [uri], o, () => {
        const a = this.accounts.get(uri);
        if (!a) throw notFound(uri);
        return pub(a);
      });
    this.createAccount = (acct, o) =>
      this.call('createAccount', [{ ...acct, password: '<redacted>' }], o, () => {
        this.checkPassword(ACCOUNTS_URI, acct.password);
        const id = String(this.nextAccountId++);
        const a: StoredAccount = { id, uri: `${ACCOUNTS_URI}/${id}`, ...acct, locked: false };
        this.accounts.set(a.uri, a);
        return pub(a);
      });
    this.updateAccount = (uri, write, o) =>
      this.call(
        'updateAccount',
        [uri, { ...write, ...(write.password ? { password: '<redacted>' } : {}) }],
        o,
        () => {
          const a = this.accounts.get(uri);
          if (!a) throw notFound(uri);
          if (write.password !== undefined) this.checkPassword(uri, write.password);
          Object.assign(a, write);
        },
      );
    this.deleteAccount = (uri, o) =>
      this.call('deleteAccount', [uri], o, () => {
        this.accounts.delete(uri);
      });
  }

  /** The AccountService policy's length limits: 400 as a BMC answers (`Base.PropertyValueFormatError`). */
  private checkPassword(uri: string, password: string): void {
    const p = this.opts.accountPolicy ?? {};
    if (
      (p.minPasswordLength && password.length < p.minPasswordLength) ||
      (p.maxPasswordLength && password.length > p.maxPasswordLength)
    )
      throw new RedfishHttpError('PATCH', uri, 400, {
        code: undefined,
        message: 'password refused by the account policy',
        messageIds: ['Base.1.8.PropertyValueFormatError'],
      });
  }
}

/** A {@link FakeSystem} with defaults for what `partial` leaves out; `index` numbers the URI and UUID. */
function fakeSystem(partial: Partial<FakeSystem>, index: number): FakeSystem {
  const n = index + 1;
  return {
    uri: `/redfish/v1/Systems/${n}`,
    uuid: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`,
    powerState: 'Off',
    follow: 'immediate',
    allowedResets: [...DEFAULT_RESETS],
    nics: [
      {
        id: '1',
        macAddress: `02:00:00:00:00:${n.toString(16).padStart(2, '0')}`,
        linkStatus: 'LinkUp',
        enabled: true,
      },
    ],
    media: {
      uri: `/redfish/v1/Managers/1/VirtualMedia/${n}`,
      inserted: false,
      image: undefined,
      writeProtected: undefined,
    },
    ...partial,
    boot: {
      target: 'None',
      enabled: 'Disabled',
      mode: 'UEFI',
      allowedTargets: ['None', 'Pxe', 'Hdd', 'Cd', 'UefiHttp'] satisfies BootSourceOverrideTarget[],
      httpBootUri: null,
      ...partial.boot,
    },
  };
}

/** The PowerState a ResetType leads to from `from`; `undefined` for those that leave it (Nmi). */
function resetGoal(type: ResetType, from: PowerState): 'On' | 'Off' | undefined {
  switch (type) {
    case 'ForceOff':
    case 'GracefulShutdown':
    case 'Suspend':
      return 'Off';
    case 'PushPowerButton':
      return from === 'Off' ? 'On' : 'Off';
    case 'Nmi':
    case 'Pause':
      return undefined;
    default:
      return 'On';
  }
}

function skipped(s: FakeSystem, why: 'already' | 'in-progress'): PowerActionResult {
  return { observed: s.powerState, sent: undefined, skipped: why };
}

function lastSegment(uri: string): string {
  return uri.slice(uri.lastIndexOf('/') + 1);
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
