/**
 * Fault knobs of the virtual BMC: the ways real BMCs misbehave that the operator must survive
 * (boot-flow case C09). Counters ("the next N requests") count HTTP requests in arrival order,
 * including the service root and session logins, restricted to `onlyMethods` and `onlyPaths` when set.
 */

export interface FaultKnobs {
  /** The next N requests are answered `503 Service Unavailable` with `Retry-After`, without being processed. */
  unavailableRequests: number;
  /** `Retry-After` of those 503s, in seconds (HTTP delay-seconds, RFC 9110 §10.2.3). */
  retryAfterSeconds: number;
  /** The next N requests get their TCP connection destroyed without any response, without being processed. */
  dropConnections: number;
  /** Every response is sent this many ms after the request was processed. */
  responseDelayMs: number;
  /** The next N requests are processed at once but answered `slowResponseMs` later (on top of `responseDelayMs`). */
  slowRequests: number;
  /** Extra delay of the `slowRequests`, ms. */
  slowResponseMs: number;
  /**
   * After `ComputerSystem.Reset` was answered 204, the host acts only this many ms later; until then
   * `PowerState` keeps its old value (or a transitional one, see `reportTransitionalState`).
   */
  powerTransitionMs: number;
  /** During a pending transition report `PoweringOn`/`PoweringOff` instead of the old state. */
  reportTransitionalState: boolean;
  /** The next N PATCHes find the resource modified by another client first (its ETag changes): 412 with If-Match. */
  concurrentWrites: number;
  /** HTTP methods the counted faults (drop, unavailable, slow) apply to; empty: all methods. */
  onlyMethods: string[];
  /** Path suffixes (e.g. `/Actions/ComputerSystem.Reset`) the counted faults apply to; empty: all paths. */
  onlyPaths: string[];
  /**
   * Setting it puts every host into POST for this many ms from now, as a reset would on HPE iLO: Boot
   * PATCHes meanwhile get 400 `iLO.2.26.UnableToModifyDuringSystemPOST`. Not a counter.
   */
  hostsInPostMs: number;
  /**
   * Setting it makes each host's next Boot PATCH find it just reset: in POST for this many ms from that
   * PATCH on (so the refusal meets whatever call comes first, however late). Not a counter.
   */
  postAtNextPatchMs: number;
  /**
   * The BMC is dead: every request's connection is destroyed unanswered (the client sees a reset, as
   * when a BMC's web server crashed), before the counters are consulted. Not a counter: it lasts until
   * set false again (a BMC that comes back).
   */
  unresponsive: boolean;
  /**
   * Systems whose PATCHes (`/Systems/{id}` and below: Boot, Settings) are refused without being
   * processed: system `Id` or UUID (case-insensitive) → HTTP status, 400–599. A 503 carries
   * `Retry-After` (`retryAfterSeconds`) and MessageId `ServiceTemporarilyUnavailable` (transient);
   * any other status MessageId `PropertyNotWritable` (a refusal that asking again cannot change).
   * Setting it replaces the whole map; `{}` ends every refusal. Not a counter.
   */
  patchRefusals: Record<string, number>;
}

export const DEFAULT_FAULTS: Readonly<FaultKnobs> = {
  unavailableRequests: 0,
  retryAfterSeconds: 1,
  dropConnections: 0,
  responseDelayMs: 0,
  slowRequests: 0,
  slowResponseMs: 0,
  powerTransitionMs: 0,
  reportTransitionalState: false,
  concurrentWrites: 0,
  onlyMethods: [],
  onlyPaths: [],
  hostsInPostMs: 0,
  postAtNextPatchMs: 0,
  unresponsive: false,
  patchRefusals: {},
};

/** What happens to one incoming request before it is processed. */
export type RequestFate =
  | { kind: 'drop' }
  | { kind: 'unavailable'; retryAfterSeconds: number }
  | { kind: 'refuse'; status: number; retryAfterSeconds: number }
  | { kind: 'serve' };

/** Live fault settings; counters are consumed as requests arrive. */
export class FaultState {
  private knobs: FaultKnobs;

  constructor(initial: Partial<FaultKnobs> = {}) {
    this.knobs = { ...DEFAULT_FAULTS };
    this.set(initial);
  }

  /** Merges `f` into the current knobs (a counter set here replaces the remaining count). */
  set(f: Partial<FaultKnobs>): void {
    for (const [k, v] of Object.entries(f) as Array<[keyof FaultKnobs, unknown]>) {
      if (v === undefined) continue;
      if (k === 'patchRefusals') {
        if (typeof v !== 'object' || v === null || Array.isArray(v)) {
          throw new TypeError(`fault knob ${k} must be an object of system id → HTTP status`);
        }
        const m: Record<string, number> = {};
        for (const [id, st] of Object.entries(v)) {
          if (typeof st !== 'number' || !Number.isInteger(st) || st < 400 || st > 599) {
            throw new TypeError(`fault knob ${k}: the status of ${id} must be an integer 400-599`);
          }
          m[id.toLowerCase()] = st;
        }
        this.knobs.patchRefusals = m;
        continue;
      }
      if (k === 'reportTransitionalState' || k === 'unresponsive') {
        if (typeof v !== 'boolean') throw new TypeError(`fault knob ${k} must be a boolean`);
      } else if (k === 'onlyMethods') {
        if (!Array.isArray(v) || !v.every((m) => typeof m === 'string')) {
          throw new TypeError(`fault knob ${k} must be a list of HTTP methods`);
        }
        this.knobs.onlyMethods = v.map((m: string) => m.toUpperCase());
        continue;
      } else if (k === 'onlyPaths') {
        if (!Array.isArray(v) || !v.every((p) => typeof p === 'string')) {
          throw new TypeError(`fault knob ${k} must be a list of path suffixes`);
        }
        this.knobs.onlyPaths = [...v];
        continue;
      } else if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
        throw new TypeError(`fault knob ${k} must be a number >= 0`);
      }
      (this.knobs as unknown as Record<string, unknown>)[k] = v;
    }
  }

  get current(): Readonly<FaultKnobs> {
    return this.knobs;
  }

  /** Decides, and consumes counters for, a request that just arrived. */
  admit(method: string, path = ''): RequestFate {
    if (this.knobs.unresponsive) return { kind: 'drop' };
    if (method.toUpperCase() === 'PATCH') {
      const id = /\/Systems\/([^/]+)/.exec(path)?.[1];
      const status = id === undefined ? undefined : this.knobs.patchRefusals[safeDecode(id).toLowerCase()];
      if (status !== undefined)
        return { kind: 'refuse', status, retryAfterSeconds: this.knobs.retryAfterSeconds };
    }
    if (!this.applies(method, path)) return { kind: 'serve' };
    if (this.knobs.dropConnections > 0) {
      this.knobs.dropConnections--;
      return { kind: 'drop' };
    }
    if (this.knobs.unavailableRequests > 0) {
      this.knobs.unavailableRequests--;
      return { kind: 'unavailable', retryAfterSeconds: this.knobs.retryAfterSeconds };
    }
    return { kind: 'serve' };
  }

  /** Delay (ms) before sending the response of a processed request; consumes one slow request. */
  responseDelay(method: string, path = ''): number {
    let delay = this.knobs.responseDelayMs;
    if (this.knobs.slowRequests > 0 && this.applies(method, path)) {
      this.knobs.slowRequests--;
      delay += this.knobs.slowResponseMs;
    }
    return delay;
  }

  private applies(method: string, path: string): boolean {
    const { onlyMethods, onlyPaths } = this.knobs;
    return (
      (onlyMethods.length === 0 || onlyMethods.includes(method.toUpperCase())) &&
      (onlyPaths.length === 0 || onlyPaths.some((suffix) => path.endsWith(suffix)))
    );
  }

  /** Whether this PATCH meets a concurrent writer; consumes one. */
  takeConcurrentWrite(): boolean {
    if (this.knobs.concurrentWrites <= 0) return false;
    this.knobs.concurrentWrites--;
    return true;
  }
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
