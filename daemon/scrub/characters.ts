// The characters that matter to matching numbers: decimal digits of every script people write here (with their
// values), separators people put inside numbers, and characters that are invisible or only steer direction.
// JavaScript's \d is ASCII-only even with /u, and NFKC does not fold Arabic-Indic digits, so digits are mapped here.
// Each list below is the single source of the lookup tables the scanners read per character (runs.ts builds the
// per-unit table both digit-run scanners use from them).

type Range = readonly [first: number, last: number];

/** First code point (the zero) of each decimal-digit block we read. */
const DIGIT_ZEROS = [
  0x0030, // ASCII
  0x0660, // Arabic-Indic
  0x06f0, // Extended Arabic-Indic (Persian, Urdu)
  0x0966, // Devanagari
  0x09e6, // Bengali
  0xff10, // fullwidth
];
/** Mathematical digits: five consecutive blocks of ten (bold, double-struck, sans-serif, sans-serif bold, monospace). */
const MATH_DIGITS_START = 0x1d7ce;
const MATH_DIGITS_END = 0x1d7ff;

/** Spaces, dashes, minus signs and dots people put between groups of digits. */
const SEPARATORS: Range[] = [
  [0x20, 0x20], // space
  [0xa0, 0xa0], // no-break space
  [0x202f, 0x202f], // narrow no-break space
  [0x2000, 0x200a], // en quad … hair space (thin space is 0x2009)
  [0x2d, 0x2d], // hyphen-minus
  [0x2010, 0x2015], // hyphen … horizontal bar
  [0x2212, 0x2212], // minus sign
  [0xfe63, 0xfe63], // small hyphen-minus
  [0xff0d, 0xff0d], // fullwidth hyphen-minus
  [0x2e, 0x2e], // full stop
  [0xff0e, 0xff0e], // fullwidth full stop
];

/**
 * Characters that show nothing, or only steer direction: matching sees through them, redaction covers them. This is
 * Unicode's Default_Ignorable_Code_Point set (which includes the bidi marks, zero-width characters, invisible
 * operators, variation selectors and tags), plus tatweel, which stretches Arabic text and means nothing in a number.
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
];
/** The same above U+FFFF: shorthand format controls, musical symbol formatting, tags and variation selectors. */
const INVISIBLES_ABOVE_BMP: Range[] = [
  [0x1bca0, 0x1bca3],
  [0x1d173, 0x1d17a],
  [0xe0000, 0xe0fff],
];

const SEPARATOR = 1;
const INVISIBLE = 2;
/** Per BMP code point: its digit value or -1, and whether it is a separator or invisible. */
const DIGIT_VALUES = new Int8Array(0x10000).fill(-1);
const KINDS = new Uint8Array(0x10000);
for (const zero of DIGIT_ZEROS) for (let d = 0; d <= 9; d++) DIGIT_VALUES[zero + d] = d;
for (const [first, last] of SEPARATORS) for (let cp = first; cp <= last; cp++) KINDS[cp] = KINDS[cp]! | SEPARATOR;
for (const [first, last] of INVISIBLES) for (let cp = first; cp <= last; cp++) KINDS[cp] = KINDS[cp]! | INVISIBLE;

/** What lies above U+FFFF: the mathematical digits (values repeating every ten from the first) and the invisibles. */
export const ASTRAL_RANGES: ReadonlyArray<{ first: number; last: number; kind: 'digit' | 'invisible' }> = [
  { first: MATH_DIGITS_START, last: MATH_DIGITS_END, kind: 'digit' },
  ...INVISIBLES_ABOVE_BMP.map(([first, last]) => ({ first, last, kind: 'invisible' as const })),
];

/**
 * The high surrogates that begin a mathematical digit or an invisible character above U+FFFF, as one-unit strings:
 * the scanners read a surrogate pair whole only when it starts with one of them.
 */
export const ASTRAL_HIGH_SURROGATES: readonly string[] = [
  ...new Set(
    ASTRAL_RANGES.flatMap(({ first, last }) => {
      const highs: string[] = [];
      for (let high = highSurrogateOf(first); high <= highSurrogateOf(last); high++) highs.push(String.fromCharCode(high));
      return highs;
    }),
  ),
];

function highSurrogateOf(cp: number): number {
  return 0xd800 + ((cp - 0x10000) >> 10);
}

/** The digit's value, or -1 if the code point is not a digit we read. */
export function digitValue(cp: number): number {
  if (cp <= 0xffff) return DIGIT_VALUES[cp]!;
  return cp >= MATH_DIGITS_START && cp <= MATH_DIGITS_END ? (cp - MATH_DIGITS_START) % 10 : -1;
}

export function isSeparator(cp: number): boolean {
  return cp <= 0xffff && (KINDS[cp]! & SEPARATOR) !== 0;
}

export function isInvisible(cp: number): boolean {
  if (cp <= 0xffff) return (KINDS[cp]! & INVISIBLE) !== 0;
  return INVISIBLES_ABOVE_BMP.some(([first, last]) => cp >= first && cp <= last);
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
