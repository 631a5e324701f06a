// Numbers as people write them: digit groups joined by at most two separators (one of them at most a line break),
// with invisible characters anywhere. Candidates are then taken on group boundaries only, so a value is never a window
// inside a longer digit group (timestamps, tracking numbers), while "4111 1111 1111 1111" and "1-0-1-2-…" are still
// one number. This is the scan alone: what the groups mean (dates, decimals, values) is read in detect.ts.
import { loadNativeScanner } from './native.js';
import {
  ARABIC_DECIMAL,
  ASTRAL,
  ASTRAL_KINDS,
  ASTRAL_VALUES,
  BMP_KINDS,
  BMP_VALUES,
  codePointBefore,
  DIGIT,
  digitValue,
  INVISIBLE,
  isInvisible,
  isSeparator,
  latinIndex,
  LINE_BREAK,
  SEPARATOR,
} from './characters.js';

/**
 * The groups of the run being read, in arrays the scanner reuses: a group's digits are `digits[from[g]]` up to the next
 * group's `from` (or `count`), its first digit starts at `start[g]` and its last ends at `end[g]` in the text, and
 * `gap[g]` is what stands between it and the group before: the first separator's UTF-16 unit plus the second's times
 * 65536 (a line break, CR LF included, reads as one 0x0A); 0 for a run's first group. A run too long for the arrays is
 * handed over in parts (`RunSink`): `base` counts the groups of the run dropped from the front so far.
 */
export class RunBuffer {
  digits = new Uint8Array(256);
  count = 0;
  from = new Int32Array(64);
  start = new Int32Array(64);
  end = new Int32Array(64);
  gap = new Float64Array(64);
  groups = 0;
  base = 0;

  /** Where group g's digits end among the run's digits. */
  groupTo(g: number): number {
    return g + 1 < this.groups ? this.from[g + 1]! : this.count;
  }

  digitString(from: number, to: number): string {
    let out = '';
    for (let i = from; i < to; i++) out += DIGIT_CHARS[this.digits[i]!]!;
    return out;
  }

  /** Drops the first `n` groups (and their digits): the reader has judged them. */
  shift(n: number): void {
    const digitsFrom = n < this.groups ? this.from[n]! : this.count;
    this.digits.copyWithin(0, digitsFrom, this.count);
    this.count -= digitsFrom;
    this.start.copyWithin(0, n, this.groups);
    this.end.copyWithin(0, n, this.groups);
    this.gap.copyWithin(0, n, this.groups);
    for (let g = n; g < this.groups; g++) this.from[g - n] = this.from[g]! - digitsFrom;
    this.groups -= n;
    this.base += n;
  }

  /** Empties the buffer after a scan. */
  clear(): void {
    this.count = 0;
    this.groups = 0;
    this.base = 0;
    // A very long run grew the arrays; they are not kept for the rest of the process's life.
    if (this.digits.length > LARGEST_KEPT) this.digits = new Uint8Array(256);
    if (this.from.length > LARGEST_KEPT) {
      this.from = new Int32Array(64);
      this.start = new Int32Array(64);
      this.end = new Int32Array(64);
      this.gap = new Float64Array(64);
    }
  }

  addGroup(from: number, start: number, gap: number): void {
    // One place more than the groups: a reader may put the digits' end after the last group's start.
    if (this.groups + 1 === this.from.length) {
      this.from = grown(this.from);
      this.start = grown(this.start);
      this.end = grown(this.end);
      this.gap = grown(this.gap);
    }
    this.from[this.groups] = from;
    this.start[this.groups] = start;
    this.gap[this.groups] = gap;
    this.groups++;
  }

  addDigit(value: number): void {
    if (this.count === this.digits.length) this.digits = grown(this.digits);
    this.digits[this.count++] = value;
  }
}

/** What reads the runs as they are scanned: each run of at least ten digits, whole or (if very long) in parts. */
export interface RunSink {
  /**
   * The run in `buffer` ended (`ended`), or filled MAX_BUFFERED_GROUPS groups: the sink reads what it can judge and,
   * before the scan goes on, shifts out the groups it no longer needs (keeping the buffer under that size).
   */
  take(text: string, buffer: RunBuffer, ended: boolean): void;
}

/** Past this many groups in one run, the sink is handed the run so far, so memory stays bounded whatever the run. */
export const MAX_BUFFERED_GROUPS = 4096;

const MAX_SEPARATORS = 2;
/** The shortest value read from digits alone (a national ID or Iqama number). */
const SHORTEST_VALUE = 10;

/**
 * Code units a run must start right after to be an IBAN's check digits (which follow the country code's letters,
 * directly or after separators or invisible characters): Latin letters, separators, line breaks, invisible
 * characters, and the second half of a surrogate pair. Runs after anything else are not listed in `starts`.
 */
const MAY_PRECEDE_IBAN_DIGITS = new Uint8Array(0x10000);
for (let unit = 0; unit < 0x10000; unit++) {
  if (latinIndex(unit) >= 0 || isSeparator(unit) || isInvisible(unit) || (unit >= 0xdc00 && unit <= 0xdfff))
    MAY_PRECEDE_IBAN_DIGITS[unit] = 1;
}

// What each UTF-16 unit is to the scan: one table read per unit. A high surrogate of plane 1 or 14 (the only planes
// with digits, marks or invisible characters) is ASTRAL: the pair is then read whole from the astral tables.
const UNIT_KINDS = BMP_KINDS.slice();
for (let high = 0xd800; high <= 0xdbff; high++) {
  const plane = ((high - 0xd800) >> 6) + 1;
  UNIT_KINDS[high] = plane === 1 || plane === 14 ? ASTRAL : 0;
}
for (let low = 0xdc00; low <= 0xdfff; low++) UNIT_KINDS[low] = 0;
const UNIT_VALUES = BMP_VALUES;
/** Units a run may begin at: a digit, or a high surrogate that may begin one. */
const MAY_BEGIN_RUN = new Uint8Array(0x10000);
for (let unit = 0; unit < 0x10000; unit++) MAY_BEGIN_RUN[unit] = UNIT_KINDS[unit] === DIGIT || UNIT_KINDS[unit] === ASTRAL ? 1 : 0;

/**
 * Where the next unit a run may begin at is, from `from`; the text's length if there is none. Text between numbers
 * is most of any text: this loop, on its own, is what the engine optimises hardest.
 */
function nextRunBegin(text: string, from: number): number {
  const length = text.length;
  let i = from;
  while (i < length && MAY_BEGIN_RUN[text.charCodeAt(i)] === 0) i++;
  return i;
}

/** The kind of the surrogate pair at `i` (OTHER if it is not one); its digit value in `astralValue`. */
let astralValue = -1;
function astralKind(text: string, i: number): number {
  const cp = text.codePointAt(i)!;
  const at = cp < 0xe0000 ? cp - 0x10000 : cp - 0xe0000 + 0x10000;
  astralValue = ASTRAL_VALUES[at]!;
  return ASTRAL_KINDS[at]!;
}

/**
 * The scan: a run goes from a digit to the last digit joined to it, where between two digits there may be invisible
 * characters and at most two separators, of which at most one line break (CR LF is one) and U+066B only alone. Each
 * run of at least ten digits goes to `sink`; the result is where every run that may be an IBAN's check digits begins.
 * In a long text the native scanner finds the runs (most text lies between numbers, and it reads it at memory speed),
 * and each run of ten digits or more is read here; otherwise one JavaScript pass does both, with the same result.
 */
export function scanDigits(text: string, sink: RunSink | null): ArrayLike<number> {
  if (!nativeScan || text.length < NATIVE_FROM) return scanDigitsJs(text, sink);
  const { starts, runs } = nativeScan(text);
  if (sink) for (let r = 0; r < runs.length; r++) readRun(text, runs[r]!, sink, null);
  SHARED_BUFFER.clear();
  return starts;
}

/** Whether `text` holds a digit (or a surrogate pair that may be one): a text without one holds no value, IBANs included. */
export function holdsDigits(text: string): boolean {
  return nextRunBegin(text, 0) < text.length;
}

/** The scan in JavaScript alone (what runs without the native addon, and for short texts). */
export function scanDigitsJs(text: string, sink: RunSink | null): number[] {
  const starts: number[] = [];
  const length = text.length;
  for (let i = 0; ;) {
    i = nextRunBegin(text, i);
    if (i >= length) {
      SHARED_BUFFER.clear();
      return starts;
    }
    i = readRun(text, i, sink, starts);
  }
}

/**
 * Reads the run that may begin at `i` (a digit, or a high surrogate that may begin one) to its end, hands it to `sink`
 * if it has ten digits or more, and lists its start in `starts` if an IBAN's check digits may begin there. Returns
 * where scanning goes on.
 * Kept whole: it is the scanner's per-character state machine, whose state lives in locals its inner loop updates.
 */
function readRun(text: string, i: number, sink: RunSink | null, starts: number[] | null): number {
  const length = text.length;
  const buffer = SHARED_BUFFER;
  let start = -1;
  let separators = 0;
  let gap = 0;
  let lineBreak = false;
  let afterCR = false;
  let digits = 0;
  buffer.count = buffer.groups = buffer.base = 0;
  for (; i < length;) {
    const unit = text.charCodeAt(i);
    let kind = UNIT_KINDS[unit]!;
    let value = UNIT_VALUES[unit]!;
    let width = 1;
    if (kind === ASTRAL) {
      const low = i + 1 < length ? text.charCodeAt(i + 1) : 0;
      if (low >= 0xdc00 && low <= 0xdfff) {
        kind = astralKind(text, i);
        value = astralValue;
        width = 2;
      } else {
        kind = 0;
      }
    }
    if (start < 0) {
      if (kind !== DIGIT) return i + width;
      start = i;
      if (starts && (start === 0 || MAY_PRECEDE_IBAN_DIGITS[text.charCodeAt(start - 1)] === 1)) starts.push(start);
    }
    if (kind === DIGIT) {
      if (separators > 0 || digits === 0) {
        if (buffer.groups === MAX_BUFFERED_GROUPS && sink) sink.take(text, buffer, false);
        buffer.addGroup(buffer.count, i, gap);
      }
      // This digit, those of the BMP right after it (most of a number), and the groups after it that one plain
      // separator joins (a table's, a grouped number's), in one tight loop.
      let stored = buffer.digits;
      let count = buffer.count;
      let at = i + width;
      for (;;) {
        if (count === stored.length) stored = buffer.digits = grown(stored);
        stored[count++] = value;
        if (at >= length) break;
        value = UNIT_VALUES[text.charCodeAt(at)]!;
        if (value >= 0) {
          at++;
          continue;
        }
        const separator = text.charCodeAt(at);
        if (at + 1 >= length || UNIT_KINDS[separator] !== SEPARATOR) break;
        value = UNIT_VALUES[text.charCodeAt(at + 1)]!;
        if (value < 0) break;
        buffer.end[buffer.groups - 1] = at;
        digits += count - buffer.count;
        buffer.count = count;
        if (buffer.groups === MAX_BUFFERED_GROUPS && sink) {
          sink.take(text, buffer, false);
          count = buffer.count;
        }
        buffer.addGroup(count, at + 1, separator);
        stored = buffer.digits;
        at += 2;
      }
      digits += count - buffer.count;
      buffer.count = count;
      buffer.end[buffer.groups - 1] = at;
      i = at;
      separators = 0;
      gap = 0;
      lineBreak = false;
      afterCR = false;
      continue;
    }
    if (kind === INVISIBLE) {
      // seen through
    } else if (kind === LINE_BREAK && unit === 0x0a && afterCR) {
      // the LF of a CR LF: one line break
      afterCR = false;
    } else if (
      (kind === LINE_BREAK && !lineBreak && separators < MAX_SEPARATORS) ||
      (kind === SEPARATOR && separators < MAX_SEPARATORS) ||
      (kind === ARABIC_DECIMAL && separators === 0)
    ) {
      const recorded = kind === LINE_BREAK ? 0x0a : unit;
      gap += separators === 0 ? recorded : recorded * 65536;
      separators++;
      lineBreak ||= kind === LINE_BREAK;
      afterCR = unit === 0x0d;
    } else {
      // Anything else ends the run at its last digit; this unit cannot begin the next one.
      i += width;
      break;
    }
    i += width;
  }
  // Fewer than the shortest value's digits: nothing in it to judge.
  if (digits >= SHORTEST_VALUE && sink) sink.take(text, buffer, true);
  return i;
}

/** Below this many UTF-16 units (a streamed answer's window, a short message) calling the native scanner costs more. */
const NATIVE_FROM = 2048;

const nativeScan = loadNativeScanner([UNIT_KINDS, UNIT_VALUES, MAY_PRECEDE_IBAN_DIGITS, ASTRAL_KINDS, ASTRAL_VALUES]);

/** Which scanner finds the runs of long texts, for the log at start. */
export const scannerKind: 'native' | 'javascript' = nativeScan ? 'native' : 'javascript';

/** One buffer for every scan: scanning is synchronous, and a sink reads a run before the next one begins. */
const SHARED_BUFFER = new RunBuffer();

export interface DigitGroup {
  /** The group's digits are `run.digits.slice(from, to)`. */
  from: number;
  to: number;
  start: number;
  end: number;
  /** See RunBuffer. */
  gap: number;
}

export interface DigitRun {
  /** The run's digits in ASCII, whatever the script they were written in. */
  digits: string;
  groups: DigitGroup[];
}

/**
 * The runs of `text` as objects: those some of whose groups in a row have a value's length, or with `everyRun` every
 * run of ten digits or more. For the stream's look at the run it holds, and for tests.
 */
export function digitRunList(text: string, everyRun = false, scan = scanDigits): { starts: number[]; runs: DigitRun[] } {
  const runs: DigitRun[] = [];
  let open: DigitRun | null = null;
  const starts = scan(text, {
    take(_text, buffer, ended) {
      open ??= { digits: '', groups: [] };
      const offset = open.digits.length;
      for (let g = 0; g < buffer.groups; g++) {
        const from = offset + buffer.from[g]!;
        open.groups.push({ from, to: offset + buffer.groupTo(g), start: buffer.start[g]!, end: buffer.end[g]!, gap: buffer.gap[g]! });
      }
      open.digits += buffer.digitString(0, buffer.count);
      buffer.shift(buffer.groups);
      if (!ended) return;
      if (everyRun || holdsValueLength(open)) runs.push(open);
      open = null;
    },
  });
  return { starts: Array.from(starts), runs };
}

/** The longest value read from digits alone (a card number). */
const LONGEST_VALUE = 19;

/** Whether a number of this many digits, starting with this one, may be a value: an ID or Iqama number, or a card. */
export function mayBeValue(length: number, firstDigit: number): boolean {
  return length === SHORTEST_VALUE ? firstDigit === 1 || firstDigit === 2 : length >= 13 && length <= LONGEST_VALUE;
}

/** Whether some of the run's groups in a row make a number that `mayBeValue`. */
function holdsValueLength(run: DigitRun): boolean {
  const { groups, digits } = run;
  for (let a = 0; a < groups.length; a++) {
    for (let b = a; b < groups.length; b++) {
      const length = groups[b]!.to - groups[a]!.from;
      if (length > LONGEST_VALUE) break;
      if (mayBeValue(length, digits.charCodeAt(groups[a]!.from) - 48)) return true;
    }
  }
  return false;
}

function grown<T extends Int32Array | Uint8Array | Float64Array>(a: T): T {
  const b = new (a.constructor as new (length: number) => T)(a.length * 2);
  b.set(a);
  return b;
}

/** Space beyond this (digits, or groups: a buffer's worth and one) is given back after the run that needed it. */
const LARGEST_KEPT = 2 * MAX_BUFFERED_GROUPS;

const DIGIT_CHARS = '0123456789';

/**
 * For streaming: where the digit run still open at the end of `text` begins (text to come may extend it, and only
 * a whole run can be judged), or `text.length` if the text does not end inside one. It may answer earlier than the
 * scan would (holding more back is safe), never later: a CR is not counted, and a second line break does not end it.
 */
export function openRunStart(text: string): number {
  let i = text.length;
  let separators = 0;
  // The Arabic decimal separator joins groups too (only right after a digit, but assuming it always does is safe).
  const joins = (cp: number) => isSeparator(cp) || cp === 0x066b;
  let start = text.length;
  while (i > 0) {
    const cp = codePointBefore(text, i);
    if (digitValue(cp) >= 0) {
      start = i - (cp > 0xffff ? 2 : 1);
      separators = 0;
    } else if (cp === 0x0d) {
      // half of a CR LF, or a line break of its own: either way not more than one separator
    } else if (joins(cp)) {
      if (++separators > MAX_SEPARATORS) break;
    } else if (!isInvisible(cp)) {
      break;
    }
    i -= cp > 0xffff ? 2 : 1;
  }
  return start;
}
