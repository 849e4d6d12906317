/**
 * A fake BMC for unit tests of pure decision logic (not used by the product): the power and boot
 * override part of the {@link BMC} interface (src/bmc/bmc.ts) over an in-memory system, recording
 * every call, and told per method to refuse the next calls with a given error (e.g. a Redfish 400
 * `PropertyValueNotInList`, src/bmc/errors.ts `RedfishHttpError`). Integration tests use the
 * virtual BMC (src/virtualbmc/) over HTTP instead.
 */
import type { BMC, BootOverride, BootOverrideResult, PowerActionResult, PowerState } from '../bmc/bmc.js';
import { RedfishHttpError } from '../bmc/errors.js';

/** The methods the fake implements. */
export type FakedMethod = 'setBootOverride' | 'powerState' | 'powerOn' | 'forceOff' | 'restart';

/** One recorded call: the method and its arguments after the system URI. */
export interface FakeCall {
  method: FakedMethod;
  args: unknown[];
}

/** A Redfish HTTP refusal as a BMC answers it (status, MessageId). */
export function redfishRefusal(
  method: string,
  path: string,
  status: number,
  messageId?: string,
): RedfishHttpError {
  return new RedfishHttpError(method, path, status, {
    code: messageId,
    message: undefined,
    messageIds: messageId ? [messageId] : [],
  });
}

export class FakeBmc implements Pick<BMC, FakedMethod> {
  readonly calls: FakeCall[] = [];
  power: PowerState = 'Off';
  override: BootOverride | undefined;
  private readonly refusals = new Map<FakedMethod, Error[]>();

  /** The next `errors.length` calls of `method` throw these errors, in order. */
  refuse(method: FakedMethod, ...errors: Error[]): this {
    this.refusals.set(method, [...(this.refusals.get(method) ?? []), ...errors]);
    return this;
  }

  /** The calls of `method`, their arguments. */
  callsOf(method: FakedMethod): unknown[][] {
    return this.calls.filter((c) => c.method === method).map((c) => c.args);
  }

  private enter(method: FakedMethod, args: unknown[]): void {
    this.calls.push({ method, args });
    const err = this.refusals.get(method)?.shift();
    if (err) throw err;
  }

  async setBootOverride(_uri: string, override: BootOverride): Promise<BootOverrideResult> {
    this.enter('setBootOverride', [override]);
    const changed = JSON.stringify(this.override) !== JSON.stringify(override);
    this.override = override;
    return { changed, patchedUri: changed ? _uri : undefined, sentFields: {}, ignored: [] };
  }

  async powerState(): Promise<PowerState> {
    this.enter('powerState', []);
    return this.power;
  }

  async powerOn(): Promise<PowerActionResult> {
    this.enter('powerOn', []);
    return this.act('On', 'On');
  }

  async forceOff(): Promise<PowerActionResult> {
    this.enter('forceOff', []);
    return this.act('Off', 'ForceOff');
  }

  async restart(): Promise<PowerActionResult> {
    this.enter('restart', []);
    const observed = this.power;
    this.power = 'On';
    return { observed, sent: observed === 'On' ? 'ForceRestart' : 'On', skipped: undefined };
  }

  private act(goal: PowerState, reset: 'On' | 'ForceOff'): PowerActionResult {
    const observed = this.power;
    if (observed === goal) return { observed, sent: undefined, skipped: 'already' };
    this.power = goal;
    return { observed, sent: reset, skipped: undefined };
  }
}
