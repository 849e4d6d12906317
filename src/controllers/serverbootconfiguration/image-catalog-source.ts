/**
 * Where the image catalog comes from: a YAML file (`--image-catalog`, read once at start) or a
 * ConfigMap (`--image-catalog-configmap ns/name`, key `images.yaml`, followed through an informer so
 * edits apply without a restart). Shared by the ServerBootConfiguration controller and the boot server.
 */
import { readFileSync } from 'node:fs';
import type pino from 'pino';
import { ImageCatalog } from '../../oci/image-catalog.js';
import type { Informer } from '../../runtime/informer.js';
import type { KObject } from '../../runtime/resource.js';

/** Key of the catalog document in the ConfigMap. */
export const CATALOG_CONFIGMAP_KEY = 'images.yaml';

export type ConfigMapObject = KObject & { data?: Record<string, string> };

export class ImageCatalogSource {
  private catalog: ImageCatalog;
  private readonly listeners: (() => void)[] = [];

  private constructor(
    initial: ImageCatalog,
    private readonly log: pino.Logger,
  ) {
    this.catalog = initial;
  }

  /** A catalog read from `path`. Throws when the file cannot be read or parsed. */
  static fromFile(path: string, log: pino.Logger): ImageCatalogSource {
    return new ImageCatalogSource(ImageCatalog.parse(readFileSync(path, 'utf8'), `file ${path}`), log);
  }

  static empty(log: pino.Logger): ImageCatalogSource {
    return new ImageCatalogSource(ImageCatalog.empty(), log);
  }

  /**
   * A catalog that follows ConfigMap `name` through `configMaps` (an informer of its namespace). A
   * missing ConfigMap or an unparsable document leaves an empty (or the last good) catalog and is logged.
   */
  static fromConfigMap(
    configMaps: Informer<ConfigMapObject>,
    name: string,
    log: pino.Logger,
    namespace?: string,
  ): ImageCatalogSource {
    const origin = `ConfigMap ${namespace ? `${namespace}/` : ''}${name}, key ${CATALOG_CONFIGMAP_KEY}`;
    const src = new ImageCatalogSource(ImageCatalog.empty(`${origin}: not found`), log);
    const load = (cm: ConfigMapObject | undefined) => {
      if (cm && cm.metadata.name !== name) return;
      const text = cm?.data?.[CATALOG_CONFIGMAP_KEY];
      try {
        src.set(
          text
            ? ImageCatalog.parse(text, origin)
            : ImageCatalog.empty(`${origin}: ${cm ? 'key missing' : 'not found'}`),
        );
      } catch (err) {
        log.error(
          { err, configMap: name },
          'image catalog ConfigMap is invalid; keeping the previous catalog',
        );
      }
    };
    configMaps.on('add', (cm) => load(cm));
    configMaps.on('update', (cm) => load(cm));
    configMaps.on('delete', (cm) => cm.metadata.name === name && load(undefined));
    return src;
  }

  /** The catalog now (changes when the ConfigMap does). */
  current(): ImageCatalog {
    return this.catalog;
  }

  /** Called after every change of the catalog. */
  onChange(fn: () => void): void {
    this.listeners.push(fn);
  }

  private set(c: ImageCatalog): void {
    this.catalog = c;
    this.log.info({ images: c.names() }, 'image catalog loaded');
    for (const l of this.listeners) l();
  }
}
