/**
 * The project's callback merged into served Ignition (config spec v3.x): a systemd unit and an env
 * file that post `/bootstate` with the attempt token once the OS is up. Pure functions; validation
 * of the result is `served-ignition.ts`'s job.
 */

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

/** True when `cfg` looks like an Ignition v3 object (the validator decides the rest). */
export function isIgnitionV3(cfg: unknown): cfg is IgnitionConfig {
  const version = (cfg as IgnitionConfig | null)?.ignition?.version;
  return (
    typeof cfg === 'object' &&
    cfg !== null &&
    !Array.isArray(cfg) &&
    typeof version === 'string' &&
    version.startsWith('3.')
  );
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
