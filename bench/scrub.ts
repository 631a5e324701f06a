// Scrubbing throughput on one core: the scrubber against a plain single-regex scan over the same mixed Arabic and
// English text, alternating in one run, and the streaming hold-back (characters held at any point) on answers cut
// into token-sized pieces.
//
//   npm run bench:scrub                     about 8 MB of text, 9 rounds
//   options: --megabytes N (default 8), --rounds N (default 9)
import { parseArgs } from 'node:util';
import { scannerKind, ScrubSession, StreamScrubber } from '../daemon/scrub/index.js';
import { digitRuns, digitRunsJs } from '../daemon/scrub/runs.js';
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

const text = corpus(targetBytes);
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
// The digit-run scan alone, by the scanner in use and by the JavaScript one (what runs without the native addon).
const scanInUse: number[] = [];
const scanJs: number[] = [];
let redacted = 0;
for (let r = 0; r < rounds; r++) {
  plain.push(time(() => plainScan(text)));
  const session = new ScrubSession();
  scrub.push(time(() => session.scrub(text)));
  redacted = Object.values(session.counts()).reduce((a, b) => a + b, 0);
  scanInUse.push(time(() => digitRuns(text)));
  scanJs.push(time(() => digitRunsJs(text)));
}
const plainRate = mb / median(plain);
const scrubRate = mb / median(scrub);

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
console.log(
  `digit-run scan alone      ${scannerKind} ${(mb / median(scanInUse)).toFixed(0)} MB/s, JavaScript ${(mb / median(scanJs)).toFixed(0)} MB/s`,
);
console.log(`streamed, 1–6 chars/piece ${(streamedMb / streamSeconds).toFixed(1)} MB/s  (${answers.length} answers)`);
console.log(`hold-back                 at most ${mostHeld} characters, ${(heldSum / pushes).toFixed(1)} on average`);
console.log('');
console.log(`goal: scrubber ≥ 50 MB/s            ${scrubRate >= 50 ? 'met' : 'NOT met'}`);
console.log(`goal: within 3x of the plain scan   ${ratio <= 3 ? 'met' : 'NOT met'}`);
