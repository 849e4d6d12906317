/**
 * Tables of the fleet as an operator reads it: servers (state, power, claim, which boot signals
 * arrived for the current attempt, time since power-on) and claims (phase, Booted reason, attempt,
 * signals). Pure functions over API objects, shared by `metalctl get`, `local up` and `local status`.
 */

import type { BMC } from '../api/v1alpha1/bmc.js';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import { BootSignal, ConditionType, countsForCurrentAttempt } from '../api/vocabulary.js';
import { claimState, serverHeader, serverRows } from './server-view.js';

/** Boot signals in the order a boot produces them, with the word shown in tables. */
export const SIGNALS: readonly [string, string][] = [
  [BootSignal.IPXEScriptFetched, 'script'],
  [BootSignal.HTTPBootFileFetched, 'uki'],
  [BootSignal.VirtualMediaFetched, 'iso'],
  [BootSignal.IgnitionDataFetched, 'ignition'],
  [BootSignal.RegistrationReceived, 'registered'],
  [BootSignal.BootStateReceived, 'booted'],
];

/** Signals of the SBC's current attempt that are True, joined by `+` (`-` when none). */
export function currentSignals(sbc: ServerBootConfiguration | undefined): string {
  if (!sbc) return '-';
  const got = SIGNALS.filter(([type]) => countsForCurrentAttempt(sbc, type)).map(([, word]) => word);
  return got.length ? got.join('+') : '-';
}

/** `12s`, `3m04s`, `1h02m`: elapsed time since an RFC 3339 timestamp (`-` when unset). */
export function since(ts: string | undefined, now = Date.now()): string {
  if (!ts) return '-';
  const s = Math.max(0, Math.round((now - Date.parse(ts)) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** Renders rows as columns separated by three spaces, kubectl style. */
export function renderTable(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('   ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

export interface FleetSnapshot {
  servers: Server[];
  claims: ServerClaim[];
  sbcs: ServerBootConfiguration[];
  /** BMC objects, for the PROBLEM column (a BMC that is not Ready). */
  bmcs?: BMC[];
}

function sbcFor(s: FleetSnapshot, server: Server): ServerBootConfiguration | undefined {
  const ref = server.spec.bootConfigurationRef;
  return ref
    ? s.sbcs.find((b) => b.metadata.name === ref.name && b.metadata.namespace === ref.namespace)
    : undefined;
}

/**
 * `get servers`: state, power, claim, the current attempt's signals, time since power-on, BMC and
 * PROBLEM (server-view.ts); `wide` adds manufacturer, model, cores, memory and the first IP.
 */
export function serversTable(s: FleetSnapshot, now = Date.now(), opts: { wide?: boolean } = {}): string {
  const wide = !!opts.wide;
  const sorted = [...s.servers].sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''));
  const base = serverRows(sorted, s.bmcs ?? [], wide);
  const rows = sorted.map((srv, i) => {
    const sbc = sbcFor(s, srv);
    const claim = srv.spec.serverClaimRef;
    const claimObj = claim
      ? s.claims.find((c) => c.metadata.name === claim.name && c.metadata.namespace === claim.namespace)
      : undefined;
    // A Server's own boot (the cleanup after a release) counts from its own power-on.
    const poweredOn =
      claimObj?.status?.boot?.poweredOnAt ??
      (srv.status?.state === 'Cleaning' ? srv.status.cleanup?.poweredOnAt : undefined);
    const r = base[i]!;
    // serverRows: NAME SYSTEMUUID BMC STATE POWER CLAIM [wide…] PROBLEM; the signal columns go before PROBLEM.
    return [
      ...r.slice(0, -1),
      sbc ? String(sbc.spec.bootAttempt ?? 1) : '-',
      currentSignals(sbc),
      since(poweredOn, now),
      r[r.length - 1]!,
    ];
  });
  const header = serverHeader(wide);
  return renderTable([...header.slice(0, -1), 'ATTEMPT', 'SIGNALS', 'SINCE-POWER-ON', 'PROBLEM'], rows);
}

/** The Server `c` is bound to: named by its `spec.serverRef` and pointing back at it (else undefined). */
function boundServer(s: FleetSnapshot, c: ServerClaim): Server | undefined {
  const name = c.spec.serverRef?.name;
  if (!name) return undefined;
  const srv = s.servers.find((x) => x.metadata.name === name);
  const back = srv?.spec.serverClaimRef;
  // An Unbound claim may name a Server another claim holds: that Server's signals are not this claim's.
  return back?.name === c.metadata.name && back?.namespace === c.metadata.namespace ? srv : undefined;
}

/**
 * `get claims`: server, phase, Booted, attempt, boot phase, the bound Server's current signals and time
 * since power-on; `wide` adds image, boot policy, boot method and the Booted condition's message.
 */
export function claimsTable(s: FleetSnapshot, now = Date.now(), opts: { wide?: boolean } = {}): string {
  const wide = !!opts.wide;
  const rows = [...s.claims]
    .sort((a, b) =>
      `${a.metadata.namespace}/${a.metadata.name}`.localeCompare(
        `${b.metadata.namespace}/${b.metadata.name}`,
      ),
    )
    .map((c) => {
      const server = boundServer(s, c);
      const row = [
        c.metadata.namespace ?? '',
        c.metadata.name ?? '',
        c.spec.serverRef?.name || '-',
        c.status?.phase ?? '-',
        claimState(c),
        String(c.status?.boot?.attempt ?? '-'),
        c.status?.boot?.phase ?? '-',
        currentSignals(server ? sbcFor(s, server) : undefined),
        since(c.status?.boot?.poweredOnAt, now),
      ];
      if (!wide) return row;
      const booted = c.status?.conditions?.find((x) => x.type === ConditionType.Booted);
      return [
        ...row,
        c.spec.image || '-',
        c.spec.bootPolicy ?? '-',
        c.spec.bootMethod ?? '-',
        booted?.message?.replace(/\s+/g, ' ') || '-',
      ];
    });
  const header = [
    'NAMESPACE',
    'NAME',
    'SERVER',
    'PHASE',
    'BOOTED',
    'ATTEMPT',
    'BOOT-PHASE',
    'SIGNALS',
    'SINCE-POWER-ON',
  ];
  return renderTable(wide ? [...header, 'IMAGE', 'BOOT-POLICY', 'BOOT-METHOD', 'MESSAGE'] : header, rows);
}

type AttemptRecord = NonNullable<NonNullable<NonNullable<ServerClaim['status']>['boot']>['history']>[number];

/** `3.2s`, `1m04s`: a duration between two RFC 3339 times (`?` when one is missing). */
function span(from: string | undefined, to: string | undefined): string {
  if (!from || !to) return '?';
  const ms = Math.max(0, Date.parse(to) - Date.parse(from));
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  return `${Math.floor(ms / 60_000)}m${String(Math.round((ms % 60_000) / 1000)).padStart(2, '0')}s`;
}

/** The OS boot's steps as `metalctl boots` names them: power-on → script → ignition → booted. */
const BOOT_STEPS: readonly [string, string][] = [
  [BootSignal.IPXEScriptFetched, 'script'],
  [BootSignal.IgnitionDataFetched, 'ignition'],
  [BootSignal.RegistrationReceived, 'registered'],
  [BootSignal.BootStateReceived, 'booted'],
];

/**
 * One line per attempt of `status.boot.history`: its number, when it began, and the durations
 * power-on → script → ignition → booted (each from the previous step), then how it ended, e.g.
 * `attempt 2  started 12:00:04  power-on +0.4s → script 3.1s → ignition 0.6s → booted 5.0s  = 9.1s  BootCompleted`.
 */
export function attemptLine(r: AttemptRecord): string {
  const parts = [`attempt ${r.attempt}`, `started ${r.startedAt?.slice(11, 19) ?? '?'}`];
  if (r.poweredOnAt) {
    const steps = [`power-on +${span(r.startedAt ?? r.poweredOnAt, r.poweredOnAt)}`];
    let prev = r.poweredOnAt;
    for (const [type, word] of BOOT_STEPS) {
      const at = r.signals?.[type];
      if (!at) continue;
      steps.push(`${word} ${span(prev, at)}`);
      prev = at;
    }
    parts.push(steps.join(' → '));
  } else parts.push('not powered on');
  if (r.endedAt) parts.push(`= ${span(r.poweredOnAt ?? r.startedAt, r.endedAt)}`, r.result ?? '');
  else parts.push('(running)');
  return parts.join('  ').trimEnd();
}
