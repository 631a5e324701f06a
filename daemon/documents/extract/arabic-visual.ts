// Arabic text from producers that write presentation forms (U+FB50–U+FDFF, U+FE70–U+FEFF) in visual order. What
// pdf.js does with it and where this repair comes in is explained at the top of pdf.ts.
//
// Telling a visual line from a logical one: the presentation forms say where each letter sits in its word. In
// logical order a letter that joins the next one (initial or medial form) is followed by one that joins the one
// before (medial or final), and a letter that does not is followed by one that does not; read backwards the same
// holds with the roles swapped. Counting the adjacent pairs that only one reading allows decides, and text typed in
// base letters (no forms, no evidence) is never reordered. "Mostly presentation forms" alone is not a signal:
// pdf.js already hands back such lines in logical order.
import { isRtlLine, reorderLine } from './bidi.js';

type Joining = { next: boolean; prev: boolean };

/**
 * Joining of U+FE80–U+FEFC, from the block's layout: each letter's forms are consecutive, as many as it has
 * (isolated, final, initial, medial), so grouping code points by what NFKC folds them to gives the form of each.
 */
const JOINING: ReadonlyMap<number, Joining> = (() => {
  const FORMS: Joining[] = [
    { next: false, prev: false },
    { next: false, prev: true },
    { next: true, prev: false },
    { next: true, prev: true },
  ];
  const base = (cp: number) => String.fromCodePoint(cp).normalize('NFKC');
  const map = new Map<number, Joining>();
  let start = 0xfe80;
  for (let cp = 0xfe80; cp <= 0xfefd; cp++) {
    if (cp <= 0xfefc && base(cp) === base(start)) continue;
    for (let i = start; i < cp; i++) map.set(i, FORMS[i - start]!);
    start = cp;
  }
  return map;
})();

/** True when the presentation forms in the line read right only backwards. */
export function isVisualOrder(line: string): boolean {
  let logical = 0;
  let visual = 0;
  let prev: Joining | undefined;
  for (const ch of line) {
    const form = JOINING.get(ch.codePointAt(0)!);
    if (prev && form) {
      const asLogical = prev.next === form.prev;
      const asVisual = form.next === prev.prev;
      if (asLogical && !asVisual) logical++;
      if (asVisual && !asLogical) visual++;
    }
    prev = form;
  }
  return visual > logical;
}

const PRESENTATION_FORM = /[\ufb50-\ufdff\ufe70-\ufefe]/gu;

/**
 * Presentation forms folded to base letters; nothing else touched (NFKC over the whole text would also rewrite
 * full-width Latin, ligatures like "ﬁ", superscripts...). Lam-alef ligatures become two letters. The isolated forms
 * of the short vowels fold to a space and the mark; the space is dropped so the mark stays on its letter.
 */
export function foldPresentationForms(text: string): string {
  return text.replace(PRESENTATION_FORM, (ch) => ch.normalize('NFKC').replace(/^ (?=\p{M})/u, ''));
}

/**
 * A lam-alef ligature glyph whose ToUnicode is the two letters in logical order comes out of any reordering
 * reversed, alef before lam: "الأحد" as "األحد", "لا" as "ال". Fixed where the result cannot be Arabic: an alef
 * straight after an alef, and "ال" standing alone. A reversed ligature elsewhere ("سلام" as "سالم") reads as
 * another word and stays.
 */
export function fixReversedLamAlef(text: string): string {
  return text.replace(/([اأإآ])([اأإآ])ل/g, '$1ل$2').replace(/(?<!\p{L})ال(?!\p{L})/gu, 'لا');
}

/** One line: back to logical order when its presentation forms show it is visual, then folded. */
export function repairArabicLine(line: string): string {
  return foldPresentationForms(isVisualOrder(line) ? reorderLine(line, isRtlLine(line)) : line);
}

/** Every line of a text, each on its own (a document can mix visual Arabic lines with anything else). */
export function repairArabicLines(text: string): string {
  return text.split('\n').map(repairArabicLine).join('\n');
}
