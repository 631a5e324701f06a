// Numbers as people write them: digit groups joined by at most two separators, with invisible characters anywhere.
// Candidates are then taken on group boundaries only, so a value is never a window inside a longer digit group
// (timestamps, tracking numbers), while "4111 1111 1111 1111" and "1-0-1-2-…" are still one number.
import {
  ASTRAL_HIGH_SURROGATES,
  ASTRAL_RANGES,
  codePointBefore,
  DIGIT_CLASS,
  digitValue,
  INVISIBLE_CLASS,
  INVISIBLE_PATTERN,
  isInvisible,
  isSeparator,
  latinIndex,
  MATH_DIGIT_PATTERN,
  SEPARATOR_CLASS,
} from './characters.js';
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
 * A run from its first digit to its last, as people write numbers: between two digits, invisible characters and at
 * most two separators (the Arabic decimal separator only as the first). One regex match per run: the regex engine
 * skips text without digits fast and consumes a whole run per match (so no run is tried again from an inner digit).
 * The BMP-only form is for text with no mathematical digit and no invisible character above U+FFFF (most text).
 */
const runPattern = (digit: string, invisible: string) => {
  const gap = `${invisible}*(?:[${SEPARATOR_CLASS}\\u066b]${invisible}*(?:[${SEPARATOR_CLASS}]${invisible}*)?)?`;
  return new RegExp(`${digit}(?:${gap}${digit})*`, 'g');
};
const RUN_ALL = runPattern(`(?:[${DIGIT_CLASS}]|${MATH_DIGIT_PATTERN})`, INVISIBLE_PATTERN);
const RUN_BMP = runPattern(`[${DIGIT_CLASS}]`, `[${INVISIBLE_CLASS}]`);

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

function isDecimalPoint(cp: number): boolean {
  return cp === 0x2e || cp === 0xff0e || cp === 0x066b;
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

/** The scan in JavaScript: a regex match per run, read further in JavaScript when it is long enough. */
export function digitRunsJs(text: string): DigitScan {
  const scan = { starts: [] as number[], runs: [] as DigitRun[] };
  const RUN = ASTRAL_HIGH_SURROGATES.some((high) => text.includes(high)) ? RUN_ALL : RUN_BMP;
  RUN.lastIndex = 0;
  for (let match = RUN.exec(text); match; match = RUN.exec(text)) {
    const start = match.index;
    if (start === 0 || MAY_PRECEDE_IBAN_DIGITS[text.charCodeAt(start - 1)] === 1) scan.starts.push(start);
    // Fewer characters than the shortest value has digits: nothing in it to judge.
    if (match[0].length >= SHORTEST_VALUE) readRun(text, start, RUN.lastIndex, scan.runs);
  }
  return scan;
}

// The native scanner's character tables, built from characters.ts, so that it reads exactly what this file reads.
const UNIT_OTHER = 0;
const UNIT_DIGIT = 1;
const UNIT_SEPARATOR = 2;
const UNIT_INVISIBLE = 3;
const UNIT_ARABIC_DECIMAL = 4;
const UNIT_ASTRAL = 5;
function nativeTables(): [Uint8Array, Int8Array, Uint8Array, Uint32Array] {
  const kinds = new Uint8Array(0x10000);
  const values = new Int8Array(0x10000).fill(-1);
  for (let unit = 0; unit < 0x10000; unit++) {
    values[unit] = digitValue(unit);
    kinds[unit] = values[unit]! >= 0 ? UNIT_DIGIT : isSeparator(unit) ? UNIT_SEPARATOR : isInvisible(unit) ? UNIT_INVISIBLE : UNIT_OTHER;
  }
  kinds[0x066b] = UNIT_ARABIC_DECIMAL;
  for (const high of ASTRAL_HIGH_SURROGATES) kinds[high.charCodeAt(0)] = UNIT_ASTRAL;
  const astral = new Uint32Array(
    ASTRAL_RANGES.flatMap(({ first, last, kind }) => [first, last, kind === 'digit' ? UNIT_DIGIT : UNIT_INVISIBLE]),
  );
  return [kinds, values, MAY_PRECEDE_IBAN_DIGITS, astral];
}
const nativeScan = loadNativeScanner(nativeTables());
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

// Scratch space for the run being read (scanning is synchronous, so one is enough): per group, the index of its
// first digit among the run's digits, that digit's value, and its span in the text. Grown when a run has more groups.
let groupFrom = new Int32Array(64);
let groupFirst = new Int8Array(64);
let groupStart = new Int32Array(64);
let groupEnd = new Int32Array(64);

const NOT_ASCII_DIGIT = /[^0-9]/g;

/**
 * Reads the run from its first digit at `start` to just after its last at `end` (the span RUN matched, so every
 * character in it is a digit, an invisible character or a separator in a valid place) into `runs`.
 */
function readRun(text: string, start: number, end: number, runs: DigitRun[]): void {
  let count = 0;
  let groups = 0;
  let separators = 0;
  let lastSeparator = 0;
  let decimalTail = false;
  let ascii = true;
  for (let i = start; i < end;) {
    const unit = text.charCodeAt(i);
    const cp = unit >= 0xd800 && unit <= 0xdbff ? text.codePointAt(i)! : unit;
    const width = cp > 0xffff ? 2 : 1;
    if (cp > 0x7f) ascii = false;
    const value = digitValue(cp);
    if (value >= 0) {
      if (separators > 0 || count === 0) {
        if (groups === groupFrom.length) growGroups();
        // Whether the group starting now follows a lone decimal point; decided once the run has ended.
        decimalTail = separators === 1 && isDecimalPoint(lastSeparator);
        groupFrom[groups] = count;
        groupFirst[groups] = value;
        groupStart[groups] = i;
        groups++;
      }
      count++;
      groupEnd[groups - 1] = i + width;
      separators = 0;
    } else if (!isInvisible(cp)) {
      separators++;
      lastSeparator = cp;
    }
    i += width;
  }
  const allGroups = groups;
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
  const span = text.slice(start, end);
  const digits = ascii ? span.replace(NOT_ASCII_DIGIT, '') : asciiDigits(span);
  runs.push({ digits: digits.slice(0, usable), groups: out });
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

/** The digits of `span`, whatever their script, as ASCII. */
function asciiDigits(span: string): string {
  let out = '';
  for (const ch of span) {
    const value = digitValue(ch.codePointAt(0)!);
    if (value >= 0) out += String.fromCharCode(48 + value);
  }
  return out;
}

function growGroups(): void {
  const grow = <T extends Int32Array | Int8Array>(a: T): T => {
    const b = new (a.constructor as new (length: number) => T)(a.length * 2);
    b.set(a);
    return b;
  };
  groupFrom = grow(groupFrom);
  groupFirst = grow(groupFirst);
  groupStart = grow(groupStart);
  groupEnd = grow(groupEnd);
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
