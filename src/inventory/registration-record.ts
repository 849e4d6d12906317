/**
 * Where a probe agent's registration lives. The whole payload (upstream metalprobe
 * `RegistrationPayload.data`, up to the registry's 64 KiB body limit) is written once, to a
 * ConfigMap in the manager's namespace ({@link registrationConfigMap}: key
 * {@link REGISTRATION_PAYLOAD_KEY}, label {@link SERVER_LABEL}, owned by the Server so the garbage
 * collector deletes it with the Server). The Server keeps a small record in `status.registration`
 * ({@link RegistrationRecord}): when and from where, the payload's digest, the attempt it answered
 * and where the payload is, plus until discovery completes the bounded hardware mapping
 * (registration-hardware.ts) the Server controller turns into upstream's status fields.
 *
 * Why: every write of a Server, spec or status, costs kube-apiserver in proportion to the whole
 * stored object (bench/apiserver-cost.ts), and a Server is written several times after its
 * registration; a payload in its status made each of those writes pay for it, a ConfigMap written
 * once does not. Pure functions; the registry does the writes (registry/register-route.ts).
 */
import { createHash } from 'node:crypto';
import { API_VERSION } from '../api/v1alpha1/schema.js';
import type { Server } from '../api/v1alpha1/server.js';
import type { KObject } from '../runtime/resource.js';
import type { HardwareStatus } from './registration-hardware.js';

/** The ConfigMap key holding the payload, as JSON. */
export const REGISTRATION_PAYLOAD_KEY = 'registration.json';
/** Label on the payload ConfigMap: the Server's name (its hash when not a valid label value). */
export const SERVER_LABEL = 'metal.ironcore.dev/server';
/** Annotation on the payload ConfigMap: the payload's digest ({@link registrationDigest}). */
export const DIGEST_ANNOTATION = 'metal.ironcore.dev/registration-digest';

/** `status.registration` as the registry writes it. `data`: a record of an earlier release, read only. */
export interface RegistrationRecord {
  receivedAt: string;
  clientAddress?: string;
  /** Hex sha256 of the payload's canonical JSON. */
  digest?: string;
  /** The discovery attempt (`spec.bootAttempt` of the SBC) whose probe registered. */
  attempt?: number;
  /** False for a registration without a token (`--callback-auth=optional`). */
  authenticated?: boolean;
  /** uid of that attempt's SBC: a record of an earlier discovery never counts for a new one. */
  bootConfigurationUID?: string;
  /** The ConfigMap holding the whole payload. */
  payload?: { namespace: string; name: string };
  /** The bounded upstream mapping, until the Server controller copies it into the status. */
  hardware?: HardwareStatus;
  data?: Record<string, unknown>;
}

const PREFIX = 'registration-';
const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/** JSON with object keys sorted: equal for deep-equal JSON values whatever their key order. */
function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (isRecord(v)) {
    const keys = Object.keys(v)
      .filter((k) => v[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

/** Hex sha256 of a payload's canonical JSON (the agent's key order does not matter). */
export function registrationDigest(data: unknown): string {
  return sha256(canonicalJson(data));
}

/**
 * The payload ConfigMap's name: `registration-<server>`, or `registration-<sha256 of it, 40 hex>`
 * when that exceeds 253 characters (a Server name is a DNS subdomain, so either is valid).
 */
export function registrationConfigMapName(serverName: string): string {
  const name = `${PREFIX}${serverName}`;
  return name.length <= 253 ? name : `${PREFIX}${sha256(serverName).slice(0, 40)}`;
}

/** The Server's name as a label value: itself when valid (≤ 63, alphanumeric ends), else its hash. */
export function serverLabelValue(serverName: string): string {
  return /^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$/.test(serverName)
    ? serverName
    : sha256(serverName).slice(0, 63);
}

/** The payload ConfigMap for `server` (server-side apply body; needs the Server's uid). */
export function registrationConfigMap(
  server: Server,
  namespace: string,
  data: Record<string, unknown>,
  digest: string,
): KObject {
  const name = server.metadata.name ?? '';
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: registrationConfigMapName(name),
      namespace,
      labels: { [SERVER_LABEL]: serverLabelValue(name) },
      annotations: { [DIGEST_ANNOTATION]: digest },
      ownerReferences: [{ apiVersion: API_VERSION, kind: 'Server', name, uid: server.metadata.uid ?? '' }],
    },
    data: { [REGISTRATION_PAYLOAD_KEY]: JSON.stringify(data) },
  } as KObject;
}

/** The stored record, typed (the API type keeps it loose for records of earlier releases). */
export function registrationRecord(server: Server): RegistrationRecord | undefined {
  return server.status?.registration as RegistrationRecord | undefined;
}

/**
 * Whether the stored record answers discovery attempt `attempt` of the SBC with uid `sbcUid`. A
 * record of an earlier release (no attempt) counts when the SBC carries the registry's signal for
 * the current attempt (`legacySignal`), as it did then.
 */
export function registrationAnswers(
  record: RegistrationRecord | undefined,
  attempt: number,
  sbcUid: string | undefined,
  legacySignal: boolean,
): boolean {
  if (!record) return false;
  if (record.attempt === undefined) return legacySignal;
  return (
    record.attempt === attempt && (!record.bootConfigurationUID || record.bootConfigurationUID === sbcUid)
  );
}
