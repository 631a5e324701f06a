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
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const keys = Object.keys(value)
    .filter((k) => value[k] !== undefined)
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k]!)}`).join(',')}}`;
}
