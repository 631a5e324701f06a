// Text extraction for uploads: the format from the name and MIME type; txt in UTF-8 and UTF-16; markdown and HTML
// with their markup (and scripts and styles) gone; PDFs in English and in Arabic written in visual order with
// presentation forms, which must come back in reading order with base letters and numbers the right way round; and
// files that are not what they claim, refused with a message that says what to do.
import t, { type Test } from 'tap';
import { getDocument, GlobalWorkerOptions } from 'pdfjs-dist/legacy/build/pdf.mjs';
import { foldPresentationForms, isVisualOrder } from '../daemon/documents/extract/arabic-visual.js';
import {
  ExtractionError,
  extractText,
  formatOf,
  MAX_PDF_PAGES,
  repairArabicLines,
  restoreReversedNumbers,
  type DocumentFormat,
} from '../daemon/documents/extract/index.js';
import { joinLine } from '../daemon/documents/extract/pdf.js';
import { luhnValid } from '../daemon/scrub/index.js';
import {
  ARABIC,
  arabicShapedPdf,
  arabicVisualPdf,
  blankPdf,
  encryptedPdf,
  ENGLISH,
  englishPdf,
  garbagePdf,
  HIDDEN_HTML,
  htmlFile,
  htmlFile1256,
  latin1File,
  markdownFile,
  MIXED,
  shapeArabic,
  txtFile,
  visualOrder,
} from './fixtures/documents.js';

const BOTH = [...ENGLISH, ...ARABIC];
const PRESENTATION_FORMS = /[\ufb50-\ufdff\ufe70-\ufefe]/u;
const lines = (text: string) => text.split('\n');
const twoPagesOfEnglish = () => englishPdf([ENGLISH.slice(0, 3), ENGLISH.slice(3)]);

async function refused(t: Test, bytes: Uint8Array | Promise<Uint8Array>, format: DocumentFormat, message: RegExp, what: string) {
  const err = await extractText(await bytes, format).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err instanceof ExtractionError, `${what}: ExtractionError`);
  t.match((err as Error | undefined)?.message, message, `${what}: says why and what to do`);
}

t.test('formatOf: a known extension decides, else the MIME type; anything else is unsupported', async (t) => {
  const cases: [string | null, string | null, DocumentFormat | null][] = [
    ['notes.txt', null, 'txt'],
    ['NOTES.TXT', null, 'txt'],
    ['guide.md', null, 'md'],
    ['guide.markdown', 'application/octet-stream', 'md'],
    ['guide.md', 'text/plain', 'md'],
    ['page.html', null, 'html'],
    ['page.HTM', 'text/html; charset=windows-1256', 'html'],
    ['policy.pdf', null, 'pdf'],
    ['policy.pdf', 'application/octet-stream', 'pdf'],
    ['طلب.pdf', 'application/pdf', 'pdf'],
    [null, 'application/pdf', 'pdf'],
    [null, 'Text/Plain; charset=utf-8', 'txt'],
    ['README', 'text/plain', 'txt'],
    ['upload', 'text/markdown', 'md'],
    ['report.docx', null, null],
    ['report.docx', 'application/vnd.openxmlformats-officedocument.wordprocessingml.document', null],
    ['setup.exe', null, null],
    ['setup.exe', 'application/x-msdownload', null],
    ['archive.pdf.zip', 'application/zip', null],
    ['README', null, null],
    [null, 'application/octet-stream', null],
    [null, null, null],
  ];
  for (const [name, mime, want] of cases) t.equal(formatOf(name, mime), want, `${name} / ${mime}`);
});

t.test('txt: UTF-8 with or without a BOM, UTF-16 with one; anything else refused', async (t) => {
  for (const encoding of ['utf8', 'utf8-bom', 'utf16le-bom', 'utf16be-bom'] as const) {
    const text = await extractText(txtFile(BOTH, encoding), 'txt');
    t.same(lines(text), BOTH, `${encoding}: every line, nothing else (no BOM)`);
  }
  t.equal(await extractText(new Uint8Array(Buffer.from('a\r\nb\rc')), 'txt'), 'a\nb\nc', 'line ends normalised');
  await refused(t, latin1File('Café des Arts'), 'txt', /not valid UTF-8.*Save it as UTF-8/, 'Latin-1 is not UTF-8');
  await refused(t, new Uint8Array([0x68, 0x69, 0x00, 0x01, 0x02]), 'txt', /binary data/, 'a NUL byte means binary');
  await refused(t, arabicVisualPdf([ARABIC]), 'txt', /not valid UTF-8/, 'a PDF named .txt');
  await refused(t, garbagePdf(), 'md', /not valid UTF-8/, 'random bytes named .md');
});

t.test('markdown: the words without the syntax, blocks and list items on their own lines', async (t) => {
  const text = await extractText(markdownFile(BOTH), 'md');
  for (const s of BOTH) t.ok(text.includes(s), `has: ${s}`);
  t.ok(lines(text).includes(ENGLISH[0]), 'a heading is a line of its own');
  t.ok(text.includes(`${ENGLISH[2]}\nsecond item\n`), 'list items on consecutive lines');
  t.ok(lines(text).includes(`1. ${ENGLISH[3]}`), 'link text kept, with the item number');
  t.ok(lines(text).includes(ENGLISH[5]), 'code block text kept');
  t.ok(lines(text).includes(`${ENGLISH[6]}\tlogo`), 'a table row on one line, the image by its alt text');
  t.ok(text.includes(`${ENGLISH[0]}\n\nA paragraph with emphasis: ${ENGLISH[1]} and a soft break.\n\n`), 'paragraphs apart');
  t.ok(lines(text).includes('raw html block'), 'raw HTML reduced to its text');
  t.notMatch(text, /[#*`|>[\]]|\]\(|https?:|<\/?div|&amp;/, 'no markdown or HTML syntax, no URLs');
  t.notMatch(text, /\n{3}/, 'never more than one blank line');
});

t.test('html: visible text only, blocks as lines, entities decoded, whitespace collapsed', async (t) => {
  const text = await extractText(htmlFile('Policy handbook', BOTH), 'html');
  for (const s of BOTH)
    t.ok(
      lines(text).some((l) => l.includes(s)),
      `has: ${s}`,
    );
  t.equal(lines(text)[0], 'Policy handbook', 'the title is the first paragraph');
  for (const hidden of HIDDEN_HTML) t.notOk(text.includes(hidden), `dropped: ${hidden}`);
  t.ok(text.includes(`Before the sentence.\n${ENGLISH[1]}`), '<br> is a line break, and & decoded');
  t.ok(lines(text).includes(`${ENGLISH[3]}\tcell two`), 'a row on one line, cells apart, &nbsp; a space');
  t.ok(lines(text).includes(ENGLISH[4]), 'inline elements do not break a line');
  t.ok(lines(text).includes(ENGLISH[5]), 'source line breaks and indentation collapse');
  t.ok(text.includes(`${ENGLISH[2]}\nsecond item`), 'list items on their own lines');
  t.notMatch(text, /[<>]|&\w+;|https?:|a comment/, 'no tags, entities, URLs or comments');
  t.notMatch(text, /\n{3}| {2}/, 'no runs of blank lines or spaces');
  const legacy = await extractText(htmlFile1256('دليل السياسات', ARABIC), 'html');
  t.same(lines(legacy).filter(Boolean).slice(0, 2), ['دليل السياسات', ARABIC[0]], 'windows-1256 read through its <meta charset>');
});

t.test('pdf: English lines in order, pages apart', async (t) => {
  const text = await extractText(await twoPagesOfEnglish(), 'pdf');
  t.same(text.split('\n\n').map(lines), [ENGLISH.slice(0, 3), ENGLISH.slice(3)]);
});

t.test('pdf.js itself, for the record: a visual line drawn as one item comes back in logical order, in presentation forms', async (t) => {
  GlobalWorkerOptions.workerSrc = import.meta.resolve('pdfjs-dist/legacy/build/pdf.worker.mjs');
  const doc = await getDocument({ data: await arabicVisualPdf([[ARABIC[0]]]), isEvalSupported: false, verbosity: 0 }).promise;
  const { items } = await (await doc.getPage(1)).getTextContent();
  await doc.destroy();
  const strs = items.flatMap((item) => ('str' in item && item.str ? [item.str] : []));
  t.same(strs, [shapeArabic(ARABIC[0])], 'logical order, digits left to right, letters still presentation forms');
});

t.test('pdf: Arabic in visual order comes back in reading order, base letters, numbers intact', async (t) => {
  for (const layout of ['glyphs', 'spread', 'glyphs-rtl'] as const) {
    const text = await extractText(await arabicVisualPdf([ARABIC, MIXED], { layout }), 'pdf');
    t.same(text.split('\n\n').map(lines), [ARABIC, MIXED], `${layout}: every line exactly, pages apart`);
    t.ok(text.includes('1012345678') && !text.includes('8765432101'), `${layout}: the ID in its order`);
    t.notMatch(text, PRESENTATION_FORMS, `${layout}: no presentation forms left`);
  }
  const shaped = ['ساعات العمل من الأحد إلى الخميس', 'لا يمكن تحويل الأموال'];
  t.same(
    lines(await extractText(await arabicShapedPdf(shaped), 'pdf')),
    shaped,
    'a producer that shapes with the font: lam-alef the right way round',
  );
  const crude = await extractText(await arabicVisualPdf([[ARABIC[0]]], { order: 'reversed' }), 'pdf');
  t.equal(crude, 'رقم الهوية 8765432101', 'a producer that reverses digits too: the number as the page shows it');
});

t.test('pdf: nothing is fetched; standard fonts and CMaps come from the package directory', async (t) => {
  const fetch = globalThis.fetch;
  let calls = 0;
  globalThis.fetch = () => {
    calls++;
    throw new Error('no network');
  };
  t.teardown(() => {
    globalThis.fetch = fetch;
  });
  await extractText(await twoPagesOfEnglish(), 'pdf');
  await extractText(await arabicVisualPdf([ARABIC]), 'pdf');
  t.equal(calls, 0);
});

t.test('pdf: refused with a reason and a way out', async (t) => {
  await refused(t, encryptedPdf(), 'pdf', /encrypted with a password.*without the password/, 'encrypted');
  await refused(t, garbagePdf(), 'pdf', /not a readable PDF/, 'random bytes');
  await refused(t, htmlFile('x', ['y']), 'pdf', /not a readable PDF/, 'HTML named .pdf');
  await refused(t, new Uint8Array(), 'pdf', /not a readable PDF.*empty/, 'no bytes at all');
  const whole = await twoPagesOfEnglish();
  await refused(t, whole.slice(0, 400), 'pdf', /not a readable PDF/, 'cut short');
  await refused(t, blankPdf(1), 'pdf', /no text layer.*OCR/, 'no text: a scan');
  await refused(
    t,
    blankPdf(MAX_PDF_PAGES + 1),
    'pdf',
    new RegExp(`${MAX_PDF_PAGES + 1} pages; at most ${MAX_PDF_PAGES}`),
    'too many pages',
  );
});

t.test('repairArabicLines: visual lines back to logical order, logical text left alone, only presentation forms folded', async (t) => {
  for (const line of [...ARABIC, ...MIXED, 'رقم 12 34', 'ساعات 8:30 إلى 16:00']) {
    const visual = visualOrder(shapeArabic(line));
    t.ok(isVisualOrder(visual), `visual: ${line}`);
    t.equal(repairArabicLines(visual), line, `repaired: ${line}`);
    t.notOk(isVisualOrder(shapeArabic(line)), `logical presentation forms are not visual: ${line}`);
    t.equal(repairArabicLines(shapeArabic(line)), line, `logical presentation forms only folded: ${line}`);
    t.equal(repairArabicLines(line), line, `base letters untouched: ${line}`);
  }
  const page = [ENGLISH[0], visualOrder(shapeArabic(ARABIC[0])), '', ARABIC[1]].join('\n');
  t.equal(repairArabicLines(page), [ENGLISH[0], ARABIC[0], '', ARABIC[1]].join('\n'), 'line by line');
  t.equal(foldPresentationForms('\ufefb \ufef7\ufea3\ufeaa'), 'لا لأحد', 'lam-alef ligatures fold to two letters');
  const other = 'ﬁle ＡＢＣ ① x² ½ Ⅻ';
  t.equal(repairArabicLines(other), other, 'compatibility characters outside the Arabic forms untouched');
});

t.test('joinLine: items in any order, split into words, with Latin and numbers between', async (t) => {
  // As pdf.js hands them over: each item in logical order already, the items in drawing (x) order.
  const item = (str: string, x: number, dir = /[\u0600-\u06ff\ufe70-\ufeff]/u.test(str) ? 'rtl' : 'ltr') => ({
    str,
    dir,
    x,
    width: 10,
    size: 14,
  });
  const visualItems = [item('1012345678', 0), item(' ', 10), item(shapeArabic('الهوية'), 20), item(' ', 30), item(shapeArabic('رقم'), 40)];
  t.equal(foldPresentationForms(joinLine(visualItems)), ARABIC[0], 'visual word items read right to left, the number left to right');
  t.equal(foldPresentationForms(joinLine([...visualItems].reverse())), ARABIC[0], 'whatever their content order');
  const digits = [...'1012345678'].map((d, i) => item(d, 50 + i * 3));
  t.equal(joinLine([item('رقم', 100), ...digits.reverse()]), 'رقم 1012345678', 'digits written right to left, gap made a space');
  t.equal(joinLine([item('Opening', 0), item('hours', 60)]), 'Opening hours', 'English by x, spaced by the gap');
});

t.test('numbers a producer wrote backwards are turned back when, and only when, that makes them identifiers', async (t) => {
  const nid = '1012345672';
  t.ok(luhnValid(nid), 'a valid national ID');
  const backwards = [...nid].reverse().join('');
  t.equal(restoreReversedNumbers(`رقم الهوية ${backwards}`), `رقم الهوية ${nid}`);
  t.equal(restoreReversedNumbers(`رقم الهوية ${nid}`), `رقم الهوية ${nid}`, 'a number that already is one stays');
  t.equal(restoreReversedNumbers(`ID ${backwards} in English`), `ID ${backwards} in English`, 'only lines with Arabic letters');
  t.equal(restoreReversedNumbers('المبلغ 9876543210 ريال في 2025'), 'المبلغ 9876543210 ريال في 2025', 'other numbers stay as shown');
  const iban = 'SA0380000000608010167519';
  t.equal(restoreReversedNumbers(`الآيبان ${[...iban].reverse().join('')}`), `الآيبان ${iban}`, 'an IBAN, letters and all');
  t.equal(restoreReversedNumbers(`هوية DI ${backwards}\nسطر`), `هوية DI ${nid}\nسطر`, 'a word beside the number is left alone');
});
