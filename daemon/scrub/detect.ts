// Which spans of a text are personal data, by type. Saudi national ID and Iqama numbers: ten digits starting with
// 1 or 2, Luhn-valid. Payment cards: 13–19 digits, Luhn-valid, in a known issuer range with that range's length.
// Values are read from a run's groups in a row (runs.ts), after the structures people write with digits that are not
// values have been set aside: dates, decimal numbers, international phone numbers (see NumberFinder.readStructure).
import { codePointBefore, isDecimalPoint, isInvisible } from './characters.js';
import { labelBefore, type Label } from './labels.js';
import { MAX_BUFFERED_GROUPS, scanDigits, type RunBuffer, type RunSink } from './runs.js';

export type RedactionType = 'NATIONAL_ID' | 'IQAMA' | 'IBAN' | 'CARD';

export interface Redaction {
  type: RedactionType;
  /** Original span, JavaScript string indices: from the first significant character to the end of the last. */
  start: number;
  end: number;
  /** The value as detected (ASCII digits, upper-case letters): for numbering placeholders, never logged. */
  value: string;
}

/** The number made of `width` digits from `at` (read from the digit values, without a string). */
function prefix(d: Uint8Array, at: number, width: number): number {
  let p = 0;
  for (let i = 0; i < width; i++) p = p * 10 + d[at + i]!;
  return p;
}

/** Mada BIN prefixes (Saudi Payments' domestic scheme) that are not also Visa or Mastercard ranges: [prefix, width]. */
const MADA_PREFIXES: ReadonlyArray<readonly [number, number]> = [
  [9682, 4],
  [588845, 6],
  [588846, 6],
  [588848, 6],
  [588849, 6],
  [588850, 6],
  [588982, 6],
  [588983, 6],
  [589005, 6],
  [589206, 6],
  [604906, 6],
  [636120, 6],
];

function isMada(d: Uint8Array, at: number): boolean {
  for (const [value, width] of MADA_PREFIXES) if (prefix(d, at, width) === value) return true;
  return false;
}

/** The card network of the `n` digit values from `at` in `d`, by issuer range and length, or null. */
function networkOf(d: Uint8Array, at: number, n: number): string | null {
  const p2 = d[at]! * 10 + d[at + 1]!;
  const p3 = p2 * 10 + d[at + 2]!;
  const p4 = p3 * 10 + d[at + 3]!;
  if (p2 >= 40 && p2 <= 49 && (n === 13 || n === 16 || n === 19)) return 'visa';
  if (n === 16 && ((p2 >= 51 && p2 <= 55) || (p4 >= 2221 && p4 <= 2720))) return 'mastercard';
  if (n === 15 && (p2 === 34 || p2 === 37)) return 'amex';
  if (n === 16 && isMada(d, at)) return 'mada';
  if (n >= 16 && n <= 19) {
    const p6 = prefix(d, at, 6);
    if (p4 === 6011 || (p3 >= 644 && p3 <= 649) || p2 === 65 || (p6 >= 622126 && p6 <= 622925)) return 'discover';
    if (p4 >= 3528 && p4 <= 3589) return 'jcb';
    if (p4 >= 2200 && p4 <= 2204) return 'mir';
    if (p2 === 62) return 'unionpay';
  }
  if ((n === 14 && (p2 === 36 || (p3 >= 300 && p3 <= 305))) || ((n === 14 || n === 16) && (p2 === 38 || p2 === 39))) return 'diners';
  return null;
}

/** The card network a number (ASCII digits) belongs to, by issuer range and length, or null. */
export function cardNetwork(d: string): string | null {
  return networkOf(
    Uint8Array.from(d, (c) => c.charCodeAt(0) - 48),
    0,
    d.length,
  );
}

/** What a Luhn-valid number of a value's length (`mayBeValue`), `n` digit values from `at`, is, if anything. */
function classifyValid(d: Uint8Array, at: number, n: number): RedactionType | null {
  if (n === 10) return d[at] === 1 ? 'NATIONAL_ID' : d[at] === 2 ? 'IQAMA' : null;
  return networkOf(d, at, n) ? 'CARD' : null;
}

/** The longest digit run an international phone number has (E.164: fifteen), with "00" written for "+". */
const LONGEST_PHONE = 17;
/** The shortest value read from digits alone (a national ID or Iqama number), and the longest (a card number). */
const SHORTEST_VALUE = 10;
const LONGEST_VALUE = 19;

/** A gap's separators (runs.ts): the first's unit, and the second's (0 if there is none). */
const firstOf = (gap: number) => gap % 65536;
const secondOf = (gap: number) => Math.floor(gap / 65536);
const hasPoint = (gap: number) => isDecimalPoint(firstOf(gap)) || isDecimalPoint(secondOf(gap));
/** Separators a date's parts are joined by: dashes, dots, minus signs; not spaces (a grouped ID's). By gap (runs.ts). */
const DATE_JOINER = new Uint8Array(0x10000);
for (const unit of [0x2d, 0x2e, 0x2010, 0x2011, 0x2012, 0x2013, 0x2014, 0x2212, 0xff0d, 0xff0e]) DATE_JOINER[unit] = 1;
/** Whether the gap is one date joiner, or holds one (of two separators). */
const isDateJoiner = (gap: number) => gap < 0x10000 && DATE_JOINER[gap] === 1;
const holdsDateJoiner = (gap: number) => DATE_JOINER[firstOf(gap)] === 1 || DATE_JOINER[secondOf(gap)] === 1;

const groupLength = (run: RunBuffer, g: number) => run.groupTo(g) - run.from[g]!;

/** The number the group's digits make (a date's parts: at most four digits). */
function groupNumber(run: RunBuffer, g: number): number {
  let n = 0;
  for (let i = run.from[g]!, to = run.groupTo(g); i < to; i++) n = n * 10 + run.digits[i]!;
  return n;
}

const isYear = (n: number) => n >= 1300 && n <= 2199;

/**
 * Whether groups g, g+1 and g+2 are a date: year-month-day or day-month-year (or month-day-year), the year of four
 * digits in 1300–2199 (Hijri and Gregorian), the parts joined by the same one dash or dot.
 */
function isDate(run: RunBuffer, g: number): boolean {
  const joiner = run.gap[g + 1]!;
  if (!isDateJoiner(joiner) || joiner !== run.gap[g + 2]) return false;
  const a = groupLength(run, g);
  const b = groupLength(run, g + 1);
  const c = groupLength(run, g + 2);
  if (b > 2) return false;
  if (a === 4 && c <= 2) {
    const m = groupNumber(run, g + 1);
    const d = groupNumber(run, g + 2);
    return isYear(groupNumber(run, g)) && m >= 1 && m <= 12 && d >= 1 && d <= 31;
  }
  if (a <= 2 && c === 4) {
    const x = groupNumber(run, g);
    const y = groupNumber(run, g + 1);
    const dayMonth = x >= 1 && x <= 31 && y >= 1 && y <= 12;
    const monthDay = x >= 1 && x <= 12 && y >= 1 && y <= 31;
    return isYear(groupNumber(run, g + 2)) && (dayMonth || monthDay);
  }
  return false;
}

/** Whether group g is an IPv4 address's part: one to three digits, at most 255. */
const isOctet = (run: RunBuffer, g: number) => groupLength(run, g) <= 3 && groupNumber(run, g) <= 255;

/**
 * Whether groups g to g+3 are an IPv4 address: four parts of at most 255 joined by single dots, with no dot before or
 * after them (1.2.3.4.5 is a version or a list, read as any run).
 */
function isAddress(run: RunBuffer, g: number): boolean {
  // The dots first: most runs (a table of numbers, a grouped ID) fail there.
  if (g + 3 >= run.groups || run.gap[g + 1] !== 0x2e || run.gap[g + 2] !== 0x2e || run.gap[g + 3] !== 0x2e) return false;
  if ((g > 0 && hasPoint(run.gap[g]!)) || (g + 4 < run.groups && hasPoint(run.gap[g + 4]!))) return false;
  return isOctet(run, g) && isOctet(run, g + 1) && isOctet(run, g + 2) && isOctet(run, g + 3);
}

/**
 * Whether a stream may cut the run just before group g, judging what comes before the cut without what follows
 * (stream.ts): only where no structure NumberFinder reads can span the cut. A decimal point in the gap could make a
 * decimal of the groups on either side; a dash or dot could join a date, which needs a four-digit group next to it.
 */
export function mayCutBefore(run: RunBuffer, g: number): boolean {
  const gap = run.gap[g]!;
  if (hasPoint(gap)) return false;
  if (!holdsDateJoiner(gap)) return true;
  for (let k = Math.max(0, g - 2); k <= Math.min(run.groups - 1, g + 1); k++) if (groupLength(run, k) === 4) return false;
  return true;
}

/** Whether the run follows a plus sign (seen through invisible characters): an international phone number. */
function afterPlus(text: string, start: number): boolean {
  for (let i = start; i > 0;) {
    const cp = codePointBefore(text, i);
    if (!isInvisible(cp)) return cp === 0x2b || cp === 0xff0b;
    i -= cp > 0xffff ? 2 : 1;
  }
  return false;
}

/**
 * Whether the run starts with "00" glued to more digits, the dialling prefix written for "+" (0044…, 00966…). A "00"
 * group of its own is not one: it is most often the end of a time ("10:00 1012345678", "+03:00 2…").
 */
function dialsOut(run: RunBuffer): boolean {
  return run.digits[0] === 0 && run.digits[1] === 0 && groupLength(run, 0) > 2;
}

const DOUBLED = [0, 2, 4, 6, 8, 1, 3, 5, 7, 9];
/**
 * Groups a judgement looks past the one it judges: a value's nineteen digits (nineteen groups at most) and the two
 * groups a date or a decimal after them needs.
 */
const LOOKAHEAD = LONGEST_VALUE + 3;
/** Groups kept before the first one still to judge, for the structures that reach back (a date, a decimal). */
const CONTEXT = 3;

/**
 * Reads the values of each run as the scan hands it over (runs.ts). At each group, from the run's first, the longest
 * valid reading that starts there is taken, unless a reading taken before already covers the group: one pass, each
 * decision final once nineteen digits after it are known, so a run of any length is judged in bounded memory.
 */
class NumberFinder implements RunSink {
  found: Redaction[] = [];
  /** Groups of the current run before this one (in the buffer) are judged. */
  private judged = 0;
  /** The last group (counted from the run's first) that a value taken covers; -1 when none. */
  private coveredThrough = -1;
  // Scratch space, kept from one text to the next (scanning is synchronous: one finder serves every call).
  private excluded = new Uint8Array(MAX_BUFFERED_GROUPS);
  /** Luhn prefix sums of the buffer's digits: one doubling those at even positions, one those at odd. */
  private even = new Int32Array(256);
  private odd = new Int32Array(256);

  /** Starts a new text: what was found in the last one is the caller's now. */
  reset(): void {
    this.found = [];
    this.judged = 0;
    this.coveredThrough = -1;
  }

  take(text: string, run: RunBuffer, ended: boolean): void {
    const limit = ended ? run.groups : run.groups - LOOKAHEAD;
    if (limit > this.judged) this.judge(text, run, limit);
    if (ended) {
      this.judged = 0;
      this.coveredThrough = -1;
      return;
    }
    const drop = limit - CONTEXT;
    run.shift(drop);
    this.judged = limit - drop;
  }

  private judge(text: string, run: RunBuffer, limit: number): void {
    const excluded = this.readStructure(text, run);
    const { digits, from, base, groups } = run;
    // Where each group's digits end is where the next one's begin: the last group's end too, for this loop.
    from[groups] = run.count;
    // Long runs check each reading against prefix sums; a short one reads its few digits.
    const sums = run.count > LONGEST_VALUE;
    if (sums) this.prefixSums(run);
    const { even, odd, found } = this;
    let covered = this.coveredThrough - base;
    const count = run.count;
    // Read only where it matters (a ten-digit value at the run's start): most runs never need it.
    let label: Label | undefined;
    // Two positions that only move forward as `a` does, so each reading is looked at once: the first group at which a
    // reading from `a` reaches a value's shortest length, and the first group set aside at or after `a` (no reading
    // goes through one).
    let reach = this.judged;
    let barrier = this.judged;
    for (let a = this.judged; a < limit; a++) {
      if (excluded[a] || a <= covered) continue;
      const start = from[a]!;
      // Fewer digits left in the run than the shortest value has: no value starts here or after.
      if (count - start < SHORTEST_VALUE) break;
      const first = digits[start]!;
      if (barrier < a) barrier = a;
      while (barrier < groups && !excluded[barrier]) barrier++;
      if (reach < a) reach = a;
      while (reach < groups && from[reach + 1]! - start < SHORTEST_VALUE) reach++;
      let best = -1;
      let bestType: RedactionType | null = null;
      for (let b = reach; b < barrier; b++) {
        const to = from[b + 1]!;
        const length = to - start;
        // A value's length (mayBeValue), written out: this loop runs for every group of every number-dense text.
        if (length > LONGEST_VALUE) break;
        if (length === SHORTEST_VALUE ? first !== 1 && first !== 2 : length < 13) continue;
        // Every value is Luhn-valid (most numbers fail here): in a window ending at `to`, the digits doubled have the
        // parity of `to`.
        const valid = sums
          ? ((to % 2 === 0 ? even : odd)[to]! - (to % 2 === 0 ? even : odd)[start]!) % 10 === 0
          : luhnDigits(digits, start, to);
        if (!valid) continue;
        const type = classifyValid(digits, start, length);
        if (!type || (length === SHORTEST_VALUE && base + a === 0 && (label ??= labelBefore(text, run.start[0]!)) === 'time')) continue;
        best = b;
        bestType = type;
      }
      if (!bestType) continue;
      const end = run.end[best]!;
      const to = from[best + 1]!;
      // Written as one group of ASCII digits (most values), the value is the text itself.
      const value =
        a === best && end - run.start[a]! === to - start && text.charCodeAt(end - 1) < 0x80
          ? text.slice(run.start[a], end)
          : run.digitString(start, to);
      found.push({ type: bestType, start: run.start[a]!, end, value });
      covered = best;
    }
    this.coveredThrough = base + covered;
  }

  /**
   * The groups that cannot be part of a value, because they belong to a structure people write with digits:
   *  - a date (2026-11-27, 27.11.2026, 1446-03-12): its three groups, so "2026-11-27 10:16:23" is not read as the
   *    ten digits "2026112710";
   *  - an IPv4 address (100.39.68.128): its four groups;
   *  - a decimal number: two groups joined by one decimal point, with no decimal point in the gaps on either side
   *    ("0.5122554429744111", "1732700123.512255", "1012345678.50"; "1.012.345.678" groups thousands). Both parts are
   *    set aside, except an integer part that opens the run right after an identifier's label ("ID 1012345678.5");
   *  - an international phone number: a run of at most LONGEST_PHONE digits after "+", or starting with "00" glued to
   *    more digits (dialsOut).
   * (A label that names a time keeps a ten-digit value from starting the run: judge.)
   */
  private readStructure(text: string, run: RunBuffer): Uint8Array {
    const count = run.groups;
    const excluded = this.excluded.fill(0, 0, count);
    const phoneLength = run.base === 0 && run.count <= LONGEST_PHONE;
    if (phoneLength && (afterPlus(text, run.start[0]!) || dialsOut(run))) return excluded.fill(1, 0, count);
    for (let g = 0; g + 2 < count; g++) {
      if (isDate(run, g)) {
        excluded[g] = excluded[g + 1] = excluded[g + 2] = 1;
        g += 2;
      } else if (isAddress(run, g)) {
        excluded.fill(1, g, g + 4);
        g += 3;
      }
    }
    for (let g = 1; g < count; g++) {
      if (!isDecimalPoint(run.gap[g]!) || excluded[g] || excluded[g - 1]) continue;
      if (hasPoint(run.gap[g - 1]!) || (g + 1 < count && hasPoint(run.gap[g + 1]!))) continue;
      excluded[g] = 1;
      if (run.base + g - 1 > 0 || labelBefore(text, run.start[0]!) !== 'identifier') excluded[g - 1] = 1;
    }
    return excluded;
  }

  /** Luhn prefix sums of the buffer's digits (see `even`, `odd`). */
  private prefixSums(run: RunBuffer): void {
    if (this.even.length <= run.count) {
      this.even = new Int32Array(run.count * 2 + 1);
      this.odd = new Int32Array(run.count * 2 + 1);
    } else if (this.even.length > LARGEST_KEPT && run.count < LARGEST_KEPT / 2) {
      // A very long group grew them; they are not kept for the rest of the process's life.
      this.even = new Int32Array(LARGEST_KEPT);
      this.odd = new Int32Array(LARGEST_KEPT);
    }
    const { even, odd } = this;
    const { digits } = run;
    for (let i = 0; i < run.count; i++) {
      const d = digits[i]!;
      const doubled = DOUBLED[d]!;
      even[i + 1] = even[i]! + (i % 2 === 0 ? doubled : d);
      odd[i + 1] = odd[i]! + (i % 2 === 1 ? doubled : d);
    }
  }
}

/** Luhn over digit values from `from` to `to`: the last digit checks the others. */
function luhnDigits(d: Uint8Array, from: number, to: number): boolean {
  let sum = 0;
  for (let i = to - 1, double = false; i >= from; i--, double = !double) sum += double ? DOUBLED[d[i]!]! : d[i]!;
  return sum % 10 === 0;
}

/**
 * National IDs, Iqama numbers and cards in `text`, non-overlapping, in order; and where the runs that may be an
 * IBAN's check digits begin (for findIbans), from the same one scan.
 */
export function findNumbers(text: string): { numbers: Redaction[]; ibanStarts: ArrayLike<number> } {
  FINDER.reset();
  const ibanStarts = scanDigits(text, FINDER);
  return { numbers: FINDER.found, ibanStarts };
}

const FINDER = new NumberFinder();
/** Prefix sums longer than this are given back once a shorter run needs them. */
const LARGEST_KEPT = 8192;
