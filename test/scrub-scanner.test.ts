// The two digit-run scanners: the native one (native/scrub-scan, built by `npm run build`, which `npm test` runs
// first) and the JavaScript one. The scrubbing tests go through the native one for long texts and the JavaScript one
// for short ones (a streamed window, a message); this file checks the native one is built, and that both read every
// text the same: the labelled corpus and random text crowded with digits of every script, separators, invisible
// characters (both planes), letters and IBANs. Both are the same state machine, so each is also held to an independent
// reading written here plainly (a regular expression over code points, then each run split into groups), which a
// mistake made in both would not pass.
import t from 'tap';
import { digitValue, isInvisible, isSeparator, latinIndex } from '../daemon/scrub/characters.js';
import { digitRunsJs, digitRunsNative, mayBeValue, scannerKind, type DigitGroup, type DigitScan } from '../daemon/scrub/runs.js';
import { generator, makeIban, negatives, positives } from './fixtures/scrub-corpus.js';

const native = (text: string) => (digitRunsNative ? digitRunsNative(text) : { starts: [], runs: [{ digits: 'not built', groups: [] }] });
const same = (scan: DigitScan) => JSON.stringify({ starts: Array.from(scan.starts), runs: scan.runs });

/** A regular-expression class of every code point `test` accepts, as ranges. */
function classOf(test: (cp: number) => boolean): string {
  const hex = (cp: number) => `\\u{${cp.toString(16)}}`;
  let out = '';
  for (let cp = 0; cp <= 0x10ffff; cp++) {
    if (!test(cp) || (cp >= 0xd800 && cp <= 0xdfff)) continue;
    let last = cp;
    while (last < 0x10ffff && test(last + 1)) last++;
    out += last === cp ? hex(cp) : `${hex(cp)}-${hex(last)}`;
    cp = last;
  }
  return out;
}
const [D, S, I] = [classOf((cp) => digitValue(cp) >= 0), classOf(isSeparator), classOf(isInvisible)];
/** A run: a digit, then digits each after invisible characters and at most two separators (U+066B only first). */
const RUN = new RegExp(`[${D}](?:[${I}]*(?:[${S}\\u066b][${I}]*(?:[${S}][${I}]*)?)?[${D}])*`, 'gu');

function referenceRuns(text: string): DigitScan {
  const scan = { starts: [] as number[], runs: [] as DigitScan['runs'] };
  for (const match of text.matchAll(RUN)) {
    const start = match.index;
    const before = start === 0 ? -1 : text.charCodeAt(start - 1);
    const low = before >= 0xdc00 && before <= 0xdfff;
    if (start === 0 || latinIndex(before) >= 0 || isSeparator(before) || isInvisible(before) || low) scan.starts.push(start);
    if (match[0].length < 10) continue;
    // Groups: digits with nothing but invisible characters between them.
    const groups: Array<DigitGroup & { first: number; afterDecimal: boolean }> = [];
    let digits = '';
    let separators: number[] = [];
    for (let i = start; i < start + match[0].length;) {
      const cp = text.codePointAt(i)!;
      const width = cp > 0xffff ? 2 : 1;
      const value = digitValue(cp);
      if (value >= 0) {
        if (!groups.length || separators.length) {
          const afterDecimal = separators.length === 1 && [0x2e, 0xff0e, 0x066b].includes(separators[0]);
          groups.push({ from: digits.length, to: 0, start: i, end: 0, first: value, afterDecimal });
        }
        digits += String(value);
        groups.at(-1)!.end = i + width;
        separators = [];
      } else if (!isInvisible(cp)) separators.push(cp);
      i += width;
    }
    groups.forEach((g, k) => (g.to = k + 1 < groups.length ? groups[k + 1].from : digits.length));
    // A dot and one or two final digits: a decimal number, whose last two groups are not read.
    const kept =
      groups.length >= 2 && groups.at(-1)!.afterDecimal && groups.at(-1)!.to - groups.at(-1)!.from <= 2 ? groups.slice(0, -2) : groups;
    const usable = kept.length ? kept.at(-1)!.to : 0;
    const holds = kept.some((a, x) => kept.slice(x).some((b) => b.to - a.from <= 19 && mayBeValue(b.to - a.from, a.first)));
    if (usable < 10 || !holds) continue;
    scan.runs.push({ digits: digits.slice(0, usable), groups: kept.map(({ from, to, start, end }) => ({ from, to, start, end })) });
  }
  return scan;
}

t.test('the native scanner is built and in use', async (t) => {
  t.equal(scannerKind, 'native', 'npm run build compiles native/scrub-scan; without it scrubbing falls back to JavaScript');
});

t.test('both scanners read the labelled corpus the same, and as the plain reading does', async (t) => {
  const texts = [...positives().map((p) => p.text), ...negatives().map((n) => n.text)];
  const differ = texts.filter((text) => same(native(text)) !== same(digitRunsJs(text)));
  t.same(differ, [], `${texts.length} texts`);
  const fromReference = texts.filter((text) => same(referenceRuns(text)) !== same(digitRunsJs(text)));
  t.same(fromReference, [], `${texts.length} texts, against the plain reading`);
});

t.test('both scanners read random text the same, and as the plain reading does', async (t) => {
  const rand = generator(99);
  const pieces = [
    ...'0123456789',
    '٣',
    '۴',
    '५',
    '৬',
    '５',
    '\u{1d7d9}',
    '\u{1d7ce}',
    '\u{1d7ff}', // digits of other scripts, mathematical ones
    ' ',
    '-',
    '.',
    '\u066b',
    '\u066c',
    '\u00a0',
    '\u2009',
    '\u2212',
    '\ufe63',
    '．', // separators, and the Arabic ones
    '\u200f',
    '\u200b',
    '\u0640',
    '\u00ad',
    '\ufeff',
    '\u{e0020}',
    '\u{1bca1}',
    '\u{1d175}', // invisibles, both planes
    'a',
    'S',
    'A',
    'ｓ',
    'ب',
    '/',
    ':',
    '\n',
    '😀',
    '\u{1d400}',
    '\ud835',
    '\udfd0', // letters, others, lone surrogates
  ];
  let differ = 0;
  let first = '';
  let fromReference = 0;
  let firstFromReference = '';
  const cases = 40_000;
  for (let n = 0; n < cases; n++) {
    let text = '';
    const length = rand.next(60);
    for (let k = 0; k < length; k++) {
      text +=
        rand.next(25) === 0
          ? ` ${makeIban(rand.pick(['SA', 'DE', 'GB', 'AE']), rand).replace(/(.{4})(?=.)/g, `$1${rand.pick(pieces)}`)}`
          : rand.pick(pieces);
    }
    const js = same(digitRunsJs(text));
    if (js !== same(native(text)) && !differ++) first = text;
    if (js !== same(referenceRuns(text)) && !fromReference++) firstFromReference = text;
  }
  t.equal(differ, 0, `${cases} random texts${differ ? `; the first that differs: ${JSON.stringify(first)}` : ''}`);
  t.equal(
    fromReference,
    0,
    `${cases} random texts, against the plain reading${fromReference ? `; the first that differs: ${JSON.stringify(firstFromReference)}` : ''}`,
  );
});
