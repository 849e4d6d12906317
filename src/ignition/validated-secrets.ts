/**
 * Hand-over of ignition Secrets between the ServerBootConfiguration controller and the boot server
 * of one process (issue 17: one Secret GET per attempt instead of two). The controller reads the
 * SBC's ignition Secret to validate it before the SBC may be Ready; it hands the Secret it validated
 * over here, keyed by the SBC's uid and generation (one attempt); the boot server's first
 * `/ignition` of that attempt takes it instead of reading the Secret again, and so serves exactly
 * the version that was validated.
 *
 * Safety: an entry is taken once (every later fetch reads the Secret fresh, so an edit is served
 * from the next fetch on), only for the same SBC generation and Secret name, and only while it is
 * younger than `maxAgeMs` (default 60 s: an edit made after the validation is served at the latest
 * that long after it). Memory is bounded by `maxEntries` and `maxBytes` (of Secret data, base64
 * as stored; oldest out). Where the boot server runs in its own process, nothing is handed over and
 * it reads the Secret as before. Pure bookkeeping, no I/O; `now` in ms since the epoch.
 */
import type { KObject } from '../runtime/resource.js';

/** A Secret as the API returns it (only what the hand-over reads). */
export interface HandedSecret extends KObject {
  data?: Record<string, string>;
}

/** The SBC an entry belongs to: uid, generation (its attempt) and the Secret it references. */
export interface SecretUse {
  uid: string;
  generation: number;
  namespace: string;
  name: string;
}

/** The hand-over key of the ignition Secret `name` referenced by the SBC `sbc`. */
export function secretUse(sbc: KObject, name: string): SecretUse {
  return {
    uid: sbc.metadata.uid ?? '',
    generation: sbc.metadata.generation ?? 0,
    namespace: sbc.metadata.namespace ?? '',
    name,
  };
}

interface Entry {
  use: SecretUse;
  secret: HandedSecret;
  at: number;
  bytes: number;
}

export interface ValidatedSecretsOptions {
  /** How long an entry may be taken after it was handed over, ms (default 60,000). */
  maxAgeMs?: number;
  /** Most entries kept (default 10,000). */
  maxEntries?: number;
  /** Most Secret data kept, bytes of base64 (default 32 MiB). */
  maxBytes?: number;
}

export class ValidatedSecrets {
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;
  private readonly maxAgeMs: number;
  private readonly maxEntries: number;
  private readonly maxBytes: number;

  constructor(o: ValidatedSecretsOptions = {}) {
    this.maxAgeMs = o.maxAgeMs ?? 60_000;
    this.maxEntries = o.maxEntries ?? 10_000;
    this.maxBytes = o.maxBytes ?? 32 * 1024 * 1024;
  }

  /** Hands over `secret`, as read and validated for `use` at `now`. A Secret over `maxBytes` is not kept. */
  handOver(use: SecretUse, secret: HandedSecret, now = Date.now()): void {
    this.drop(use.uid);
    for (const [uid, e] of this.entries) {
      if (now - e.at <= this.maxAgeMs) break; // oldest first: the rest are younger
      this.drop(uid);
    }
    const bytes = Object.values(secret.data ?? {}).reduce((n, v) => n + v.length, 0);
    if (bytes > this.maxBytes) return;
    while (this.entries.size >= this.maxEntries || this.bytes + bytes > this.maxBytes) {
      const oldest = this.entries.keys().next().value;
      if (oldest === undefined) break;
      this.drop(oldest);
    }
    this.entries.set(use.uid, { use, secret, at: now, bytes });
    this.bytes += bytes;
  }

  /**
   * The Secret handed over for exactly `use` (same uid, generation, namespace and name) and younger
   * than `maxAgeMs`, removed so it is served once; otherwise `undefined` (the caller reads it).
   */
  take(use: SecretUse, now = Date.now()): HandedSecret | undefined {
    const e = this.entries.get(use.uid);
    if (!e) return undefined;
    this.drop(use.uid);
    const same =
      e.use.generation === use.generation && e.use.namespace === use.namespace && e.use.name === use.name;
    return same && now - e.at <= this.maxAgeMs ? e.secret : undefined;
  }

  /** Entries and bytes held (for tests and metrics). */
  get size(): { entries: number; bytes: number } {
    return { entries: this.entries.size, bytes: this.bytes };
  }

  private drop(uid: string): void {
    const e = this.entries.get(uid);
    if (!e) return;
    this.entries.delete(uid);
    this.bytes -= e.bytes;
  }
}
