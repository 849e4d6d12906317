/**
 * Registry credentials from a Kubernetes Secret of type `kubernetes.io/dockerconfigjson` (key
 * `.dockerconfigjson`: `{"auths": {"<registry>": {"auth": base64("user:password")} |
 * {"username", "password"} | {"identitytoken"}}}`) or the legacy `kubernetes.io/dockercfg` (key
 * `.dockercfg`: the `auths` map itself). Keys may carry a scheme and a path
 * (`https://index.docker.io/v1/`); they match a registry by host, Docker Hub aliases being one.
 */
import { normalizeDomain } from './reference.js';

export interface RegistryCredentials {
  username?: string;
  password?: string;
  /** OAuth2 refresh token (`identitytoken`), exchanged at the token endpoint. */
  identityToken?: string;
}

type AuthEntry = { auth?: string; username?: string; password?: string; identitytoken?: string };

function hostOfKey(key: string): string {
  const noScheme = key.replace(/^[a-z]+:\/\//i, '');
  return normalizeDomain(noScheme.split('/')[0] ?? '');
}

/**
 * The credentials for registry `domain` in Secret `data` (base64 values as in the API), or
 * undefined when the Secret has none for it. Throws `Error` when the Secret's JSON is malformed.
 */
export function credentialsFor(
  data: Record<string, string> | undefined,
  domain: string,
): RegistryCredentials | undefined {
  const raw = data?.['.dockerconfigjson'] ?? data?.['.dockercfg'];
  if (!raw) return undefined;
  let doc: { auths?: Record<string, AuthEntry> } & Record<string, AuthEntry>;
  try {
    doc = JSON.parse(Buffer.from(raw, 'base64').toString('utf8'));
  } catch {
    throw new Error('pull secret is not docker config JSON');
  }
  const auths = (data?.['.dockerconfigjson'] ? doc.auths : doc) ?? {};
  const want = normalizeDomain(domain);
  for (const [key, e] of Object.entries(auths)) {
    if (hostOfKey(key) !== want || typeof e !== 'object' || !e) continue;
    if (e.identitytoken) return { identityToken: e.identitytoken, username: e.username };
    if (e.username || e.password) return { username: e.username, password: e.password };
    if (e.auth) {
      const plain = Buffer.from(e.auth, 'base64').toString('utf8');
      const cut = plain.indexOf(':');
      if (cut > 0) return { username: plain.slice(0, cut), password: plain.slice(cut + 1) };
    }
  }
  return undefined;
}
