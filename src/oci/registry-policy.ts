/**
 * Which registries may be contacted and how (manager flags): `--allowed-registries` (comma list of
 * registry hosts, `host[:port]`; Docker Hub aliases `docker.io`, `index.docker.io`,
 * `registry-1.docker.io` are one; upstream boot-operator's default when unset is `ghcr.io` alone),
 * `--insecure-registries` (hosts spoken to over plain HTTP; all others HTTPS only), and
 * `--architecture` (the platform an image index is resolved for, default `amd64`).
 */
import { normalizeDomain } from './reference.js';

export interface RegistryPolicy {
  /** Normalised registry hosts that may be contacted. */
  allowed: readonly string[];
  /** Normalised registry hosts spoken to over plain HTTP. */
  insecure: readonly string[];
  /** OCI platform architecture (`amd64`, `arm64`). */
  architecture: string;
}

/** Upstream's default allow-list (boot-operator `internal/registry/validation.go`). */
export const DEFAULT_ALLOWED_REGISTRIES = ['ghcr.io'];
export const DEFAULT_ARCHITECTURE = 'amd64';

/** Parses a comma-separated host list into normalised hosts. */
export function registryList(v: string | readonly string[]): string[] {
  const items = typeof v === 'string' ? v.split(',') : v;
  return items
    .map((s) => s.trim())
    .filter(Boolean)
    .map(normalizeDomain);
}

export function newRegistryPolicy(p: Partial<RegistryPolicy> = {}): RegistryPolicy {
  return {
    allowed: registryList(p.allowed ?? DEFAULT_ALLOWED_REGISTRIES),
    insecure: registryList(p.insecure ?? []),
    architecture: p.architecture ?? DEFAULT_ARCHITECTURE,
  };
}

export function isAllowed(p: RegistryPolicy, domain: string): boolean {
  return p.allowed.includes(normalizeDomain(domain));
}

export function isInsecure(p: RegistryPolicy, host: string): boolean {
  return p.insecure.includes(normalizeDomain(host));
}
