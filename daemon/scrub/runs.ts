// Numbers as people write them: digit groups joined by at most two separators, with invisible characters anywhere.
// Candidates are then taken on group boundaries only, so a value is never a window inside a longer digit group
// (timestamps, tracking numbers), while "4111 1111 1111 1111" and "1-0-1-2-…" are still one number.
import {
  codePointBefore,
  DIGIT_CLASS,
  digitValue,
  INVISIBLE_ABOVE_BMP_HINT,
  INVISIBLE_CLASS,
  INVISIBLE_PATTERN,
  isInvisible,
  isSeparator,
  MATH_DIGIT_PATTERN,
  SEPARATOR_CLASS,
} from './characters.js';

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
  /** Where every run's first digit is. */
  starts: number[];
  /** The runs long enough to hold a value, with their groups (a decimal's last two groups left out). */
  runs: DigitRun[];
}

const MAX_SEPARATORS = 2;
/** The shortest value read from digits alone (a national ID or Iqama number). */
const SHORTEST_VALUE = 10;

/**
 * A run from its first digit to its last, as people write numbers: between two digits, invisible characters and at
 * most two separators (the Arabic decimal separator only as the first). Found by the regex engine, so text without
 * digits costs almost nothing, and runs too short to hold a value are passed over without reading them here.
 */
const DIGIT = `(?:[${DIGIT_CLASS}]|${MATH_DIGIT_PATTERN})`;
const gap = (invisible: string) => `${invisible}*(?:[${SEPARATOR_CLASS}\\u066b]${invisible}*(?:[${SEPARATOR_CLASS}]${invisible}*)?)?`;
/** Runs in text with invisible characters above U+FFFF too, and the faster form for text without any. */
const RUN_ALL = new RegExp(`${DIGIT}(?:${gap(INVISIBLE_PATTERN)}${DIGIT})*`, 'y');
const RUN_BMP = new RegExp(`${DIGIT}(?:${gap(`[${INVISIBLE_CLASS}]`)}${DIGIT})*`, 'y');
/** Where a run may begin: a digit, or the first half of a mathematical one (RUN then says whether it is one). */
const RUN_START = new RegExp(`[${DIGIT_CLASS}\\ud835]`, 'g');

function isDecimalPoint(cp: number): boolean {
  return cp === 0x2e || cp === 0xff0e || cp === 0x066b;
}

export function digitRuns(text: string): DigitScan {
  const scan: DigitScan = { starts: [], runs: [] };
  const RUN = INVISIBLE_ABOVE_BMP_HINT.test(text) ? RUN_ALL : RUN_BMP;
  // test() allocates nothing, unlike exec(): the start is one before where RUN_START stopped.
  for (RUN_START.lastIndex = 0; RUN_START.test(text);) {
    const start = RUN_START.lastIndex - 1;
    RUN.lastIndex = start;
    if (!RUN.test(text)) continue;
    scan.starts.push(start);
    // Fewer characters than the shortest value has digits: nothing in it to judge.
    if (RUN.lastIndex - start >= SHORTEST_VALUE) readRun(text, start, RUN.lastIndex, scan.runs);
    RUN_START.lastIndex = RUN.lastIndex;
  }
  return scan;
}

// Scratch space for the run being read (scanning is synchronous, so one is enough): per group, the index of its
// first digit among the run's digits and its span in the text. Grown when a run has more groups.
let groupFrom = new Int32Array(64);
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
    if (digitValue(cp) >= 0) {
      if (separators > 0 || count === 0) {
        if (groups === groupFrom.length) growGroups();
        // Whether the group starting now follows a lone decimal point; decided once the run has ended.
        decimalTail = separators === 1 && isDecimalPoint(lastSeparator);
        groupFrom[groups] = count;
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
  if (usable < SHORTEST_VALUE) return;
  const out: DigitGroup[] = [];
  for (let g = 0; g < groups; g++) {
    out.push({ from: groupFrom[g]!, to: g + 1 < allGroups ? groupFrom[g + 1]! : count, start: groupStart[g]!, end: groupEnd[g]! });
  }
  const span = text.slice(start, end);
  const digits = ascii ? span.replace(NOT_ASCII_DIGIT, '') : asciiDigits(span);
  runs.push({ digits: digits.slice(0, usable), groups: out });
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
  const grow = (a: Int32Array) => {
    const b = new Int32Array(a.length * 2);
    b.set(a);
    return b;
  };
  groupFrom = grow(groupFrom);
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
