/**
 * The shipped YAML as its users' tools read it: `kubectl kustomize` builds a kustomization, and
 * kubectl (sigs.k8s.io/yaml on go-yaml v2) reads YAML 1.1, where an unquoted On/Off/yes/no is a
 * boolean. {@link readAsKubectl} parses with the yaml package's 1.1 schema for the same answers;
 * {@link kubectl} runs the real binary (on PATH; its absence fails the test that needs it).
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';

export const CONFIG = join(process.cwd(), 'config');

export type Manifest = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [k: string]: unknown;
};

/** Runs kubectl with `args` (and `input` on stdin); returns stdout. Throws with stderr on a non-zero exit. */
export function kubectl(args: string[], input?: string): string {
  try {
    return execFileSync('kubectl', args, {
      encoding: 'utf8',
      input,
      stdio: ['pipe', 'pipe', 'pipe'],
      maxBuffer: 64 << 20,
    });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`kubectl ${args.join(' ')}: ${e.stderr || e.message}`);
  }
}

/** `kubectl kustomize <dir>` (kustomize's default load restrictor: nothing outside the folder's root). */
export function kustomize(dir: string): string {
  return kubectl(['kustomize', dir]);
}

/** Every document of `text` as YAML 1.1 reads it (kubectl's reading). */
export function readAsKubectl(text: string): Manifest[] {
  return parseAllDocuments(text, { version: '1.1' })
    .map((d) => d.toJSON() as Manifest | null)
    .filter((d): d is Manifest => !!d);
}

/** Every document of `text` as YAML 1.2 reads it (what the author meant, read by the yaml package's default). */
export function readAsWritten(text: string): Manifest[] {
  return parseAllDocuments(text)
    .map((d) => d.toJSON() as Manifest | null)
    .filter((d): d is Manifest => !!d);
}
