/**
 * Compares an upstream CRD with ours and lists every incompatibility: a missing property path, a
 * different type/format/enum/default/constraint, a missing CEL rule, a stricter `required`, different
 * names, scope, printer columns or subresources. An empty list means every object upstream accepts,
 * ours accepts too, and kubectl shows the same columns.
 */

type Schema = Record<string, unknown> & {
  properties?: Record<string, Schema>;
  items?: Schema;
  additionalProperties?: Schema | boolean;
  required?: string[];
};
type CRD = {
  spec: {
    names: Record<string, unknown>;
    scope: string;
    versions: {
      name: string;
      schema: { openAPIV3Schema: Schema };
      additionalPrinterColumns?: Record<string, unknown>[];
      subresources?: Record<string, unknown>;
    }[];
  };
};

/** Constraints that must be identical wherever upstream defines a node. */
const SAME = [
  'type',
  'format',
  'default',
  'pattern',
  'maxLength',
  'minLength',
  'minimum',
  'maximum',
  'maxItems',
  'minItems',
  'x-kubernetes-int-or-string',
  'x-kubernetes-map-type',
  'x-kubernetes-preserve-unknown-fields',
] as const;

const sameValue = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/**
 * Defaults we add where upstream has none, each deliberate and invisible to upstream's controllers:
 * - Server `status` `{}` and `status.state` `Initial`: a Server no controller has written reads
 *   `Initial` (upstream writes it in an extra first reconcile step; an empty STATE column otherwise).
 */
const DELIBERATE_DEFAULTS: Record<string, unknown> = {
  'Server v1alpha1.status': {},
  'Server v1alpha1.status.state': 'Initial',
};

/**
 * Enums we add where upstream has a free string, each deliberate: the values are exactly upstream's
 * Go constants, so every manifest that upstream's controllers act on still applies.
 * - ServerClaim `spec.power`: upstream's `Power` type has only `On` and `Off`; a free string let
 *   `"on"` through, which nothing acts on (the attempt-engine issue asks to refuse it).
 */
const DELIBERATE_ENUMS: Record<string, readonly string[]> = {
  'v1alpha1.spec.power': ['Off', 'On'],
};

function compareNode(path: string, up: Schema, ours: Schema | undefined, out: string[]): void {
  if (!ours) {
    out.push(`${path}: missing`);
    return;
  }
  for (const key of SAME) {
    if (!sameValue(up[key], ours[key]))
      out.push(`${path}: ${key} upstream=${JSON.stringify(up[key])} ours=${JSON.stringify(ours[key])}`);
  }
  const upEnum = up.enum as unknown[] | undefined;
  const ourEnum = ours.enum as unknown[] | undefined;
  const deliberate = DELIBERATE_ENUMS[path];
  const allowed = !upEnum && deliberate !== undefined && sameValue([...(ourEnum ?? [])].sort(), deliberate);
  if ((upEnum || ourEnum) && !allowed) {
    const a = JSON.stringify([...(upEnum ?? [])].sort());
    const b = JSON.stringify([...(ourEnum ?? [])].sort());
    if (a !== b) out.push(`${path}: enum upstream=${a} ours=${b}`);
  }
  // Upstream list types must be kept; ours may declare one where upstream has none (e.g. conditions as a map list).
  for (const key of ['x-kubernetes-list-type', 'x-kubernetes-list-map-keys'] as const) {
    if (up[key] !== undefined && !sameValue(up[key], ours[key])) {
      out.push(`${path}: ${key} upstream=${JSON.stringify(up[key])} ours=${JSON.stringify(ours[key])}`);
    }
  }
  const upRules = (up['x-kubernetes-validations'] as { rule: string; message?: string }[] | undefined) ?? [];
  const ourRules =
    (ours['x-kubernetes-validations'] as { rule: string; message?: string }[] | undefined) ?? [];
  for (const r of upRules) {
    if (!ourRules.some((o) => o.rule === r.rule && o.message === r.message)) {
      out.push(`${path}: CEL rule missing: ${r.rule} (${r.message ?? 'no message'})`);
    }
  }
  for (const r of ourRules) {
    if (!upRules.some((u) => u.rule === r.rule))
      out.push(`${path}: extra CEL rule would reject upstream objects: ${r.rule}`);
  }
  const upReq = new Set(up.required ?? []);
  for (const r of ours.required ?? [])
    if (!upReq.has(r)) out.push(`${path}: ours requires ${r}, upstream does not`);
  for (const r of upReq)
    if (!(ours.required ?? []).includes(r)) out.push(`${path}: upstream requires ${r}, ours does not`);
  for (const [name, child] of Object.entries(up.properties ?? {})) {
    compareNode(`${path}.${name}`, child, ours.properties?.[name], out);
  }
  if (up.items) compareNode(`${path}[]`, up.items, ours.items, out);
  if (up.additionalProperties && typeof up.additionalProperties === 'object') {
    const o = typeof ours.additionalProperties === 'object' ? ours.additionalProperties : undefined;
    compareNode(`${path}{}`, up.additionalProperties, o, out);
  }
}

/** Every incompatibility of `ours` against `upstream` (same group/kind), as readable lines. */
export function compareCRDs(upstream: CRD, ours: CRD): string[] {
  const out: string[] = [];
  const un = upstream.spec.names;
  const on = ours.spec.names;
  for (const key of ['kind', 'listKind', 'plural', 'singular'] as const) {
    if (un[key] !== on[key]) out.push(`names.${key}: upstream=${String(un[key])} ours=${String(on[key])}`);
  }
  const us = JSON.stringify([...((un.shortNames as string[]) ?? [])].sort());
  const os = JSON.stringify([...((on.shortNames as string[]) ?? [])].sort());
  if (us !== os) out.push(`names.shortNames: upstream=${us} ours=${os}`);
  if (upstream.spec.scope !== ours.spec.scope)
    out.push(`scope: upstream=${upstream.spec.scope} ours=${ours.spec.scope}`);
  for (const uv of upstream.spec.versions) {
    const ov = ours.spec.versions.find((v) => v.name === uv.name);
    if (!ov) {
      out.push(`version ${uv.name}: missing`);
      continue;
    }
    if (!sameValue(uv.subresources ?? {}, ov.subresources ?? {})) out.push(`${uv.name}: subresources differ`);
    const ucols = uv.additionalPrinterColumns ?? [];
    const ocols = ov.additionalPrinterColumns ?? [];
    // kubectl's default view shows priority-0 columns in order: those must be identical.
    const norm = (c: Record<string, unknown>) =>
      JSON.stringify({ name: c.name, type: c.type, jsonPath: c.jsonPath, priority: c.priority ?? 0 });
    const uDefault = ucols.filter((c) => !c.priority).map(norm);
    const oDefault = ocols.filter((c) => !c.priority).map(norm);
    if (!sameValue(uDefault, oDefault))
      out.push(`${uv.name}: default printer columns upstream=${uDefault} ours=${oDefault}`);
    for (const c of ucols.filter((c) => c.priority)) {
      if (!ocols.map(norm).includes(norm(c)))
        out.push(`${uv.name}: printer column ${String(c.name)} missing`);
    }
    const found: string[] = [];
    compareNode(`${uv.name}`, uv.schema.openAPIV3Schema, ov.schema.openAPIV3Schema, found);
    out.push(...found.filter((line) => !deliberateDefault(String(on.kind), line)));
  }
  return out;
}

/** Whether `line` reports exactly one of {@link DELIBERATE_DEFAULTS} (upstream none, ours that value). */
function deliberateDefault(kind: string, line: string): boolean {
  const m = /^(\S+): default upstream=undefined ours=(.*)$/.exec(line);
  const key = m && `${kind} ${m[1]}`;
  return !!key && key in DELIBERATE_DEFAULTS && m[2] === JSON.stringify(DELIBERATE_DEFAULTS[key]);
}
