/**
 * Tests' and benchmarks' read of a Server's registration as the registry stored it: the record in
 * `status.registration` and the whole payload from the ConfigMap it names
 * (inventory/registration-record.ts). Reads the API server, never a cache; `payload` is undefined
 * when the record or the ConfigMap is missing. API errors propagate.
 */
import type { Server } from '../api/v1alpha1/server.js';
import {
  REGISTRATION_PAYLOAD_KEY,
  type RegistrationRecord,
  registrationRecord,
} from '../inventory/registration-record.js';
import type { KubeClient } from '../runtime/client.js';
import { type KObject, Resources } from '../runtime/resource.js';

export interface StoredRegistration {
  record?: RegistrationRecord;
  payload?: unknown;
  configMap?: KObject;
}

/** The record and payload of Server `serverName` (see the file comment). */
export async function storedRegistration(
  client: KubeClient,
  serverName: string,
): Promise<StoredRegistration> {
  const srv = await client.get<Server>(Resources.Server, serverName);
  const record = srv ? registrationRecord(srv) : undefined;
  if (!record?.payload) return { record };
  const cm = await client.get<KObject & { data?: Record<string, string> }>(
    Resources.ConfigMap,
    record.payload.name,
    record.payload.namespace,
  );
  const json = cm?.data?.[REGISTRATION_PAYLOAD_KEY];
  return { record, payload: json === undefined ? undefined : JSON.parse(json), configMap: cm };
}
