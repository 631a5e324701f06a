// PDF to plain text with pdf.js (the legacy build, which runs in Node without a browser): lines from text items,
// pages separated by blank lines, and Arabic from visual-order producers put back in reading order.
//
// What pdf.js 5.6 does with Arabic written in visual order (presentation forms, drawn left to right), measured on
// PDFs made the way test/fixtures/documents.ts makes them and read in its source (core/evaluator.js, core/bidi.js):
//  - getTextContent cuts a page's glyphs into items in content-stream order. An item ends where the font or size
//    changes, where the pen jumps forward more than 0.6 em (the gap becomes an item of its own, " "), moves back
//    more than 0.2 em, or changes line (hasEOL). Inside an item the glyphs are therefore in drawing order, left to
//    right: visual order. Space glyphs are dropped and put back from gaps, forward gaps only.
//  - Each item then goes through pdf.js's own bidi (a simplified UAX #9) on its own: an item of at least 30%
//    right-to-left characters (or of at most 4) is taken as a right-to-left paragraph (`dir: "rtl"`), its letters
//    reversed and its digit runs kept left to right. So a visual line drawn as one item does come back in logical
//    order, numbers right: "ﺭﻗﻢ ﺍﻟﻬﻮﻳﺔ 1012345678". That bidi also deletes every "<" and ">" in such an item
//    (lost for good), and it knows only the item, not the line.
//  - Its normalizeUnicode folds some compatibility characters but, of U+FE70–U+FEFF, only a few vowel-sign forms:
//    the letters stay presentation forms (U+FE8D for alef, one U+FEFB for lam-alef, ...).
//  - It never reorders items. Where pdf.js gets it wrong: a line in several items (words spaced wider than 0.6 em,
//    as justified text and forms are; a word in another font; cells) comes back with every item right but the
//    items, joined as they come, in visual order: the words read backwards. An Arabic line with much Latin in
//    it (under 30% Arabic) is taken as left to right: its Arabic and Latin runs stay in visual order. A producer
//    that writes glyphs from the right edge leftwards gets one item per glyph, its spaces lost and its numbers
//    reversed in content order.
// The repair: take the items of a line in x order, undo pdf.js's bidi on each (reordering is its own inverse, and
// bidi.ts classifies characters as pdf.js does), put a space where the gap between two items is one, and so
// rebuild the line exactly as drawn; then run the bidi algorithm once over the whole line, in the line's direction
// (isRtlLine), which gives logical order with digit runs left to right. Then repairArabicLines folds the
// presentation forms to base letters (its visual-order test finds nothing left to reorder by then), and
// fixReversedLamAlef mends what producers that shape with the font (base letters in ToUnicode) and pdf.js alike
// get wrong: a lam-alef ligature glyph's two letters come out reversed.
import { dirname } from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { PDFDocumentProxy } from 'pdfjs-dist';
import { fixReversedLamAlef, repairArabicLines } from './arabic-visual.js';
import { isRtlLine, reorderLine } from './bidi.js';
import { ExtractionError } from './extraction-error.js';

/** Past this many pages a PDF is refused before any page is read. */
export const MAX_PDF_PAGES = 2000;

export interface LineItem {
  /** The item's text as pdf.js gives it (after its bidi). */
  str: string;
  /** pdf.js's direction for the item: the paragraph direction its bidi used. */
  dir: string;
  /** Left edge and width on the page, and the font size, in the same units. */
  x: number;
  width: number;
  size: number;
}

/** A line's text in reading order from its items, whatever order they came in (see the top of this module). */
export function joinLine(items: readonly LineItem[]): string {
  let drawn = '';
  let end = -Infinity;
  for (const item of [...items].sort((a, b) => a.x - b.x)) {
    // pdf.js only spaces items apart going forward in content order; a gap of a tenth of an em is its threshold.
    if (drawn && item.x - end > item.size * 0.1 && !/\s$/.test(drawn) && !/^\s/.test(item.str)) drawn += ' ';
    drawn += reorderLine(item.str, item.dir === 'rtl', true);
    end = Math.max(end, item.x + item.width);
  }
  return reorderLine(drawn, isRtlLine(drawn)).replace(/\s+/g, ' ').trim();
}

// pdf.js's worker code runs in this thread ("fake worker"), loaded from the package; its fonts, CMaps and wasm
// decoders are read from the package directory, never fetched. System fonts, font faces and eval stay off: only
// text is wanted, and a document must not get code compiled on its behalf.
const PDFJS_DIR = `${dirname(fileURLToPath(import.meta.resolve('pdfjs-dist/package.json')))}/`;
let pdfjs: Promise<typeof import('pdfjs-dist')> | undefined;

function loadPdfjs() {
  pdfjs ??= import('pdfjs-dist/legacy/build/pdf.mjs').then((lib) => {
    lib.GlobalWorkerOptions.workerSrc = import.meta.resolve('pdfjs-dist/legacy/build/pdf.worker.mjs');
    return lib;
  });
  return pdfjs;
}

export async function pdfToText(bytes: Uint8Array): Promise<string> {
  const lib = await loadPdfjs();
  const task = lib.getDocument({
    data: new Uint8Array(bytes), // a copy: pdf.js transfers (detaches) the buffer it is given
    isEvalSupported: false,
    useSystemFonts: false,
    disableFontFace: true,
    useWorkerFetch: false,
    enableXfa: false,
    standardFontDataUrl: `${PDFJS_DIR}standard_fonts/`,
    cMapUrl: `${PDFJS_DIR}cmaps/`,
    cMapPacked: true,
    wasmUrl: `${PDFJS_DIR}wasm/`,
    iccUrl: `${PDFJS_DIR}iccs/`,
    verbosity: lib.VerbosityLevel.ERRORS,
  });
  try {
    const doc = await task.promise.catch((err: unknown) => {
      throw openError(err);
    });
    if (doc.numPages > MAX_PDF_PAGES) {
      throw new ExtractionError(`The PDF has ${doc.numPages} pages; at most ${MAX_PDF_PAGES} are accepted. Split it into smaller files.`);
    }
    const pages: string[] = [];
    for (let n = 1; n <= doc.numPages; n++) {
      pages.push(await pageText(doc, n));
      // pdf.js runs in this thread and talks to itself through promises: without a turn of the event loop between
      // pages, a long PDF would hold up every other request until its last page.
      await nextTurn();
    }
    const text = fixReversedLamAlef(repairArabicLines(pages.filter(Boolean).join('\n\n')));
    if (!text.trim()) {
      throw new ExtractionError(
        'The PDF has no text layer (it is probably scanned images). Run it through OCR, or upload the text, and try again.',
      );
    }
    return text;
  } finally {
    await task.destroy();
  }
}

function openError(err: unknown): Error {
  const name = err instanceof Error ? err.name : '';
  const detail = (err instanceof Error ? err.message : String(err)).replace(/\.$/, '');
  if (name === 'PasswordException') {
    return new ExtractionError(
      'The PDF is encrypted with a password. Save or print it again without the password (an unprotected copy) and upload that.',
    );
  }
  if (name === 'InvalidPDFException') {
    return new ExtractionError(`The file is not a readable PDF (${detail}). Check that it is a PDF and not damaged, or export it again.`);
  }
  return new ExtractionError(`The PDF could not be read (${detail}). It may be damaged: export or save it again and upload the new copy.`);
}

interface Line {
  y: number;
  size: number;
  items: LineItem[];
}

async function pageText(doc: PDFDocumentProxy, n: number): Promise<string> {
  let content;
  try {
    content = await (await doc.getPage(n)).getTextContent();
  } catch (err) {
    throw new ExtractionError(
      `Page ${n} of the PDF could not be read (${err instanceof Error ? err.message : String(err)}). The file may be damaged: export or save it again.`,
    );
  }
  const lines: Line[] = [];
  let line: Line | undefined;
  let ended = false;
  for (const item of content.items) {
    if (!('str' in item)) continue;
    const [a, b, c, d, x, y] = item.transform as [number, number, number, number, number, number];
    const size = Math.hypot(c, d) || 1;
    // pdf.js flags the end of a line on the item before it; a baseline half a line away also starts one. Rotated
    // text has no left and right to order by: each item stays a line of its own, as pdf.js gives it.
    const upright = a > 0 && b === 0;
    if (!line || ended || !upright || Math.abs(y - line.y) > Math.max(size, line.size) / 2) {
      line = { y, size, items: [] };
      lines.push(line);
    }
    if (item.str) line.items.push({ str: item.str, dir: item.dir, x, width: item.width, size });
    ended = item.hasEOL || !upright;
  }
  return withParagraphs(lines.map((l) => ({ y: l.y, text: joinLine(l.items) })).filter((l) => l.text));
}

/** A blank line where the gap between two lines is well over the page's usual line spacing. */
function withParagraphs(lines: { y: number; text: string }[]): string {
  const gaps = lines.slice(1).map((l, i) => Math.abs(lines[i]!.y - l.y));
  const usual = [...gaps].sort((a, b) => a - b)[Math.floor(gaps.length / 2)] ?? 0;
  return lines.map((l, i) => (i > 0 && usual > 0 && gaps[i - 1]! > usual * 1.5 ? `\n${l.text}` : l.text)).join('\n');
}
