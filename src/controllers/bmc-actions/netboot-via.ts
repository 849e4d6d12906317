/**
 * How a boot attempt reaches the host: the BMC boot override (and, for virtual media, the image to
 * insert) of an SBC's `spec.bootMethod`, shared by the claim, discovery and cleanup boots, and the boot
 * method of the boots the manager makes on its own (discovery, cleanup).
 *
 * Contract: {@link netbootVia} reads the attempt's token (for `VirtualMedia` only) and nothing else;
 * {@link managerBootMethod} is pure; {@link ejectAfterVirtualMedia} posts at most one EjectMedia and
 * never throws.
 */

import type pino from 'pino';
import { type BootMethod, httpBootFileUrl, virtualMediaIsoUrl } from '../../api/v1alpha1/boot-method.js';
import type { Server } from '../../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../api/v1alpha1/serverbootconfiguration.js';
import { virtualMediaCapability } from '../../bootauth/vmedia-capability.js';
import type { BootConfigurations } from '../common/boot-configuration.js';
import type { ControllerConfig } from '../common/config.js';
import { BmcAccessError, classifyBmcFailure } from './bmc-connections.js';
import type { NetbootVia, PowerActions } from './power.js';

/**
 * The boot method of discovery and cleanup boots: `--discovery-boot-method` when given, else
 * `VirtualMedia` when claims default to it (`--default-boot-method VirtualMedia`: a fleet that boots
 * tenants by virtual media usually has no DHCP on its provisioning network, where a PXE discovery
 * could never start), else `PXE` (as upstream discovers). Pure.
 */
export function managerBootMethod(
  cfg: Pick<ControllerConfig, 'defaultBootMethod' | 'discoveryBootMethod'>,
): BootMethod {
  if (cfg.discoveryBootMethod) return cfg.discoveryBootMethod;
  return cfg.defaultBootMethod === 'VirtualMedia' ? 'VirtualMedia' : 'PXE';
}

/**
 * The BMC override of a network boot of `sbc`: `Pxe`; for `HTTPBoot` `UefiHttp` with `Boot.HttpBootUri`
 * at the attempt's boot file on the boot server; for `VirtualMedia` `Cd` with the attempt's ISO at its
 * capability URL (keyed by the attempt's token: bootauth/vmedia-capability.ts).
 * @throws BmcAccessError `CallbackTokenPending` for an SBC without `metadata.uid` (not from the API
 *   server; its token cannot be derived, nothing is sent).
 */
export async function netbootVia(
  server: Server,
  sbc: ServerBootConfiguration | undefined,
  cfg: Pick<ControllerConfig, 'bootServerUrl'>,
  bootConfigs: Pick<BootConfigurations, 'attemptToken'>,
): Promise<NetbootVia> {
  const attempt = sbc?.spec.bootAttempt ?? 1;
  if (sbc?.spec.bootMethod === 'VirtualMedia') {
    const token = bootConfigs.attemptToken(sbc);
    if (!token)
      throw new BmcAccessError(
        'CallbackTokenPending',
        `the token of attempt ${attempt} cannot be derived yet`,
      );
    const cap = virtualMediaCapability(token, server.spec.systemUUID, attempt);
    return {
      target: 'Cd',
      image: virtualMediaIsoUrl(cfg.bootServerUrl, server.spec.systemUUID, attempt, cap),
    };
  }
  if (sbc?.spec.bootMethod !== 'HTTPBoot') return { target: 'Pxe' };
  return {
    target: 'UefiHttp',
    httpBootUri: httpBootFileUrl(cfg.bootServerUrl, server.spec.systemUUID, attempt),
  };
}

/**
 * {@link netbootVia} for an engine power step: the path, or its failure classified like a BMC
 * call's (`{ ok: false, failure }`, the shape the step's `boot` returns), so the engine backs off
 * and retries it instead of the reconcile throwing. Shared by discovery, cleanup and claims.
 */
export async function netbootViaOrFailure(
  server: Server,
  sbc: ServerBootConfiguration | undefined,
  cfg: Pick<ControllerConfig, 'bootServerUrl'>,
  bootConfigs: Pick<BootConfigurations, 'attemptToken'>,
): Promise<{ ok: true; via: NetbootVia } | { ok: false; failure: ReturnType<typeof classifyBmcFailure> }> {
  try {
    return { ok: true, via: await netbootVia(server, sbc, cfg, bootConfigs) };
  } catch (err) {
    return { ok: false, failure: classifyBmcFailure(err) };
  }
}

/**
 * Ejects the virtual CD after a `VirtualMedia` discovery or cleanup series ended (completed or
 * exhausted): the ISO's token is spent, and the next boot from disk must not find the probe or the
 * cleanup image in the drive. Nothing for other boot methods. Best effort: a failed eject is logged
 * by `PowerActions.ejectMedia` and left (the next virtual media boot ejects before it inserts).
 */
export async function ejectAfterVirtualMedia(
  power: Pick<PowerActions, 'ejectMedia'>,
  server: Server,
  sbc: ServerBootConfiguration | undefined,
  log: pino.Logger,
  flow: 'discovery' | 'cleanup',
): Promise<void> {
  if (sbc?.spec.bootMethod !== 'VirtualMedia') return;
  const res = await power.ejectMedia(server);
  if (res.ok && res.ejected)
    log.info({ attempt: sbc.spec.bootAttempt ?? 1, flow }, `virtual media ejected after ${flow}`);
}
