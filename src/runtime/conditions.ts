/**
 * Status conditions (`metav1.Condition`, Kubernetes API conventions "Typical status properties"):
 * one entry per `type`; `lastTransitionTime` records when `status` last changed, not when the
 * condition was last written; `observedGeneration` is the `metadata.generation` the writer acted on.
 * These helpers are pure: they return new arrays and never mutate their input.
 */
import { rfc3339 } from './time.js';

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  observedGeneration?: number;
  /** RFC 3339, second precision (the API server's `metav1.Time` drops fractions). */
  lastTransitionTime: string;
}

export function findCondition(conds: Condition[] | undefined, type: string): Condition | undefined {
  return conds?.find((c) => c.type === type);
}

/**
 * Sets condition `c.type`. `lastTransitionTime` stays as it was unless `status` changes (then it
 * becomes `c.lastTransitionTime`, or `now`); `changed` is false when type, status, reason, message and
 * observedGeneration all match the existing entry — write the status back only when it is true,
 * which keeps repeated signals idempotent. Order of other conditions is kept; a new one is appended.
 */
export function setCondition(
  conds: Condition[] | undefined,
  c: Omit<Condition, 'lastTransitionTime'> & { lastTransitionTime?: string },
  now: Date = new Date(),
): { conditions: Condition[]; changed: boolean } {
  const list = conds ?? [];
  const i = list.findIndex((x) => x.type === c.type);
  const prev = i >= 0 ? list[i] : undefined;
  if (
    prev &&
    prev.status === c.status &&
    prev.reason === c.reason &&
    prev.message === c.message &&
    prev.observedGeneration === c.observedGeneration
  ) {
    return { conditions: list.slice(), changed: false };
  }
  const lastTransitionTime =
    prev && prev.status === c.status ? prev.lastTransitionTime : (c.lastTransitionTime ?? rfc3339(now));
  const next: Condition = {
    type: c.type,
    status: c.status,
    reason: c.reason,
    message: c.message,
    ...(c.observedGeneration !== undefined ? { observedGeneration: c.observedGeneration } : {}),
    lastTransitionTime,
  };
  const out = list.slice();
  if (i >= 0) out[i] = next;
  else out.push(next);
  return { conditions: out, changed: true };
}

/** Removes condition `type`; `changed` is false when it was absent. */
export function removeCondition(
  conds: Condition[] | undefined,
  type: string,
): { conditions: Condition[]; changed: boolean } {
  const list = conds ?? [];
  const out = list.filter((c) => c.type !== type);
  return { conditions: out, changed: out.length !== list.length };
}
