/**
 * UKI prebuilds (issue 35): the unified kernel image of an HTTP-boot attempt is built when its
 * ServerBootConfiguration turns Ready, from the boot server's SBC informer, not on the firmware's
 * first request (1–4 s under load before its first byte; firmware HTTP clients time out). The
 * request then leases the same builder entry (uki.ts), already on disk or still building: it waits
 * for that build, never starts a second one.
 *
 * What is prebuilt ({@link prebuildAttempt}, pure): only an SBC that is `Ready`, says
 * `bootMethod: HTTPBoot`, is not a completed NetBootOnce configuration and whose current attempt's
 * file was not served yet; always for its current `spec.bootAttempt` (an event of an older attempt
 * than one already seen is ignored), for the canonical UUID of the Server it names (whose
 * `bootConfigurationRef` must name it back). A Server not cached yet, an image not resolved yet, or
 * a bound reached: nothing is built now, the next event of the SBC (or of its Server) tries again,
 * else the request builds it as before.
 *
 * Bounds (security review N7; the builder's own stay: `maxBuilds` objcopy runs at once, `maxQueued`
 * waiting, `maxEntries` files and `maxBytes` bytes, UkiBusy beyond):
 * - at most `concurrency` prebuilds at once (default 1, so a build slot stays for requests) and
 *   `maxPending` waiting (default 256; beyond, that SBC is built on request);
 * - a prebuilt UKI is held (leased: not evicted) until its first GET was served, its attempt
 *   changes, its SBC stops qualifying or is deleted, or `maxAgeMs` (default 600 000 ms) passed; then
 *   it is an ordinary cache entry (LRU), and on an attempt change or deletion it is discarded at once
 *   (its command line carries a token that is no longer served);
 * - at most `maxHeld` held UKIs (default 64) of at most `maxHeldBytes` (default 2 GiB, half the
 *   builder's default `maxBytes`, so builds on request keep room); beyond, no prebuild;
 * - a prebuild the builder refuses as busy is tried again after 1, 2 and 4 s, then left to the request.
 *
 * Replicas: each boot-server replica has its own informer and builder and prebuilds every
 * qualifying SBC itself (a replica started later prebuilds the Ready SBCs its first list shows,
 * those not served yet); a request to a replica that could not prebuild builds on request.
 * Metrics: `metal_uki_prebuilds_total{result}` (built, reused, bound, failed, dropped) and
 * `metal_uki_prebuilds_held`. Logs name the SBC's namespace/name and the Server's system UUID.
 * Throws nothing: failures are logged and counted.
 */
import { statSync } from 'node:fs';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import { canonicalSystemUUID } from '../api/system-uuid.js';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { BootSignal, countsForCurrentAttempt } from '../api/vocabulary.js';
import { provisioned } from '../bootsignals/boot-target.js';
import type { Informer } from '../runtime/informer.js';
import { type UkiBuilder, UkiBusy, type UkiInput, type UkiLease } from './uki.js';

export interface UkiPrebuildOptions {
  /** Prebuilds running at once (default 1). */
  concurrency?: number;
  /** Prebuilds waiting to run, at most (default 256). */
  maxPending?: number;
  /** Prebuilt UKIs held at once, at most (default 64). */
  maxHeld?: number;
  /** Bytes of held prebuilt UKIs, at most (default 2 GiB). */
  maxHeldBytes?: number;
  /** Milliseconds a prebuilt UKI is held when no GET fetches it (default 600 000). */
  maxAgeMs?: number;
}

/** What a prebuild reads and builds with. */
export interface UkiPrebuildSources {
  sbcs: Informer<ServerBootConfiguration>;
  servers: Informer<Server>;
  uki: UkiBuilder;
  /** The attempt's callback token of `sbc` (BootTargetResolver.targetFor). */
  token(sbc: ServerBootConfiguration, uuid: string, server: Server): string | undefined;
  /** The UKI input the route builds for this attempt (http-boot.ts `ukiInputFor`); may throw. */
  inputFor(sbc: ServerBootConfiguration, uuid: string, token: string): Promise<{ input: UkiInput }>;
  log: Logger;
  metrics?: Registry;
}

/** The attempt to prebuild for `sbc` (`uid/attempt`), or why not (pure; see the file comment). */
export function prebuildAttempt(sbc: ServerBootConfiguration): { attempt: string } | { skip: string } {
  if (sbc.metadata.deletionTimestamp) return { skip: 'deleting' };
  if (sbc.spec.bootMethod !== 'HTTPBoot') return { skip: 'not HTTP boot' };
  if (sbc.status?.state !== 'Ready') return { skip: `state ${sbc.status?.state ?? 'Pending'}` };
  if (provisioned(sbc)) return { skip: 'provisioned (NetBootOnce)' };
  return { attempt: `${sbc.metadata.uid}/${sbc.spec.bootAttempt ?? 1}` };
}

interface Held {
  /** `uid/attempt` this record is for. */
  attempt: string;
  state: 'pending' | 'building' | 'held' | 'released' | 'retry';
  input?: UkiInput;
  lease?: UkiLease;
  timer?: NodeJS.Timeout;
  tries: number;
}

const RETRY_MS = [1000, 2000, 4000];

interface PrebuildMetrics {
  results: Counter<'result'>;
  held: Gauge;
}
const metricsByRegistry = new WeakMap<Registry, PrebuildMetrics>();
function prebuildMetrics(r: Registry | undefined): PrebuildMetrics | undefined {
  if (!r) return undefined;
  let m = metricsByRegistry.get(r);
  if (!m) {
    m = {
      results: new Counter({
        name: 'metal_uki_prebuilds_total',
        help: 'UKI prebuilds by result: built, reused (already kept), bound (a bound refused it), failed, dropped.',
        labelNames: ['result'],
        registers: [r],
      }),
      held: new Gauge({
        name: 'metal_uki_prebuilds_held',
        help: 'Prebuilt UKIs held for their first GET.',
        registers: [r],
      }),
    };
    metricsByRegistry.set(r, m);
  }
  return m;
}

const keyOf = (sbc: ServerBootConfiguration) => `${sbc.metadata.namespace ?? ''}/${sbc.metadata.name ?? ''}`;
const attemptNumber = (a: string) => Number(a.slice(a.lastIndexOf('/') + 1));
const uidOf = (a: string) => a.slice(0, a.lastIndexOf('/'));

export class UkiPrebuilder {
  private readonly records = new Map<string, Held>();
  private readonly queue: string[] = [];
  private running = 0;
  private heldBytes = 0;
  private heldCount = 0;
  private closed = false;
  private readonly m: PrebuildMetrics | undefined;

  constructor(
    private readonly src: UkiPrebuildSources,
    private readonly opts: UkiPrebuildOptions = {},
  ) {
    this.m = prebuildMetrics(src.metrics);
  }

  /** Subscribes to the SBC informer and queues the SBCs it already holds (call once the URL is known). */
  start(): void {
    const onChange = (sbc: ServerBootConfiguration) => this.changed(sbc);
    this.src.sbcs.on('add', onChange);
    this.src.sbcs.on('update', onChange);
    this.src.sbcs.on('delete', (sbc) => this.drop(keyOf(sbc)));
    // A Server cached after its SBC turned Ready (two watches, no order between them) is the event then.
    const onServer = (srv: Server) => {
      const ref = srv.spec.bootConfigurationRef;
      const sbc = ref ? this.src.sbcs.get(ref.name, ref.namespace) : undefined;
      if (sbc && !this.records.has(keyOf(sbc))) this.changed(sbc);
    };
    this.src.servers.on('add', onServer);
    this.src.servers.on('update', onServer);
    for (const sbc of this.src.sbcs.list()) this.changed(sbc);
  }

  /** Lets go of every hold and stops prebuilding (the builder's close removes the files). */
  close(): void {
    this.closed = true;
    for (const key of [...this.records.keys()]) this.drop(key, false);
    this.queue.length = 0;
  }

  /** The route served a GET of `sbc`'s current attempt: the file is no longer held (LRU from now). */
  served(sbc: ServerBootConfiguration): void {
    const r = this.records.get(keyOf(sbc));
    const want = prebuildAttempt(sbc);
    if (r && 'attempt' in want && r.attempt === want.attempt) this.letGo(r);
  }

  /** The prebuild's state of `sbc`'s current record, and its file while held (tests, diagnostics). */
  stateOf(
    sbc: ServerBootConfiguration,
  ): { state: Held['state']; attempt: string; path?: string } | undefined {
    const r = this.records.get(keyOf(sbc));
    return r && { state: r.state, attempt: r.attempt, path: r.lease?.path };
  }

  private changed(sbc: ServerBootConfiguration): void {
    if (this.closed) return;
    const key = keyOf(sbc);
    const want = prebuildAttempt(sbc);
    const r = this.records.get(key);
    if (!('attempt' in want)) {
      if (r) this.drop(key);
      return;
    }
    if (r && uidOf(r.attempt) === uidOf(want.attempt)) {
      if (attemptNumber(want.attempt) < attemptNumber(r.attempt)) return; // an older attempt's event
      if (r.attempt === want.attempt && r.state !== 'retry') return; // done or under way
    }
    if (r) this.drop(key);
    if (countsForCurrentAttempt(sbc, BootSignal.HTTPBootFileFetched)) return; // served already
    if (this.queue.length >= (this.opts.maxPending ?? 256)) {
      this.count('bound');
      this.src.log.warn(
        { namespace: sbc.metadata.namespace, name: sbc.metadata.name },
        'UKI prebuild queue full: built on request',
      );
      return;
    }
    this.records.set(key, { attempt: want.attempt, state: 'pending', tries: r?.tries ?? 0 });
    this.queue.push(key);
    this.pump();
  }

  private pump(): void {
    while (!this.closed && this.running < (this.opts.concurrency ?? 1) && this.queue.length > 0) {
      const key = this.queue.shift()!;
      const r = this.records.get(key);
      if (r?.state !== 'pending') continue;
      this.running++;
      void this.run(key, r).finally(() => {
        this.running--;
        this.pump();
      });
    }
  }

  /** One prebuild: the SBC as cached now, its Server, the route's input, a lease on the builder's entry. */
  private async run(key: string, r: Held): Promise<void> {
    r.state = 'building';
    const [namespace, name] = [key.slice(0, key.indexOf('/')), key.slice(key.indexOf('/') + 1)];
    const sbc = this.src.sbcs.get(name, namespace);
    const want = sbc && prebuildAttempt(sbc);
    // Changed meanwhile (its event replaced this record already, or will find none and start anew).
    if (!sbc || !want || !('attempt' in want) || want.attempt !== r.attempt) return this.forget(key, r);
    const server = this.src.servers.get(sbc.spec.serverRef?.name ?? '');
    const ref = server?.spec.bootConfigurationRef;
    const uuid = canonicalSystemUUID(server?.spec.systemUUID);
    const log = this.src.log.child({ namespace, name, systemUUID: uuid, attempt: attemptNumber(r.attempt) });
    if (!server || !uuid || ref?.name !== name || (ref.namespace ?? namespace) !== namespace) {
      log.info(
        'UKI prebuild: Server not cached or not pointing at this boot configuration; built on request',
      );
      return this.forget(key, r);
    }
    try {
      const token = this.src.token(sbc, uuid, server);
      if (!token) return this.forget(key, r);
      const { input } = await this.src.inputFor(sbc, uuid, token);
      if (!this.current(key, r)) return;
      const reused = this.src.uki.state(input) === 'built';
      const need = statSync(input.kernel).size + statSync(input.initrd).size;
      if (
        this.heldCount >= (this.opts.maxHeld ?? 64) ||
        this.heldBytes + need > (this.opts.maxHeldBytes ?? 2 * 1024 ** 3)
      ) {
        this.count('bound');
        log.warn(
          { held: this.heldCount, heldBytes: this.heldBytes },
          'UKI prebuild bound reached: built on request',
        );
        return this.forget(key, r);
      }
      const lease = await this.src.uki.lease(input);
      if (!this.current(key, r)) {
        lease.release();
        this.src.uki.discard(input);
        return;
      }
      this.hold(r, input, lease);
      this.count(reused ? 'reused' : 'built');
      log.info({ bytes: lease.size }, 'UKI prebuilt');
    } catch (err) {
      this.failed(key, r, err, log);
    }
  }

  /** A busy builder is tried again (bounded: {@link RETRY_MS}); anything else waits for the SBC's next event. */
  private failed(key: string, r: Held, err: unknown, log: Logger): void {
    if (!this.current(key, r)) return;
    const delay = RETRY_MS[r.tries];
    if (err instanceof UkiBusy && delay !== undefined) {
      r.tries++;
      r.state = 'retry';
      r.timer = setTimeout(() => {
        if (this.records.get(key) !== r || this.closed) return;
        r.state = 'pending';
        this.queue.push(key);
        this.pump();
      }, delay);
      r.timer.unref();
      return;
    }
    this.count('failed');
    log.warn({ err: (err as Error).message }, 'UKI prebuild failed: built on request');
    r.state = 'retry'; // the SBC's next event tries again
    r.tries = RETRY_MS.length;
  }

  private hold(r: Held, input: UkiInput, lease: UkiLease): void {
    r.state = 'held';
    r.input = input;
    r.lease = lease;
    this.heldCount++;
    this.heldBytes += lease.size;
    this.m?.held.set(this.heldCount);
    r.timer = setTimeout(() => this.letGo(r), this.opts.maxAgeMs ?? 600_000);
    r.timer.unref();
  }

  /** Ends the hold of `r` (its file stays an ordinary cache entry). */
  private letGo(r: Held): void {
    if (r.timer) clearTimeout(r.timer);
    r.timer = undefined;
    if (r.lease) {
      this.heldCount--;
      this.heldBytes -= r.lease.size;
      this.m?.held.set(this.heldCount);
      r.lease.release();
      r.lease = undefined;
    }
    if (r.state === 'held') r.state = 'released';
  }

  /** Forgets `key`'s record: its hold ends and, unless `discard` is false, its file is removed. */
  private drop(key: string, discard = true): void {
    const r = this.records.get(key);
    if (!r) return;
    this.records.delete(key);
    this.letGo(r);
    if (discard && r.input) {
      this.src.uki.discard(r.input);
      this.count('dropped');
    }
  }

  private forget(key: string, r: Held): void {
    if (this.records.get(key) === r) this.records.delete(key);
  }

  private current(key: string, r: Held): boolean {
    return !this.closed && this.records.get(key) === r;
  }

  private count(result: string): void {
    this.m?.results.inc({ result });
  }
}
