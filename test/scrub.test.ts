// The scrubbing layer's detectors against a labelled corpus: what must be replaced (each type, digit script,
// separator, invisible characters, labels glued on) and what must be left alone (failed checksums, other first
// digits, phone numbers, dates, amounts, timestamps, VAT numbers, masked cards, decimals, broken IBANs).
import t from 'tap';
import { luhnValid, ScrubSession, StreamScrubber } from '../daemon/scrub/index.js';
import { generator, makeIban, negatives as generatedNegatives, positives as generatedPositives } from './fixtures/scrub-corpus.js';

/**
 * A text as it is reported: JSON with line and paragraph separators escaped too (JSON.stringify leaves U+2028 and
 * U+2029 raw, and a raw one in TAP output cuts the report short, so a failure would go unseen).
 */
const show = (value: unknown) =>
  JSON.stringify(value).replace(/[\u2028\u2029\u0085]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

/** Appends the Luhn check digit to a string of digits. */
function withLuhn(prefix: string): string {
  for (let d = 0; d <= 9; d++) if (luhnValid(prefix + d)) return prefix + d;
  throw new Error('unreachable');
}
const toArabicIndic = (s: string) => s.replace(/[0-9]/g, (d) => String.fromCharCode(0x0660 + Number(d)));
const toPersian = (s: string) => s.replace(/[0-9]/g, (d) => String.fromCharCode(0x06f0 + Number(d)));
const toFullwidth = (s: string) => s.replace(/[0-9]/g, (d) => String.fromCharCode(0xff10 + Number(d)));
const toMath = (s: string) => s.replace(/[0-9]/g, (d) => String.fromCodePoint(0x1d7ec + Number(d)));
const interleave = (s: string, mark: string) => [...s].join(mark);

const nid = withLuhn('101234567');
const nid2 = withLuhn('109876543');
const iqama = withLuhn('234567890');
const visa = withLuhn('411111111111111');
const mastercard = withLuhn('222100000000000');
const amex = withLuhn('37828224631000');
const mada = withLuhn('968201000000000');
const unionpay = withLuhn('621234567890123');

// [text, the placeholders it must contain after scrubbing]
const positives: Array<[string, string[]]> = [
  [`رقم الهوية: ${nid}`, ['[NATIONAL_ID]']],
  [`رقم الهوية:${nid}`, ['[NATIONAL_ID]']],
  [`هويتي${nid}`, ['[NATIONAL_ID]']],
  [`ID${nid}.`, ['[NATIONAL_ID]']],
  [`My national ID is ${nid}, thanks`, ['[NATIONAL_ID]']],
  [`Iqama ${iqama}`, ['[IQAMA]']],
  [`رقم الإقامة ${toArabicIndic(iqama)}`, ['[IQAMA]']],
  [`هوية ${toArabicIndic(nid)}`, ['[NATIONAL_ID]']],
  [`هوية ${toPersian(nid)}`, ['[NATIONAL_ID]']],
  [`id ${toFullwidth(nid)}`, ['[NATIONAL_ID]']],
  [`id ${toMath(nid)}`, ['[NATIONAL_ID]']],
  [`id ${interleave(nid, '\u200b')}`, ['[NATIONAL_ID]']],
  [`id ${interleave(nid, '\u200f')}`, ['[NATIONAL_ID]']],
  [`id \u2066${nid}\u2069`, ['[NATIONAL_ID]']],
  [`id ${interleave(nid, '\u0640')}`, ['[NATIONAL_ID]']],
  [`id ${interleave(nid, '-')}`, ['[NATIONAL_ID]']],
  [`id ${nid.slice(0, 3)} ${nid.slice(3, 6)} ${nid.slice(6)}`, ['[NATIONAL_ID]']],
  [`id ${nid.slice(0, 5)}\u00a0${nid.slice(5)}`, ['[NATIONAL_ID]']],
  [`id ${nid.slice(0, 5)}\u202f${nid.slice(5)}`, ['[NATIONAL_ID]']],
  [`ids ${nid} and ${nid2}`, ['[NATIONAL_ID]', '[NATIONAL_ID_2]']],
  [`${nid} ${iqama}`, ['[NATIONAL_ID]', '[IQAMA]']],
  [`card ${visa}`, ['[CARD]']],
  [`card ${visa.replace(/(\d{4})(?=\d)/g, '$1 ')}`, ['[CARD]']],
  [`card ${visa.replace(/(\d{4})(?=\d)/g, '$1-')}`, ['[CARD]']],
  [`mc ${mastercard}`, ['[CARD]']],
  [`amex ${amex.slice(0, 4)} ${amex.slice(4, 10)} ${amex.slice(10)}`, ['[CARD]']],
  [`مدى ${toArabicIndic(mada)}`, ['[CARD]']],
  [`unionpay ${unionpay}`, ['[CARD]']],
  ['IBAN SA03 8000 0000 6080 1016 7519', ['[IBAN]']],
  ['IBAN SA03 8000 -0000 6080 1016 7519', ['[IBAN]']],
  ['iban sa0380000000608010167519', ['[IBAN]']],
  ['ibanSA0380000000608010167519', ['[IBAN]']],
  ['الآيبان:SA0380000000608010167519', ['[IBAN]']],
  [`آيبان ${'SA03' + toArabicIndic('80000000608010167519')}`, ['[IBAN]']],
  ['GB82 WEST 1234 5698 7654 32', ['[IBAN]']],
  ['DE89370400440532013000', ['[IBAN]']],
  ['AE070331234567890123456', ['[IBAN]']],
  ['FR14 2004 1010 0505 0001 3M02 606', ['[IBAN]']],
  ['{"iban":"SA0380000000608010167519","note":"x"}', ['[IBAN]']],
  [`| name | id |\n| Ali | ${nid} |\n| Sara | ${iqama} |`, ['[NATIONAL_ID]', '[IQAMA]']],
  [`{"card":"${visa}","nid":"${nid}"}`, ['[CARD]', '[NATIONAL_ID]']],
  // Right after a time whose last part is 00: the 00 is the time's, not an international dialling prefix.
  [`10:00 ${nid}`, ['[NATIONAL_ID]']],
  [`2026-11-27T10:16:00 ${iqama} signed in`, ['[IQAMA]']],
  [`2026-11-27T10:16:23+03:00 ${iqama}`, ['[IQAMA]']],
  [`الساعة ١٠:٠٠ ${toArabicIndic(nid)}`, ['[NATIONAL_ID]']],
];

const negatives: string[] = [
  `failed checksum ${nid.slice(0, 9)}${(Number(nid[9]) + 1) % 10}`,
  `other first digit ${withLuhn('301234567')}`,
  `other first digit ${withLuhn('501234567')}`,
  'call 0501234567 or +966 50 123 4567 or 00966501234567',
  'landline 011 234 5678, 920000000',
  'date 2024-05-12, 12/05/2024, ١٤٤٥/١١/٠٥ هـ, 1445-11-05',
  'amount 1,234,567.89 SAR and 1012345678.50 SAR',
  'timestamp 1700000000000 and 1715512345678',
  'VAT 300000000000003 and 310123456700003',
  'masked card 4111 **** **** 1111 and 4111XXXXXXXX1111',
  `long run ${nid}12345`,
  `inside a tracking number 99${nid}`,
  'decimal 3.14159265358979',
  'IBAN with wrong check SA04 8000 0000 6080 1016 7519',
  'IBAN too short SA03 8000 0000 6080 1016 751',
  'IBAN too long SA03800000006080101675199',
  'IBAN cut by three separators SA03 8000 - 0000 6080 1016 7519',
  'order #1234567890 and invoice 4000000000',
  'version 10.12.345.678',
  // IPv4 addresses whose digits, read as one number, pass Luhn.
  'GET /v1/models from 100.39.68.128 in 12 ms',
  'client 10.1.22.23 200 OK',
  'broadcast 100.0.255.255:8080',
];

t.test('every positive is replaced by its typed placeholder (recall ≥ 0.99)', async (t) => {
  let found = 0;
  for (const [text, expected] of positives) {
    const out = new ScrubSession().scrub(text);
    const ok = expected.every((p) => out.includes(p)) && !/[0-9\u0660-\u0669\u06f0-\u06f9]{6,}/.test(out.replace(/\[[A-Z_0-9]+\]/g, ''));
    t.ok(ok, `${show(text)} → ${show(out)}`);
    if (ok) found++;
  }
  const recall = found / positives.length;
  t.ok(recall >= 0.99, `recall ${recall.toFixed(3)}`);
});

t.test('negatives are left byte-identical (≥ 0.98)', async (t) => {
  let untouched = 0;
  for (const text of negatives) {
    const out = new ScrubSession().scrub(text);
    t.equal(out, text, show(text));
    if (out === text) untouched++;
  }
  t.ok(untouched / negatives.length >= 0.98, `untouched ${(untouched / negatives.length).toFixed(3)}`);
});

/** Digits of any script left over once placeholders are taken out: a value the scrubber missed shows here. */
const leftoverDigits = (out: string) =>
  /(?:[0-9\u0660-\u0669\u06f0-\u06f9\uff10-\uff19]|\ud835[\udfce-\udfff])[^\p{L}]*(?:(?:[0-9\u0660-\u0669\u06f0-\u06f9\uff10-\uff19]|\ud835[\udfce-\udfff])[^\p{L}]*){5,}/u.test(
    out.replace(/\[[A-Z_0-9]+\]/g, ''),
  );

t.test('generated corpus: recall by type and untouched negatives by kind meet the gates', async (t) => {
  const cases = generatedPositives();
  const byType = new Map<string, { found: number; total: number }>();
  const misses: string[] = [];
  for (const { text, expected, type, how } of cases) {
    const out = new ScrubSession().scrub(text);
    const placeholders = out.match(/\[(?:NATIONAL_ID|IQAMA|IBAN|CARD)(?:_\d+)?\]/g) ?? [];
    const ok = JSON.stringify(placeholders) === JSON.stringify(expected) && !leftoverDigits(out);
    const tally = byType.get(type) ?? { found: 0, total: 0 };
    tally.total++;
    if (ok) tally.found++;
    else misses.push(`${how}: ${show(text)} → ${show(out)}`);
    byType.set(type, tally);
  }
  for (const miss of misses) t.comment(`missed ${miss}`);
  const found = [...byType.values()].reduce((n, v) => n + v.found, 0);
  const recall = found / cases.length;
  for (const [type, { found, total }] of byType) t.comment(`${type}: ${found}/${total}`);
  t.ok(cases.length >= 500, `${cases.length} positives`);
  t.ok(recall >= 0.99, `recall ${recall.toFixed(4)} (${found}/${cases.length})`);

  const texts = generatedNegatives();
  const byKind = new Map<string, { untouched: number; total: number }>();
  for (const { text, kind } of texts) {
    const out = new ScrubSession().scrub(text);
    const tally = byKind.get(kind) ?? { untouched: 0, total: 0 };
    tally.total++;
    if (out === text) tally.untouched++;
    else t.comment(`changed ${kind}: ${show(text)} → ${show(out)}`);
    byKind.set(kind, tally);
  }
  const untouched = [...byKind.values()].reduce((n, v) => n + v.untouched, 0);
  for (const [kind, { untouched, total }] of byKind) t.comment(`${kind}: ${untouched}/${total} untouched`);
  t.ok(texts.length >= 500, `${texts.length} negatives`);
  t.ok(untouched / texts.length >= 0.98, `untouched ${(untouched / texts.length).toFixed(4)} (${untouched}/${texts.length})`);
});

t.test('everything around a value stays byte-identical; the span covers interleaved invisible characters', async (t) => {
  const text = `قبل\u200f ${interleave(nid, '\u200b')} \u200eبعد`;
  t.equal(new ScrubSession().scrub(text), 'قبل\u200f [NATIONAL_ID] \u200eبعد');
});

t.test('placeholders are per request: the same value, the same placeholder; idempotent', async (t) => {
  const session = new ScrubSession();
  const a = session.scrub(`first ${nid}, then ${nid2}`);
  const b = session.scrub(`again ${nid2} and ${nid}`);
  t.equal(a, 'first [NATIONAL_ID], then [NATIONAL_ID_2]');
  t.equal(b, 'again [NATIONAL_ID_2] and [NATIONAL_ID]');
  t.same(session.counts(), { NATIONAL_ID: 4, IQAMA: 0, IBAN: 0, CARD: 0 });
  t.equal(new ScrubSession().scrub(a), a, 'scrubbing scrubbed text changes nothing');
});

t.test('property: values planted at random places in random text are always found, nothing else changes', async (t) => {
  let seed = 12345;
  const rand = (n: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const filler = ['السلام عليكم', 'hello', 'المبلغ', 'رقم', 'the', ' ', ', ', '\n', 'تم', 'ok', 'يا', 'and'];
  const values: Array<[string, string]> = [
    [nid, '[NATIONAL_ID]'],
    [iqama, '[IQAMA]'],
    [visa, '[CARD]'],
    ['SA0380000000608010167519', '[IBAN]'],
  ];
  for (let round = 0; round < 300; round++) {
    let text = '';
    let expected = '';
    const [value, placeholder] = values[rand(values.length)];
    const before = Array.from({ length: rand(6) }, () => filler[rand(filler.length)]).join(' ');
    const after = Array.from({ length: rand(6) }, () => filler[rand(filler.length)]).join(' ');
    text = `${before} ${value} ${after}`;
    expected = `${before} ${placeholder} ${after}`;
    t.equal(new ScrubSession().scrub(text), expected, `round ${round}`);
  }
});

/** Scrubs `text` fed in the given pieces through one stream; returns the joined output and the largest hold. */
function streamed(pieces: string[]): { text: string; mostHeld: number } {
  const stream = new StreamScrubber(new ScrubSession());
  const text = pieces.map((p) => stream.push(p)).join('') + stream.end();
  return { text, mostHeld: stream.mostHeld };
}

t.test('streaming: every split point of every corpus text gives exactly the whole-text result', async (t) => {
  let cases = 0;
  for (const text of [...positives.map(([p]) => p), ...negatives]) {
    const whole = new ScrubSession().scrub(text);
    for (let cut = 0; cut <= text.length; cut++) {
      cases++;
      const out = streamed([text.slice(0, cut), text.slice(cut)]).text;
      if (out !== whole) {
        t.fail(`${show(text)} cut at ${cut}: ${show(out)}, expected ${show(whole)}`);
        return;
      }
    }
    const byCharacter = streamed(text.split('')).text;
    if (byCharacter !== whole) {
      t.fail(`${show(text)} one UTF-16 unit at a time: ${show(byCharacter)}`);
      return;
    }
  }
  t.pass(`${cases} two-piece splits and every text one unit at a time`);
  // The generated corpus too, one UTF-16 unit at a time (which cuts every code point in two along the way).
  const generated = [...generatedPositives().map((p) => p.text), ...generatedNegatives().map((n) => n.text)];
  const differing = generated.filter((text) => streamed(text.split('')).text !== new ScrubSession().scrub(text));
  t.same(differing, [], `${generated.length} generated texts streamed one unit at a time`);
});

t.test('streaming property: random texts with planted values, cut into random pieces, never differ', async (t) => {
  let seed = 424242;
  const rand = (n: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const pick = <T>(items: T[]): T => items[rand(items.length)];
  const values = [nid, iqama, visa, amex, mada, 'SA0380000000608010167519', 'GB82WEST12345698765432', 'DE89370400440532013000'];
  const scripts = [toArabicIndic, toPersian, toFullwidth, toMath, (s: string) => s];
  const joiners = [' ', '-', '.', '\u00a0', '\u202f', '\u2009', '\u2212', '\u200b', '\u200f', '\u2066', '\u0640', '\u00ad'];
  const filler = ['a', 'SA', 'gb', 'iban', ' ', '   ', ',', '. ', '\n', 'ب', 'رقم', '1', '12', '٣', '-', ':', '"', '😀', 'x9', 'is ', 'DE'];
  const render = (value: string) =>
    [...pick(scripts)(value)].map((ch) => (rand(8) === 0 ? ch + pick(joiners) : rand(2) ? ch : ch.toLowerCase())).join('');
  let mismatches = 0;
  for (let round = 0; round < 1500; round++) {
    let text = '';
    for (let k = rand(10); k >= 0; k--) text += rand(3) === 0 ? render(pick(values)) : pick(filler);
    const whole = new ScrubSession().scrub(text);
    const pieces: string[] = [];
    for (let at = 0; at < text.length;) {
      const length = 1 + rand(7);
      pieces.push(text.slice(at, at + length));
      at += length;
    }
    const out = streamed(pieces).text;
    if (out !== whole && mismatches++ < 3) t.fail(`${show(pieces)} → ${show(out)}, expected ${show(whole)}`);
  }
  t.equal(mismatches, 0, '1500 random texts in random pieces');
});

t.test('streaming: IBANs inside long runs of Latin words and digits (no hard break) are judged as in the whole text', async (t) => {
  // Only the last symbols of a window are read for where an open IBAN may start; with no hard break in the text, that
  // reading begins an IBAN's length (and more) back. IBANs of the longest countries among words, compact or in groups,
  // cut into random pieces, must still come out as scrubbing the whole text does.
  const rand = generator(97);
  const words = ['please', 'pay', 'to', 'account', 'iban', 'ref', 'GB', 'sa', 'x', '12', '7', 'RU', 'LC', 'MT', 'no'];
  const codes = ['RU', 'LC', 'MT', 'BR', 'SA', 'GB', 'DE'];
  let mismatches = 0;
  let scrubbed = 0;
  for (let round = 0; round < 400; round++) {
    const parts: string[] = [];
    for (let k = 4 + rand.next(30); k > 0; k--) {
      if (rand.next(5) === 0) {
        const iban = makeIban(codes[rand.next(codes.length)], rand);
        parts.push(rand.next(2) ? iban : iban.replace(/(.{4})(?=.)/g, '$1 '));
      } else parts.push(words[rand.next(words.length)]);
    }
    const text = parts.join(rand.next(3) ? ' ' : '  ');
    const whole = new ScrubSession().scrub(text);
    if (whole.includes('[IBAN')) scrubbed++;
    const pieces: string[] = [];
    for (let at = 0; at < text.length;) {
      const length = 1 + rand.next(6);
      pieces.push(text.slice(at, at + length));
      at += length;
    }
    const out = streamed(pieces).text;
    if (out !== whole && mismatches++ < 3) t.fail(`${show(pieces)} → ${show(out)}, expected ${show(whole)}`);
  }
  t.equal(mismatches, 0, '400 texts of words and IBANs without a hard break, in random pieces');
  t.ok(scrubbed > 200, `IBANs found in ${scrubbed} of them`);
});

t.test("streaming holds back only a short tail: a value's length, not the answer", async (t) => {
  const answer =
    `شكرا لتواصلك. رقم هويتك المسجل هو ${nid} وتم ربطه بالحساب ${'SA03 8000 0000 6080 1016 7519'}. ` +
    'Your request has been processed and the transfer will arrive within two working days. ' +
    `The card ending in 1111 (${visa.replace(/(\d{4})(?=\d)/g, '$1 ')}) was not charged. `.repeat(3) +
    'إذا كان لديك أي سؤال آخر فلا تتردد في التواصل معنا في أي وقت.';
  const pieces = answer.match(/[\s\S]{1,3}/g)!;
  const { text, mostHeld } = streamed(pieces);
  t.equal(text, new ScrubSession().scrub(answer));
  t.ok(mostHeld <= 40, `at most ${mostHeld} characters held back in a ${answer.length}-character answer`);
  t.ok(mostHeld >= 29, 'an IBAN written in groups is held whole until it ends (it could not be judged before)');
});

t.test('streaming degenerate answers: long digit runs and letter-digit soup stay bounded and equal', async (t) => {
  const inPieces = (text: string) => text.match(/[\s\S]{1,4}/g)!;
  const numbers = Array.from({ length: 6000 }, (_, i) => String(i % 10)).join(' ');
  const planted = `${numbers.slice(0, 5001)} ${nid} ${numbers.slice(5001)}`;
  for (const [name, text] of [
    ['a table of single digits', numbers],
    ['the same with an ID inside', planted],
    ['one 20,000-digit number', '7'.repeat(20_000)],
    ['hexadecimal', Array.from({ length: 20_000 }, (_, i) => '0123456789abcdef'[(i * 7919) % 16]).join('')],
  ] as const) {
    const stream = new StreamScrubber(new ScrubSession());
    let firstOutput = -1;
    let out = '';
    inPieces(text).forEach((piece, i) => {
      const o = stream.push(piece);
      if (o && firstOutput < 0) firstOutput = i * 4;
      out += o;
    });
    out += stream.end();
    t.equal(out, new ScrubSession().scrub(text), `${name}: the same as scrubbing it whole`);
    t.ok(stream.mostHeld <= 300, `${name}: at most ${stream.mostHeld} characters held`);
    t.ok(firstOutput >= 0 && firstOutput < 1000, `${name}: output starts after ${firstOutput} characters, not at the end`);
  }
  t.match(new ScrubSession().scrub(planted), '[NATIONAL_ID]');
  // Tens of thousands of invisible characters inside one run cannot be judged in bounded time: the stream fails.
  const stuffed = new StreamScrubber(new ScrubSession());
  t.throws(() => {
    for (const piece of inPieces(`1${'\u200b'.repeat(70_000)}012345672`)) stuffed.push(piece);
  }, /could not be judged/);
});

t.test('sovereign scrub: text on stdin, and --jsonl with offsets into the input', async (t) => {
  const { spawnSync } = await import('node:child_process');
  const { BIN } = await import('./helpers/daemon.js');
  const run = (args: string[], input: string) =>
    spawnSync(BIN, ['scrub', ...args], { input, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  const text = run([], `Ali ${nid}\nno data 2024-05-12\nagain ${nid} and SA0380000000608010167519\n`);
  t.equal(text.status, 0, text.stderr);
  t.equal(
    text.stdout,
    'Ali [NATIONAL_ID]\nno data 2024-05-12\nagain [NATIONAL_ID] and [IBAN]\n',
    'one placeholder per value across the file',
  );
  const crlf = run([], `a ${nid}\r\nb\r\nno newline at the end ${iqama}`);
  t.equal(crlf.stdout, 'a [NATIONAL_ID]\r\nb\r\nno newline at the end [IQAMA]', 'line endings kept, nothing added');
  // Larger than a pipe's read, with values straddling every 64 KiB boundary: still found, as in one piece.
  const big = Array.from({ length: 40 }, (_, i) => `${'x'.repeat(65536 - 30 + (i % 7))} ${nid} ${iqama} `).join('');
  const streamedBig = run([], big);
  t.equal(streamedBig.stdout, new ScrubSession().scrub(big), `${(big.length / 1e6).toFixed(1)} MB through the CLI`);
  const input = `card ${visa} ok`;
  const jsonl = run(['--jsonl'], `${JSON.stringify({ text: input })}\n`);
  t.equal(jsonl.status, 0, jsonl.stderr);
  const line = JSON.parse(jsonl.stdout);
  t.equal(line.text, 'card [CARD] ok');
  t.same(line.redactions, [{ type: 'CARD', start: 5, end: 5 + visa.length }]);
  t.equal(input.slice(line.redactions[0].start, line.redactions[0].end), visa, 'offsets point into the input');
  const bad = run(['--jsonl'], 'not json\n');
  t.equal(bad.status, 2);
  t.match(bad.stderr, /line 1 is not JSON/);
});

t.test('pieces read joined (a transcript): a value across pieces is one value, each piece keeps its place', async (t) => {
  const session = new ScrubSession();
  t.same(session.scrubPieces(['My ID is 1012', ' 345672 thanks'], ' '), ['My ID is [NATIONAL_ID]', ' thanks']);
  t.same(session.scrubPieces([' 1012', ' 345', ' 672', ' ok'], ' '), [' [NATIONAL_ID]', '', '', ' ok'], 'a value spoken word by word');
  t.same(session.scrubPieces(['no values', 'here'], ' '), ['no values', 'here']);
  // Joined without a joiner, the pieces are exactly the whole text scrubbed, wherever the pieces were cut.
  const rand = generator(11);
  const texts = [
    ...positives.map(([text]) => text),
    ...generatedPositives()
      .slice(0, 200)
      .map((p) => p.text),
  ];
  let differing = 0;
  for (const text of texts) {
    const pieces: string[] = [];
    for (let at = 0; at < text.length;) {
      const length = 1 + rand.next(8);
      pieces.push(text.slice(at, at + length));
      at += length;
    }
    if (new ScrubSession().scrubPieces(pieces, '').join('') !== new ScrubSession().scrub(text) && differing++ < 3) t.fail(show(pieces));
  }
  t.equal(differing, 0, `${texts.length} texts cut into random pieces`);
});
