/**
 * The soak's invariants as a pure checker (no I/O, no clock): the soak feeds it every claim and
 * Server version its watches see and every request the virtual BMCs log, each with the time it was
 * seen, and calls {@link SoakInvariants.check} with the current time as often as it likes; each
 * violation is returned once (keyed by invariant and subject), as it is found.
 *
 * The invariants (issue 30 item 5; what a claim's attempts promise: README "A claim's boot attempts"):
 * - `power-outside-attempt`: every accepted (2xx) power-on `ComputerSystem.Reset` (On, ForceOn,
 *   ForceRestart, GracefulRestart, PowerCycle) of a system lies within an attempt of a claim bound to
 *   that system (`status.boot.history[]` from `startedAt` to `endedAt`, open while it has none) or
 *   within a discovery/cleanup attempt of its Server (`status.discovery` / `status.cleanup` from
 *   `attemptStartedAt` to `completedAt`, or to when it was first seen in a final phase, else to
 *   `deadline`), ± `graceMs`. A power-on is judged `settleMs` after it
 *   arrived, so that the claim version carrying the attempt (written before the power-on) has
 *   reached the watch.
 * - `power-ons-exceed-attempts`: the accepted power-ons inside a claim's attempts are at most the
 *   number of its attempts.
 * - `series-unbounded`: every series (the attempts from `status.boot.firstAttempt` on) ends — phase
 *   `Completed`, `Exhausted` or `Refused`, or `Booted` True / False with a terminal reason — within
 *   `maxAttempts × timeout + seriesSlackMs` of its first attempt's `startedAt` (the claim's own
 *   `spec.bootCompletion.timeout` / `maxAttempts` when set, else the manager's defaults). The rule is
 *   the README's: an attempt's timeout runs from its first power-on request, accepted or not, so the
 *   series ends within maxAttempts × timeout; the slack covers the manager's reaction time (a restart
 *   re-lists everything).
 * - `bmc-requests-per-minute`: requests a virtual BMC logs for one system (paths under
 *   `/Systems/{id}`) in any 60 s window ≤ `bmcRequestsPerMinute`.
 * - `writes-per-minute`: versions of one claim, or of one Server, seen in any 60 s window ≤
 *   `writesPerMinute` (a watch may coalesce versions, never invent them: the count is a lower bound
 *   of the writes, so a hot loop still shows).
 * - `claim-without-history`: a claim (not being deleted) whose phase says an attempt ran
 *   (`AwaitingNetboot`, `AwaitingSignals`, `Completed`, `Exhausted`) or that is `Booted=True` has a
 *   `status.boot.history` entry for its current attempt.
 *
 * Memory: per claim its attempts' windows; per system/object the timestamps of the last minute;
 * power-ons until judged. Claims are forgotten `forgetMs` after their deletion was seen.
 */
import type { Server } from '../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../src/api/v1alpha1/serverclaim.js';
import { parseDuration } from '../src/controllers/common/duration.js';

export const INVARIANTS = [
  'power-outside-attempt',
  'power-ons-exceed-attempts',
  'series-unbounded',
  'bmc-requests-per-minute',
  'writes-per-minute',
  'claim-without-history',
] as const;
export type Invariant = (typeof INVARIANTS)[number];

export interface InvariantConfig {
  /** The manager's `--boot-max-attempts` (a claim's `spec.bootCompletion.maxAttempts` overrides). */
  maxAttempts: number;
  /** The manager's `--boot-timeout`, ms (a claim's `spec.bootCompletion.timeout` overrides). */
  bootTimeoutMs: number;
  /** Added to maxAttempts × timeout for a series' bound, ms. */
  seriesSlackMs: number;
  /** Bound of BMC requests per system in any 60 s window. */
  bmcRequestsPerMinute: number;
  /** Bound of versions per claim and per Server in any 60 s window. */
  writesPerMinute: number;
  /** A power-on is judged this long after it arrived, ms (default 10 s). */
  settleMs?: number;
  /** Tolerance of attempt windows, ms (default 1 s: clocks, second-precision timestamps). */
  graceMs?: number;
  /** How long a deleted claim's attempts stay known, ms (default 5 min). */
  forgetMs?: number;
}

export interface Finding {
  invariant: Invariant;
  /** What it is about: `claim <ns>/<name>`, `system <uuid>`, `server <name>`. */
  subject: string;
  /** When it was found (the `now` of the check, or the time of the observation), ms since the epoch. */
  at: number;
  detail: string;
}

/** One request as a virtual BMC logged it (a subset of its RequestRecord). */
export interface BmcRequest {
  at: number;
  method: string;
  path: string;
  status: number;
  body?: unknown;
}

export const POWER_ON_TYPES: ReadonlySet<string> = new Set([
  'On',
  'ForceOn',
  'ForceRestart',
  'GracefulRestart',
  'PowerCycle',
]);
const TERMINAL_PHASES = new Set(['Completed', 'Exhausted', 'Refused']);
const TERMINAL_REASONS = new Set(['AttemptsExhausted', 'BootRefused', 'BootMethodUnsupported']);
const ATTEMPT_RAN_PHASES = new Set(['AwaitingNetboot', 'AwaitingSignals', 'Completed', 'Exhausted']);
const MINUTE = 60_000;

interface Window {
  start: number;
  end: number | undefined;
  /** A Server attempt seen finished: its end no longer moves. */
  closed?: boolean;
}

interface ClaimState {
  subject: string;
  uuid: string | undefined;
  /** attempt number → its window (earliest start, latest end seen). */
  attempts: Map<number, Window>;
  firstAttempt: number;
  boundMs: number;
  terminalAt: number | undefined;
  deletedAt: number | undefined;
  lastRv: string | undefined;
  powerOns: number;
  /** The accepted power-ons counted for this claim: ResetType@arrival, for the finding's detail. */
  powerOnLog: string[];
}

/** Sliding 60 s counter per key. */
class PerMinute {
  private readonly times = new Map<string, number[]>();
  max = 0;
  maxKey = '';
  /** Records one event at `at`; returns the count in the 60 s ending at `at`. */
  add(key: string, at: number): number {
    let l = this.times.get(key);
    if (!l) {
      l = [];
      this.times.set(key, l);
    }
    l.push(at);
    while (l.length > 0 && l[0]! <= at - MINUTE) l.shift();
    if (l.length > this.max) {
      this.max = l.length;
      this.maxKey = key;
    }
    return l.length;
  }
  /** Drops keys with nothing in the last minute (memory). */
  prune(now: number): void {
    for (const [k, l] of this.times)
      if (l.length === 0 || l[l.length - 1]! <= now - MINUTE) this.times.delete(k);
  }
}

const ms = (t: string | undefined): number | undefined => {
  if (!t) return undefined;
  const v = Date.parse(t);
  return Number.isFinite(v) ? v : undefined;
};

export class SoakInvariants {
  private readonly claims = new Map<string, ClaimState>();
  /** system UUID → Server discovery/cleanup windows, keyed `kind/attempt/start`. */
  private readonly serverWindows = new Map<string, Map<string, Window>>();
  private readonly serverRvs = new Map<string, string>();
  private readonly pendingPowerOns: { uuid: string; at: number; type: string }[] = [];
  private readonly bmcRate = new PerMinute();
  private readonly writeRate = new PerMinute();
  private readonly serverWriteRate = new PerMinute();
  private readonly reported = new Set<string>();
  private found: Finding[] = [];
  private readonly settleMs: number;
  private readonly graceMs: number;
  private readonly forgetMs: number;
  /** Totals, for the report. */
  readonly counts = {
    powerOns: 0,
    powerOnsInClaims: 0,
    powerOnsInServerAttempts: 0,
    bmcRequests: 0,
    versions: 0,
  };

  constructor(private readonly cfg: InvariantConfig) {
    this.settleMs = cfg.settleMs ?? 10_000;
    this.graceMs = cfg.graceMs ?? 1_000;
    this.forgetMs = cfg.forgetMs ?? 5 * MINUTE;
  }

  /** The highest count seen in a 60 s window: BMC requests per system, versions per object. */
  peaks(): {
    bmcPerSystem: number;
    bmcSystem: string;
    writesPerClaim: number;
    writesClaim: string;
    writesPerServer: number;
    writesServer: string;
  } {
    return {
      bmcPerSystem: this.bmcRate.max,
      bmcSystem: this.bmcRate.maxKey,
      writesPerClaim: this.writeRate.max,
      writesClaim: this.writeRate.maxKey,
      writesPerServer: this.serverWriteRate.max,
      writesServer: this.serverWriteRate.maxKey,
    };
  }

  /**
   * A claim version seen at `at` (a watch's add or update). `uuid`: the system UUID of the Server it
   * is bound to (`spec.serverRef`), lower case; undefined while unbound.
   */
  observeClaim(c: ServerClaim, at: number, uuid: string | undefined): void {
    const key = c.metadata.uid ?? `${c.metadata.namespace}/${c.metadata.name}`;
    const subject = `claim ${c.metadata.namespace ?? ''}/${c.metadata.name ?? ''}`;
    let st = this.claims.get(key);
    if (!st) {
      st = {
        subject,
        uuid,
        attempts: new Map(),
        firstAttempt: 1,
        boundMs: this.boundOf(c),
        terminalAt: undefined,
        deletedAt: undefined,
        lastRv: undefined,
        powerOns: 0,
        powerOnLog: [],
      };
      this.claims.set(key, st);
    }
    if (uuid) st.uuid = uuid;
    const rv = c.metadata.resourceVersion;
    if (rv !== undefined && rv !== st.lastRv) {
      st.lastRv = rv;
      this.counts.versions++;
      const n = this.writeRate.add(subject, at);
      if (n > this.cfg.writesPerMinute) {
        this.report(
          'writes-per-minute',
          subject,
          at,
          `${n} versions in 60 s (bound ${this.cfg.writesPerMinute})`,
        );
      }
    }
    const boot = c.status?.boot;
    const series = boot?.firstAttempt ?? 1;
    if (series !== st.firstAttempt) {
      // A new series (retry): its bound starts again from its own first attempt.
      st.firstAttempt = series;
      st.terminalAt = undefined;
    }
    st.boundMs = this.boundOf(c);
    for (const h of boot?.history ?? []) {
      const start = ms(h.startedAt);
      if (start === undefined) continue;
      const w = st.attempts.get(h.attempt);
      const end = ms(h.endedAt);
      if (!w) st.attempts.set(h.attempt, { start, end });
      else {
        w.start = Math.min(w.start, start);
        if (end !== undefined) w.end = Math.max(w.end ?? end, end);
      }
    }
    const booted = c.status?.conditions?.find((x) => x.type === 'Booted');
    const terminal =
      TERMINAL_PHASES.has(boot?.phase ?? '') ||
      booted?.status === 'True' ||
      (booted?.status === 'False' && TERMINAL_REASONS.has(booted.reason ?? ''));
    if (terminal && st.terminalAt === undefined) {
      st.terminalAt = at;
      const start = this.seriesStart(st);
      if (start !== undefined && at - start > st.boundMs + this.graceMs) {
        this.report(
          'series-unbounded',
          subject,
          at,
          `series from attempt ${st.firstAttempt} (started ${iso(start)}) ended ${Math.round((at - start) / 1000)} s later, bound ${Math.round(st.boundMs / 1000)} s`,
        );
      }
    }
    if (!c.metadata.deletionTimestamp && boot) {
      const ran = ATTEMPT_RAN_PHASES.has(boot.phase ?? '') || booted?.status === 'True';
      if (ran && !(boot.history ?? []).some((h) => h.attempt === boot.attempt)) {
        this.report(
          'claim-without-history',
          subject,
          at,
          `phase ${boot.phase}, Booted ${booted?.status ?? '-'}, attempt ${boot.attempt}, history attempts [${(boot.history ?? []).map((h) => h.attempt).join(',')}]`,
        );
      }
    }
  }

  /** A claim's deletion seen at `at` (its attempts stay known for `forgetMs`, for late power-ons). */
  claimDeleted(c: ServerClaim, at: number): void {
    const st = this.claims.get(c.metadata.uid ?? `${c.metadata.namespace}/${c.metadata.name}`);
    if (st) st.deletedAt = at;
  }

  /** A Server version seen at `at`: its discovery/cleanup attempt windows; counts its writes. */
  observeServer(s: Server, at: number): void {
    const subject = `server ${s.metadata.name ?? ''}`;
    const rv = s.metadata.resourceVersion;
    // A relist repeats versions: only a new resourceVersion is a write.
    const n =
      rv !== undefined && this.serverRvs.get(subject) !== rv ? this.serverWriteRate.add(subject, at) : 0;
    if (rv !== undefined) this.serverRvs.set(subject, rv);
    if (n > 0) this.counts.versions++;
    if (n > this.cfg.writesPerMinute) {
      this.report(
        'writes-per-minute',
        subject,
        at,
        `${n} versions in 60 s (bound ${this.cfg.writesPerMinute})`,
      );
    }
    const uuid = s.spec.systemUUID?.toLowerCase();
    if (!uuid) return;
    for (const [kind, a] of [
      ['discovery', s.status?.discovery],
      ['cleanup', s.status?.cleanup],
    ] as const) {
      const start = ms(a?.attemptStartedAt);
      if (!a || start === undefined) continue;
      let m = this.serverWindows.get(uuid);
      if (!m) {
        m = new Map();
        this.serverWindows.set(uuid, m);
      }
      const k = `${kind}/${a.attempt}/${start}`;
      // The attempt ends when it completed (cleanup: completedAt), when it is first seen in a final
      // phase (discovery keeps no completion time), else at its deadline at the latest.
      const done = TERMINAL_PHASES.has(a.phase ?? '');
      const completed = 'completedAt' in a ? ms(a.completedAt) : undefined;
      const w = m.get(k);
      if (w?.closed) continue;
      const end = completed ?? (done ? Math.min(at, ms(a.deadline) ?? at) : ms(a.deadline));
      if (!w) m.set(k, { start, end, closed: done || completed !== undefined });
      else {
        w.end =
          done || completed !== undefined ? end : end === undefined ? w.end : Math.max(w.end ?? end, end);
        w.closed = done || completed !== undefined;
      }
    }
  }

  /**
   * A request a virtual BMC logged; `uuid`: the system its path names (lower case), undefined for
   * service-wide paths (service root, sessions), which no per-system bound covers.
   */
  observeBmcRequest(uuid: string | undefined, r: BmcRequest): void {
    this.counts.bmcRequests++;
    if (uuid === undefined) return;
    const n = this.bmcRate.add(`system ${uuid}`, r.at);
    if (n > this.cfg.bmcRequestsPerMinute) {
      this.report(
        'bmc-requests-per-minute',
        `system ${uuid}`,
        r.at,
        `${n} requests in 60 s (bound ${this.cfg.bmcRequestsPerMinute})`,
      );
    }
    if (r.method !== 'POST' || !r.path.endsWith('/Actions/ComputerSystem.Reset')) return;
    if (r.status < 200 || r.status >= 300) return;
    const type = String((r.body as { ResetType?: unknown } | undefined)?.ResetType ?? '?');
    if (!POWER_ON_TYPES.has(type)) return;
    this.counts.powerOns++;
    this.pendingPowerOns.push({ uuid, at: r.at, type });
  }

  /** Judges what is due at `now` (settled power-ons, open series past their bound); returns new findings. */
  check(now: number): Finding[] {
    while (this.pendingPowerOns.length > 0 && this.pendingPowerOns[0]!.at <= now - this.settleMs) {
      this.judgePowerOn(this.pendingPowerOns.shift()!, now);
    }
    for (const [key, st] of this.claims) {
      if (st.deletedAt !== undefined && now - st.deletedAt > this.forgetMs) {
        this.claims.delete(key);
        continue;
      }
      if (st.terminalAt !== undefined || st.deletedAt !== undefined) continue;
      const start = this.seriesStart(st);
      if (start !== undefined && now - start > st.boundMs + this.graceMs) {
        this.report(
          'series-unbounded',
          st.subject,
          now,
          `series from attempt ${st.firstAttempt} started ${iso(start)}, not ended after ${Math.round((now - start) / 1000)} s, bound ${Math.round(st.boundMs / 1000)} s`,
        );
      }
    }
    this.bmcRate.prune(now);
    this.writeRate.prune(now);
    this.serverWriteRate.prune(now);
    const out = this.found;
    this.found = [];
    return out;
  }

  private judgePowerOn(p: { uuid: string; at: number; type: string }, now: number): void {
    const g = this.graceMs;
    const inside = (w: Window, openUntil: number) => p.at >= w.start - g && p.at <= (w.end ?? openUntil) + g;
    // The attempt a power-on belongs to is the latest one begun before it (its intent, with its start,
    // is stored before the power-on): with back-to-back claims the previous claim's window, widened by
    // the grace, may still cover the next claim's first power-on.
    // Rank: a window that holds the power-on itself beats one that holds it only within the grace,
    // and one begun before it beats one begun after; then the latest start. Without the first two,
    // a claim whose attempt began within the grace after the previous claim's power-on took that
    // power-on (soak 2026-12-02: soak-4-34 began 950 ms after soak-5-32's On and was charged with it).
    const rank = (w: Window, openUntil: number) =>
      (p.at >= w.start && p.at <= (w.end ?? openUntil) ? 2 : 0) + (w.start <= p.at ? 1 : 0);
    let best: { st: ClaimState; attempt: number; start: number; rank: number } | undefined;
    for (const st of this.claims.values()) {
      if (st.uuid !== p.uuid) continue;
      for (const [attempt, w] of st.attempts) {
        const openUntil = st.deletedAt ?? now;
        if (!inside(w, openUntil)) continue;
        const r = rank(w, openUntil);
        if (!best || r > best.rank || (r === best.rank && w.start > best.start))
          best = { st, attempt, start: w.start, rank: r };
      }
    }
    if (best) {
      const { st, attempt } = best;
      this.counts.powerOnsInClaims++;
      st.powerOns++;
      st.powerOnLog.push(`${p.type}@${iso(p.at)}`);
      if (st.powerOns > st.attempts.size) {
        this.report(
          'power-ons-exceed-attempts',
          st.subject,
          now,
          `${st.powerOns} accepted power-ons (the latest ${p.type} at ${iso(p.at)}, attempt ${attempt}) for ${st.attempts.size} attempts (${st.powerOnLog.join(', ')}); ${this.knownFor(p.uuid, now, p.at)}`,
        );
      }
      return;
    }
    for (const w of this.serverWindows.get(p.uuid)?.values() ?? []) {
      if (inside(w, now)) {
        this.counts.powerOnsInServerAttempts++;
        return;
      }
    }
    this.report(
      'power-outside-attempt',
      `system ${p.uuid}`,
      now,
      `${p.type} accepted at ${iso(p.at)} outside every attempt of its claims and of its Server; ${this.knownFor(p.uuid, now, p.at)}`,
    );
  }

  /**
   * What the checker knows of system `uuid` when it judges a power-on: its claims' attempt windows
   * (start–end, `open` while running) and its Server's — so a finding can be told from a gap in the
   * checker's own view (a claim it never associated with the system).
   */
  private knownFor(uuid: string, now: number, at: number): string {
    const win = (w: Window) => `${iso(w.start)}–${w.end === undefined ? 'open' : iso(w.end)}`;
    const claims: string[] = [];
    for (const st of this.claims.values()) {
      if (st.uuid !== uuid) continue;
      // Only claims with an attempt within 30 s of the power-on: the ones that could own it.
      const near = [...st.attempts.values()].some((w) => Math.abs(w.start - at) < 30_000);
      if (!near) continue;
      const ws = [...st.attempts].map(([a, w]) => `${a}: ${win(w)}`);
      claims.push(`${st.subject}${st.deletedAt !== undefined ? ' (deleted)' : ''} [${ws.join(', ')}]`);
    }
    const server = [...(this.serverWindows.get(uuid)?.values() ?? [])].map(win);
    return `known claims ${claims.length > 0 ? claims.join('; ') : 'none'}, Server attempts [${server.join(', ')}], judged ${iso(now)}`;
  }

  private seriesStart(st: ClaimState): number | undefined {
    let start: number | undefined;
    for (const [a, w] of st.attempts) if (a >= st.firstAttempt) start = Math.min(start ?? w.start, w.start);
    return start;
  }

  private boundOf(c: ServerClaim): number {
    const bc = c.spec.bootCompletion;
    let timeout = this.cfg.bootTimeoutMs;
    if (bc?.timeout) {
      try {
        timeout = parseDuration(bc.timeout);
      } catch {
        // the API server validated it; a value this checker cannot read keeps the default
      }
    }
    return (bc?.maxAttempts ?? this.cfg.maxAttempts) * timeout + this.cfg.seriesSlackMs;
  }

  private report(invariant: Invariant, subject: string, at: number, detail: string): void {
    const key = `${invariant}\0${subject}`;
    if (this.reported.has(key)) return;
    this.reported.add(key);
    this.found.push({ invariant, subject, at, detail });
  }
}

/** The system UUID a virtual BMC path names (`/redfish/v1/Systems/{id}…`), via `idToUuid` (lower-case keys). */
export function systemOfPath(path: string, idToUuid: ReadonlyMap<string, string>): string | undefined {
  const m = /\/Systems\/([^/]+)/.exec(path);
  if (!m) return undefined;
  let id = m[1]!;
  try {
    id = decodeURIComponent(id);
  } catch {
    // a malformed escape names no system
  }
  return idToUuid.get(id.toLowerCase());
}

const iso = (t: number) => new Date(t).toISOString();
