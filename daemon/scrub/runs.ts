// Numbers as people write them: digit groups joined by at most two separators, with invisible characters anywhere.
// Candidates are then taken on group boundaries only, so a value is never a window inside a longer digit group
// (timestamps, tracking numbers), while "4111 1111 1111 1111" and "1-0-1-2-…" are still one number.
import { digitValue, isInvisible, isSeparator } from './characters.js';

export interface DigitGroup {
  /** ASCII digits, whatever the script they were written in. */
  digits: string;
  /** Original index where each digit starts, and where the last one ends (JavaScript string indices). */
  starts: number[];
  end: number;
}

export interface DigitRun {
  groups: DigitGroup[];
}

const MAX_SEPARATORS = 2;

function isDecimalPoint(cp: number): boolean {
  return cp === 0x2e || cp === 0xff0e || cp === 0x066b;
}

export function digitRuns(text: string): DigitRun[] {
  const runs: DigitRun[] = [];
  let groups: DigitGroup[] = [];
  let group: DigitGroup | null = null;
  let separators = 0;
  let lastSeparator = 0;
  let decimalTail = false;

  const closeRun = () => {
    if (group) groups.push(group);
    // "1012345678.50" is an amount: a dot followed by one or two final digits ends the run as a decimal number,
    // and neither part is taken for an identifier.
    if (decimalTail && groups.length >= 2 && groups[groups.length - 1]!.digits.length <= 2) groups = groups.slice(0, -2);
    if (groups.length) runs.push({ groups });
    groups = [];
    group = null;
    separators = 0;
    decimalTail = false;
  };

  for (let i = 0; i < text.length;) {
    const cp = text.codePointAt(i)!;
    const width = cp > 0xffff ? 2 : 1;
    const value = digitValue(cp);
    if (value >= 0) {
      if (group && separators > 0) {
        groups.push(group);
        group = null;
        // Whether the group starting now follows a lone decimal point; closeRun decides once the run has ended.
        decimalTail = separators === 1 && isDecimalPoint(lastSeparator);
      }
      group ??= { digits: '', starts: [], end: i };
      group.digits += String.fromCharCode(48 + value);
      group.starts.push(i);
      group.end = i + width;
      separators = 0;
    } else if (isInvisible(cp)) {
      // Seen through: neither joins nor breaks.
    } else if (group && isSeparator(cp) && separators < MAX_SEPARATORS) {
      separators++;
      lastSeparator = cp;
    } else if (cp === 0x066b && group && separators === 0) {
      separators = 1;
      lastSeparator = cp;
    } else {
      closeRun();
    }
    i += width;
  }
  closeRun();
  return runs;
}

/**
 * For streaming: where the digit run still open at the end of `text` begins (text to come may extend it, and only
 * a whole run can be judged), or `text.length` if the text does not end inside one.
 */
export function openRunStart(text: string): number {
  let i = text.length;
  let separators = 0;
  const before = (at: number) => {
    const low = text.charCodeAt(at - 1);
    return low >= 0xdc00 && low <= 0xdfff && at >= 2 ? text.codePointAt(at - 2)! : low;
  };
  // The Arabic decimal separator joins groups too (only right after a digit, but assuming it always does is safe).
  const joins = (cp: number) => isSeparator(cp) || cp === 0x066b;
  let start = text.length;
  while (i > 0) {
    const cp = before(i);
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
