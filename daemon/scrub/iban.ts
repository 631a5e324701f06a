// IBANs of every country in the ISO 13616 registry: country code, two check digits, and a BBAN of the country's
// length and shape, mod 97 = 1. Case-insensitive, compact or in groups, digits of any script, invisible characters
// anywhere. The IBAN must start a word and must not run on into more letters or digits.
import { digitValue, isInvisible, isSeparator, latinLetter } from './characters.js';
import { ibanValid } from './checksums.js';
import type { Redaction } from './detect.js';
import { IBAN_REGISTRY } from './iban-registry.js';

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

const BBAN_PATTERNS = new Map<string, { length: number; pattern: RegExp }>(
  Object.entries(IBAN_REGISTRY).map(([code, [length, bban]]) => {
    const source = [...bban.matchAll(/(\d+)!?([nac])/g)]
      .map(([, count, kind]) => `${kind === 'n' ? '[0-9]' : kind === 'a' ? '[A-Z]' : '[A-Z0-9]'}{${count}}`)
      .join('');
    return [code, { length, pattern: new RegExp(`^${source}$`) }];
  }),
);

function symbols(text: string): Symbol[] {
  const out: Symbol[] = [];
  let separators = 0;
  let broken = true;
  for (let i = 0; i < text.length;) {
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
  return startsWord(s) || !/[0-9]/.test(stream[p - 1]?.ch ?? '');
}

export function findIbans(text: string): Redaction[] {
  const stream = symbols(text);
  const found: Redaction[] = [];
  for (let p = 0; p + 4 < stream.length; p++) {
    const first = stream[p]!;
    if (!mayStart(stream, p)) continue;
    const registry = BBAN_PATTERNS.get(first.ch + stream[p + 1]!.ch);
    if (!registry || stream[p + 1]!.separatorsBefore > 0 || stream[p + 1]!.breakBefore) continue;
    let value = '';
    let q = p;
    for (; q < stream.length && value.length < registry.length; q++) {
      const s = stream[q]!;
      if (q > p && (s.breakBefore || s.separatorsBefore > MAX_SEPARATORS)) break;
      value += s.ch;
    }
    if (value.length !== registry.length) continue;
    const next = stream[q];
    if (next && !startsWord(next)) continue;
    if (!/^[A-Z]{2}[0-9]{2}/.test(value) || !registry.pattern.test(value.slice(4)) || !ibanValid(value)) continue;
    found.push({ type: 'IBAN', start: first.start, end: stream[q - 1]!.end, value });
    p = q - 1;
  }
  return found;
}
