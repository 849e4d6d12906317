/**
 * What the boot server serves as `/ignition/{uuid}` and what the ServerBootConfiguration controller
 * checks before a power-on, computed the same way:
 *
 *   Secret data → stored config (key `ignition`; key `format`: absent or `ignition` = Ignition v3
 *   JSON, `fcos` or `butane` = Butane YAML, translated with the official translator once per Secret
 *   resourceVersion) → the project's `/bootstate` hook merged in (optional) → validated with the
 *   official validator (verdicts cached by content; the hook's per-attempt values sit percent-encoded
 *   in a data URL and cannot change validity, so one verdict covers every attempt) → JSON text.
 *
 * Failures are `IgnitionError`s whose `reason` goes onto the SBC (`IgnitionMissing`, `InvalidButane`,
 * `InvalidIgnition`, `IgnitionToolsUnavailable`) and whose message carries the translator's or the
 * validator's report. Butane warnings do not fail (upstream semantics); they are returned.
 */
import { createHash } from 'node:crypto';
import { BootConfigurationReason } from '../api/vocabulary.js';
import {
  type BootstateHook,
  DEFAULT_IGNITION_VERSION,
  type IgnitionConfig,
  isIgnitionV3,
  withBootstateHook,
} from './bootstate-hook.js';
import {
  formatReport,
  type IgnitionReportEntry,
  type IgnitionTools,
  IgnitionToolsUnavailable,
  type ToolResult,
} from './ignition-tools.js';
import { ValidatedSecrets } from './validated-secrets.js';

/** Reasons of ignition failures, as written to the SBC's Ready condition (src/api/vocabulary.ts). */
export const IgnitionReason = {
  IgnitionMissing: BootConfigurationReason.IgnitionMissing,
  InvalidButane: BootConfigurationReason.InvalidButane,
  InvalidIgnition: BootConfigurationReason.InvalidIgnition,
  IgnitionToolsUnavailable: BootConfigurationReason.IgnitionToolsUnavailable,
} as const;
export type IgnitionReason = (typeof IgnitionReason)[keyof typeof IgnitionReason];

export class IgnitionError extends Error {
  constructor(
    readonly reason: IgnitionReason,
    message: string,
    /** The translator's or validator's report, when there is one. */
    readonly report: IgnitionReportEntry[] = [],
  ) {
    super(message);
  }
  /** True when retrying later can help (the tool is missing or timed out), not the config. */
  get retryable(): boolean {
    return this.reason === IgnitionReason.IgnitionToolsUnavailable;
  }
}

export interface StoredIgnition {
  config: IgnitionConfig;
  /** `ignition` or `fcos`/`butane`. */
  format: string;
  /** Translation warnings (Butane only). */
  warnings: IgnitionReportEntry[];
}

/** Hook values the validity verdict is computed with (see `render`). */
const STANDIN_HOOK: BootstateHook = {
  registryUrl: 'http://registry.invalid:10000',
  uuid: '00000000-0000-0000-0000-000000000000',
  token: 'x'.repeat(43),
  attempt: 1,
};

/** Most entries kept per cache (translations by Secret resourceVersion, verdicts by content hash). */
const CACHE_ENTRIES = 1000;

function remember<K, V>(m: Map<K, V>, k: K, v: V): V {
  if (m.size >= CACHE_ENTRIES) m.delete(m.keys().next().value as K);
  m.set(k, v);
  return v;
}

export class IgnitionRenderer {
  /**
   * Secrets the ServerBootConfiguration controller validated, for the boot server of the same
   * process (both hold this renderer): see validated-secrets.ts.
   */
  readonly validated = new ValidatedSecrets();
  private readonly translations = new Map<string, Promise<StoredIgnition>>();
  private readonly verdicts = new Map<string, Promise<ToolResult>>();

  constructor(private readonly tools: IgnitionTools) {}

  /**
   * The stored config of a Secret's `data` (base64 values as in the API). `cacheKey` identifies
   * the Secret version (`ns/name@resourceVersion`). `data` undefined = no Secret referenced: an
   * empty config. Throws `IgnitionError`.
   */
  stored(
    data: Record<string, string> | undefined,
    cacheKey: string,
    secretName = '',
  ): Promise<StoredIgnition> {
    if (!data)
      return Promise.resolve({
        config: { ignition: { version: DEFAULT_IGNITION_VERSION } },
        format: 'none',
        warnings: [],
      });
    if (!data.ignition) {
      return Promise.reject(
        new IgnitionError(
          IgnitionReason.IgnitionMissing,
          `ignition Secret ${secretName} has no key ignition`,
        ),
      );
    }
    const text = Buffer.from(data.ignition, 'base64').toString('utf8');
    const format = data.format ? Buffer.from(data.format, 'base64').toString('utf8').trim() : 'ignition';
    if (format === 'fcos' || format === 'butane') {
      const key = `${cacheKey}#${createHash('sha256').update(text).digest('hex')}`;
      const hit = this.translations.get(key);
      if (hit) return hit;
      const p = this.translate(text, format, secretName);
      // A missing tool is not the config's fault: do not remember it.
      p.catch(() => this.translations.get(key) === p && this.translations.delete(key));
      return remember(this.translations, key, p);
    }
    return this.parseStored(text, secretName);
  }

  /**
   * The JSON text to serve: `stored` with `hook` merged in (when given), validated. Throws
   * `IgnitionError` `InvalidIgnition` with the validator's report.
   */
  async render(stored: StoredIgnition, hook: BootstateHook | undefined): Promise<string> {
    const body = JSON.stringify(hook ? withBootstateHook(stored.config, hook) : stored.config);
    // The hook's values (registry URL, UUID, token, attempt) only appear percent-encoded inside a
    // data URL, so validity does not depend on them: the verdict of the config with stand-in values
    // is the verdict of every served one, and a token per attempt costs no validator run.
    const canonical = hook ? JSON.stringify(withBootstateHook(stored.config, STANDIN_HOOK)) : body;
    const v = await this.validate(canonical);
    if (!v.ok) {
      throw new IgnitionError(
        IgnitionReason.InvalidIgnition,
        `ignition is not valid${hook ? ' with the boot callback merged in' : ''}: ${formatReport(v.report) || v.error}`,
        v.report,
      );
    }
    return body;
  }

  private async translate(text: string, format: string, secretName: string): Promise<StoredIgnition> {
    const res = await this.tool(() => this.tools.translate(text));
    if (!res.ok || !isIgnitionV3(res.config)) {
      throw new IgnitionError(
        IgnitionReason.InvalidButane,
        `ignition Secret ${secretName} (format ${format}): the Butane translator rejected it: ${formatReport(res.report) || res.error}`,
        res.report,
      );
    }
    return { config: res.config, format, warnings: res.report.filter((e) => e.kind !== 'error') };
  }

  private async parseStored(text: string, secretName: string): Promise<StoredIgnition> {
    const v = await this.validate(text);
    if (!v.ok) {
      throw new IgnitionError(
        IgnitionReason.InvalidIgnition,
        `ignition Secret ${secretName}: ${formatReport(v.report) || v.error}`,
        v.report,
      );
    }
    const config: unknown = JSON.parse(text);
    if (!isIgnitionV3(config)) {
      throw new IgnitionError(
        IgnitionReason.InvalidIgnition,
        `ignition Secret ${secretName}: not an Ignition v3 config (ignition.version 3.x)`,
      );
    }
    return { config, format: 'ignition', warnings: [] };
  }

  private validate(text: string): Promise<ToolResult> {
    const key = createHash('sha256').update(text).digest('hex');
    const hit = this.verdicts.get(key);
    if (hit) return hit;
    const p = this.tool(() => this.tools.validate(text));
    p.catch(() => this.verdicts.get(key) === p && this.verdicts.delete(key));
    return remember(this.verdicts, key, p);
  }

  private async tool(run: () => Promise<ToolResult>): Promise<ToolResult> {
    try {
      return await run();
    } catch (err) {
      if (err instanceof IgnitionToolsUnavailable) {
        throw new IgnitionError(
          IgnitionReason.IgnitionToolsUnavailable,
          `${err.message} (build it with hack/build-ignition-tools.sh)`,
        );
      }
      throw err;
    }
  }
}
