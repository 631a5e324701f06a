// RFC 8785 (JSON Canonicalization Scheme) for the values an audit entry holds: objects with keys sorted by UTF-16
// code units, no whitespace, strings escaped as ECMAScript's JSON.stringify does, numbers in ECMAScript's shortest
// form (which is what JSON.stringify writes for finite numbers). The same entry always hashes the same.
export type Canonical = null | boolean | number | string | Canonical[] | { [key: string]: Canonical | undefined };

export function canonicalJson(value: Canonical): string {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError('canonical JSON has no form for NaN or Infinity');
    return JSON.stringify(value);
  }
  if (typeof value !== 'object') throw new TypeError(`canonical JSON has no form for ${typeof value}`);
  // Plain loops and concatenation: every call's entry goes through here, and the array methods' closures cost more
  // than the work.
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) out += (i ? ',' : '') + canonicalJson(value[i]!);
    return `${out}]`;
  }
  // sort() without a comparator orders strings by UTF-16 code units, as RFC 8785 asks.
  const keys = Object.keys(value).sort();
  let out = '{';
  for (const key of keys) {
    const member = value[key];
    if (member === undefined) continue;
    out += `${out.length > 1 ? ',' : ''}${JSON.stringify(key)}:${canonicalJson(member)}`;
  }
  return `${out}}`;
}
