/**
 * The API server's timestamp formats (apimachinery `metav1.Time` and `metav1.MicroTime`). Both are
 * RFC 3339 in UTC; they differ in precision, and the server rejects or truncates other precisions.
 */

/** `metav1.Time`: whole seconds (`2006-01-02T15:04:05Z`); conditions, Event `lastTimestamp`. */
export function rfc3339(d: Date): string {
  return `${d.toISOString().slice(0, 19)}Z`;
}

/** `metav1.MicroTime`: six fractional digits (`2006-01-02T15:04:05.000000Z`); Lease and Event `eventTime`. */
export function microTime(d: Date): string {
  return `${d.toISOString().slice(0, 23)}000Z`;
}
