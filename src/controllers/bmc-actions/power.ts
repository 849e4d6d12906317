/**
 * Power actions on a Server's system that never block a reconcile: an action is sent, the reconcile
 * requeues, and the next pass reads `PowerState` (docs/ARCHITECTURE.md). A BMC whose `PowerState`
 * lags the action by a minute or more (boot-flow case C09) is not sent the same action again until
 * `powerActionResendMs` has passed; what is pending, and why, is the Server's
 * `PowerActionPending` condition.
 *
 * Used by the Server controller (discovery, Available servers) and the ServerClaim controller
 * (claimed servers); both write `PowerActionPending` through the same field manager.
 */
import type pino from 'pino';
import type { Server } from '../../api/v1alpha1/server.js';
import { BmcFailureReason, ConditionType, EventReason, PowerReason } from '../../api/vocabulary.js';
import type { BMC, PowerState, ResetType } from '../../bmc/bmc.js';
import { isTransitionalPowerState } from '../../bmc/bmc.js';
import { RedfishHttpError, VirtualMediaNotSupportedError } from '../../bmc/errors.js';
import type { KubeClient } from '../../runtime/client.js';
import { findCondition } from '../../runtime/conditions.js';
import type { EventRecorder } from '../../runtime/events.js';
import { Resources } from '../../runtime/resource.js';
import { StatusPatch } from '../../runtime/status-patch.js';
import { applyOwnedCondition } from '../common/owned-conditions.js';
import { DUPLICATE_SYSTEM_UUID, describeOwner } from '../common/system-ownership.js';
import type { BmcDownReports } from './bmc-availability.js';
import type { BmcConnections, BmcFailure } from './bmc-connections.js';
import { classifyBmcFailure } from './bmc-connections.js';

/** Server condition: True while a power action is requested but not yet visible, or cannot be sent. */
/** How soon a refused `InsertMedia` is tried again, ms: the boot server may just have been unable to build the ISO. */
export const INSERT_REFUSED_RETRY_MS = 5_000;

/**
 * A BMC's refusal of `InsertMedia` (HTTP 4xx other than busy, auth and rate limits: how a BMC that
 * cannot fetch the image answers) as its own failure: nothing was inserted, the boot was not started, try
 * again soon. `undefined` for every other error (classified as usual).
 */
export function insertRefusal(err: unknown): BmcFailure | undefined {
  if (!(err instanceof RedfishHttpError) || err.transient) return undefined;
  if (err.status < 400 || err.status >= 500 || err.status === 401 || err.status === 429) return undefined;
  return {
    reason: BmcFailureReason.VirtualMediaInsertRefused,
    message: `the BMC refused to insert the attempt's ISO (HTTP ${err.status}): ${err.info.message ?? err.message}`,
    retryAfterMs: INSERT_REFUSED_RETRY_MS,
    maybeApplied: false,
  };
}

/**
 * The network boot override of a boot: iPXE via PXE, UEFI HTTP boot of `httpBootUri` (Redfish
 * `Boot.HttpBootUri`), or the virtual CD holding `image` (inserted through Redfish
 * `VirtualMedia.InsertMedia` before the `Cd` override is set).
 */
export type NetbootVia =
  | { target: 'Pxe' }
  | { target: 'UefiHttp'; httpBootUri: string }
  | { target: 'Cd'; image: string };

export const POWER_PENDING_CONDITION = ConditionType.PowerActionPending;

export type PowerGoal = 'On' | 'Off';

export interface PowerProgress {
  /** The BMC reports the goal state. */
  reached: boolean;
  /** Last PowerState read, `undefined` when the BMC could not be read. */
  state: PowerState | undefined;
  /** When to look again, ms; set whenever `reached` is false. */
  requeueAfterMs?: number;
  /** What is pending, for claim conditions. */
  pending?: string;
  /** The ResetType this call sent and the PowerState it was sent on; `undefined` when it sent none. */
  sent?: { resetType: ResetType; from: PowerState };
  /** The latest PowerState read by this call (after the action when one was sent and re-read). */
  lastRead?: PowerState;
  /** A BMC call failed (`pending` says which): `requeueAfterMs` is its retry delay. */
  failed?: boolean;
}

/**
 * How {@link PowerActions.ensure} reports: by default every PowerState read is stored in
 * `status.powerState` at once and a sent action gets a `PowerOn`/`PowerOff` Event. A caller that
 * writes the Server's status in the same reconcile anyway passes `record: false` and carries
 * {@link PowerProgress.lastRead} in that write (one request instead of two), and `event: false`
 * when its own Event names the action ({@link PowerProgress.sent}).
 */
export interface EnsureOptions {
  record?: boolean;
  event?: boolean;
}

export type BootActionResult =
  | { ok: true; sent: ResetType | undefined; overrideSet: boolean }
  | { ok: false; failure: BmcFailure };

export interface PowerActionsOptions {
  client: KubeClient;
  connections: BmcConnections;
  events: EventRecorder;
  log: pino.Logger;
  /** How long a requested state may take to show before the action is sent again, ms. */
  resendAfterMs: number;
  /**
   * The other Server that owns a Server's system UUID (system-ownership.ts): such a Server is never
   * powered, whoever asks.
   */
  uuidOwner?: (server: Server) => Server | undefined;
  /** Told of every BMC call that failed because the BMC is unusable (the BMC controller reacts). */
  bmcDown?: BmcDownReports;
}

interface SentAction {
  goal: PowerGoal;
  at: number;
}

export class PowerActions {
  /** Last action sent per Server name; after a restart the pending condition stands in for it. */
  private readonly sent = new Map<string, SentAction>();

  constructor(private readonly o: PowerActionsOptions) {}

  /** One read of `PowerState`, also stored in `status.powerState`. Throws BMC errors and {@link BmcAccessError}. */
  async observe(server: Server): Promise<PowerState> {
    const state = await this.read(server);
    await this.recordState(server, state);
    return state;
  }

  /** One read of `PowerState`, not stored. Throws BMC errors (reported to the BMC controller). */
  private async read(server: Server): Promise<PowerState> {
    const h = this.o.connections.forServer(server);
    try {
      return await h.bmc.powerState(h.systemUri);
    } catch (err) {
      this.reportFailure(server, err);
      throw err;
    }
  }

  /**
   * Moves the system towards `goal` without waiting: reads `PowerState`, sends `On` / `ForceOff` when
   * needed and not sent within `resendAfterMs`, and reports progress. `observed`: a PowerState read
   * earlier in the same reconcile (saves a BMC round trip); `opts`: see {@link EnsureOptions}. BMC
   * failures are reported in the result and the Server's `PowerActionPending` condition, never
   * thrown; API errors are thrown.
   */
  async ensure(
    server: Server,
    goal: PowerGoal,
    observed?: PowerState,
    opts: EnsureOptions = {},
  ): Promise<PowerProgress> {
    const name = server.metadata.name ?? '';
    const record = opts.record !== false;
    const refused = this.duplicate(server);
    if (refused) return this.failed(server, `requesting ${goal}`, refused);
    let state: PowerState;
    try {
      state = observed ?? (record ? await this.observe(server) : await this.read(server));
    } catch (err) {
      return this.failed(server, `reading PowerState (want ${goal})`, classifyBmcFailure(err));
    }
    if (state === goal) {
      this.sent.delete(name);
      await this.setPending(server, undefined);
      return { reached: true, state, lastRead: state };
    }
    const now = Date.now();
    const prior = this.sent.get(name) ?? this.fromCondition(server);
    if (prior && prior.goal === goal && now - prior.at < this.o.resendAfterMs) {
      const pending = `${goal} requested at ${new Date(prior.at).toISOString()}; BMC still reports ${state}`;
      await this.setPending(server, { reason: waitingFor(goal), message: pending, since: prior.at });
      return { reached: false, state, requeueAfterMs: pollDelay(now - prior.at), pending, lastRead: state };
    }
    if (isTransitionalPowerState(state) && !prior) {
      // Someone else's transition: let it finish before deciding.
      const pending = `BMC reports ${state}; waiting before requesting ${goal}`;
      await this.setPending(server, { reason: PowerReason.WaitingForTransition, message: pending });
      return { reached: false, state, requeueAfterMs: 2_000, pending, lastRead: state };
    }
    const h = this.o.connections.forServer(server);
    let after: PowerState | undefined;
    let sent: PowerProgress['sent'];
    try {
      const res = goal === 'On' ? await h.bmc.powerOn(h.systemUri) : await h.bmc.forceOff(h.systemUri);
      this.sent.set(name, { goal, at: now });
      sent = res.sent ? { resetType: res.sent, from: res.observed } : undefined;
      this.log(server).info({ goal, sent: res.sent, observed: res.observed }, 'power action sent');
      if (res.sent) after = await this.refresh(server, record);
      if (res.sent && opts.event !== false)
        this.o.events.record(
          Resources.Server,
          server,
          'Normal',
          goal === 'On' ? EventReason.PowerOn : EventReason.PowerOff,
          `${res.sent} sent to the BMC (PowerState was ${res.observed})`,
        );
    } catch (err) {
      const f = classifyBmcFailure(err);
      if (!f.maybeApplied) return this.failed(server, `requesting ${goal}`, f);
      this.sent.set(name, { goal, at: now });
      return this.failed(server, `requesting ${goal}`, f, { goal, at: now });
    }
    // The BMC reports the goal already (most ForceOffs): nothing is pending, nothing to write twice.
    if (after === goal) {
      await this.setPending(server, undefined);
      return { reached: true, state: after, sent, lastRead: after };
    }
    const pending = `${goal} requested at ${new Date(now).toISOString()}; BMC reports ${state}`;
    await this.setPending(server, { reason: waitingFor(goal), message: pending, since: now });
    return { reached: false, state, requeueAfterMs: pollDelay(0), pending, sent, lastRead: after ?? state };
  }

  /**
   * Powers `server` off for a caller whose status write follows at once: nothing is written here
   * but the `PowerActionPending` condition of a lagging or failing BMC; the caller carries `status`
   * (`powerState` when the last read differs from the stored one) in its write and `words` (what was
   * sent, on which PowerState) in its Event, instead of a `PowerOff` Event. Never throws BMC errors.
   */
  async offForStatusWrite(server: Server): Promise<{ status: { powerState?: PowerState }; words: string }> {
    const p = await this.ensure(server, 'Off', undefined, { record: false, event: false });
    const status = p.lastRead && p.lastRead !== server.status?.powerState ? { powerState: p.lastRead } : {};
    const words = p.sent
      ? `${p.reached ? 'powered off' : 'powering off'}: ${p.sent.resetType} sent to the BMC (PowerState was ${p.sent.from})`
      : p.reached
        ? 'Off already'
        : `powering off: ${p.pending ?? 'pending'}`;
    return { status, words };
  }

  /**
   * Inserts the attempt's ISO (Redfish VirtualMedia.InsertMedia). A refusal the BMC answered is
   * recorded on the Server and returned; other failures are thrown (the boot's own handling).
   */
  private async insertMedia(
    server: Server,
    h: ReturnType<BmcConnections['forServer']>,
    via: Extract<NetbootVia, { target: 'Cd' }>,
  ): Promise<BmcFailure | undefined> {
    if (!h.bmc.insertMedia) throw new VirtualMediaNotSupportedError(h.systemUri, []);
    let m: Awaited<ReturnType<NonNullable<typeof h.bmc.insertMedia>>>;
    try {
      m = await h.bmc.insertMedia(h.systemUri, via.image);
    } catch (err) {
      const refused = insertRefusal(err);
      if (!refused) throw err;
      await this.failed(server, 'inserting virtual media', refused);
      return refused;
    }
    this.log(server).info(
      { media: m.device.uri, ejected: m.ejected, inserted: m.inserted },
      'virtual media inserted',
    );
    return undefined;
  }

  /**
   * Starts a boot: with `netboot`, a network boot override (`via`, default `Pxe`; `Once`, or
   * `Continuous` with `persistent`) first; then `On`
   * when `observed` is Off, a forced restart when it is On (a power cycle). Returns the BMC failure
   * instead of throwing it, so the caller can undo its recorded intent when nothing was applied.
   */
  async boot(
    server: Server,
    opts: {
      netboot: boolean;
      observed: PowerState;
      via?: NetbootVia;
      /** What the boot is for, leading the Event's message (`discovery attempt 1/3`). */
      purpose?: string;
      /**
       * A persistent network boot override (`Continuous`: every boot until changed, also a reset
       * made outside the operator), for NetBootAlways; a BMC that refuses the value (400) gets `Once`.
       */
      persistent?: boolean;
      /**
       * Whether to record the Server's `BootStarted` Event (default true); false when the object
       * that asked for the boot records the power-on itself (the claim's `BootAttemptStarted`).
       */
      event?: boolean;
    },
  ): Promise<BootActionResult> {
    const name = server.metadata.name ?? '';
    const refused = this.duplicate(server);
    if (refused) {
      await this.failed(server, 'starting a boot', refused);
      return { ok: false, failure: refused };
    }
    let overrideSet = false;
    let enabled: 'Once' | 'Continuous' = 'Once';
    const via = opts.via ?? { target: 'Pxe' };
    try {
      const h = this.o.connections.forServer(server);
      if (opts.netboot && via.target === 'Cd') {
        const refused = await this.insertMedia(server, h, via);
        if (refused) return { ok: false, failure: refused };
      }
      if (opts.netboot) {
        enabled = await setNetbootOverride(h, via, opts.persistent === true);
        overrideSet = true;
      }
      const res =
        opts.observed === 'Off' ? await h.bmc.powerOn(h.systemUri) : await h.bmc.restart(h.systemUri);
      this.sent.set(name, { goal: 'On', at: Date.now() });
      await this.refresh(server);
      await this.setPending(server, undefined);
      const how = opts.netboot ? `network boot (${via.target}, ${enabled})` : 'boot from disk';
      this.log(server).info(
        {
          sent: res.sent,
          observed: res.observed,
          netboot: opts.netboot,
          override: opts.netboot ? enabled : undefined,
        },
        'boot started',
      );
      if (opts.event !== false)
        this.o.events.record(
          Resources.Server,
          server,
          'Normal',
          EventReason.BootStarted,
          `${opts.purpose ? `${opts.purpose}: ` : ''}${res.sent ?? 'nothing'} sent (PowerState was ${res.observed}); ${how}`,
        );
      return { ok: true, sent: res.sent, overrideSet };
    } catch (err) {
      const f = classifyBmcFailure(err);
      // An override that was set but not used does no harm: the next attempt sets it again.
      if (!overrideSet) f.maybeApplied = false;
      await this.failed(server, opts.netboot ? 'starting a network boot' : 'starting a boot', f);
      return { ok: false, failure: f };
    }
  }

  /**
   * Ejects the system's virtual CD (the `VirtualMedia` boot method after completion, so the next
   * power-on boots the disk). Returns whether media was ejected, or the BMC failure (never thrown);
   * a BMC without virtual media support has nothing to eject.
   */
  async ejectMedia(
    server: Server,
  ): Promise<{ ok: true; ejected: boolean } | { ok: false; failure: BmcFailure }> {
    try {
      const h = this.o.connections.forServer(server);
      if (!h.bmc.ejectMedia) return { ok: true, ejected: false };
      const m = await h.bmc.ejectMedia(h.systemUri);
      if (m.ejected) this.log(server).info({ media: m.device.uri }, 'virtual media ejected');
      return { ok: true, ejected: m.ejected };
    } catch (err) {
      const f = classifyBmcFailure(err);
      this.log(server).warn({ reason: f.reason, err: f.message }, 'virtual media not ejected');
      return { ok: false, failure: f };
    }
  }

  /**
   * Reads and records `PowerState` once right after an action, so `status.powerState` does not show
   * the state before it until the next reconcile (`record` false: read only, the caller stores it).
   * Best effort: a failed read changes nothing (undefined).
   */
  private async refresh(server: Server, record = true): Promise<PowerState | undefined> {
    try {
      return record ? await this.observe(server) : await this.read(server);
    } catch (err) {
      this.log(server).debug({ err }, 'PowerState not re-read after the action');
      return undefined;
    }
  }

  /** A failure that is never sent when another Server owns this Server's UUID. */
  private duplicate(server: Server): BmcFailure | undefined {
    const owner = this.o.uuidOwner?.(server);
    if (!owner) return undefined;
    return {
      reason: DUPLICATE_SYSTEM_UUID,
      message: `system UUID ${server.spec.systemUUID} is held by ${describeOwner(owner)}; this Server is not powered`,
      retryAfterMs: 60_000,
      maybeApplied: false,
    };
  }

  /** Forgets in-memory state of a Server (it was deleted). */
  forget(name: string): void {
    this.sent.delete(name);
  }

  private reportFailure(server: Server, err: unknown): void {
    let f: BmcFailure;
    try {
      f = classifyBmcFailure(err);
    } catch {
      return; // not a BMC failure
    }
    this.o.bmcDown?.report(server, f);
  }

  /**
   * A failed BMC call: reported to the BMC controller, a Warning Event (not for a busy BMC) and the
   * `PowerActionPending` condition. `maybeSent`: a power request whose outcome is unknown (it timed
   * out after it was sent): the condition then says `WaitingForPower<goal>` since it was sent, so
   * neither this process nor a restarted manager ({@link fromCondition}) sends it again before
   * `resendAfterMs` — a slow BMC that did act would otherwise get a second power-on.
   */
  private async failed(
    server: Server,
    what: string,
    f: BmcFailure,
    maybeSent?: SentAction,
  ): Promise<PowerProgress> {
    this.o.bmcDown?.report(server, f);
    const retry = `retrying in ${Math.round(f.retryAfterMs / 1000)}s`;
    const pending = maybeSent
      ? `${maybeSent.goal} requested at ${new Date(maybeSent.at).toISOString()}, outcome unknown (${f.reason}: ${f.message}); not sent again before ${new Date(maybeSent.at + this.o.resendAfterMs).toISOString()}`
      : `${what}: ${f.reason}: ${f.message}; ${retry}`;
    this.log(server).warn({ reason: f.reason, error: f.message }, `BMC call failed while ${what}`);
    // A busy BMC (e.g. HPE POST window) is waited out with a pending condition: no Warning storm.
    if (!f.busy) this.o.events.record(Resources.Server, server, 'Warning', f.reason, `${what}: ${f.message}`);
    await this.setPending(
      server,
      maybeSent
        ? { reason: waitingFor(maybeSent.goal), message: pending, since: maybeSent.at }
        : { reason: f.reason, message: pending },
    );
    return { reached: false, state: undefined, requeueAfterMs: f.retryAfterMs, pending, failed: true };
  }

  /** The pending action recorded in the condition (after a restart of the manager). */
  private fromCondition(server: Server): SentAction | undefined {
    const c = findCondition(server.status?.conditions, POWER_PENDING_CONDITION);
    if (c === undefined) return undefined;
    if (c.status !== 'True') return undefined;
    const goal =
      c.reason === PowerReason.WaitingForPowerOn
        ? 'On'
        : c.reason === PowerReason.WaitingForPowerOff
          ? 'Off'
          : undefined;
    const at = Date.parse(c.lastTransitionTime);
    return goal && Number.isFinite(at) ? { goal, at } : undefined;
  }

  private async setPending(
    server: Server,
    p: { reason: string; message: string; since?: number } | undefined,
  ): Promise<void> {
    const existing = findCondition(server.status?.conditions, POWER_PENDING_CONDITION);
    if (!p && (!existing || existing.status === 'False')) return;
    await applyOwnedCondition(
      this.o.client,
      Resources.Server,
      server,
      p
        ? { type: POWER_PENDING_CONDITION, status: 'True', reason: p.reason, message: p.message }
        : {
            type: POWER_PENDING_CONDITION,
            status: 'False',
            reason: PowerReason.NoActionPending,
            message: '',
          },
      p?.since ? new Date(p.since) : new Date(),
    );
  }

  /** Records the BMC's power state (`status.powerState`, which this class alone writes: no precondition). */
  private async recordState(server: Server, state: PowerState): Promise<void> {
    await new StatusPatch(this.o.client, Resources.Server, server, 'none')
      .set({ powerState: state })
      .commit();
  }

  private log(server: Server): pino.Logger {
    return this.o.log.child({ server: server.metadata.name, systemUUID: server.spec.systemUUID });
  }
}

/**
 * The controller Result of power progress not reached yet: its requeue (5 s when it gave none),
 * grown per key while the BMC call fails (runtime Result.backoff).
 */
export function powerRetry(p: PowerProgress): { requeueAfterMs: number; backoff?: boolean } {
  const requeueAfterMs = p.requeueAfterMs ?? 5_000;
  return p.failed ? { requeueAfterMs, backoff: true } : { requeueAfterMs };
}

function waitingFor(goal: PowerGoal): string {
  return goal === 'On' ? PowerReason.WaitingForPowerOn : PowerReason.WaitingForPowerOff;
}

/** Poll interval while waiting for a power state: a quarter of the time waited so far, 1–15 s. */
function pollDelay(elapsedMs: number): number {
  return Math.min(15_000, Math.max(1_000, elapsedMs / 4));
}

/**
 * Sets the network boot override of `via` (Redfish ComputerSystem Boot: BootSourceOverrideTarget,
 * BootSourceOverrideEnabled); `persistent` asks for `Continuous`, and a BMC that refuses that value
 * (400, PropertyValueNotInList) gets `Once`. Returns the value set; other failures are thrown.
 */
export async function setNetbootOverride(
  h: { bmc: Pick<BMC, 'setBootOverride'>; systemUri: string },
  via: NetbootVia,
  persistent: boolean,
): Promise<'Once' | 'Continuous'> {
  const override = (enabled: 'Once' | 'Continuous') =>
    h.bmc.setBootOverride(h.systemUri, {
      target: via.target,
      enabled,
      ...(via.target === 'UefiHttp' ? { httpBootUri: via.httpBootUri } : {}),
    });
  const enabled = persistent ? 'Continuous' : 'Once';
  try {
    await override(enabled);
    return enabled;
  } catch (err) {
    if (!(enabled === 'Continuous' && err instanceof RedfishHttpError && err.status === 400)) throw err;
    await override('Once');
    return 'Once';
  }
}
