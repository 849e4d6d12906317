/**
 * Label selector matching for the equality-based form of the Kubernetes API
 * (`k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated = AND; Kubernetes API conventions, "Labels and
 * Selectors"). Set-based terms (`in`, `notin`, parentheses) are not parsed: `parseEqualitySelector`
 * returns undefined for them, and a caller that needs certainty then assumes "does not match".
 */

type Term = { key: string; op: '=' | '!=' | 'exists' | '!exists'; value?: string };

/** Terms of `selector` ('' or undefined: no terms, matches everything); undefined when not equality-based. */
export function parseEqualitySelector(selector: string | undefined): Term[] | undefined {
  if (!selector?.trim()) return [];
  const terms: Term[] = [];
  for (const raw of selector.split(',')) {
    const t = raw.trim();
    if (!t || /[()\s]/.test(t)) return undefined;
    const ne = t.indexOf('!=');
    const eq = t.indexOf('=');
    if (ne > 0) terms.push({ key: t.slice(0, ne), op: '!=', value: t.slice(ne + 2) });
    else if (eq > 0)
      terms.push({ key: t.slice(0, eq), op: '=', value: t.slice(t[eq + 1] === '=' ? eq + 2 : eq + 1) });
    else if (t.startsWith('!')) terms.push({ key: t.slice(1), op: '!exists' });
    else if (!t.includes('=')) terms.push({ key: t, op: 'exists' });
    else return undefined;
  }
  return terms;
}

/** True when `labels` satisfy every term. */
export function matchesTerms(terms: Term[], labels: Record<string, string> | undefined): boolean {
  const l = labels ?? {};
  return terms.every((t) => {
    const has = Object.hasOwn(l, t.key);
    if (t.op === 'exists') return has;
    if (t.op === '!exists') return !has;
    if (t.op === '=') return has && l[t.key] === t.value;
    return !has || l[t.key] !== t.value;
  });
}
