/**
 * Refused boot-file fetches made visible (issue 28 item 4): a fetch of the current attempt's iPXE
 * script or HTTP-boot file refused 403 (`UnknownClient`, `ScriptPinned`, `MACMismatch`) sets the
 * SBC's `FetchRefused` condition — who (client address), why (the reason and the refusal's message,
 * which never holds a token), when — and records one Warning Event `FetchRefused` on the claim that
 * owns the SBC (else its Server), whose message is the same for every refusal of one attempt and
 * reason, so repeats aggregate into one Event's series count (runtime/events.ts).
 *
 * Bounded: at most one condition write per SBC every {@link REFUSAL_WRITE_INTERVAL_MS} (an
 * attacker's request loop costs the API server nothing more), at most {@link MAX_TRACKED} SBCs
 * remembered, the message cut at {@link MAX_MESSAGE}. Fire and forget: a failed write is logged at
 * debug, the 403 stands.
 */
import type { Logger } from 'pino';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { ConditionType, EventReason, FetchRefusedReason } from '../api/vocabulary.js';
import { BootTargetResolver } from '../bootsignals/boot-target.js';
import { clientAddress } from '../bootsignals/client-address.js';
import type { HttpApp } from '../bootsignals/http-app.js';
import type { HttpError } from '../bootsignals/http-error.js';
import { recordSignal } from '../bootsignals/signal-condition.js';
import type { KubeClient } from '../runtime/client.js';
import type { EventRecorder } from '../runtime/events.js';
import { type KObject, Resources, type ResourceType } from '../runtime/resource.js';

/** Least time between two `FetchRefused` writes on one SBC, in ms. */
export const REFUSAL_WRITE_INTERVAL_MS = 10_000;
const MAX_TRACKED = 4096;
const MAX_MESSAGE = 512;
const REASONS: ReadonlySet<string> = new Set(Object.values(FetchRefusedReason));

/** True for the 403 reasons that {@link FetchRefusals} records. */
export function isFetchRefusal(err: unknown): err is HttpError {
  const e = err as { status?: unknown; reason?: unknown };
  return e?.status === 403 && typeof e.reason === 'string' && REASONS.has(e.reason);
}

/** The `FetchRefused` condition message (pure; `at` RFC 3339). */
export function refusalMessage(
  attempt: number,
  what: string,
  client: string,
  err: HttpError,
  at: string,
): string {
  const m = `attempt ${attempt}: ${what} requested from ${client} at ${at} refused (${err.reason}): ${err.message}`;
  return m.length > MAX_MESSAGE ? `${m.slice(0, MAX_MESSAGE - 3)}...` : m;
}

export class FetchRefusals {
  /** SBC uid → when its condition was last written (ms). */
  private readonly written = new Map<string, number>();

  constructor(
    private readonly client: KubeClient,
    private readonly events: EventRecorder,
    private readonly component: string,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  /** Records a refusal of `sbc`'s current attempt (see the file comment); never throws. */
  record(server: Server, sbc: ServerBootConfiguration, what: string, client: string, err: HttpError): void {
    const attempt = sbc.spec.bootAttempt ?? 1;
    const owner = sbc.metadata.ownerReferences?.find((r) => r.kind === 'ServerClaim');
    const [rt, subject]: [ResourceType, KObject] = owner
      ? [
          Resources.ServerClaim,
          { metadata: { name: owner.name, namespace: sbc.metadata.namespace, uid: owner.uid } },
        ]
      : [Resources.Server, server];
    this.events.record(
      rt,
      subject,
      'Warning',
      EventReason.FetchRefused,
      `attempt ${attempt}: ${what} fetches refused (${err.reason}); the ServerBootConfiguration ${sbc.metadata.namespace}/${sbc.metadata.name} condition FetchRefused names the latest client`,
    );
    const uid = sbc.metadata.uid ?? `${sbc.metadata.namespace}/${sbc.metadata.name}`;
    const last = this.written.get(uid);
    const t = this.now();
    if (last !== undefined && t - last < REFUSAL_WRITE_INTERVAL_MS) return;
    this.written.delete(uid);
    this.written.set(uid, t);
    if (this.written.size > MAX_TRACKED) this.written.delete(this.written.keys().next().value as string);
    const at = new Date(t).toISOString().replace(/\.\d+Z$/, 'Z');
    recordSignal(this.client, this.component, sbc, {
      type: ConditionType.FetchRefused,
      status: 'True',
      reason: err.reason,
      message: refusalMessage(attempt, what, client, err, at),
    }).catch((e: unknown) => {
      this.log.debug({ error: String(e), sbc: sbc.metadata.name }, 'cannot record the refused fetch');
    });
  }
}

/**
 * Makes a refused fetch of an attempt's boot file visible on its SBC and claim: an `onError` hook
 * on `app` that hands a {@link isFetchRefusal} error of the script route (`/ipxe/:uuid`) or an
 * HTTP-boot route (`/httpboot/…`) to `refusals`. A UUID without a single Server is not recorded.
 */
export function recordFetchRefusals(
  app: HttpApp,
  resolver: BootTargetResolver,
  refusals: FetchRefusals,
): void {
  app.addHook('onError', async (req, _reply, err) => {
    if (!isFetchRefusal(err)) return;
    const route = req.routeOptions.url;
    const what =
      route === '/ipxe/:uuid' ? 'script' : route?.startsWith('/httpboot/') ? 'HTTP boot file' : undefined;
    if (!what) return;
    try {
      const target = resolver.resolve(BootTargetResolver.parseUUID((req.params as { uuid: string }).uuid));
      if (target.sbc)
        refusals.record(target.server, target.sbc, what, clientAddress(req.socket.remoteAddress), err);
    } catch {
      // No single Server for the UUID: nothing to attach the refusal to.
    }
  });
}
