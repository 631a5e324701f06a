// Just enough of the Unicode bidirectional algorithm (UAX #9) to turn a line stored in visual order (left to right
// as drawn) back into logical order: the weak and neutral rules (W1–W7, N1, N2), levels (I1, I2) and reversing runs
// (L2), for lines without explicit embeddings, which is what PDFs hold. Reordering by levels is its own inverse, so
// the same function also turns pdf.js's per-item output back into drawing order: pdf.js (core/bidi.js) runs these
// same rules, and `pdfjs: true` classifies characters the way it does where it matters (everything above U+00FF
// outside Hebrew and Arabic is "L" to it), so undoing it gives back what was drawn.

export type BidiClass = 'L' | 'R' | 'AL' | 'EN' | 'AN' | 'ES' | 'CS' | 'ET' | 'NSM' | 'N';

const HEBREW = /[\u0590-\u05ff]/u;
const ARABIC_BLOCKS = /[\u0600-\u06ff\u0700-\u08ff\ufb1d-\ufdff\ufe70-\ufeff]/u;
const MARK = /[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06e4\u06e7\u06e8\u06ea-\u06ed]/u;
const LETTER = /[\p{L}\p{M}]/u;

/** The bidi class of a character; `pdfjs` mimics pdf.js, which calls every other character above U+00FF "L". */
export function bidiClass(ch: string, pdfjs = false): BidiClass {
  const cp = ch.codePointAt(0)!;
  if (cp >= 0x30 && cp <= 0x39) return 'EN';
  if (cp >= 0x06f0 && cp <= 0x06f9) return 'EN';
  if ((cp >= 0x0660 && cp <= 0x0669) || cp === 0x066b || cp === 0x066c || (cp >= 0x0600 && cp <= 0x0605)) return 'AN';
  if (HEBREW.test(ch)) return 'R';
  if (ARABIC_BLOCKS.test(ch)) {
    if (MARK.test(ch)) return 'NSM';
    if (cp === 0x060c) return 'CS';
    if (cp === 0x066a || cp === 0x0609 || cp === 0x060a) return 'ET';
    return 'AL';
  }
  if ('#$%\u00a2\u00a3\u00a4\u00a5\u00b0\u00b1'.includes(ch)) return 'ET';
  if (ch === '+' || ch === '-') return 'ES';
  if (',./:\u00a0'.includes(ch)) return 'CS';
  if (LETTER.test(ch) || (pdfjs && cp > 0xff)) return 'L';
  return 'N';
}

const isStrong = (t: BidiClass) => t === 'L' || t === 'R' || t === 'AL';

/**
 * Whether a line in visual order belongs to a right-to-left paragraph. Its first strong character in logical order
 * is at the right end if it does, at the left end if not; when the two ends disagree, the direction with more
 * letters wins (ties go right to left: the line came from an Arabic producer).
 */
export function isRtlLine(visual: string): boolean {
  let left: boolean | undefined;
  let right: boolean | undefined;
  let rtl = 0;
  let ltr = 0;
  for (const ch of visual) {
    const t = bidiClass(ch);
    if (!isStrong(t)) continue;
    const isRtl = t !== 'L';
    left ??= isRtl;
    right = isRtl;
    if (isRtl) rtl++;
    else ltr++;
  }
  return left === right ? left === true : rtl >= ltr;
}

/** The embedding level of each element of a sequence (UAX #9 W1–W7, N1, N2, I1, I2); odd is right to left. */
export function bidiLevels(classes: readonly BidiClass[], rtl: boolean): number[] {
  const n = classes.length;
  const t: BidiClass[] = [...classes];
  const sor: BidiClass = rtl ? 'R' : 'L';
  let last: BidiClass = sor;
  for (let i = 0; i < n; i++) {
    if (t[i] === 'NSM') t[i] = i > 0 ? t[i - 1]! : sor; // W1
    if (isStrong(t[i]!)) last = t[i]!;
    else if (t[i] === 'EN' && last === 'AL') t[i] = 'AN'; // W2
  }
  for (let i = 0; i < n; i++) if (t[i] === 'AL') t[i] = 'R'; // W3
  for (let i = 1; i < n - 1; i++) {
    // W4: one separator between two numbers of a kind stays in the number ("1,234", "2025/01/01").
    const [a, b] = [t[i - 1], t[i + 1]];
    if (t[i] === 'ES' && a === 'EN' && b === 'EN') t[i] = 'EN';
    else if (t[i] === 'CS' && a === b && (a === 'EN' || a === 'AN')) t[i] = a;
  }
  for (let i = 0; i < n; i++) {
    if (t[i] !== 'EN') continue; // W5: currency and percent signs next to a number join it
    for (let j = i - 1; j >= 0 && t[j] === 'ET'; j--) t[j] = 'EN';
    for (let j = i + 1; j < n && t[j] === 'ET'; j++) t[j] = 'EN';
  }
  for (let i = 0; i < n; i++) if (t[i] === 'ES' || t[i] === 'ET' || t[i] === 'CS') t[i] = 'N'; // W6
  last = sor;
  for (let i = 0; i < n; i++) {
    if (t[i] === 'L' || t[i] === 'R') last = t[i]!;
    else if (t[i] === 'EN' && last === 'L') t[i] = 'L'; // W7: "ID 1012345678" is one left-to-right run
  }
  // N1, N2: neutrals take the direction of both sides when they agree (numbers count as R), else the paragraph's.
  const side = (x: BidiClass | undefined) => (x === undefined ? sor : x === 'L' ? 'L' : 'R');
  for (let i = 0; i < n;) {
    if (t[i] !== 'N') {
      i++;
      continue;
    }
    let end = i;
    while (end < n && t[end] === 'N') end++;
    const before = side(t[i - 1]);
    t.fill(before === side(t[end]) ? before : sor, i, end);
    i = end;
  }
  return t.map((x) => (rtl ? (x === 'R' ? 1 : 2) : x === 'L' ? 0 : x === 'R' ? 1 : 2)); // I1, I2
}

/** The order to read a visual-order sequence in (L2): logical position i holds element result[i] of the visual one. */
export function logicalOrder(levels: readonly number[]): number[] {
  const n = levels.length;
  const order = Array.from({ length: n }, (_, i) => i);
  // Every run at or above each level reversed, highest first. The levels need not move with the runs: everything
  // in a reversed run is at or above every level still to come.
  for (let level = levels.reduce((a, b) => Math.max(a, b), 0); level >= 1; level--) {
    for (let i = 0; i < n;) {
      if (levels[i]! < level) {
        i++;
        continue;
      }
      let end = i;
      while (end < n && levels[end]! >= level) end++;
      for (let a = i, b = end - 1; a < b; a++, b--) [order[a], order[b]] = [order[b]!, order[a]!];
      i = end;
    }
  }
  return order;
}

const RTL_CHAR = /[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefe]/u;

const MIRRORED: Record<string, string> = {
  '(': ')',
  ')': '(',
  '[': ']',
  ']': '[',
  '{': '}',
  '}': '{',
  '<': '>',
  '>': '<',
  '«': '»',
  '»': '«',
};

/**
 * A line reordered by the bidi algorithm: visual order to logical, or (run again) back. Brackets in right-to-left
 * text are mirrored (L4), as a producer draws them; pdf.js does not mirror, so undoing its reordering (`pdfjs`)
 * leaves them. Lines without a right-to-left character never move.
 */
export function reorderLine(line: string, rtl: boolean, pdfjs = false): string {
  if (!RTL_CHAR.test(line)) return line;
  const chars = [...line];
  const levels = bidiLevels(
    chars.map((c) => bidiClass(c, pdfjs)),
    rtl,
  );
  return logicalOrder(levels)
    .map((i) => (!pdfjs && levels[i]! % 2 ? (MIRRORED[chars[i]!] ?? chars[i]) : chars[i]))
    .join('');
}
