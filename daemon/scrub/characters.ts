// The characters that matter to matching numbers: decimal digits of every script people write here (with their
// values), separators people put inside numbers, and characters that are invisible or only steer direction.
// JavaScript's \d is ASCII-only even with /u, and NFKC does not fold Arabic-Indic digits, so digits are mapped here.

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

/** The digit's value, or -1 if the code point is not a digit we read. */
export function digitValue(cp: number): number {
  for (const zero of DIGIT_ZEROS) if (cp >= zero && cp <= zero + 9) return cp - zero;
  if (cp >= MATH_DIGITS_START && cp <= MATH_DIGITS_END) return (cp - MATH_DIGITS_START) % 10;
  return -1;
}

/** Spaces, dashes, minus signs and dots people put between groups of digits. */
export function isSeparator(cp: number): boolean {
  return (
    cp === 0x20 || // space
    cp === 0xa0 || // no-break space
    cp === 0x202f || // narrow no-break space
    (cp >= 0x2000 && cp <= 0x200a) || // en quad … hair space (thin space is 0x2009)
    cp === 0x2d || // hyphen-minus
    (cp >= 0x2010 && cp <= 0x2015) || // hyphen … horizontal bar
    cp === 0x2212 || // minus sign
    cp === 0xfe63 || // small hyphen-minus
    cp === 0xff0d || // fullwidth hyphen-minus
    cp === 0x2e || // full stop
    cp === 0xff0e // fullwidth full stop
  );
}

/** Characters that show nothing, or only steer direction: matching sees through them, redaction covers them. */
export function isInvisible(cp: number): boolean {
  return (
    cp === 0x200e || // LRM
    cp === 0x200f || // RLM
    cp === 0x061c || // ALM
    (cp >= 0x202a && cp <= 0x202e) || // LRE, RLE, PDF, LRO, RLO
    (cp >= 0x2066 && cp <= 0x2069) || // LRI, RLI, FSI, PDI
    cp === 0x200b || // zero width space
    cp === 0x200c || // ZWNJ
    cp === 0x200d || // ZWJ
    cp === 0x2060 || // word joiner
    cp === 0xfeff || // BOM / zero width no-break space
    cp === 0x00ad || // soft hyphen
    cp === 0x0640 // tatweel
  );
}

/** Latin letters, in any case and in fullwidth form, as upper-case ASCII; otherwise an empty string. */
export function latinLetter(cp: number): string {
  if (cp >= 0x41 && cp <= 0x5a) return String.fromCharCode(cp);
  if (cp >= 0x61 && cp <= 0x7a) return String.fromCharCode(cp - 0x20);
  if (cp >= 0xff21 && cp <= 0xff3a) return String.fromCharCode(cp - 0xff21 + 0x41);
  if (cp >= 0xff41 && cp <= 0xff5a) return String.fromCharCode(cp - 0xff41 + 0x41);
  return '';
}
