// The two digit-run scanners: the native one (native/scrub-scan, built by `npm run build`, which `npm test` runs
// first) and the JavaScript one. The scrubbing tests go through the native one for long texts and the JavaScript one
// for short ones (a streamed window, a message); this file checks the native one is built, and that both read every
// text the same: the labelled corpus and random text
// crowded with digits of every script, separators, invisible characters (both planes), letters and IBANs.
import t from 'tap';
import { digitRunsJs, digitRunsNative, scannerKind, type DigitScan } from '../daemon/scrub/runs.js';
import { generator, makeIban, negatives, positives } from './fixtures/scrub-corpus.js';

const native = (text: string) => (digitRunsNative ? digitRunsNative(text) : { starts: [], runs: [{ digits: 'not built', groups: [] }] });
const same = (scan: DigitScan) => JSON.stringify({ starts: Array.from(scan.starts), runs: scan.runs });

t.test('the native scanner is built and in use', async (t) => {
  t.equal(scannerKind, 'native', 'npm run build compiles native/scrub-scan; without it scrubbing falls back to JavaScript');
});

t.test('both scanners read the labelled corpus the same', async (t) => {
  const texts = [...positives().map((p) => p.text), ...negatives().map((n) => n.text)];
  const differ = texts.filter((text) => same(native(text)) !== same(digitRunsJs(text)));
  t.same(differ, [], `${texts.length} texts`);
});

t.test('both scanners read random text the same', async (t) => {
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
    if (same(native(text)) !== same(digitRunsJs(text)) && !differ++) first = text;
  }
  t.equal(differ, 0, `${cases} random texts${differ ? `; the first that differs: ${JSON.stringify(first)}` : ''}`);
});
