// The digit-run scan (daemon/scrub/runs.ts), in JavaScript alone and with the native run finder (native/scrub-scan,
// built by `npm run build`, which `npm test` runs first), against an independent reading written here plainly (a
// regular expression over code points, then each run split into groups and gaps), on the labelled corpus and on random
// text crowded with digits of every script, separators, line breaks, invisible characters and combining marks (both
// planes), letters and IBANs; and a run longer than the scan's buffer, which the reader is handed in parts.
import t from 'tap';
import { digitValue, isInvisible, isSeparator, kindOf, latinIndex, LINE_BREAK } from '../daemon/scrub/characters.js';
import {
  digitRunList,
  mayBeValue,
  MAX_BUFFERED_GROUPS,
  scanDigits,
  scanDigitsJs,
  scannerKind,
  type DigitGroup,
  type DigitRun,
} from '../daemon/scrub/runs.js';
import { generator, makeIban, negatives, positives } from './fixtures/scrub-corpus.js';

type DigitScan = { starts: number[]; runs: DigitRun[] };
const same = (scan: DigitScan) => JSON.stringify(scan);
/** A text as it is reported: U+2028 and U+2029 escaped too (raw, they cut TAP output short). */
const show = (text: string) =>
  JSON.stringify(text).replace(/[\u2028\u2029\u0085]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
/** The runs as the scan in use reads them (native run finding from 2,048 characters), and as JavaScript alone does. */
const inUse = (text: string) => digitRunList(text, false, scanDigits);
const javascript = (text: string) => digitRunList(text, false, scanDigitsJs);

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
const isLineBreak = (cp: number) => kindOf(cp) === LINE_BREAK;
const [D, S, L, I] = [
  classOf((cp) => digitValue(cp) >= 0),
  classOf((cp) => isSeparator(cp) && !isLineBreak(cp)),
  classOf(isLineBreak),
  classOf(isInvisible),
];
/** One line break: CR LF (invisible characters between them allowed), or any line-break character alone. */
const LB = `(?:\\r[${I}]*\\n|[${L}])`;
/**
 * A run: a digit, then digits each after invisible characters and at most two separators, of which at most one line
 * break, U+066B only first.
 */
const GAP = `[${I}]*(?:[${S}\\u066b][${I}]*(?:(?:[${S}]|${LB})[${I}]*)?|${LB}[${I}]*(?:[${S}][${I}]*)?)?`;
const RUN = new RegExp(`[${D}](?:${GAP}[${D}])*`, 'gu');

function referenceRuns(text: string): DigitScan {
  const scan = { starts: [] as number[], runs: [] as DigitScan['runs'] };
  for (const match of text.matchAll(RUN)) {
    const start = match.index;
    const before = start === 0 ? -1 : text.charCodeAt(start - 1);
    const low = before >= 0xdc00 && before <= 0xdfff;
    if (start === 0 || latinIndex(before) >= 0 || isSeparator(before) || isInvisible(before) || low) scan.starts.push(start);
    if (match[0].length < 10) continue;
    // Groups: digits with nothing but invisible characters between them; the separators between two groups are its gap.
    const groups: Array<DigitGroup & { first: number }> = [];
    let digits = '';
    let separators: number[] = [];
    for (let i = start; i < start + match[0].length;) {
      const cp = text.codePointAt(i)!;
      const width = cp > 0xffff ? 2 : 1;
      const value = digitValue(cp);
      if (value >= 0) {
        if (!groups.length || separators.length) {
          const gap = separators.length ? separators[0] + (separators[1] ?? 0) * 65536 : 0;
          groups.push({ from: digits.length, to: 0, start: i, end: 0, gap, first: value });
        }
        digits += String(value);
        groups.at(-1)!.end = i + width;
        separators = [];
      } else if (
        cp === 0x0a &&
        text
          .slice(start, i)
          .replace(new RegExp(`[${I}]`, 'gu'), '')
          .endsWith('\r')
      ) {
        // the LF of a CR LF
      } else if (!isInvisible(cp)) separators.push(isLineBreak(cp) ? 0x0a : cp);
      i += width;
    }
    groups.forEach((g, k) => (g.to = k + 1 < groups.length ? groups[k + 1].from : digits.length));
    const holds = groups.some((a, x) => groups.slice(x).some((b) => b.to - a.from <= 19 && mayBeValue(b.to - a.from, a.first)));
    if (digits.length < 10 || !holds) continue;
    scan.runs.push({ digits, groups: groups.map(({ from, to, start, end, gap }) => ({ from, to, start, end, gap })) });
  }
  return scan;
}

t.test('the native run finder is built and in use', async (t) => {
  t.equal(scannerKind, 'native', 'npm run build compiles native/scrub-scan; without it the JavaScript scan finds the runs');
});

t.test('the scan reads the labelled corpus as the plain reading does', async (t) => {
  const texts = [...positives().map((p) => p.text), ...negatives().map((n) => n.text)];
  const fromReference = texts.filter((text) => same(referenceRuns(text)) !== same(javascript(text)));
  t.same(fromReference, [], `${texts.length} texts, against the plain reading`);
  // Long enough for the native run finder: the whole corpus in one text.
  const joined = texts.join('\n\n');
  t.equal(same(inUse(joined)), same(javascript(joined)), 'the corpus as one text, native and JavaScript');
  t.equal(same(inUse(joined)), same(referenceRuns(joined)), 'the corpus as one text, against the plain reading');
});

t.test('the scan reads random text as the plain reading does', async (t) => {
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
    '\u{1d7ff}',
    '²',
    '₇',
    '⑤',
    '\u{1fbf3}',
    '๓', // digits of other scripts, mathematical ones, superscripts, subscripts, circled, segmented, Thai
    ' ',
    '-',
    '.',
    '\u066b',
    '\u066c',
    '\u00a0',
    '\u2009',
    '\u2212',
    '\ufe63',
    '．',
    '_',
    '·',
    '\u3000',
    '\t',
    '\r',
    '\r\n',
    '\u2028', // separators, line breaks, and the Arabic ones
    '\u200f',
    '\u200b',
    '\u0640',
    '\u00ad',
    '\ufeff',
    '\u{e0020}',
    '\u{1bca1}',
    '\u{1d175}',
    '\u0301',
    '\u20dd',
    '\u064e', // invisibles, both planes, combining marks
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
  let fromReference = 0;
  let differ = 0;
  let firstDiffering = '';
  let batch: string[] = [];
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
    if (same(javascript(text)) !== same(referenceRuns(text)) && !fromReference++) firstFromReference = text;
    batch.push(text);
    if (batch.join('').length > 4096) {
      // Joined into texts the native run finder reads (a hard break between them, so no run spans two).
      const joined = batch.join('/');
      if (same(inUse(joined)) !== same(javascript(joined)) && !differ++) firstDiffering = joined;
      batch = [];
    }
  }
  t.equal(differ, 0, `the same texts joined, native and JavaScript${differ ? `; the first that differs: ${show(firstDiffering)}` : ''}`);
  t.equal(
    fromReference,
    0,
    `${cases} random texts, against the plain reading${fromReference ? `; the first that differs: ${show(firstFromReference)}` : ''}`,
  );
});

t.test('a run longer than the buffer is handed over in parts and read whole', async (t) => {
  // Runs of more groups than the scan buffers are given to the reader in parts; joined, they are the same run.
  const rand = generator(5);
  const text = Array.from({ length: MAX_BUFFERED_GROUPS * 3 + 17 }, () => rand.digits(1 + rand.next(5))).join(
    rand.pick([' ', '-', '\u00a0']),
  );
  t.equal(same(inUse(text)), same(referenceRuns(text)), `${text.length} characters in one run`);
  t.equal(same(javascript(text)), same(referenceRuns(text)), `${text.length} characters in one run, JavaScript alone`);
});
