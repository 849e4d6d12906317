/**
 * Ignition served by the boot server (Ignition config spec v3.x, JSON).
 *
 * The SBC's ignition Secret holds key `ignition` (the config) and optionally `format`: `ignition`
 * (or absent) for Ignition v3 JSON, served as stored; `fcos` for Butane YAML (upstream's Secrets),
 * converted by the official `butane` tool when it is on PATH. Unless disabled, a small systemd unit
 * and an env file are merged in that post `/bootstate` with the attempt token once the OS is up.
 */
import { execFile } from 'node:child_process';
import { HttpError } from '../bootsignals/http-error.js';

export interface BootstateHook {
  registryUrl: string;
  uuid: string;
  token: string;
  attempt: number;
}

/** Ignition spec version used when a config has to be made from nothing. */
export const DEFAULT_IGNITION_VERSION = '3.4.0';

/** An Ignition v3 config object (the keys the hook touches are typed; others pass through). */
export type IgnitionConfig = {
  ignition?: { version?: string };
  systemd?: { units?: Record<string, unknown>[] };
  storage?: { files?: Record<string, unknown>[] };
  [k: string]: unknown;
};

/**
 * Parses Ignition v3 JSON; throws `HttpError` 409 `InvalidIgnition` when the stored config is not
 * an Ignition v3 object (the host cannot use it, and retrying will not help).
 */
export function parseIgnition(text: string): IgnitionConfig {
  let cfg: unknown;
  try {
    cfg = JSON.parse(text);
  } catch {
    throw new HttpError(409, 'InvalidIgnition', 'stored ignition is not JSON');
  }
  const version = (cfg as IgnitionConfig | null)?.ignition?.version;
  if (
    typeof cfg !== 'object' ||
    cfg === null ||
    Array.isArray(cfg) ||
    typeof version !== 'string' ||
    !version.startsWith('3.')
  ) {
    throw new HttpError(
      409,
      'InvalidIgnition',
      'stored ignition is not an Ignition v3 config (ignition.version 3.x)',
    );
  }
  return cfg as IgnitionConfig;
}

/** Returns a copy of `cfg` with the `/bootstate` unit and its env file added. */
export function withBootstateHook(cfg: IgnitionConfig, hook: BootstateHook): IgnitionConfig {
  const env = [
    `METAL_REGISTRY=${hook.registryUrl}`,
    `METAL_UUID=${hook.uuid}`,
    `METAL_TOKEN=${hook.token}`,
    `METAL_ATTEMPT=${hook.attempt}`,
    '',
  ].join('\n');
  const unit = [
    '[Unit]',
    'Description=Report the boot to metal-operator',
    'Wants=network-online.target',
    'After=network-online.target',
    '[Service]',
    'Type=oneshot',
    'EnvironmentFile=/etc/metal/bootstate.env',
    'ExecStart=/bin/sh -c \'curl -fsS --retry 60 --retry-all-errors --retry-delay 2 -H "Authorization: Bearer $METAL_TOKEN" -H "Content-Type: application/json" -d "{\\"systemUUID\\":\\"$METAL_UUID\\",\\"booted\\":true}" "$METAL_REGISTRY/bootstate"\'',
    '[Install]',
    'WantedBy=multi-user.target',
    '',
  ].join('\n');
  const out = structuredClone(cfg);
  out.storage ??= {};
  out.storage.files = [
    ...(out.storage.files ?? []),
    {
      path: '/etc/metal/bootstate.env',
      mode: 0o600,
      overwrite: true,
      contents: { source: `data:,${encodeURIComponent(env)}` },
    },
  ];
  out.systemd ??= {};
  out.systemd.units = [
    ...(out.systemd.units ?? []),
    { name: 'metal-bootstate.service', enabled: true, contents: unit },
  ];
  return out;
}

/**
 * Converts Butane YAML to Ignition JSON with the `butane` binary (`butane --strict`). Throws
 * `HttpError` 503 `ButaneUnavailable` when the tool is not installed and 409 `InvalidButane` when it
 * rejects the input. Time limit 10 s.
 */
export function butaneToIgnition(yaml: string, binary = 'butane'): Promise<string> {
  return new Promise((ok, fail) => {
    const child = execFile(
      binary,
      ['--strict'],
      { timeout: 10_000, maxBuffer: 4 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (!err) return ok(stdout);
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
          return fail(
            new HttpError(
              503,
              'ButaneUnavailable',
              'butane is not installed; cannot convert format fcos',
              60,
            ),
          );
        }
        fail(
          new HttpError(409, 'InvalidButane', `butane rejected the config: ${String(stderr).slice(0, 500)}`),
        );
      },
    );
    child.stdin?.end(yaml);
  });
}
