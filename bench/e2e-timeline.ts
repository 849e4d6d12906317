/**
 * One claim's boot as a timeline of millisecond marks, cut into steps that are either our code's or
 * someone else's (firmware, kernel, the image's agent, the virtual BMC), for bench/e2e.ts.
 *
 * Sources, all with ms times on one clock (one machine): the manager's JSON log lines (pino `time`;
 * an HTTP request's start is its `request served` line's time minus its `ms`), the virtual BMC's
 * request records (`at`, `answeredAt`), and the benchmark's own watch of the claim and its
 * ServerBootConfiguration (the time an event arrived). Steps are the gaps between consecutive marks
 * (sorted by time), each named by the mark that ends it; steps of one name within a run add up
 * (the gaps between BMC requests). The steps of a run add up to its total exactly.
 *
 * Contract: {@link readManagerLog} never throws on a malformed line (skipped); {@link buildTimeline}
 * throws an Error naming the first mark it cannot find (the run's evidence is incomplete).
 */
import { readFileSync } from 'node:fs';
import type { RequestRecord } from '../src/virtualbmc/server.js';

/** A manager log line of interest: its time (ms since the epoch) and fields. */
export interface LogEvent {
  t: number;
  msg: string;
  name?: string;
  systemUUID?: string;
  state?: string;
  method?: string;
  url?: string;
  ms?: number;
}

/** The manager's log lines at or after `since` (ms since the epoch). */
export function readManagerLog(path: string, since: number): LogEvent[] {
  const out: LogEvent[] = [];
  for (const raw of readFileSync(path, 'utf8').split('\n')) {
    if (!raw) continue;
    let l: Record<string, unknown>;
    try {
      l = JSON.parse(raw);
    } catch {
      continue;
    }
    const t = Date.parse(String(l.time ?? ''));
    if (!(t >= since) || typeof l.msg !== 'string') continue;
    // pino writes the logger's `name` first and the object's `name` after it: JSON.parse keeps the last.
    out.push({ ...(l as Omit<LogEvent, 't'>), t, msg: l.msg });
  }
  return out;
}

/** A step: the gap that ends at a mark; `ours`: our code's time, else firmware/kernel/agent/BMC. */
export interface Step {
  label: string;
  ours: boolean;
  ms: number;
}

interface Mark {
  t: number;
  label: string;
  ours: boolean;
}

/** What one run left behind, besides the log. */
export interface RunEvidence {
  claim: string;
  systemUUID: string;
  /** Just before the claim's create request, ms. */
  t0: number;
  /** The benchmark's watch saw the claim's SBC created / the claim Booted, ms. */
  sbcCreated?: number;
  booted: number;
  /** The virtual BMC's requests of this run (at ≥ t0). */
  bmc: RequestRecord[];
  log: LogEvent[];
}

/** A served request's start and end, from its `request served` line. */
interface Served {
  start: number;
  end: number;
  method: string;
  url: string;
}

function served(log: LogEvent[]): Served[] {
  return log
    .filter((l) => l.msg === 'request served' && typeof l.ms === 'number' && l.url)
    .map((l) => ({ start: l.t - (l.ms ?? 0), end: l.t, method: l.method ?? '', url: l.url ?? '' }));
}

function need<T>(v: T | undefined, what: string): T {
  if (v === undefined) throw new Error(`no ${what}`);
  return v;
}

/** Marks of the power-on: each BMC request up to the Reset (our gap before it, the BMC's answer after it). */
function bmcMarks(bmc: RequestRecord[], after: number): { marks: Mark[]; resetAnswered: number } {
  const marks: Mark[] = [];
  const reqs = bmc.filter((r) => r.at >= after).sort((a, b) => a.at - b.at);
  const reset = need(
    reqs.find((r) => r.method === 'POST' && r.path.endsWith('ComputerSystem.Reset')),
    'Redfish Reset POST after the boot configuration was Ready',
  );
  for (const [i, r] of reqs.entries()) {
    if (r.at > reset.at) break;
    const isReset = r === reset;
    marks.push({
      t: r.at,
      label: i === 0 ? 'ours: → first BMC request (boot override)' : 'ours: → next BMC request (sum of gaps)',
      ours: true,
    });
    marks.push({
      t: need(r.answeredAt, `answer to ${r.method} ${r.path}`),
      label: isReset
        ? 'BMC: answering the Reset POST (virtual BMC starts QEMU)'
        : 'BMC: answering GET/PATCH before the Reset (sum)',
      ours: false,
    });
  }
  return { marks, resetAnswered: reset.answeredAt! };
}

/** Marks of the network boot: the script (iPXE script or UKI) fetch, the downloads, ignition, /bootstate. */
function bootServerMarks(ev: RunEvidence, after: number): Mark[] {
  const uuid = ev.systemUUID;
  const reqs = served(ev.log).filter((r) => r.start >= after);
  const ign = need(
    reqs.find((r) => r.url.startsWith(`/ignition/${uuid}`)),
    'ignition request',
  );
  const state = need(
    reqs.find((r) => r.url === '/bootstate' && r.start >= ign.end),
    '/bootstate request',
  );
  const marks: Mark[] = [];
  const head = reqs.find((r) => r.method === 'HEAD' && r.url.startsWith(`/httpboot/${uuid}`));
  const uki = reqs.find((r) => r.method === 'GET' && r.url.startsWith(`/httpboot/${uuid}`));
  const script = reqs.find((r) => r.url.startsWith(`/ipxe/${uuid}`));
  const firstByte = (msg: string) =>
    ev.log.find((l) => l.msg === msg && l.systemUUID === uuid && l.t >= after)?.t;
  if (uki) {
    if (head) {
      marks.push({
        t: head.start,
        label: 'firmware: POST, DHCP (s-only log), HTTP boot → HEAD uki.efi',
        ours: false,
      });
      marks.push({ t: head.end, label: 'ours: HEAD uki.efi answered (boot server)', ours: true });
    }
    marks.push({ t: uki.start, label: 'firmware: HEAD answer → GET uki.efi', ours: false });
    marks.push({
      t: need(firstByte('HTTP boot file served'), "'HTTP boot file served' line"),
      label: 'ours: GET uki.efi → body starts (boot server)',
      ours: true,
    });
  } else if (script) {
    marks.push({
      t: script.start,
      label: 'firmware: POST, DHCP (s-only log), iPXE → script request',
      ours: false,
    });
    marks.push({ t: script.end, label: 'ours: iPXE script served (boot server)', ours: true });
  }
  const downloads = reqs.filter((r) => r.end <= ign.start && (r.url.startsWith('/images/') || r === uki));
  const lastDownload = Math.max(...downloads.map((r) => r.end));
  if (Number.isFinite(lastDownload))
    marks.push({
      t: lastDownload,
      label: 'firmware/iPXE: → boot files downloaded (their pace)',
      ours: false,
    });
  marks.push({ t: ign.start, label: 'kernel + initramfs: → ignition request', ours: false });
  marks.push({ t: ign.end, label: 'ours: ignition served (boot server)', ours: true });
  marks.push({ t: state.start, label: 'agent: ignition → /bootstate request', ours: false });
  return marks;
}

/**
 * The run's steps in time order (a name seen again adds to its first step). Throws an Error naming
 * the first missing mark.
 */
export function buildTimeline(ev: RunEvidence): Step[] {
  const logged = (msg: string, ok: (l: LogEvent) => boolean) =>
    need(
      ev.log.find((l) => l.msg === msg && ok(l)),
      `'${msg}' line`,
    ).t;
  const bound = logged('bound', (l) => l.name === ev.claim);
  const ready = logged('boot configuration evaluated', (l) => l.name === ev.claim && l.state === 'Ready');
  const power = bmcMarks(ev.bmc, ev.t0);
  // The API steps end where the power-on began: a line logged after its write can come later than
  // the first BMC request (the watch told the claim controller first), and BMC time is not ours.
  const by = (t: number) => Math.min(t, power.marks[0]?.t ?? t);
  const marks: Mark[] = [{ t: by(bound), label: 'ours: → claim Bound (log line)', ours: true }];
  if (ev.sbcCreated !== undefined)
    marks.push({ t: by(ev.sbcCreated), label: 'ours: → SBC created (watch)', ours: true });
  marks.push({ t: by(ready), label: 'ours: → SBC Ready (log line)', ours: true });
  marks.push(...power.marks, ...bootServerMarks(ev, power.resetAnswered));
  marks.push({
    t: ev.booted,
    label: 'ours: /bootstate received → claim Booted (registry, claim controller; watch)',
    ours: true,
  });
  marks.sort((a, b) => a.t - b.t);
  const steps = new Map<string, Step>();
  let prev = ev.t0;
  for (const m of marks) {
    const s = steps.get(m.label) ?? { label: m.label, ours: m.ours, ms: 0 };
    s.ms += m.t - prev;
    steps.set(m.label, s);
    prev = m.t;
  }
  return [...steps.values()];
}
