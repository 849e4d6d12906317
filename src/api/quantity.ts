/**
 * Kubernetes resource quantities as the API stores them. Upstream's Server status carries memory as a
 * `resource.Quantity` (k8s.io/apimachinery `api/resource`), which Go serialises as a string in its
 * canonical form; this project writes the same string so `kubectl get srv` prints `16Gi`, as upstream's
 * Servers do, not `17179869184`.
 */

const BINARY = ['Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei'];

/**
 * `bytes` (a non-negative safe integer) as a canonical binary-SI quantity string: the largest suffix
 * that divides it exactly (`16Gi`, `1536Mi`), else the plain integer (`1000`). Throws RangeError on a
 * negative, fractional or unsafe number (a quantity of bytes is neither).
 */
export function binarySIQuantity(bytes: number): string {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new RangeError(`not a byte count: ${bytes}`);
  let n = bytes;
  let i = -1;
  while (n !== 0 && n % 1024 === 0 && i < BINARY.length - 1) {
    n /= 1024;
    i++;
  }
  return i < 0 ? String(n) : `${n}${BINARY[i]}`;
}
