// An entry's time, as Date.prototype.toISOString writes it. Every call's entry has one, and toISOString formats the
// whole date on each call: here the part up to the second is made once a second and reused. The string MUST be the
// one toISOString writes.

let second = Number.NaN;
let prefix = '';

/** `new Date(ms).toISOString()`, the same string. */
export function isoTime(ms: number = Date.now()): string {
  const milli = ((ms % 1000) + 1000) % 1000;
  const start = ms - milli;
  if (start !== second) {
    // A whole second's ISO string ends in ".000Z".
    prefix = new Date(start).toISOString().slice(0, -4);
    second = start;
  }
  return `${prefix}${milli < 10 ? '00' : milli < 100 ? '0' : ''}${milli}Z`;
}
