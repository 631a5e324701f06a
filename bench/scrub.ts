// Scrubbing throughput on one core: the scrubber against a plain single-regex scan over the same mixed Arabic and
// English text, alternating in one run; the scrubber on number-dense text (long digit runs, a long numeric table) and
// on a hostile body (one digit run of valid IDs); and the streaming hold-back (characters held at any point) on
// answers cut into token-sized pieces.
//
//   npm run bench:scrub                     about 8 MB of text, 9 rounds
//   options: --megabytes N (default 8), --rounds N (default 9)
import { parseArgs } from 'node:util';
import { ScrubSession, StreamScrubber } from '../daemon/scrub/index.js';
import { appendResult } from './results.js';
import { generator, makeIban, SCRIPTS, withLuhn } from '../test/fixtures/scrub-corpus.js';

const { values } = parseArgs({ options: { megabytes: { type: 'string' }, rounds: { type: 'string' } } });
const targetBytes = Number(values.megabytes ?? 8) * 1024 * 1024;
const rounds = Number(values.rounds ?? 9);

const rand = generator(7);
const arabic = [
  'شكرا لتواصلك معنا، تم استلام طلبك وسيتم الرد عليه خلال يومي عمل.',
  'يرجى تحديث بياناتك في أقرب فرع أو عبر التطبيق قبل نهاية الشهر.',
  'تم تحويل المبلغ ١٬٢٥٠٫٠٠ ريال بتاريخ ١٤٤٦/٠٣/١٢ هـ إلى الحساب المسجل.',
  'للاستفسار اتصل على ٩٢٠٠٠١٢٣٤ أو ٠٥٥١٢٣٤٥٦٧ من الأحد إلى الخميس.',
  'المريض راجع العيادة يوم ٢٠٢٥-٠٤-١٠ ووصف له الطبيب علاجا لمدة أسبوعين.',
];
const english = [
  'Thank you for contacting us; your request has been received and will be answered within two working days.',
  'The invoice dated 2025-04-10 for SAR 12,450.00 was paid in full, reference 778812.',
  'Please call 800 123 4567 or +966 55 123 4567 if you have any further questions about the transfer.',
  'The patient was seen on 10/04/2025 and prescribed a two-week course; follow-up is scheduled for May.',
  'Our records show the account was opened in 2019 and the last statement was issued on the 3rd.',
];
function plantedValue(): string {
  const script = rand.pick(Object.values(SCRIPTS));
  switch (rand.next(4)) {
    case 0:
      return `رقم الهوية ${script(withLuhn(`1${rand.digits(8)}`))}`;
    case 1:
      return `Iqama ${script(withLuhn(`2${rand.digits(8)}`))}`;
    case 2:
      return `card ${withLuhn(`4${rand.digits(14)}`).replace(/(\d{4})(?=\d)/g, '$1 ')}`;
    default:
      return `IBAN ${makeIban('SA', rand).replace(/(.{4})(?=.)/g, '$1 ')}`;
  }
}
/** Paragraphs of Arabic and English sentences, one value planted in about one sentence in eight. */
function corpus(bytes: number): string {
  const parts: string[] = [];
  let size = 0;
  while (size < bytes) {
    const sentence = rand.next(8) === 0 ? `${plantedValue()}.` : rand.pick(rand.next(2) ? arabic : english);
    const piece = `${sentence}${rand.next(5) === 0 ? '\n\n' : ' '}`;
    parts.push(piece);
    size += Buffer.byteLength(piece);
  }
  return parts.join('');
}

/**
 * The baseline: what a gateway typically runs, one regex over the text (ASCII digits only, \b boundaries, no
 * checksums), replacing what it matches.
 */
const PLAIN = /\b(?:[12]\d{9}|(?:\d[ -]?){12,18}\d|[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30})\b/g;
const plainScan = (text: string) => text.replace(PLAIN, '[REDACTED]');

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function time(fn: () => unknown): number {
  const start = process.hrtime.bigint();
  fn();
  return Number(process.hrtime.bigint() - start) / 1e9;
}

/**
 * Long digit runs: lines of three hundred numbers separated by single spaces (a data dump, a list of account numbers
 * or readings), every line one digit run with the next (a line break joins groups too); one number in forty is a value
 * (an ID, an Iqama number or a card). `shortest` and `longest` bound the other numbers' digits.
 */
function digitRuns(bytes: number, shortest: number, longest: number): string {
  const lines: string[] = [];
  let size = 0;
  while (size < bytes) {
    const numbers: string[] = [];
    for (let k = 0; k < 300; k++) {
      if (rand.next(40) === 0)
        numbers.push(rand.next(2) ? withLuhn(`${1 + rand.next(2)}${rand.digits(8)}`) : withLuhn(`4${rand.digits(14)}`));
      else numbers.push(rand.digits(shortest + rand.next(longest - shortest + 1)));
    }
    const line = `${numbers.join(' ')}\n`;
    lines.push(line);
    size += line.length;
  }
  return lines.join('');
}

/**
 * A long numeric table: CSV rows of a date and time, an account's amount and balance with decimals, a count, a
 * reading with six decimals, a phone number, and in one row in eight a national ID or Iqama number.
 */
function numericTable(bytes: number): string {
  const rows: string[] = ['date,time,amount,balance,count,reading,phone,id\n'];
  let size = 0;
  while (size < bytes) {
    const id = rand.next(8) === 0 ? withLuhn(`${1 + rand.next(2)}${rand.digits(8)}`) : '';
    const row =
      `2026-${String(1 + rand.next(12)).padStart(2, '0')}-${String(1 + rand.next(28)).padStart(2, '0')},` +
      `${String(rand.next(24)).padStart(2, '0')}:${rand.digits(2)}:${rand.digits(2)},${rand.next(100000)}.${rand.digits(2)},` +
      `${rand.next(10000000)}.${rand.digits(2)},${rand.next(1000)},${rand.next(100)}.${rand.digits(6)},05${rand.digits(8)},${id}\n`;
    rows.push(row);
    size += row.length;
  }
  return rows.join('');
}

/** Flat strings: a rope built by concatenation would be flattened by the first pass that reads it, inside the timing. */
const flat = (s: string) => Buffer.from(s).toString();
const text = flat(corpus(targetBytes));
const bytes = Buffer.byteLength(text);
const mb = bytes / 1024 / 1024;
console.log(`text: ${mb.toFixed(1)} MB UTF-8, ${text.length.toLocaleString()} UTF-16 units, mixed Arabic and English`);

// Warm both up, then alternate so neither gets a quieter machine.
for (let i = 0; i < 2; i++) {
  plainScan(text);
  new ScrubSession().scrub(text);
}
const plain: number[] = [];
const scrub: number[] = [];
let redacted = 0;
for (let r = 0; r < rounds; r++) {
  plain.push(time(() => plainScan(text)));
  const session = new ScrubSession();
  scrub.push(time(() => session.scrub(text)));
  redacted = Object.values(session.counts()).reduce((a, b) => a + b, 0);
}
const plainRate = mb / median(plain);
const scrubRate = mb / median(scrub);

/** The scrubber's rate on `sample` (median of the rounds), in MB/s of UTF-8. */
function rateOn(sample: string): number {
  new ScrubSession().scrub(sample);
  const seconds: number[] = [];
  for (let r = 0; r < rounds; r++) seconds.push(time(() => new ScrubSession().scrub(sample)));
  return Buffer.byteLength(sample) / 1024 / 1024 / median(seconds);
}
const runsRate = rateOn(flat(digitRuns(targetBytes / 2, 6, 12)));
// The same of numbers of one to seven digits: five characters a group, and the work is per group.
const shortRunsRate = rateOn(flat(digitRuns(targetBytes / 2, 1, 7)));
const tableRate = rateOn(flat(numericTable(targetBytes / 2)));
// The hostile body of docs/scrubbing.md: 4 MB of one digit run in which every group is a valid ID.
const hostile = flat('1047382914 '.repeat(Math.ceil((4 * 1024 * 1024) / 11)));
new ScrubSession().scrub(hostile);
const hostileSeconds = median(Array.from({ length: Math.min(rounds, 5) }, () => time(() => new ScrubSession().scrub(hostile))));

// Streaming: answers of a few kilobytes cut into pieces of 1 to 6 characters, as a model's tokens arrive.
const answers = Array.from({ length: 400 }, () => corpus(3000));

let mostHeld = 0;
let heldSum = 0;
let pushes = 0;
const streamSeconds = time(() => {
  for (const answer of answers) {
    const stream = new StreamScrubber(new ScrubSession());
    for (let at = 0; at < answer.length;) {
      const length = 1 + rand.next(6);
      stream.push(answer.slice(at, at + length));
      heldSum += stream.held;
      pushes++;
      at += length;
    }
    stream.end();
    mostHeld = Math.max(mostHeld, stream.mostHeld);
  }
});
const streamedMb = answers.reduce((n, a) => n + Buffer.byteLength(a), 0) / 1024 / 1024;

const ratio = plainRate / scrubRate;
console.log(`values replaced per pass: ${redacted.toLocaleString()}`);
console.log('');
console.log(`plain single-regex scan   ${plainRate.toFixed(1)} MB/s  (median of ${rounds})`);
console.log(`scrubber                  ${scrubRate.toFixed(1)} MB/s  (median of ${rounds})`);
console.log(`plain / scrubber          ${ratio.toFixed(2)}x`);
console.log(`long digit runs           ${runsRate.toFixed(1)} MB/s  (numbers of 6–12 digits)`);
console.log(`long runs, short numbers  ${shortRunsRate.toFixed(1)} MB/s  (numbers of 1–7 digits)`);
console.log(`long numeric table        ${tableRate.toFixed(1)} MB/s`);
console.log(`4 MB run of valid IDs     ${hostileSeconds.toFixed(2)} s`);
console.log(`streamed, 1–6 chars/piece ${(streamedMb / streamSeconds).toFixed(1)} MB/s  (${answers.length} answers)`);
console.log(`hold-back                 at most ${mostHeld} characters, ${(heldSum / pushes).toFixed(1)} on average`);
console.log('');
console.log(`goal: scrubber ≥ 50 MB/s            ${scrubRate >= 50 ? 'met' : 'NOT met'}`);
console.log(`goal: within 3x of the plain scan   ${ratio <= 3 ? 'met' : 'NOT met'}`);
console.log(`goal: digit runs, table ≥ 50 MB/s   ${runsRate >= 50 && tableRate >= 50 ? 'met' : 'NOT met'}`);
console.log(`goal: 4 MB hostile run under 1 s    ${hostileSeconds < 1 ? 'met' : 'NOT met'}`);

appendResult(
  'scrub',
  { megabytes: targetBytes / 1024 / 1024, rounds },
  {
    textMB: mb,
    valuesReplaced: redacted,
    plainScanMBps: plainRate,
    scrubberMBps: scrubRate,
    plainOverScrubber: ratio,
    digitRunsMBps: runsRate,
    shortDigitRunsMBps: shortRunsRate,
    numericTableMBps: tableRate,
    hostileSeconds,
    streamedMBps: streamedMb / streamSeconds,
    holdBackMost: mostHeld,
    holdBackMean: heldSum / pushes,
    goals: {
      scrubberAtLeast50MBps: scrubRate >= 50,
      within3xOfPlainScan: ratio <= 3,
      digitRunsAndTableAtLeast50MBps: runsRate >= 50 && tableRate >= 50,
      hostileUnder1s: hostileSeconds < 1,
    },
  },
);
