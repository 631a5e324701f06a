// Numbers as people write them: digit groups joined by at most two separators, with invisible characters anywhere.
// Candidates are then taken on group boundaries only, so a value is never a window inside a longer digit group
// (timestamps, tracking numbers), while "4111 1111 1111 1111" and "1-0-1-2-…" are still one number.
import { ASTRAL_HIGH_SURROGATES, ASTRAL_RANGES, codePointBefore, digitValue, isInvisible, isSeparator, latinIndex } from './characters.js';
import { loadNativeScanner, type NativeScan } from './native.js';

export interface DigitGroup {
  /** The group's digits are `run.digits.slice(from, to)`. */
  from: number;
  to: number;
  /** Where the group's first digit starts and its last one ends in the text (JavaScript string indices). */
  start: number;
  end: number;
}

export interface DigitRun {
  /** The run's digits in ASCII, whatever the script they were written in. */
  digits: string;
  groups: DigitGroup[];
}

export interface DigitScan {
  /** Where every run that may be an IBAN's check digits (see MAY_PRECEDE_IBAN_DIGITS) has its first digit. */
  starts: number[] | Int32Array;
  /** The runs whose groups may make a value, with their groups (a decimal's last two groups left out). */
  runs: DigitRun[];
}

const MAX_SEPARATORS = 2;
/** The shortest value read from digits alone (a national ID or Iqama number). */
const SHORTEST_VALUE = 10;

/**
 * Code units a run must start right after to be an IBAN's check digits (which follow the country code's letters,
 * directly or after separators or invisible characters): Latin letters, separators, invisible characters, and the
 * second half of an invisible character above U+FFFF. Runs after anything else are not listed in `starts`.
 */
const MAY_PRECEDE_IBAN_DIGITS = new Uint8Array(0x10000);
for (let unit = 0; unit < 0x10000; unit++) {
  if (latinIndex(unit) >= 0 || isSeparator(unit) || isInvisible(unit) || (unit >= 0xdc00 && unit <= 0xdfff))
    MAY_PRECEDE_IBAN_DIGITS[unit] = 1;
}

// What each UTF-16 unit is to the scan, and a digit's value: one table read per unit. A high surrogate that may begin
// a mathematical digit or an invisible character above U+FFFF is ASTRAL: the pair is then read whole. The native
// scanner is given these same tables.
const UNIT_OTHER = 0;
const UNIT_DIGIT = 1;
const UNIT_SEPARATOR = 2;
const UNIT_INVISIBLE = 3;
const UNIT_ARABIC_DECIMAL = 4;
const UNIT_ASTRAL = 5;
const UNIT_KINDS = new Uint8Array(0x10000);
const UNIT_VALUES = new Int8Array(0x10000).fill(-1);
for (let unit = 0; unit < 0x10000; unit++) {
  UNIT_VALUES[unit] = digitValue(unit);
  UNIT_KINDS[unit] =
    UNIT_VALUES[unit]! >= 0 ? UNIT_DIGIT : isSeparator(unit) ? UNIT_SEPARATOR : isInvisible(unit) ? UNIT_INVISIBLE : UNIT_OTHER;
}
UNIT_KINDS[0x066b] = UNIT_ARABIC_DECIMAL;
for (const high of ASTRAL_HIGH_SURROGATES) UNIT_KINDS[high.charCodeAt(0)] = UNIT_ASTRAL;
/** Per range above U+FFFF: first, last, and its kind (a digit range's values repeat every ten from its first). */
const ASTRAL_KINDS = new Uint32Array(
  ASTRAL_RANGES.flatMap(({ first, last, kind }) => [first, last, kind === 'digit' ? UNIT_DIGIT : UNIT_INVISIBLE]),
);
/** Units a run may begin at: a digit, or a high surrogate that may begin one. */
const MAY_BEGIN_RUN = new Uint8Array(0x10000);
for (let unit = 0; unit < 0x10000; unit++)
  MAY_BEGIN_RUN[unit] = UNIT_KINDS[unit] === UNIT_DIGIT || UNIT_KINDS[unit] === UNIT_ASTRAL ? 1 : 0;

function isDecimalPoint(unit: number): boolean {
  return unit === 0x2e || unit === 0xff0e || unit === 0x066b;
}

/**
 * The digit runs of `text`: by the native scanner when it is built and the text is long enough to repay the call
 * (copying the text, building the result), else by `digitRunsJs`; the result is the same.
 */
export function digitRuns(text: string): DigitScan {
  return digitRunsNative && text.length >= NATIVE_FROM ? digitRunsNative(text) : digitRunsJs(text);
}

/** Below this many UTF-16 units (a streamed answer's window, a short message) the JavaScript scan is faster. */
const NATIVE_FROM = 2048;

// The run being read (scanning is synchronous, so one is enough): per group, the index of its first digit among the
// run's digits, that digit's value, and its span in the text; and the run's digit values. Grown when a run needs more.
let groupFrom = new Int32Array(64);
let groupFirst = new Int8Array(64);
let groupStart = new Int32Array(64);
let groupEnd = new Int32Array(64);
let runDigits = new Uint8Array(256);

/** The astral unit pair at `i`'s kind, its digit value in `astralValue`; OTHER if it is neither digit nor invisible. */
let astralValue = -1;
function astralKind(text: string, i: number): number {
  const cp = text.codePointAt(i)!;
  astralValue = -1;
  for (let r = 0; r < ASTRAL_KINDS.length; r += 3) {
    if (cp < ASTRAL_KINDS[r]! || cp > ASTRAL_KINDS[r + 1]!) continue;
    if (ASTRAL_KINDS[r + 2] === UNIT_DIGIT) astralValue = (cp - ASTRAL_KINDS[r]!) % 10;
    return ASTRAL_KINDS[r + 2]!;
  }
  return UNIT_OTHER;
}

/**
 * The scan in JavaScript, in one pass over the text's UTF-16 units, as the native scanner does it: a run goes from a
 * digit to the last digit joined to it, where between two digits there may be invisible characters and at most two
 * separators (the Arabic decimal separator only as the first). Text between runs costs one table read per unit.
 */
export function digitRunsJs(text: string): DigitScan {
  const scan = { starts: [] as number[], runs: [] as DigitRun[] };
  const length = text.length;
  let i = 0;
  for (;;) {
    while (i < length && MAY_BEGIN_RUN[text.charCodeAt(i)] === 0) i++;
    if (i >= length) {
      // A very long run grew the scratch space; it is not kept for the rest of the process's life.
      if (runDigits.length > LARGEST_KEPT) shrinkScratch();
      return scan;
    }
    // A run may begin at i: read it to its end (a high surrogate that begins no digit is passed over).
    let start = -1;
    let end = 0;
    let count = 0;
    let groups = 0;
    let separators = 0;
    let decimalTail = false;
    let lastSeparator = 0;
    for (; i < length;) {
      const unit = text.charCodeAt(i);
      let kind = UNIT_KINDS[unit]!;
      let value = UNIT_VALUES[unit]!;
      let width = 1;
      if (kind === UNIT_ASTRAL) {
        const low = i + 1 < length ? text.charCodeAt(i + 1) : 0;
        if (unit <= 0xdbff && low >= 0xdc00 && low <= 0xdfff) {
          kind = astralKind(text, i);
          value = astralValue;
          width = 2;
        } else {
          kind = UNIT_OTHER;
        }
      }
      if (start < 0) {
        if (kind !== UNIT_DIGIT) {
          i += width;
          break;
        }
        start = i;
      }
      if (kind === UNIT_DIGIT) {
        if (separators > 0 || count === 0) {
          if (groups === groupFrom.length) growGroups();
          // Whether the group starting now follows a lone decimal point; decided once the run has ended.
          decimalTail = separators === 1 && isDecimalPoint(lastSeparator);
          groupFrom[groups] = count;
          groupFirst[groups] = value;
          groupStart[groups] = i;
          groups++;
        }
        if (count === runDigits.length) runDigits = grown(runDigits);
        runDigits[count++] = value;
        end = groupEnd[groups - 1] = i + width;
        separators = 0;
      } else if (kind === UNIT_INVISIBLE) {
        // seen through
      } else if ((kind === UNIT_SEPARATOR && separators < MAX_SEPARATORS) || (kind === UNIT_ARABIC_DECIMAL && separators === 0)) {
        separators++;
        lastSeparator = unit;
      } else {
        // Anything else ends the run at its last digit; this unit cannot begin the next one.
        i += width;
        break;
      }
      i += width;
    }
    if (start >= 0) closeRun(text, scan, start, end, count, groups, decimalTail);
  }
}

/** A run ended: lists its start, and its groups and digits when some of its groups in a row may make a value. */
function closeRun(
  text: string,
  scan: DigitScan & { starts: number[] },
  start: number,
  end: number,
  count: number,
  allGroups: number,
  decimalTail: boolean,
): void {
  if (start === 0 || MAY_PRECEDE_IBAN_DIGITS[text.charCodeAt(start - 1)] === 1) scan.starts.push(start);
  // Fewer characters than the shortest value has digits: nothing in it to judge.
  if (end - start < SHORTEST_VALUE) return;
  let groups = allGroups;
  // "1012345678.50" is an amount: a dot followed by one or two final digits ends the run as a decimal number, and
  // neither part is taken for an identifier.
  if (decimalTail && groups >= 2 && count - groupFrom[groups - 1]! <= 2) groups -= 2;
  const usable = groups === 0 ? 0 : groups < allGroups ? groupFrom[groups]! : count;
  // Most long runs are phone numbers, amounts and references: none of their groups in a row make a value's length.
  if (usable < SHORTEST_VALUE || !holdsValueLength(groups, allGroups, count)) return;
  const out: DigitGroup[] = [];
  for (let g = 0; g < groups; g++) {
    out.push({ from: groupFrom[g]!, to: g + 1 < allGroups ? groupFrom[g + 1]! : count, start: groupStart[g]!, end: groupEnd[g]! });
  }
  let digits = '';
  for (let d = 0; d < usable; d++) digits += DIGIT_CHARS[runDigits[d]!]!;
  scan.runs.push({ digits, groups: out });
}

const DIGIT_CHARS = '0123456789';

const nativeScan = loadNativeScanner([UNIT_KINDS, UNIT_VALUES, MAY_PRECEDE_IBAN_DIGITS, ASTRAL_KINDS]);
/** The native scan on its own (null when the addon is not built): for the test that compares it with the other. */
export const digitRunsNative = nativeScan ? (text: string) => fromNative(nativeScan(text)) : null;

/** Which scanner `digitRuns` uses, for the log at start. */
export const scannerKind: 'native' | 'javascript' = nativeScan ? 'native' : 'javascript';

function fromNative({ starts, runs: flat, digits }: NativeScan): DigitScan {
  const runs: DigitRun[] = [];
  for (let at = 0; at < flat.length;) {
    const offset = flat[at++]!;
    const usable = flat[at++]!;
    const count = flat[at++]!;
    const groups: DigitGroup[] = [];
    for (let g = 0; g < count; g++, at += 4) groups.push({ from: flat[at]!, to: flat[at + 1]!, start: flat[at + 2]!, end: flat[at + 3]! });
    runs.push({ digits: digits.slice(offset, offset + usable), groups });
  }
  return { starts, runs };
}

/** The longest value read from digits alone (a card number). */
const LONGEST_VALUE = 19;

/** Whether a number of this many digits, starting with this one, may be a value: an ID or Iqama number, or a card. */
export function mayBeValue(length: number, firstDigit: number): boolean {
  return length === SHORTEST_VALUE ? firstDigit === 1 || firstDigit === 2 : length >= 13 && length <= LONGEST_VALUE;
}

/** Whether some of the run's first `groups` groups in a row make a number that `mayBeValue`. */
function holdsValueLength(groups: number, allGroups: number, count: number): boolean {
  for (let a = 0; a < groups; a++) {
    for (let b = a; b < groups; b++) {
      const length = (b + 1 < allGroups ? groupFrom[b + 1]! : count) - groupFrom[a]!;
      if (length > LONGEST_VALUE) break;
      if (mayBeValue(length, groupFirst[a]!)) return true;
    }
  }
  return false;
}

function grown<T extends Int32Array | Int8Array | Uint8Array>(a: T): T {
  const b = new (a.constructor as new (length: number) => T)(a.length * 2);
  b.set(a);
  return b;
}

/** Scratch space beyond this (digits, or groups) is given back after the scan that needed it. */
const LARGEST_KEPT = 4096;

function shrinkScratch(): void {
  runDigits = new Uint8Array(256);
  if (groupFrom.length > LARGEST_KEPT) {
    groupFrom = new Int32Array(64);
    groupFirst = new Int8Array(64);
    groupStart = new Int32Array(64);
    groupEnd = new Int32Array(64);
  }
}

function growGroups(): void {
  groupFrom = grown(groupFrom);
  groupFirst = grown(groupFirst);
  groupStart = grown(groupStart);
  groupEnd = grown(groupEnd);
}

/**
 * For streaming: where the digit run still open at the end of `text` begins (text to come may extend it, and only
 * a whole run can be judged), or `text.length` if the text does not end inside one.
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
    } else if (joins(cp)) {
      if (++separators > MAX_SEPARATORS) break;
    } else if (!isInvisible(cp)) {
      break;
    }
    i -= cp > 0xffff ? 2 : 1;
  }
  return start;
}
