/**
 * Pushes boot images with the registry HTTP API (distribution-spec v1.1 "push": monolithic blob
 * upload `POST /v2/<name>/blobs/uploads/` then `PUT <location>?digest=…`, and
 * `PUT /v2/<name>/manifests/<reference>`), for the local stack and tests. Plain HTTP on loopback
 * registries; optional HTTP Basic credentials.
 */
import { createHash } from 'node:crypto';
import { OCI_INDEX, OCI_MANIFEST } from './media-types.js';

export interface PushTarget {
  /** `http://127.0.0.1:5000` */
  registryUrl: string;
  repository: string;
  /** HTTP Basic credentials. */
  auth?: { username: string; password: string };
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
  platform?: { architecture: string; os: string };
}

export const EMPTY_CONFIG_MEDIA_TYPE = 'application/vnd.oci.empty.v1+json';
/** Config media type of boot images with a `commandLine` (beyond upstream). */
export const BOOT_CONFIG_MEDIA_TYPE = 'application/vnd.ironcore.image.config.v1+json';

export function digestOf(data: Buffer): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

function headers(t: PushTarget, extra: Record<string, string> = {}): Record<string, string> {
  const h: Record<string, string> = { ...extra };
  if (t.auth)
    h.authorization = `Basic ${Buffer.from(`${t.auth.username}:${t.auth.password}`).toString('base64')}`;
  return h;
}

/** Uploads `data` as a blob (skipped when the registry has it); returns its descriptor. */
export async function pushBlob(t: PushTarget, mediaType: string, data: Buffer): Promise<Descriptor> {
  const digest = digestOf(data);
  const base = `${t.registryUrl}/v2/${t.repository}/blobs`;
  const head = await fetch(`${base}/${digest}`, { method: 'HEAD', headers: headers(t) });
  if (head.status !== 200) {
    const start = await fetch(`${base}/uploads/`, { method: 'POST', headers: headers(t) });
    await start.arrayBuffer();
    const loc = start.headers.get('location');
    if (start.status !== 202 || !loc) throw new Error(`blob upload start: ${start.status}`);
    const url = new URL(loc, t.registryUrl);
    url.searchParams.set('digest', digest);
    const put = await fetch(url, {
      method: 'PUT',
      headers: headers(t, { 'content-type': 'application/octet-stream' }),
      body: data,
    });
    await put.arrayBuffer();
    if (put.status !== 201) throw new Error(`blob upload ${digest}: ${put.status}`);
  }
  return { mediaType, digest, size: data.length };
}

/** Puts a manifest (or index) under `reference` (a tag or its digest); returns its descriptor. */
export async function pushManifest(
  t: PushTarget,
  reference: string,
  mediaType: string,
  doc: object,
): Promise<Descriptor> {
  const body = Buffer.from(JSON.stringify(doc));
  const res = await fetch(`${t.registryUrl}/v2/${t.repository}/manifests/${reference}`, {
    method: 'PUT',
    headers: headers(t, { 'content-type': mediaType }),
    body,
  });
  const text = await res.text();
  if (res.status !== 201) throw new Error(`manifest ${reference}: ${res.status} ${text.slice(0, 300)}`);
  return { mediaType, digest: digestOf(body), size: body.length };
}

export interface BootImage {
  layers: { mediaType: string; data: Buffer }[];
  /** Written into the image config as `commandLine`. */
  commandLine?: string;
}

/** Pushes an OCI image manifest with `img`'s layers; tags it `tag` when given. */
export async function pushBootImage(t: PushTarget, img: BootImage, tag?: string): Promise<Descriptor> {
  const layers = [];
  for (const l of img.layers) layers.push(await pushBlob(t, l.mediaType, l.data));
  const config =
    img.commandLine !== undefined
      ? await pushBlob(
          t,
          BOOT_CONFIG_MEDIA_TYPE,
          Buffer.from(JSON.stringify({ commandLine: img.commandLine })),
        )
      : await pushBlob(t, EMPTY_CONFIG_MEDIA_TYPE, Buffer.from('{}'));
  const doc = { schemaVersion: 2, mediaType: OCI_MANIFEST, config, layers };
  const body = Buffer.from(JSON.stringify(doc));
  return pushManifest(t, tag ?? digestOf(body), OCI_MANIFEST, doc);
}

/** Pushes an OCI image index over `manifests` (descriptors with platform/annotations) as `tag`. */
export async function pushIndex(t: PushTarget, manifests: Descriptor[], tag: string): Promise<Descriptor> {
  return pushManifest(t, tag, OCI_INDEX, { schemaVersion: 2, mediaType: OCI_INDEX, manifests });
}
