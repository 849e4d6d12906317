/**
 * UEFI HTTP boot: `GET|HEAD /httpboot/{uuid}/{attempt}/uki.efi` serves the attempt's unified
 * kernel image (src/bootserver/uki.ts) to firmware told that URI by its BMC (`Boot.HttpBootUri`,
 * set by the claim controller for `bootMethod: HTTPBoot`; URL shape: `httpBootFileUrl`).
 *
 * Firmware cannot authenticate, so the client is identified by address, like ironcore's
 * boot-operator does for its HTTP boot route: the request must come from an address the Server is
 * known to have (`status.networkInterfaces[].ips`, from its registration). Answers:
 * - 200 `application/efi` with the UKI (command line with the attempt token); a GET sets
 *   `HTTPBootFileFetched` before the body is sent (OVMF sends HEAD first, which sets nothing);
 * - 400 malformed UUID or attempt; 404 unknown server, no boot configuration, or NetBootOnce after
 *   completion (`Provisioned`: the firmware then boots the next entry, the disk);
 * - 409 `NotHTTPBoot` (the configuration boots over PXE) or `StaleAttempt` (another attempt's URL);
 * - 403 `UnknownClient` when the address is not one of the Server's (checked first; logged with the address);
 * - 503 + `Retry-After` while the configuration is not Ready or is being rotated.
 */
import { createReadStream, statSync } from 'node:fs';
import type { Server } from '../api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { BootSignal, ConditionType, countsForCurrentAttempt, SignalReason } from '../api/vocabulary.js';
import type { BootTargetResolver } from '../bootsignals/boot-target.js';
import type { HttpApp, SignalServerOptions } from '../bootsignals/http-app.js';
import { HttpError, unavailable } from '../bootsignals/http-error.js';
import { recordSignal } from '../bootsignals/signal-condition.js';
import type { BlobCache } from '../oci/blob-cache.js';
import type { BootImages } from '../oci/boot-images.js';
import { parseReference } from '../oci/reference.js';
import { RegistryError } from '../oci/registry-client.js';
import { bootImageFor } from './boot-image.js';
import type { ImageCatalog } from './image-catalog.js';
import { attemptKernelArgs } from './ipxe-script.js';
import type { UkiBuilder } from './uki.js';

export interface HttpBootRouteOptions {
  client: SignalServerOptions['client'];
  resolver: BootTargetResolver;
  catalog: () => ImageCatalog;
  uki: UkiBuilder;
  /** Field manager of the condition write. */
  component: string;
  registryUrl: string;
  /** The boot server's external base URL (rendered into the command line). */
  baseUrl: () => string;
  /** BootTargetResolver.parseUUID. */
  parseUUID: (raw: unknown) => string;
  /** OCI images: kernel and initrd layers of the attempt's resolved image come through the blob cache. */
  oci?: { images: BootImages; cache: BlobCache } | undefined;
}

const REGISTRY_RETRY_AFTER_S = 5;

/**
 * Local files of the attempt's kernel and initrd: catalog paths as they are, OCI layers (`status.image`)
 * as verified blob-cache files. 409 `NoLocalFiles` for a catalog image served from URLs or OCI without
 * a blob cache; 403 `RegistryNotAllowed`; 503 + `Retry-After` when the registry cannot be reached.
 */
async function localBootFiles(
  o: HttpBootRouteOptions,
  sbc: ServerBootConfiguration,
  kernel: string,
  initrd: string,
): Promise<{ kernel: string; initrd: string }> {
  if (kernel.startsWith('/') && initrd.startsWith('/')) return { kernel, initrd };
  const img = sbc.status?.image;
  if (!o.oci || !img?.kernel || !img.initrd) {
    throw new HttpError(409, 'NoLocalFiles', 'HTTP boot needs local kernel and initrd files or an OCI image');
  }
  const ref = parseReference(img.reference);
  try {
    const credentials = await o.oci.images.credentials(img.pullSecret, ref);
    return {
      kernel: await o.oci.cache.file(ref, img.kernel, credentials),
      initrd: await o.oci.cache.file(ref, img.initrd, credentials),
    };
  } catch (err) {
    if (!(err instanceof RegistryError)) throw err;
    if (err.reason === 'RegistryNotAllowed') throw new HttpError(403, err.reason, err.message);
    throw new HttpError(503, err.reason, err.message, REGISTRY_RETRY_AFTER_S);
  }
}

/** The addresses a Server is known to have: every `ips` entry (and legacy `ip`) of its NICs. */
export function knownAddresses(server: Server): string[] {
  const out = new Set<string>();
  for (const nic of server.status?.networkInterfaces ?? []) {
    for (const ip of nic.ips ?? []) out.add(ip);
    if (nic.ip) out.add(nic.ip);
  }
  return [...out];
}

/** An IPv4-mapped IPv6 socket address (`::ffff:10.0.0.5`) as the IPv4 address it is. */
export function clientAddress(raw: string | undefined): string {
  if (!raw) return 'unknown';
  return raw.startsWith('::ffff:') && raw.includes('.') ? raw.slice(7) : raw;
}

export function registerHttpBootRoute(app: HttpApp, o: HttpBootRouteOptions): void {
  const params = {
    type: 'object',
    properties: {
      uuid: { type: 'string', maxLength: 16384 },
      attempt: { type: 'string', pattern: '^[1-9][0-9]{0,8}$' },
    },
    required: ['uuid', 'attempt'],
  };
  app.get('/httpboot/:uuid/:attempt/uki.efi', { schema: { params } }, async (req, reply) => {
    const p = req.params as { uuid: string; attempt: string };
    const uuid = o.parseUUID(p.uuid);
    const wanted = Number(p.attempt);
    const client = clientAddress(req.socket.remoteAddress);
    let target = o.resolver.resolve(uuid);
    const log = req.log.child({ server: target.server.metadata.name, systemUUID: uuid, client });
    if (!target.sbc) {
      log.info('HTTP boot without boot configuration: refused, local boot');
      throw new HttpError(404, 'NoBootConfiguration', 'the server has no boot configuration');
    }
    const known = knownAddresses(target.server);
    if (!known.includes(client)) {
      log.warn(
        { known, attempt: wanted },
        'HTTP boot file requested from an address the server does not have; refused',
      );
      throw new HttpError(403, 'UnknownClient', 'the request does not come from an address of this server');
    }
    if (
      target.sbc.spec.bootPolicy === 'NetBootOnce' &&
      countsForCurrentAttempt(target.sbc, ConditionType.BootCompleted)
    ) {
      log.info(
        { sbc: target.sbc.metadata.name },
        'NetBootOnce configuration already booted: HTTP boot refused, local boot',
      );
      throw new HttpError(404, 'Provisioned', 'provisioned (NetBootOnce): boot from disk');
    }
    if (!o.resolver.consistent(target)) target = await o.resolver.refresh(target);
    const sbc = target.sbc;
    if (!sbc || !target.callback) throw unavailable('boot configuration has no callback token yet', 1);
    if (!o.resolver.consistent(target)) throw unavailable('boot attempt is being rotated', 1);
    if (sbc.spec.bootMethod !== 'HTTPBoot')
      throw new HttpError(409, 'NotHTTPBoot', 'the boot configuration boots over PXE');
    if (sbc.status?.state !== 'Ready')
      throw unavailable(`boot configuration is ${sbc.status?.state ?? 'Pending'}`, 5);
    const attempt = sbc.spec.bootAttempt ?? 1;
    if (wanted !== attempt)
      throw new HttpError(409, 'StaleAttempt', `the current attempt is ${attempt}, not ${wanted}`);
    // Catalog entry or the OCI image resolved for this attempt (503 while unresolved), as iPXE boots.
    const image = bootImageFor(o.catalog(), sbc, uuid, o.baseUrl(), target.callback.token);
    const { kernel, initrd } = await localBootFiles(o, sbc, image.kernel, image.initrd);
    const cmdline = attemptKernelArgs({
      image,
      uuid,
      attempt,
      token: target.callback.token,
      bootServerUrl: o.baseUrl(),
      registryUrl: o.registryUrl,
    }).join(' ');
    let file: string;
    try {
      file = await o.uki.get({ kernel, initrd, cmdline });
    } catch (err) {
      log.error({ err: (err as Error).message }, 'building the UKI failed');
      throw unavailable('the boot file could not be built', 30);
    }
    const size = statSync(file).size;
    if (req.method === 'GET') {
      await recordSignal(o.client, o.component, sbc, {
        type: BootSignal.HTTPBootFileFetched,
        status: 'True',
        reason: SignalReason.BootFileServed,
        message: `boot file for attempt ${attempt} served to ${client}`,
      });
      log.info({ sbc: sbc.metadata.name, attempt, image: image.name, bytes: size }, 'HTTP boot file served');
    }
    return reply.type('application/efi').header('content-length', String(size)).send(createReadStream(file));
  });
}
