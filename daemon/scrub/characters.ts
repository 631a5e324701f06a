// The characters that matter to matching numbers: decimal digits of every script (with their values), separators
// people put inside numbers, line breaks, and characters that are invisible, combine with the one before, or only
// steer direction. JavaScript's \d is ASCII-only even with /u, and NFKC does not fold Arabic-Indic digits, so digits
// are mapped here. These lists are the single source of the per-unit tables the digit scan reads (runs.ts).
import { DECIMAL_DIGIT_RANGES, FOLDED_DIGITS, MARK_RANGES } from './unicode-tables.js';

type Range = readonly [first: number, last: number];

/** How a character takes part in a number. */
export const OTHER = 0;
export const DIGIT = 1;
export const SEPARATOR = 2;
export const INVISIBLE = 3;
/** U+066B, the Arabic decimal separator: joins two groups only on its own (see runs.ts). */
export const ARABIC_DECIMAL = 4;
/** In the per-unit tables only: a high surrogate whose pair must be read whole (see astralIndex). */
export const ASTRAL = 5;
export const LINE_BREAK = 6;

/**
 * Separators people put between groups of digits: every space character (Unicode Zs), every dash (Pd) and minus
 * sign, dots, and what people (or attackers) type between digits when a space would be too plain: tab, underscore,
 * middle dots, U+3000.
 */
const SEPARATORS: Range[] = [
  [0x09, 0x09], // tab
  [0x20, 0x20], // space
  [0xa0, 0xa0], // no-break space
  [0x1680, 0x1680], // ogham space mark
  [0x2000, 0x200a], // en quad … hair space (thin space is 0x2009)
  [0x202f, 0x202f], // narrow no-break space
  [0x205f, 0x205f], // medium mathematical space
  [0x3000, 0x3000], // ideographic space
  [0x2d, 0x2d], // hyphen-minus
  [0x058a, 0x058a], // Armenian hyphen
  [0x05be, 0x05be], // Hebrew maqaf
  [0x1400, 0x1400], // Canadian syllabics hyphen
  [0x1806, 0x1806], // Mongolian todo soft hyphen
  [0x2010, 0x2015], // hyphen … horizontal bar
  [0x2e17, 0x2e17], // double oblique hyphen
  [0x2e1a, 0x2e1a], // hyphen with diaeresis
  [0x2e3a, 0x2e3b], // two- and three-em dash
  [0x2e40, 0x2e40], // double hyphen
  [0x2e5d, 0x2e5d], // oblique hyphen
  [0x301c, 0x301c], // wave dash
  [0x3030, 0x3030], // wavy dash
  [0x30a0, 0x30a0], // katakana-hiragana double hyphen
  [0xfe31, 0xfe32], // vertical dashes
  [0xfe58, 0xfe58], // small em dash
  [0xfe63, 0xfe63], // small hyphen-minus
  [0xff0d, 0xff0d], // fullwidth hyphen-minus
  [0x2212, 0x2212], // minus sign
  [0x2e, 0x2e], // full stop
  [0xff0e, 0xff0e], // fullwidth full stop
  [0x5f, 0x5f], // low line (underscore)
  [0xff3f, 0xff3f], // fullwidth low line
  [0xb7, 0xb7], // middle dot
  [0x2027, 0x2027], // hyphenation point
  [0x2219, 0x2219], // bullet operator
  [0x22c5, 0x22c5], // dot operator
  [0x30fb, 0x30fb], // katakana middle dot
  [0xff65, 0xff65], // halfwidth katakana middle dot
];

/** Line ends: they join groups like a separator, but only one of them between two groups (CR LF counts as one). */
const LINE_BREAKS: Range[] = [
  [0x0a, 0x0d], // LF, VT, FF, CR
  [0x85, 0x85], // next line
  [0x2028, 0x2029], // line and paragraph separators
];

/**
 * Characters that show nothing, or only steer direction: matching sees through them, redaction covers them. This is
 * Unicode's Default_Ignorable_Code_Point set (which includes the bidi marks, zero-width characters, invisible
 * operators, variation selectors and tags), plus tatweel, which stretches Arabic text and means nothing in a number.
 * Combining marks (MARK_RANGES: accents, enclosing circles, strokes, Arabic harakat) are seen through too: placed
 * after a digit they change how it looks, not what it is.
 */
const INVISIBLES: Range[] = [
  [0x00ad, 0x00ad], // soft hyphen
  [0x034f, 0x034f], // combining grapheme joiner
  [0x061c, 0x061c], // ALM
  [0x0640, 0x0640], // tatweel
  [0x115f, 0x1160], // Hangul fillers
  [0x17b4, 0x17b5], // Khmer inherent vowels
  [0x180b, 0x180f], // Mongolian variation selectors and vowel separator
  [0x200b, 0x200f], // zero width space, ZWNJ, ZWJ, LRM, RLM
  [0x202a, 0x202e], // LRE, RLE, PDF, LRO, RLO
  [0x2060, 0x206f], // word joiner, invisible operators, LRI, RLI, FSI, PDI, deprecated format characters
  [0x3164, 0x3164], // Hangul filler
  [0xfe00, 0xfe0f], // variation selectors
  [0xfeff, 0xfeff], // BOM / zero width no-break space
  [0xffa0, 0xffa0], // halfwidth Hangul filler
  [0xfff0, 0xfff8], // unassigned specials
  [0x1bca0, 0x1bca3], // shorthand format controls
  [0x1d173, 0x1d17a], // musical symbol formatting
  [0xe0000, 0xe0fff], // tags, variation selectors supplement
];

/**
 * Where a code point above U+FFFF sits in the astral tables, or -1: only planes 1 (supplementary multilingual: digits,
 * marks, format controls) and 14 (tags, variation selectors) hold characters that matter here.
 */
export function astralIndex(cp: number): number {
  if (cp >= 0x10000 && cp <= 0x1ffff) return cp - 0x10000;
  if (cp >= 0xe0000 && cp <= 0xeffff) return cp - 0xe0000 + 0x10000;
  return -1;
}

/** Per BMP code point, and per astral index: its kind and, for a digit, its value. */
export const BMP_KINDS = new Uint8Array(0x10000);
export const BMP_VALUES = new Int8Array(0x10000).fill(-1);
export const ASTRAL_KINDS = new Uint8Array(0x20000);
export const ASTRAL_VALUES = new Int8Array(0x20000).fill(-1);

function mark(cp: number, kind: number, value = -1): void {
  if (cp <= 0xffff) {
    BMP_KINDS[cp] = kind;
    BMP_VALUES[cp] = value;
    return;
  }
  const at = astralIndex(cp);
  if (at < 0) return;
  ASTRAL_KINDS[at] = kind;
  ASTRAL_VALUES[at] = value;
}
for (const [first, last] of MARK_RANGES) for (let cp = first; cp <= last; cp++) mark(cp, INVISIBLE);
for (const [first, last] of INVISIBLES) for (let cp = first; cp <= last; cp++) mark(cp, INVISIBLE);
for (const [first, last] of SEPARATORS) for (let cp = first; cp <= last; cp++) mark(cp, SEPARATOR);
for (const [first, last] of LINE_BREAKS) for (let cp = first; cp <= last; cp++) mark(cp, LINE_BREAK);
mark(0x066b, ARABIC_DECIMAL);
for (const [first, last] of DECIMAL_DIGIT_RANGES) for (let cp = first; cp <= last; cp++) mark(cp, DIGIT, (cp - first) % 10);
for (const [cp, value] of FOLDED_DIGITS) mark(cp, DIGIT, value);

/** A code point's kind (OTHER, DIGIT, SEPARATOR, INVISIBLE, ARABIC_DECIMAL or LINE_BREAK). */
export function kindOf(cp: number): number {
  if (cp <= 0xffff) return cp >= 0xd800 && cp <= 0xdfff ? OTHER : BMP_KINDS[cp]!;
  const at = astralIndex(cp);
  return at < 0 ? OTHER : ASTRAL_KINDS[at]!;
}

/** The digit's value, or -1 if the code point is not a digit we read. */
export function digitValue(cp: number): number {
  if (cp <= 0xffff) return BMP_VALUES[cp]!;
  const at = astralIndex(cp);
  return at < 0 ? -1 : ASTRAL_VALUES[at]!;
}

/** A separator or a line break: what may stand between two groups of a number (or two symbols of an IBAN). */
export function isSeparator(cp: number): boolean {
  const kind = kindOf(cp);
  return kind === SEPARATOR || kind === LINE_BREAK;
}

export function isInvisible(cp: number): boolean {
  return kindOf(cp) === INVISIBLE;
}

/** A decimal point: a group after one of them alone may be a fraction (detect.ts). */
export function isDecimalPoint(unit: number): boolean {
  return unit === 0x2e || unit === 0xff0e || unit === 0x066b;
}

/** A Latin letter's place in the alphabet (0 for A), in any case and in fullwidth form; otherwise -1. */
export function latinIndex(cp: number): number {
  if (cp >= 0x41 && cp <= 0x5a) return cp - 0x41;
  if (cp >= 0x61 && cp <= 0x7a) return cp - 0x61;
  if (cp >= 0xff21 && cp <= 0xff3a) return cp - 0xff21;
  if (cp >= 0xff41 && cp <= 0xff5a) return cp - 0xff41;
  return -1;
}

/** Latin letters, in any case and in fullwidth form, as upper-case ASCII; otherwise an empty string. */
export function latinLetter(cp: number): string {
  const index = latinIndex(cp);
  return index < 0 ? '' : String.fromCharCode(0x41 + index);
}

/** The code point that ends just before `at` in `text` (a surrogate pair read whole). */
export function codePointBefore(text: string, at: number): number {
  const low = text.charCodeAt(at - 1);
  if (low >= 0xdc00 && low <= 0xdfff && at >= 2) {
    const high = text.charCodeAt(at - 2);
    if (high >= 0xd800 && high <= 0xdbff) return text.codePointAt(at - 2)!;
  }
  return low;
}
