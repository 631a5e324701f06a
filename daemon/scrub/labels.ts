// What the words just before a number say it is. Two readings change what a number is taken for: a label that names
// an identifier ("ID", "رقم الهوية", "iqama", "card", `"national_id":`) makes "1012345678.5" an ID with a decimal tail
// rather than an amount; a label that names a time ("ts=", `"created_at":`, "epoch", "تاريخ") makes a ten-digit number a
// timestamp rather than an ID or Iqama number.
import { digitValue, isInvisible } from './characters.js';

/** How far back from a number its label is looked for (UTF-16 units). Streaming keeps at least this much (stream.ts). */
export const LABEL_LOOKBACK = 48;

export type Label = 'identifier' | 'time' | null;

/** Words that say what follows is one of the values scrubbed (English, and Arabic stems matched inside words). */
const IDENTIFIER_WORDS = new Set([
  'id',
  'ids',
  'nid',
  'nin',
  'identity',
  'identification',
  'national',
  'civil',
  'iqama',
  'iqamah',
  'residence',
  'residency',
  'resident',
  'permit',
  'card',
  'cards',
  'cc',
  'pan',
  'mada',
  'visa',
  'mastercard',
  'amex',
]);
const IDENTIFIER_STEMS = ['هوي', 'إقام', 'اقام', 'الإقام', 'بطاق', 'مدى', 'سجل'];

/**
 * Words that say what follows is a time: a ten-digit number of seconds since 1970 (every log line has one) looks just
 * like an ID. Only times: "your reference is 1012345678" or "order 1012345678" may well be an ID a model repeats, so
 * references, orders and phone numbers are judged by their digits alone.
 */
const TIME_WORDS = new Set([
  'ts',
  'time',
  'timestamp',
  'epoch',
  'unix',
  'created',
  'updated',
  'modified',
  'deleted',
  'expires',
  'expiry',
  'exp',
  'iat',
  'nbf',
  'datetime',
  'mtime',
  'ctime',
  'atime',
]);
const TIME_STEMS = ['تاريخ', 'وقت', 'الطابع الزمني'];

/** Words that only fill the space between a label and its number ("ID number is", "رقم الهوية هو"). */
const FILLERS = new Set(['number', 'numbers', 'no', 'num', 'nr', 'is', 'was', 'are', 'of', 'the', 'my', 'your', 'رقم', 'هو', 'هي', 'كان']);

/** A key's parts: "national_id" → national, id. */
function partsOf(word: string): string[] {
  return word.includes('_') || word.includes('-') ? word.split(/[_-]+/) : [word];
}

const isStem = (word: string, stems: readonly string[]) => stems.some((stem) => word.includes(stem));
const isIdentifier = (word: string) => partsOf(word).some((p) => IDENTIFIER_WORDS.has(p)) || isStem(word, IDENTIFIER_STEMS);
const isTime = (word: string) => partsOf(word).some((p) => TIME_WORDS.has(p)) || isStem(word, TIME_STEMS);

/** Letters a label is written in (Latin and Arabic), and the underscore and hyphen of keys such as "national_id". */
function isWordUnit(unit: number): boolean {
  return (
    (unit >= 0x61 && unit <= 0x7a) ||
    (unit >= 0x41 && unit <= 0x5a) ||
    unit === 0x5f ||
    unit === 0x2d ||
    (unit >= 0x0620 && unit <= 0x064a) ||
    (unit >= 0x066e && unit <= 0x06d3)
  );
}

/**
 * The word that ends before `end` (lower case, invisible characters and marks left out), read back no further than
 * `stop`; `wordStart` is where it begins. Null if a digit comes first (a number, not a label, stands before), or no
 * word does.
 */
let wordStart = 0;
function wordBefore(text: string, end: number, stop: number): string | null {
  let i = end;
  // The glue between the label and what follows it: spaces, punctuation, invisible characters.
  while (i > stop) {
    const unit = text.charCodeAt(i - 1);
    if (isWordUnit(unit) && unit !== 0x2d && unit !== 0x5f && !isInvisible(unit)) break;
    if (digitValue(unit) >= 0) return null;
    i--;
  }
  let word = '';
  while (i > stop) {
    const unit = text.charCodeAt(i - 1);
    if (isInvisible(unit)) {
      i--;
      continue;
    }
    if (!isWordUnit(unit)) break;
    word = String.fromCharCode(unit >= 0x41 && unit <= 0x5a ? unit + 0x20 : unit) + word;
    i--;
  }
  wordStart = i;
  return word || null;
}

/** What the label just before `start` in `text` (within LABEL_LOOKBACK units) says, if anything. */
export function labelBefore(text: string, start: number): Label {
  const stop = Math.max(0, start - LABEL_LOOKBACK);
  let word = wordBefore(text, start, stop);
  for (let fillers = 0; word !== null && FILLERS.has(word) && fillers < 3; fillers++) word = wordBefore(text, wordStart, stop);
  if (word === null) return null;
  if (isTime(word)) return 'time';
  return isIdentifier(word) ? 'identifier' : null;
}
