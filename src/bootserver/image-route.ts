/**
 * `GET /images/{name}/kernel|initrd` → the file of a catalog image whose entry is a local path
 * (`application/octet-stream`, with `Content-Length`). Image names contain '/' (`metal/os:latest`)
 * and firmware decodes %2F before requesting, so the name is everything between `/images/` and the
 * last segment. 400 `InvalidPath` for bad percent-encoding; 404 `NotFound` for another file name or
 * an entry that is not a local path, 404 with the catalog's reason for an unknown image.
 */
import { createReadStream, statSync } from 'node:fs';
import type { HttpApp } from '../bootsignals/http-app.js';
import { HttpError } from '../bootsignals/http-error.js';
import type { ImageCatalog } from '../oci/image-catalog.js';

export function registerImageRoute(app: HttpApp, catalog: () => ImageCatalog): void {
  app.get('/images/*', async (req, reply) => {
    const rest = (req.params as { '*': string })['*'];
    const cut = rest.lastIndexOf('/');
    const file = rest.slice(cut + 1);
    let name: string;
    try {
      name = decodeURIComponent(rest.slice(0, Math.max(cut, 0)));
    } catch {
      throw new HttpError(400, 'InvalidPath', 'image path is not valid percent-encoding');
    }
    if (file !== 'kernel' && file !== 'initrd') throw new HttpError(404, 'NotFound', 'no such image file');
    const entry = catalog().resolve(name);
    if (!entry.ok) throw new HttpError(404, entry.reason, entry.message);
    const path = entry.image[file];
    if (!path.startsWith('/')) throw new HttpError(404, 'NotFound', 'image file is not served here');
    const size = statSync(path).size;
    return reply
      .type('application/octet-stream')
      .header('content-length', String(size))
      .send(createReadStream(path));
  });
}
