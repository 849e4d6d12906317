/**
 * Virtual media of the virtual BMC: how a BMC fetches an inserted image (Redfish `VirtualMedia.Image`,
 * an http(s) URL) and what a simulated host reads from it.
 *
 * Real BMCs check the image when it is inserted (a refused URL fails `InsertMedia`) and then read it in
 * byte ranges as the host reads its CD; so does this one: {@link probeImage} reads the first 2 KiB at
 * insert time, {@link fetchImage} reads the whole image in `Range` requests of `chunkBytes`, bounded
 * by `maxBytes` and a time budget. Errors are {@link MediaFetchError} with the URL's path (never its
 * capability, which stays out of logs by being cut at the attempt).
 */
import { request } from 'undici';

/** The image could not be read (connection, HTTP status, size bound). */
export class MediaFetchError extends Error {
  override name = 'MediaFetchError';
}

export interface FetchOptions {
  /** Largest image accepted, bytes (default 1 GiB). */
  maxBytes?: number;
  /** Bytes per Range request (default 4 MiB). */
  chunkBytes?: number;
  /** Time budget of the whole fetch, ms (default 120 s). */
  budgetMs?: number;
  signal?: AbortSignal;
}

/** The image URL for messages: scheme, host and the path up to the attempt (capabilities cut off). */
export function shownImageUrl(url: string): string {
  try {
    const u = new URL(url);
    const parts = u.pathname.split('/');
    const cut = parts.length > 4 ? `${parts.slice(0, 4).join('/')}/…` : u.pathname;
    return `${u.origin}${cut}`;
  } catch {
    return '(not a URL)';
  }
}

async function getRange(
  url: string,
  start: number,
  end: number,
  signal: AbortSignal,
): Promise<{ body: Buffer; total: number | undefined }> {
  let res: Awaited<ReturnType<typeof request>>;
  try {
    res = await request(url, {
      method: 'GET',
      headers: { range: `bytes=${start}-${end}`, 'user-agent': 'metal-virtual-bmc-vmedia/1' },
      signal,
    });
  } catch (err) {
    throw new MediaFetchError(`${shownImageUrl(url)}: ${(err as Error).message}`);
  }
  if (res.statusCode !== 206 && res.statusCode !== 200) {
    await res.body.dump();
    throw new MediaFetchError(`${shownImageUrl(url)}: HTTP ${res.statusCode}`);
  }
  const body = Buffer.from(await res.body.arrayBuffer());
  const range = res.headers['content-range'];
  const m = typeof range === 'string' ? /\/(\d+)$/.exec(range) : null;
  const total = m ? Number(m[1]) : res.statusCode === 200 ? body.length : undefined;
  return { body: res.statusCode === 200 ? body.subarray(start, end + 1) : body, total };
}

/**
 * Reads the first 2 KiB of the image, as a BMC checks an image at insert time.
 * @returns the image's total size when the server says it.
 * @throws MediaFetchError when the image cannot be read.
 */
export async function probeImage(url: string, opts: FetchOptions = {}): Promise<number | undefined> {
  if (!/^https?:\/\//.test(url)) throw new MediaFetchError('the image is not an http(s) URL');
  const signal = AbortSignal.any([
    ...(opts.signal ? [opts.signal] : []),
    AbortSignal.timeout(Math.min(opts.budgetMs ?? 120_000, 15_000)),
  ]);
  const { total } = await getRange(url, 0, 2047, signal);
  if (total !== undefined && total > (opts.maxBytes ?? 1024 ** 3))
    throw new MediaFetchError(`${shownImageUrl(url)}: image of ${total} bytes exceeds the bound`);
  return total;
}

/**
 * Reads the whole image in Range requests.
 * @throws MediaFetchError when a range cannot be read, the size is unknown or exceeds `maxBytes`.
 */
export async function fetchImage(url: string, opts: FetchOptions = {}): Promise<Buffer> {
  const maxBytes = opts.maxBytes ?? 1024 ** 3;
  const chunk = opts.chunkBytes ?? 4 * 1024 * 1024;
  const signal = AbortSignal.any([
    ...(opts.signal ? [opts.signal] : []),
    AbortSignal.timeout(opts.budgetMs ?? 120_000),
  ]);
  const first = await getRange(url, 0, chunk - 1, signal);
  const total = first.total;
  if (total === undefined) throw new MediaFetchError(`${shownImageUrl(url)}: no Content-Range total`);
  if (total > maxBytes)
    throw new MediaFetchError(`${shownImageUrl(url)}: image of ${total} bytes exceeds the bound`);
  const parts = [first.body];
  for (let at = first.body.length; at < total; ) {
    const { body } = await getRange(url, at, Math.min(total, at + chunk) - 1, signal);
    if (body.length === 0) throw new MediaFetchError(`${shownImageUrl(url)}: empty range at ${at}`);
    parts.push(body);
    at += body.length;
  }
  return Buffer.concat(parts, total);
}

/**
 * The kernel command line inside a boot image built by the boot server (an ISO whose EFI file is a
 * UKI with a `.cmdline` section): the run of printable characters around `metal.uuid=`. A simulated
 * host has no firmware to run the UKI, so it reads what the kernel would be given. Pure.
 * @returns the arguments, or `undefined` when the image holds no such command line.
 */
export function commandLineInImage(image: Buffer): string[] | undefined {
  const at = image.indexOf('metal.uuid=');
  if (at < 0) return undefined;
  const printable = (b: number | undefined) => b !== undefined && b >= 0x20 && b < 0x7f;
  let start = at;
  while (start > 0 && printable(image[start - 1])) start--;
  let end = at;
  while (end < image.length && printable(image[end])) end++;
  return image.toString('latin1', start, end).split(' ').filter(Boolean);
}
