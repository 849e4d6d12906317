/**
 * {@link BMC} over Redfish. Each method is one short exchange sharing one time budget
 * (`CallOptions.budgetMs`, default from the client): typically a GET of the ComputerSystem followed by
 * at most one action POST or PATCH. Power actions return as soon as the BMC accepted them; nothing here
 * polls `PowerState`.
 *
 * Schema sources: ComputerSystem.v1_22_0 (`Boot`, `Actions.#ComputerSystem.Reset`), Resource.v1_19_0
 * (`PowerState`, `ResetType`), ActionInfo.v1_4_0, Settings.v1_3_5 (`@Redfish.Settings`).
 */

import * as accounts from './accounts.js';
import type {
  AccountServiceInfo,
  AccountWrite,
  BMC,
  BootOverride,
  BootOverrideResult,
  BootSettings,
  CallOptions,
  ComputerSystemInfo,
  EthernetInterfaceInfo,
  GracefulShutdownOptions,
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
} from './bmc.js';
import { MAX_ETHERNET_INTERFACES } from './bmc.js';
import {
  BootTargetNotSupportedError,
  HttpBootUriNotSupportedError,
  RedfishHttpError,
  ResetTypeNotSupportedError,
} from './errors.js';
import {
  asObject,
  parseBoot,
  parseCollection,
  parseComputerSystem,
  parseEthernetInterface,
  parseEthernetInterfacesUri,
  parseManager,
  parsePowerState,
  parseResetAction,
  parseResetActionInfo,
  parseSettingsUri,
  parseSystemUUID,
  type ResetActionInfo,
} from './parse.js';
import { RedfishClient, type RedfishClientOptions } from './redfish-client.js';
import type { Budget } from './retry.js';
import { quirksForManufacturer, quirksForVendor, type VendorName, type VendorQuirks } from './vendor.js';
import { ejectCd, findCdDevice, insertCd } from './virtual-media.js';

/** Fixed URIs of the top-level collections (Redfish spec, "Resource URI patterns"). */
const SYSTEMS_URI = '/redfish/v1/Systems';
const MANAGERS_URI = '/redfish/v1/Managers';

/** Reset types after which the system is in the same state however often they are sent. */
const IDEMPOTENT_RESETS: ReadonlySet<ResetType> = new Set(['On', 'ForceOn', 'ForceOff', 'GracefulShutdown']);

/** `@Message.ExtendedInfo` ids (Base registry) meaning "this ResetType value is not accepted". */
const VALUE_REJECTED =
  /\.(ActionParameterValueNotInList|PropertyValueNotInList|ActionParameterNotSupported)$/;

export interface RedfishBMCOptions extends RedfishClientOptions {
  /** Use this vendor profile instead of detecting one from the system's `Manufacturer`. */
  vendor?: VendorName;
}

/** What a power action needs to know about a system; unlike `getSystem` it does not require a UUID. */
interface PowerView {
  uri: string;
  powerState: PowerState;
  reset: ResetActionInfo | undefined;
  quirks: VendorQuirks;
}

export class RedfishBMC implements BMC {
  readonly client: RedfishClient;
  private readonly vendor: VendorName | undefined;
  /** ActionInfo URI → allowed ResetTypes; ActionInfo resources do not change while a BMC runs. */
  private readonly actionInfo = new Map<string, ResetType[]>();

  constructor(options: RedfishBMCOptions) {
    this.client = new RedfishClient(options);
    this.vendor = options.vendor;
  }

  get transportSecurity(): TransportSecurity {
    return this.client.transportSecurity;
  }

  async listSystems(opts?: CallOptions): Promise<ResourceRef[]> {
    const res = await this.client.get(SYSTEMS_URI, { budget: this.client.budget(opts) });
    return parseCollection(res.body, SYSTEMS_URI);
  }

  async listManagers(opts?: CallOptions): Promise<ResourceRef[]> {
    const res = await this.client.get(MANAGERS_URI, { budget: this.client.budget(opts) });
    return parseCollection(res.body, MANAGERS_URI);
  }

  async getSystem(systemUri: string, opts?: CallOptions): Promise<ComputerSystemInfo> {
    const res = await this.client.get(systemUri, { budget: this.client.budget(opts) });
    return parseComputerSystem(res.body, systemUri).info;
  }

  async systemUUID(systemUri: string, opts?: CallOptions): Promise<string> {
    const res = await this.client.get(systemUri, { budget: this.client.budget(opts) });
    return parseSystemUUID(res.body, systemUri);
  }

  async ethernetInterfaces(systemUri: string, opts?: CallOptions): Promise<EthernetInterfaceInfo[]> {
    const budget = this.client.budget(opts);
    const sys = await this.client.get(systemUri, { budget });
    const uri = parseEthernetInterfacesUri(sys.body, systemUri);
    if (!uri) return [];
    const members = parseCollection((await this.client.get(uri, { budget })).body, uri);
    const out: EthernetInterfaceInfo[] = [];
    for (const m of members.slice(0, MAX_ETHERNET_INTERFACES)) {
      const nic = parseEthernetInterface((await this.client.get(m.uri, { budget })).body, m.uri);
      if (nic && !out.some((n) => n.macAddress === nic.macAddress)) out.push(nic);
    }
    return out;
  }

  async getManager(managerUri: string, opts?: CallOptions): Promise<ManagerInfo> {
    const res = await this.client.get(managerUri, { budget: this.client.budget(opts) });
    return parseManager(res.body, managerUri);
  }

  async powerState(systemUri: string, opts?: CallOptions): Promise<PowerState> {
    const res = await this.client.get(systemUri, { budget: this.client.budget(opts) });
    return parsePowerState(res.body, systemUri);
  }

  async powerOn(systemUri: string, opts?: CallOptions): Promise<PowerActionResult> {
    const budget = this.client.budget(opts);
    const view = await this.readPowerView(systemUri, budget);
    if (view.powerState === 'On') return skipped(view, 'already');
    if (view.powerState === 'PoweringOn') return skipped(view, 'in-progress');
    // PushPowerButton toggles: only safe when the system is known to be off.
    const candidates: ResetType[] =
      view.powerState === 'Off' ? ['On', 'ForceOn', 'PushPowerButton'] : ['On', 'ForceOn'];
    return this.postReset(view, await this.choose(view, candidates, budget), budget);
  }

  async gracefulShutdown(systemUri: string, opts?: GracefulShutdownOptions): Promise<PowerActionResult> {
    const budget = this.client.budget(opts);
    const view = await this.readPowerView(systemUri, budget);
    if (view.powerState === 'Off') return skipped(view, 'already');
    if (view.powerState === 'PoweringOff') return skipped(view, 'in-progress');
    const candidates: ResetType[] = ['GracefulShutdown'];
    if (view.powerState === 'On') candidates.push(...view.quirks.gracefulShutdownAlternatives);
    if (opts?.fallbackToForceOff) candidates.push('ForceOff');
    const type = await this.choose(view, candidates, budget);
    try {
      return await this.postReset(view, type, budget);
    } catch (err) {
      // Some services advertise no list and reject the value instead: the fallback still applies.
      if (opts?.fallbackToForceOff && type !== 'ForceOff' && isValueRejected(err)) {
        return this.postReset(view, 'ForceOff', budget);
      }
      throw err;
    }
  }

  async forceOff(systemUri: string, opts?: CallOptions): Promise<PowerActionResult> {
    const budget = this.client.budget(opts);
    const view = await this.readPowerView(systemUri, budget);
    if (view.powerState === 'Off') return skipped(view, 'already');
    // A PoweringOff system may be stuck in a graceful shutdown: cutting power is what was asked.
    return this.postReset(view, await this.choose(view, ['ForceOff'], budget), budget);
  }

  async restart(systemUri: string, opts?: RestartOptions): Promise<PowerActionResult> {
    const budget = this.client.budget(opts);
    const view = await this.readPowerView(systemUri, budget);
    if (view.powerState === 'PoweringOn' || view.powerState === 'PoweringOff')
      return skipped(view, 'in-progress');
    if (view.powerState === 'Off') {
      // Restarting a system that is off means booting it; several BMCs reject resets of an off system.
      return this.postReset(
        view,
        await this.choose(view, ['On', 'ForceOn', 'PushPowerButton'], budget),
        budget,
      );
    }
    const candidates: ResetType[] = opts?.graceful
      ? ['GracefulRestart', ...(opts.fallbackToForce ? (['ForceRestart', 'PowerCycle'] as const) : [])]
      : ['ForceRestart', 'PowerCycle'];
    return this.postReset(view, await this.choose(view, candidates, budget), budget);
  }

  async reset(systemUri: string, resetType: ResetType, opts?: CallOptions): Promise<PowerActionResult> {
    const budget = this.client.budget(opts);
    const view = await this.readPowerView(systemUri, budget);
    return this.postReset(view, await this.choose(view, [resetType], budget), budget);
  }

  async resetManager(managerUri: string, resetType: ResetType = 'GracefulRestart', opts?: CallOptions) {
    const budget = this.client.budget(opts);
    const res = await this.client.get(managerUri, { budget });
    const actions = asObject(res.body, managerUri)['Actions'] as Record<string, unknown> | undefined;
    const reset = actions?.['#Manager.Reset'] as { target?: unknown } | undefined;
    if (typeof reset?.target !== 'string') throw new ResetTypeNotSupportedError(managerUri, [resetType], []);
    // Not idempotent in effect (a second restart interrupts the first): sent once, never retried.
    await this.client.post(reset.target, { ResetType: resetType }, { budget, idempotent: false });
  }

  async setBootOverride(
    systemUri: string,
    override: BootOverride,
    opts?: CallOptions,
  ): Promise<BootOverrideResult> {
    const budget = this.client.budget(opts);
    // One more round after a 412/428: the resource changed (or wants If-Match) between GET and PATCH.
    for (let round = 0; ; round++) {
      const res = await this.client.get(systemUri, { budget });
      const obj = asObject(res.body, systemUri);
      const current = parseBoot(obj['Boot'], systemUri);
      const quirks = this.quirks(obj);
      if (current.allowedTargets !== undefined && !current.allowedTargets.includes(override.target)) {
        throw new BootTargetNotSupportedError(systemUri, override.target, current.allowedTargets);
      }
      if (override.httpBootUri !== undefined && current.httpBootUri === undefined) {
        throw new HttpBootUriNotSupportedError(systemUri);
      }
      let target = systemUri;
      let etag = res.etag;
      let pending: BootSettings | undefined;
      const settingsUri = parseSettingsUri(obj, systemUri);
      if (settingsUri !== undefined) {
        // Changes wait in the SettingsObject until the next reset: what is pending there counts, or two
        // calls before a reset would PATCH twice.
        const settings = await this.client.get(settingsUri, { budget });
        pending = parseBoot(asObject(settings.body, settingsUri)['Boot'], settingsUri);
        target = settingsUri;
        etag = settings.etag;
      }
      const { sent, ignored } = planBootPatch(current, pending, override, quirks);
      if (Object.keys(sent).length === 0)
        return { changed: false, patchedUri: undefined, sentFields: {}, ignored };
      const ifMatch = etag ?? (round > 0 ? '*' : quirks.ifMatchWithoutETag);
      try {
        await this.client.patch(
          target,
          { Boot: sent },
          { budget, headers: ifMatch === undefined ? {} : { 'if-match': ifMatch } },
        );
        return { changed: true, patchedUri: target, sentFields: sent, ignored };
      } catch (err) {
        if (round === 0 && err instanceof RedfishHttpError && (err.status === 412 || err.status === 428))
          continue;
        throw err;
      }
    }
  }

  async insertMedia(systemUri: string, image: string, opts?: CallOptions): Promise<MediaResult> {
    const budget = this.client.budget(opts);
    const system = asObject((await this.client.get(systemUri, { budget })).body, systemUri);
    const quirks = this.quirks(system);
    const dev = await findCdDevice(this.client, systemUri, system, quirks, budget);
    return insertCd(this.client, dev, image, quirks, budget);
  }

  async ejectMedia(systemUri: string, opts?: CallOptions): Promise<MediaResult> {
    const budget = this.client.budget(opts);
    const system = asObject((await this.client.get(systemUri, { budget })).body, systemUri);
    const dev = await findCdDevice(this.client, systemUri, system, this.quirks(system), budget);
    return ejectCd(this.client, dev, budget);
  }

  getAccountService(opts?: CallOptions): Promise<AccountServiceInfo> {
    return accounts.getAccountService(this.client, this.client.budget(opts));
  }

  listAccounts(opts?: CallOptions): Promise<ManagerAccountInfo[]> {
    return accounts.listAccounts(this.client, this.client.budget(opts));
  }

  getAccount(uri: string, opts?: CallOptions): Promise<ManagerAccountInfo> {
    return accounts.getAccount(this.client, uri, this.client.budget(opts));
  }

  createAccount(account: NewAccount, opts?: CallOptions): Promise<ManagerAccountInfo> {
    return accounts.createAccount(this.client, account, this.client.budget(opts));
  }

  updateAccount(uri: string, write: AccountWrite, opts?: CallOptions): Promise<void> {
    return accounts.updateAccount(this.client, uri, write, this.client.budget(opts));
  }

  deleteAccount(uri: string, opts?: CallOptions): Promise<void> {
    return accounts.deleteAccount(this.client, uri, this.client.budget(opts));
  }

  close(): Promise<void> {
    return this.client.close();
  }

  private async readPowerView(uri: string, budget: Budget): Promise<PowerView> {
    const res = await this.client.get(uri, { budget });
    const obj = asObject(res.body, uri);
    return {
      uri,
      powerState: parsePowerState(obj, uri),
      reset: parseResetAction(obj, uri),
      quirks: this.quirks(obj),
    };
  }

  private quirks(system: Record<string, unknown>): VendorQuirks {
    if (this.vendor !== undefined) return quirksForVendor(this.vendor);
    const m = system['Manufacturer'];
    return quirksForManufacturer(typeof m === 'string' ? m : undefined);
  }

  /** First of `candidates` the system allows; with no advertised list, the first candidate. */
  private async choose(
    view: PowerView,
    candidates: readonly ResetType[],
    budget: Budget,
  ): Promise<ResetType> {
    if (view.reset === undefined) throw new ResetTypeNotSupportedError(view.uri, candidates, []);
    const allowed = await this.allowedResetTypes(view.reset, budget);
    const type = allowed === undefined ? candidates[0] : candidates.find((c) => allowed.includes(c));
    if (type === undefined) throw new ResetTypeNotSupportedError(view.uri, candidates, allowed ?? []);
    return type;
  }

  private async allowedResetTypes(reset: ResetActionInfo, budget: Budget): Promise<ResetType[] | undefined> {
    if (reset.allowed !== undefined) return reset.allowed;
    if (reset.actionInfoUri === undefined) return undefined;
    let allowed = this.actionInfo.get(reset.actionInfoUri);
    if (allowed === undefined) {
      const res = await this.client.get(reset.actionInfoUri, { budget });
      allowed = parseResetActionInfo(res.body, reset.actionInfoUri);
      this.actionInfo.set(reset.actionInfoUri, allowed);
    }
    return allowed;
  }

  private async postReset(view: PowerView, type: ResetType, budget: Budget): Promise<PowerActionResult> {
    if (view.reset === undefined) throw new ResetTypeNotSupportedError(view.uri, [type], []);
    await this.client.post(
      view.reset.target,
      { ResetType: type },
      { budget, idempotent: IDEMPOTENT_RESETS.has(type) },
    );
    return { observed: view.powerState, sent: type, skipped: undefined };
  }
}

/**
 * The Boot properties to PATCH: each wanted property whose effective value (pending in the
 * SettingsObject, else current) differs. `mode` is left out (and reported in `ignored`) on services
 * that do not report `BootSourceOverrideMode`, which reject PATCHes carrying it. With the vendor's
 * `bootTargetWithEnabled`, Target and Enabled travel together. `HttpBootUri` is sent when wanted and
 * different (the caller has checked that the service has the property). Pure.
 */
export function planBootPatch(
  current: BootSettings,
  pending: BootSettings | undefined,
  want: BootOverride,
  quirks: Pick<VendorQuirks, 'bootTargetWithEnabled'>,
): { sent: BootOverrideResult['sentFields']; ignored: BootOverrideResult['ignored'] } {
  const sent: BootOverrideResult['sentFields'] = {};
  const ignored: BootOverrideResult['ignored'] = [];
  const target = pending?.target ?? current.target;
  const enabled = pending?.enabled ?? current.enabled;
  const mode = pending?.mode ?? current.mode;
  if (target !== want.target) sent.BootSourceOverrideTarget = want.target;
  if (enabled !== want.enabled) sent.BootSourceOverrideEnabled = want.enabled;
  if (quirks.bootTargetWithEnabled && (sent.BootSourceOverrideTarget || sent.BootSourceOverrideEnabled)) {
    sent.BootSourceOverrideTarget = want.target;
    sent.BootSourceOverrideEnabled = want.enabled;
  }
  if (want.httpBootUri !== undefined && (pending?.httpBootUri ?? current.httpBootUri) !== want.httpBootUri) {
    sent.HttpBootUri = want.httpBootUri;
  }
  if (want.mode !== undefined) {
    if (current.mode === undefined && pending?.mode === undefined) ignored.push('mode');
    else if (mode !== want.mode) sent.BootSourceOverrideMode = want.mode;
  }
  return { sent, ignored };
}

function skipped(view: PowerView, why: 'already' | 'in-progress'): PowerActionResult {
  return { observed: view.powerState, sent: undefined, skipped: why };
}

function isValueRejected(err: unknown): boolean {
  return (
    err instanceof RedfishHttpError &&
    err.status === 400 &&
    err.info.messageIds.some((id) => VALUE_REJECTED.test(id))
  );
}
