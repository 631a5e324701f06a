// Which spans of a text are personal data, by type. Saudi national ID and Iqama numbers: ten digits starting with
// 1 or 2, Luhn-valid. Payment cards: 13–19 digits, Luhn-valid, in a known issuer range with that range's length.
import { luhnValid } from './checksums.js';
import { sortInPlace } from './order.js';
import { digitRuns, mayBeValue, type DigitScan } from './runs.js';

export type RedactionType = 'NATIONAL_ID' | 'IQAMA' | 'IBAN' | 'CARD';

export interface Redaction {
  type: RedactionType;
  /** Original span, JavaScript string indices: from the first significant character to the end of the last. */
  start: number;
  end: number;
  /** The value as detected (ASCII digits, upper-case letters): for numbering placeholders, never logged. */
  value: string;
}

/** Whether the number made of the first `width` digits of `d` lies in [low, high] (read without a substring). */
const prefixIn = (d: string, low: number, high: number, width: number) => {
  let p = 0;
  for (let i = 0; i < width; i++) p = p * 10 + d.charCodeAt(i) - 48;
  return p >= low && p <= high;
};

/** Mada BIN prefixes (Saudi Payments' domestic scheme) that are not also Visa or Mastercard ranges. */
const MADA_PREFIXES = [
  '9682',
  '588845',
  '588846',
  '588848',
  '588849',
  '588850',
  '588982',
  '588983',
  '589005',
  '589206',
  '604906',
  '636120',
];

/** The card network a number belongs to, by issuer range and length, or null. */
export function cardNetwork(d: string): string | null {
  const n = d.length;
  if (d.startsWith('4') && (n === 13 || n === 16 || n === 19)) return 'visa';
  if (n === 16 && (prefixIn(d, 51, 55, 2) || prefixIn(d, 2221, 2720, 4))) return 'mastercard';
  if (n === 15 && (d.startsWith('34') || d.startsWith('37'))) return 'amex';
  if (n === 16 && MADA_PREFIXES.some((p) => d.startsWith(p))) return 'mada';
  if (n >= 16 && n <= 19) {
    if (d.startsWith('6011') || prefixIn(d, 644, 649, 3) || d.startsWith('65') || prefixIn(d, 622126, 622925, 6)) return 'discover';
    if (prefixIn(d, 3528, 3589, 4)) return 'jcb';
    if (prefixIn(d, 2200, 2204, 4)) return 'mir';
    if (d.startsWith('62')) return 'unionpay';
  }
  if (
    (n === 14 && (d.startsWith('36') || prefixIn(d, 300, 305, 3))) ||
    ((n === 14 || n === 16) && (d.startsWith('38') || d.startsWith('39')))
  ) {
    return 'diners';
  }
  return null;
}

/** What a Luhn-valid number of a value's length (`mayBeValue`) is, if anything. */
function classifyValid(d: string): RedactionType | null {
  if (d.length === 10) return d[0] === '1' ? 'NATIONAL_ID' : d[0] === '2' ? 'IQAMA' : null;
  return cardNetwork(d) ? 'CARD' : null;
}

const byStart = (x: Redaction, y: Redaction) => x.start - y.start;
/** The longest reading first; of two as long, the earlier. */
const longestFirst = (x: Redaction, y: Redaction) => y.value.length - x.value.length || x.start - y.start;

/** National IDs, Iqama numbers and cards in `text` (whose digits `scan` found), non-overlapping, in order. */
export function findNumbers(text: string, scan: DigitScan = digitRuns(text)): Redaction[] {
  const found: Redaction[] = [];
  for (const { digits, groups } of scan.runs) {
    let candidates: Redaction[] | null = null;
    for (let a = 0; a < groups.length; a++) {
      const from = groups[a]!.from;
      for (let b = a; b < groups.length; b++) {
        const length = groups[b]!.to - from;
        if (length > 19) break;
        // Every value is Luhn-valid: what cannot be one, or fails the check (most numbers), costs no substring.
        if (!mayBeValue(length, digits.charCodeAt(from) - 48) || !luhnValid(digits, from, groups[b]!.to)) continue;
        const value = digits.slice(from, groups[b]!.to);
        const type = classifyValid(value);
        if (type) (candidates ??= []).push({ type, start: groups[a]!.start, end: groups[b]!.end, value });
      }
    }
    if (!candidates) continue;
    // The longest valid reading wins; the rest must not overlap it.
    sortInPlace(candidates, longestFirst);
    const taken: Redaction[] = [];
    for (const c of candidates) if (taken.every((t) => c.end <= t.start || c.start >= t.end)) taken.push(c);
    found.push(...taken);
  }
  return sortInPlace(found, byStart);
}
