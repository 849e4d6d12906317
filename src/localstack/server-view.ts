/**
 * What an operator reads about one Server and about a fleet: pure functions over API objects,
 * rendered by `metalctl get|describe` (see commands.ts) and the live tables of `local up`.
 *
 * - {@link binaryQuantity}: bytes as a Kubernetes binary quantity (`17179869184` → `16Gi`).
 * - {@link serverProblems}: the PROBLEM column: why a Server is not simply usable (a pending or
 *   failed power action, cordoned, tainted, unclaimable, a duplicated UUID, an unusable BMC, Error
 *   (its reason: discovery's or the cleanup boot's), a cleanup boot that is stuck).
 * - {@link serverRows}: `get servers` rows (`-o wide` adds hardware columns).
 * - {@link describeServer}: `describe server` text (hardware, NICs with MAC/IP/speed, disks, BMC,
 *   taints, conditions, last Events).
 * - {@link claimState}: the claim's state as one word pair (`False/ImageNotFound`, `Unbound/…`).
 */
import { binarySIQuantity } from '../api/quantity.js';
import type { BMC } from '../api/v1alpha1/bmc.js';
import type { Condition } from '../api/v1alpha1/schema.js';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../api/v1alpha1/serverclaim.js';
import { CleanedReason, ConditionType, currentAttemptCondition } from '../api/vocabulary.js';
import { MAINTENANCE_TAINT_KEY, taintText } from '../controllers/server/taints.js';

/** A core/v1 Event as `describe` shows it. */
export interface EventView {
  type: string;
  reason: string;
  message: string;
  count?: number;
  /** RFC 3339: last seen. */
  time?: string;
  source?: string;
}

/**
 * A stored quantity for display: a string as stored (upstream's form, and ours since issue 36), an
 * older integer byte count in canonical binary-SI form (`16Gi`); `-` when unset.
 */
export function binaryQuantity(bytes: number | string | undefined): string {
  if (bytes === undefined || bytes === '') return '-';
  if (typeof bytes === 'string') return bytes;
  if (!Number.isSafeInteger(bytes) || bytes <= 0) return String(bytes);
  return binarySIQuantity(bytes);
}

function cond(conds: Condition[] | undefined, type: string): Condition | undefined {
  return conds?.find((c) => c.type === type);
}

/**
 * Short problem words for a Server, in order of urgency; empty when it is simply usable.
 * `bmc`: its BMC object, when known (a BMC that is not Ready is a problem of every Server behind it).
 */
export function serverProblems(server: Server, bmc?: BMC): string[] {
  const out: string[] = [];
  const c = server.status?.conditions;
  if (cond(c, ConditionType.DuplicateSystemUUID)?.status === 'True') out.push('duplicate-uuid');
  const ready = cond(bmc?.status?.conditions, 'Ready');
  if (ready?.status === 'False') out.push(`bmc:${ready.reason}`);
  const pending = cond(c, ConditionType.PowerActionPending);
  if (pending?.status === 'True') out.push(`power:${pending.reason}`);
  const cleaned = cond(c, ConditionType.Cleaned);
  const cleanupFailed =
    cleaned?.status === 'False' && cleaned.reason === CleanedReason.CleanupAttemptsExhausted;
  if (server.status?.state === 'Error') {
    out.push(`error:${(cleanupFailed ? cleaned : cond(c, ConditionType.Discovered))?.reason ?? 'unknown'}`);
  }
  // A cleanup that is not simply under way (timed out, image missing, no image configured).
  if (
    server.status?.state === 'Cleaning' &&
    cleaned?.status === 'False' &&
    cleaned.reason !== CleanedReason.Cleaning
  )
    out.push(`cleanup:${cleaned.reason}`);
  for (const t of server.spec.taints ?? []) {
    out.push(
      t.key === MAINTENANCE_TAINT_KEY ? `cordoned${t.value ? `:${t.value}` : ''}` : `tainted:${taintText(t)}`,
    );
  }
  if (server.spec.unclaimable) out.push('unclaimable');
  return out;
}

/** First IP address of the Server's first NIC that has one (`-` when none). */
export function firstIp(server: Server): string {
  for (const n of server.status?.networkInterfaces ?? []) {
    const ip = n.ips?.[0] ?? n.ip;
    if (ip) return ip;
  }
  return '-';
}

/** Total cores over all processors (`-` when unknown). */
export function cpuCores(server: Server): string {
  const p = server.status?.processors ?? [];
  const cores = p.reduce((sum, x) => sum + (x.totalCores ?? 0), 0);
  return cores ? String(cores) : '-';
}

/** Column names of {@link serverRows}. */
export function serverHeader(wide: boolean): string[] {
  return [
    'NAME',
    'SYSTEMUUID',
    'BMC',
    'STATE',
    'POWER',
    'CLAIM',
    ...(wide ? ['MANUFACTURER', 'MODEL', 'CPUS', 'MEMORY', 'IP'] : []),
    'PROBLEM',
  ];
}

/** One `get servers` row per Server (sorted by name); `bmcs` to show BMC trouble. */
export function serverRows(servers: readonly Server[], bmcs: readonly BMC[], wide: boolean): string[][] {
  const byName = new Map(bmcs.map((b) => [b.metadata.name ?? '', b]));
  return [...servers]
    .sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''))
    .map((s) => {
      const claim = s.spec.serverClaimRef;
      const bmcName = s.spec.bmcRef?.name ?? s.spec.bmc?.address;
      const ref = s.spec.bmcRef?.name;
      const problems = serverProblems(s, ref ? byName.get(ref) : undefined);
      return [
        s.metadata.name ?? '',
        s.spec.systemUUID,
        bmcName ?? '-',
        s.status?.state ?? 'Initial',
        s.status?.powerState ?? '-',
        claim ? `${claim.namespace}/${claim.name}` : '-',
        ...(wide
          ? [
              s.status?.manufacturer ?? '-',
              s.status?.model ?? '-',
              cpuCores(s),
              binaryQuantity(s.status?.totalSystemMemory as number | string | undefined),
              firstIp(s),
            ]
          : []),
        problems.length ? problems.join(',') : '-',
      ];
    });
}

/**
 * The claim's state in one cell: `Unbound/<Bound reason>` while unbound, `False/<reason>` while
 * its boot configuration is not ready (an image or Secret missing), else `<Booted status>/<reason>`.
 */
export function claimState(claim: ServerClaim): string {
  const c = claim.status?.conditions;
  const bound = cond(c, ConditionType.Bound);
  if (bound && bound.status !== 'True') return `Unbound/${bound.reason}`;
  const config = cond(c, ConditionType.BootConfigurationReady);
  const booted = cond(c, ConditionType.Booted);
  if (config?.status === 'False' && booted?.status !== 'True') return `False/${config.reason}`;
  return booted ? `${booted.status}/${booted.reason}` : '-';
}

/**
 * NICs with what the registration payload adds (speed, by MAC or name): `payload` is the whole
 * payload from its ConfigMap (commands.ts reads it; the Server holds only the record), else a
 * record of an earlier release's own `data`.
 */
export function nicRows(server: Server, payload?: unknown): string[][] {
  const data = (payload ?? server.status?.registration?.data) as { nics?: unknown } | undefined;
  const nics = (Array.isArray(data?.nics) ? data.nics : []) as {
    name?: string;
    mac?: string;
    speed?: string;
  }[];
  return (server.status?.networkInterfaces ?? []).map((n) => {
    const extra = nics.find((x) => x.mac?.toLowerCase() === n.macAddress.toLowerCase() || x.name === n.name);
    return [
      n.name,
      n.macAddress,
      (n.ips ?? (n.ip ? [n.ip] : [])).join(',') || '-',
      extra?.speed || '-',
      n.carrierStatus ?? '-',
    ];
  });
}

/** Disks: one row per drive. */
export function diskRows(server: Server): string[][] {
  return (server.status?.storages ?? []).flatMap((s) =>
    (s.drives ?? []).map((d) => [
      d.name ?? s.name ?? '-',
      d.mediaType ?? '-',
      binaryQuantity(d.capacity as number | string | undefined),
      [d.vendor, d.model].filter(Boolean).join(' ') || '-',
    ]),
  );
}

/** `12s`, `3m4s`, `2h5m`, `3d` ago (`-` when unset). */
export function age(ts: string | undefined, now = Date.now()): string {
  if (!ts) return '-';
  const s = Math.max(0, Math.round((now - Date.parse(ts)) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60 ? `${s % 60}s` : ''}`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d`;
}

/** Columns separated by three spaces, each as wide as its widest cell (kubectl style). */
export function columns(header: string[], rows: string[][], indent = ''): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) =>
    indent +
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('   ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

/** The `describe server` text. `events`: the Server's, any order (the last 10 are shown, oldest first). */
export function describeServer(
  server: Server,
  bmc: BMC | undefined,
  events: EventView[],
  now = Date.now(),
  /** The Server's current boot configuration: its `FetchRefused` of the current attempt is shown. */
  sbc?: ServerBootConfiguration,
  /** The registration payload from its ConfigMap (NIC speeds), when read. */
  payload?: unknown,
): string {
  const refused = sbc ? currentAttemptCondition(sbc, ConditionType.FetchRefused) : undefined;
  return [
    ...summaryFields(server, bmc),
    ...nicSections(server, payload),
    field('Refused fetch', refused ? `${refused.reason}: ${refused.message}` : 'none'),
    'Disks:',
    diskRows(server).length
      ? columns(['NAME', 'MEDIA', 'SIZE', 'MODEL'], diskRows(server), '  ')
      : '  <none>',
    'Conditions:',
    conditionsTable(server, now),
    'Events:',
    eventsTable(events, now),
  ].join('\n');
}

/** One `Key:          value` line of `describe server` (`-` for no value). */
const field = (k: string, v: string | undefined) => `${`${k}:`.padEnd(16)}${v ?? '-'}`;

/** Name to Unclaimable: identity, BMC, state, claim, problems, inventory, taints. */
function summaryFields(server: Server, bmc: BMC | undefined): string[] {
  const st = server.status ?? {};
  const claim = server.spec.serverClaimRef;
  const bmcReady = cond(bmc?.status?.conditions, 'Ready');
  const cpus = (st.processors ?? []).map(
    (p) =>
      `${p.model ?? p.id}${p.totalCores ? ` (${p.totalCores} cores${p.totalThreads ? `, ${p.totalThreads} threads` : ''})` : ''}`,
  );
  const problems = serverProblems(server, bmc);
  return [
    field('Name', server.metadata.name),
    field('System UUID', server.spec.systemUUID),
    field(
      'BMC',
      server.spec.bmcRef
        ? `${server.spec.bmcRef.name}${bmcReady ? ` (Ready=${bmcReady.status} ${bmcReady.reason})` : ''}`
        : server.spec.bmc?.address,
    ),
    field('System URI', server.spec.systemURI),
    field('State', st.state ?? 'Initial'),
    field('Power', st.powerState),
    field('Claim', claim ? `${claim.namespace}/${claim.name}` : undefined),
    field('Problems', problems.length ? problems.join(', ') : 'none'),
    field('Manufacturer', st.manufacturer),
    field('Model', st.model),
    field('Serial number', st.serialNumber),
    field('BIOS', st.biosVersion),
    field('CPU', cpus.length ? cpus.join('; ') : undefined),
    field('Memory', binaryQuantity(st.totalSystemMemory as number | string | undefined)),
    field('Taints', (server.spec.taints ?? []).map(taintText).join(', ') || '<none>'),
    field('Unclaimable', String(!!server.spec.unclaimable)),
  ];
}

/** The NICs the inventory found, then those the BMC reports (`<not read>` before the BMC was read). */
function nicSections(server: Server, payload: unknown): string[] {
  const st = server.status ?? {};
  const bmcNics = (st.bmcNetworkInterfaces ?? []).map((n) => [n.name, n.macAddress, n.carrierStatus ?? '-']);
  return [
    'NICs:',
    nicRows(server, payload).length
      ? columns(['NAME', 'MAC', 'IPS', 'SPEED', 'CARRIER'], nicRows(server, payload), '  ')
      : '  <none>',
    'NICs reported by the BMC:',
    st.bmcNetworkInterfaces === undefined
      ? '  <not read>'
      : bmcNics.length
        ? columns(['NAME', 'MAC', 'LINK'], bmcNics, '  ')
        : '  <none>',
  ];
}

function conditionsTable(server: Server, now: number): string {
  const conditions = server.status?.conditions ?? [];
  if (!conditions.length) return '  <none>';
  return columns(
    ['TYPE', 'STATUS', 'REASON', 'AGE', 'MESSAGE'],
    conditions.map((c) => [c.type, c.status, c.reason, age(c.lastTransitionTime, now), c.message]),
    '  ',
  );
}

/** The last 10 events, oldest first; repeated ones with their count. */
function eventsTable(events: EventView[], now: number): string {
  if (!events.length) return '  <none>';
  return columns(
    ['TYPE', 'REASON', 'AGE', 'FROM', 'MESSAGE'],
    [...events]
      .sort((a, b) => String(a.time).localeCompare(String(b.time)))
      .slice(-10)
      .map((e) => [
        e.type,
        e.reason,
        `${age(e.time, now)}${e.count && e.count > 1 ? ` (x${e.count})` : ''}`,
        e.source ?? '-',
        e.message,
      ]),
    '  ',
  );
}
