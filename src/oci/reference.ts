/**
 * OCI image references by the grammar of the Docker/OCI distribution reference
 * (github.com/distribution/reference, `reference.go`):
 *
 *   reference := name [ ":" tag ] [ "@" digest ]
 *   name      := [domain "/"] remote-name        domain: has "." or ":" or is "localhost", optional ":port"
 *   path-component := [a-z0-9]+ (("." | "_" | "__" | "-"+) [a-z0-9]+)*
 *   tag       := [\w][\w.-]{0,127}
 *   digest    := algorithm ":" hex             (sha256: 64 hex, sha512: 128 hex)
 *
 * Normalisation as `ParseNormalizedNamed`: no domain → `docker.io`, and a one-component path on
 * Docker Hub gets `library/`; `index.docker.io` is `docker.io`. Neither tag nor digest → tag `latest`.
 * The registry host that serves Docker Hub's API is `registry-1.docker.io`.
 */

export interface ImageReference {
  /** Registry domain as normalised (`docker.io`, `ghcr.io`, `127.0.0.1:5000`). */
  domain: string;
  /** Repository path (`library/alpine`, `ironcore-dev/os-images/gardenlinux`). */
  repository: string;
  tag?: string;
  digest?: string;
}

/** Thrown for a string that is not a reference; the message names what is wrong. */
export class InvalidReference extends Error {}

const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const DOMAIN_COMPONENT = /^(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$/;
const NAME_MAX = 255;

export const DOCKER_HUB = 'docker.io';
/** Host of Docker Hub's registry API. */
export const DOCKER_HUB_API = 'registry-1.docker.io';

function validDomain(d: string): boolean {
  const bracket = /^\[([0-9a-fA-F:]+)\](?::(\d+))?$/.exec(d);
  if (bracket) return true;
  const [host, port, ...rest] = d.split(':');
  if (rest.length || !host) return false;
  if (port !== undefined && !/^\d+$/.test(port)) return false;
  return host.split('.').every((c) => DOMAIN_COMPONENT.test(c));
}

/** Normalises a registry host the way Docker Hub aliases are compared. */
export function normalizeDomain(domain: string): string {
  const d = domain.toLowerCase();
  return d === 'index.docker.io' || d === DOCKER_HUB_API ? DOCKER_HUB : d;
}

/** Parses and normalises `ref`; throws `InvalidReference`. */
export function parseReference(ref: string): ImageReference {
  if (!ref || ref !== ref.trim())
    throw new InvalidReference(`image reference "${ref}" is empty or has spaces`);
  let rest = ref;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest))
      throw new InvalidReference(`image reference "${ref}": invalid digest "${digest}"`);
  }
  let tag: string | undefined;
  const lastSlash = rest.lastIndexOf('/');
  const colon = rest.lastIndexOf(':');
  if (colon > lastSlash) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw new InvalidReference(`image reference "${ref}": invalid tag "${tag}"`);
  }
  const parts = rest.split('/');
  let domain = DOCKER_HUB;
  const first = parts[0] ?? '';
  if (
    parts.length > 1 &&
    (first.includes('.') || first.includes(':') || first === 'localhost' || first.startsWith('['))
  ) {
    if (!validDomain(first))
      throw new InvalidReference(`image reference "${ref}": invalid registry "${first}"`);
    domain = normalizeDomain(first);
    parts.shift();
  }
  if (!parts.length || parts.some((p) => !PATH_COMPONENT.test(p))) {
    throw new InvalidReference(
      `image reference "${ref}": repository "${parts.join('/')}" must be lower-case path components`,
    );
  }
  if (domain === DOCKER_HUB && parts.length === 1) parts.unshift('library');
  const repository = parts.join('/');
  if (`${domain}/${repository}`.length > NAME_MAX)
    throw new InvalidReference(`image reference "${ref}": name longer than ${NAME_MAX} characters`);
  if (!tag && !digest) tag = 'latest';
  return { domain, repository, tag, digest };
}

/** The host:port the registry API is served at (Docker Hub's API host for `docker.io`). */
export function apiHost(r: Pick<ImageReference, 'domain'>): string {
  return r.domain === DOCKER_HUB ? DOCKER_HUB_API : r.domain;
}

/** `domain/repository[:tag][@digest]`, the fully normalised form. */
export function formatReference(r: ImageReference): string {
  return `${r.domain}/${r.repository}${r.tag ? `:${r.tag}` : ''}${r.digest ? `@${r.digest}` : ''}`;
}
