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
