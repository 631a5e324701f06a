// IBANs of every country in the ISO 13616 registry: country code, two check digits, and a BBAN of the country's
// length and shape, mod 97 = 1. Case-insensitive, compact or in groups, digits of any script, invisible characters
// anywhere, one separator allowed inside the country code. The IBAN must start a word (or follow letters: a label glued
// on) and must not run on into more digits; letters glued on after it are a word of their own.
import { codePointBefore, digitValue, isInvisible, isSeparator, latinIndex, latinLetter } from './characters.js';
import { ibanValid } from './checksums.js';
import type { Redaction } from './detect.js';
import { IBAN_REGISTRY } from './iban-registry.js';
import { scanDigits } from './runs.js';

interface Symbol {
  ch: string;
  start: number;
  end: number;
  /** Separators between this symbol and the previous one (a hard break resets the stream). */
  separatorsBefore: number;
  /** True when something that is neither a letter, a digit, a separator nor invisible came just before. */
  breakBefore: boolean;
}

const MAX_SEPARATORS = 2;

/** Per country: the IBAN's length, its BBAN as a pattern, and the BBAN's kind of character at each position. */
const BBAN_PATTERNS = new Map<string, { length: number; pattern: RegExp; kinds: string }>(
  Object.entries(IBAN_REGISTRY).map(([code, [length, bban]]) => {
    const parts = [...bban.matchAll(/(\d+)!?([nac])/g)].map(([, count, kind]) => ({ count: Number(count), kind: kind! }));
    const source = parts.map(({ count, kind }) => `${kind === 'n' ? '[0-9]' : kind === 'a' ? '[A-Z]' : '[A-Z0-9]'}{${count}}`).join('');
    const kinds = parts.map(({ count, kind }) => kind.repeat(count)).join('');
    return [code, { length, pattern: new RegExp(`^${source}$`), kinds }];
  }),
);

/** Per pair of letters (first × 26 + second, A = 0): whether the registry has that country code. */
const IS_COUNTRY = new Uint8Array(26 * 26);
for (const code of BBAN_PATTERNS.keys()) IS_COUNTRY[(code.charCodeAt(0) - 0x41) * 26 + code.charCodeAt(1) - 0x41] = 1;
const COUNTRY_INITIALS = new Set([...BBAN_PATTERNS.keys()].map((code) => code[0]));
const MAX_IBAN_LENGTH = Math.max(...[...BBAN_PATTERNS.values()].map((p) => p.length));

/**
 * The letters and digits of `text` from `start` (at most `count` of them), each with what lies between it and the one
 * before. The first symbol counts as after a break when reading starts at the beginning of the text.
 */
function symbols(text: string, start = 0, count = Infinity): Symbol[] {
  const out: Symbol[] = [];
  let separators = 0;
  let broken = start === 0;
  for (let i = start; i < text.length && out.length < count;) {
    const cp = text.codePointAt(i)!;
    const width = cp > 0xffff ? 2 : 1;
    const value = digitValue(cp);
    const letter = value >= 0 ? '' : latinLetter(cp);
    if (value >= 0 || letter) {
      out.push({ ch: value >= 0 ? String(value) : letter, start: i, end: i + width, separatorsBefore: separators, breakBefore: broken });
      separators = 0;
      broken = false;
    } else if (isInvisible(cp)) {
      // seen through
    } else if (isSeparator(cp)) {
      separators++;
    } else {
      broken = true;
      separators = 0;
    }
    i += width;
  }
  return out;
}

/** Starts a word: first symbol, or after a separator, or after anything that is not a Latin letter or digit. */
function startsWord(s: Symbol): boolean {
  return s.breakBefore || s.separatorsBefore > 0;
}

/**
 * Where an IBAN may begin: at a word start, or right after letters (a label glued on, "ibanSA03…"): the registry's
 * shape and the mod-97 check are strong enough evidence on their own. Never right after a digit.
 */
function mayStart(stream: Symbol[], p: number): boolean {
  const s = stream[p]!;
  const previous = stream[p - 1];
  return startsWord(s) || previous === undefined || !isDigitSymbol(previous.ch);
}

const isDigitSymbol = (ch: string) => ch >= '0' && ch <= '9';

const widthOf = (cp: number) => (cp > 0xffff ? 2 : 1);

/**
 * The country code an IBAN whose check digits begin the run at `runStart` would have: two Latin letters (nothing but
 * invisible characters between them), then at most two separators before the digit. Empty if there is none; then
 * `codeStart` is where the first letter is.
 */
let codeStart = -1;
function countryCodeBefore(text: string, runStart: number): string {
  let i = runStart;
  let separators = 0;
  for (;;) {
    if (i === 0) return '';
    const cp = codePointBefore(text, i);
    if (isInvisible(cp)) i -= widthOf(cp);
    else if (isSeparator(cp) && ++separators <= MAX_SEPARATORS) i -= widthOf(cp);
    else break;
  }
  // Letters as alphabet places, not strings: most runs have none, or two that are no country's code. One separator
  // may stand between the two ("S A03…"); then the first must begin a word.
  let second = -1;
  let between = 0;
  for (;;) {
    if (i === 0) return '';
    const cp = codePointBefore(text, i);
    if (second >= 0 && isInvisible(cp)) {
      i -= widthOf(cp);
      continue;
    }
    if (second >= 0 && between === 0 && isSeparator(cp)) {
      between++;
      i -= widthOf(cp);
      continue;
    }
    const letter = latinIndex(cp);
    if (letter < 0) return '';
    i -= widthOf(cp);
    if (second < 0) {
      second = letter;
      continue;
    }
    if (!IS_COUNTRY[letter * 26 + second]) return '';
    if (between && i > 0 && latinIndex(codePointBefore(text, i)) >= 0) return '';
    codeStart = i;
    return String.fromCharCode(0x41 + letter, 0x41 + second);
  }
}

const isAsciiDigit = (unit: number) => unit >= 48 && unit <= 57;

/** Where the last character `readIban` took ends. */
let readEnd = -1;

/**
 * The `length` letters and digits from `start` as upper-case ASCII, if they are one chain (between two of them only
 * invisible characters and at most two separators) and no digit follows them directly; else null. Read
 * straight from the text: this runs for every country code found before a digit run.
 */
function readIban(text: string, start: number, length: number): string | null {
  let value = '';
  let separators = 0;
  let broken = false;
  for (let i = start; i < text.length;) {
    const cp = text.codePointAt(i)!;
    const width = widthOf(cp);
    const digit = digitValue(cp);
    const letter = digit >= 0 ? -1 : latinIndex(cp);
    if (digit >= 0 || letter >= 0) {
      // A digit right after the IBAN's last character runs on into it: not an IBAN. Letters glued on after it
      // ("…7519SAR") are a word of their own: the IBAN ends where its country's length does.
      if (value.length === length) return broken || separators > 0 || digit < 0 ? value : null;
      if (value.length > 0 && (broken || separators > MAX_SEPARATORS)) return null;
      value += digit >= 0 ? DIGIT_CHARACTERS[digit]! : LATIN_LETTERS[letter]!;
      readEnd = i + width;
      separators = 0;
      broken = false;
    } else if (isInvisible(cp)) {
      // seen through
    } else if (isSeparator(cp)) {
      separators++;
    } else {
      broken = true;
      separators = 0;
    }
    // Once it is complete, a separator or a break settles it: whatever comes next starts a new word.
    if (value.length === length && (broken || separators > 0)) return value;
    i += width;
  }
  return value.length === length ? value : null;
}

const DIGIT_CHARACTERS = '0123456789';
const LATIN_LETTERS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';

/** Whether an IBAN may begin at `start`: at a word start, or after letters, never right after a digit. */
function mayStartAt(text: string, start: number): boolean {
  for (let i = start; i > 0;) {
    const cp = codePointBefore(text, i);
    if (isInvisible(cp)) i -= widthOf(cp);
    else return digitValue(cp) < 0;
  }
  return true;
}

/**
 * IBANs in `text`. Every IBAN's check digits begin a digit run (a letter ends any run before them), so candidates
 * are looked for only just before the runs the digit scan found (`starts`), and text without digits costs nothing
 * more here.
 */
export function findIbans(text: string, starts: ArrayLike<number> = scanDigits(text, null)): Redaction[] {
  const found: Redaction[] = [];
  let lastEnd = 0;
  for (let s = 0; s < starts.length; s++) {
    const runStart = starts[s]!;
    const code = countryCodeBefore(text, runStart);
    const registry = code ? BBAN_PATTERNS.get(code) : undefined;
    const start = codeStart;
    if (!registry || start < lastEnd || !mayStartAt(text, start)) continue;
    const value = readIban(text, start, registry.length);
    if (value === null) continue;
    // The country code's letters start it; its check digits and BBAN must have the registry's shape.
    if (!isAsciiDigit(value.charCodeAt(2)) || !isAsciiDigit(value.charCodeAt(3))) continue;
    if (!registry.pattern.test(value.slice(4)) || !ibanValid(value)) continue;
    found.push({ type: 'IBAN', start, end: readEnd, value });
    lastEnd = readEnd;
  }
  return found;
}

function fitsKind(ch: string, kind: string | undefined): boolean {
  const digit = ch >= '0' && ch <= '9';
  return kind === 'n' ? digit : kind === 'a' ? !digit : kind === 'c';
}

/**
 * Where reading symbols for `openIbanStart` can begin and still see the text's last symbols as a read from the start
 * would: at the last hard break (after it every symbol reads the same, and none before it can join a chain across it),
 * or at the start of the symbol an IBAN's length and two more from the end (the chain and the symbol before its first,
 * which `mayStart` reads, are all after it). A stream's window is usually short, but a long one (English text has no
 * hard break between its words) would otherwise cost a symbol object per letter on every piece.
 */
function tailStart(text: string): number {
  let symbolsSeen = 0;
  for (let i = text.length; i > 0;) {
    const cp = codePointBefore(text, i);
    const at = i - widthOf(cp);
    if (digitValue(cp) >= 0 || latinLetter(cp)) {
      if (++symbolsSeen === MAX_IBAN_LENGTH + 2) return at;
    } else if (!isInvisible(cp) && !isSeparator(cp)) {
      return at;
    }
    i = at;
  }
  return 0;
}

/**
 * For streaming: where the earliest IBAN that text still to come could complete begins (its first character), or
 * `text.length` if none can. Whatever lies before that point is judged the same whatever follows it.
 */
export function openIbanStart(text: string): number {
  const stream = symbols(text, tailStart(text));
  const last = stream.length - 1;
  if (last < 0) return text.length;
  // After the last symbol, a hard break or more than two separators settles every candidate.
  let separators = 0;
  for (let i = stream[last]!.end; i < text.length;) {
    const cp = text.codePointAt(i)!;
    if (isSeparator(cp)) {
      if (++separators > MAX_SEPARATORS) return text.length;
    } else if (!isInvisible(cp)) {
      return text.length;
    }
    i += cp > 0xffff ? 2 : 1;
  }
  // The trailing symbols still joined to the last one, no more than an IBAN's length.
  let chainStart = last;
  while (chainStart > 0 && last - chainStart + 1 < MAX_IBAN_LENGTH) {
    const s = stream[chainStart]!;
    if (s.breakBefore || s.separatorsBefore > MAX_SEPARATORS) break;
    chainStart--;
  }
  for (let p = chainStart; p <= last; p++) {
    const first = stream[p]!;
    // The cheap tests first: a country code's letter, then its check digits (when they have arrived), then its place.
    if (isDigitSymbol(first.ch) || (p + 2 <= last && !isDigitSymbol(stream[p + 2]!.ch)) || !mayStart(stream, p)) continue;
    // A country code's second letter follows its first directly or after one separator.
    if (p === last) {
      // Directly, or after one separator when it begins a word ("S A03…"; the first symbol read may be a word's start).
      if (COUNTRY_INITIALS.has(first.ch) && (separators === 0 || (separators === 1 && (p === 0 || startsWord(first))))) return first.start;
      continue;
    }
    const second = stream[p + 1]!;
    const shape = BBAN_PATTERNS.get(first.ch + second.ch);
    if (!shape || second.separatorsBefore > 1 || last - p + 1 > shape.length) continue;
    let fits = true;
    for (let k = 2; fits && p + k <= last; k++) fits = fitsKind(stream[p + k]!.ch, k < 4 ? 'n' : shape.kinds[k - 4]);
    if (fits) return first.start;
  }
  return text.length;
}
