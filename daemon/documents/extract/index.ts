// The upload formats the document library reads (txt, md, html, pdf), and the plain text of each.
import { ExtractionError } from './extraction-error.js';
import { decodeHtml, htmlToText } from './html.js';
import { markdownToText } from './markdown.js';
import { pdfToText } from './pdf.js';
import { decodeText } from './plain-text.js';
import { restoreReversedNumbers } from './reversed-numbers.js';

export { ExtractionError } from './extraction-error.js';
export { repairArabicLines } from './arabic-visual.js';
export { MAX_PDF_PAGES } from './pdf.js';
export { DEFAULT_PDF_BUDGET, defaultPdfWorkers, PdfWorkers, type PdfBudget } from './pdf-workers.js';
export { restoreReversedNumbers } from './reversed-numbers.js';

export type DocumentFormat = 'txt' | 'md' | 'html' | 'pdf';

const EXTENSIONS: Record<string, DocumentFormat> = {
  txt: 'txt',
  text: 'txt',
  md: 'md',
  markdown: 'md',
  mdown: 'md',
  mkd: 'md',
  html: 'html',
  htm: 'html',
  xhtml: 'html',
  pdf: 'pdf',
};

const MIME_TYPES: Record<string, DocumentFormat> = {
  'text/plain': 'txt',
  'text/markdown': 'md',
  'text/x-markdown': 'md',
  'text/html': 'html',
  'application/xhtml+xml': 'html',
  'application/pdf': 'pdf',
  'application/x-pdf': 'pdf',
};

/**
 * The format of an upload from its filename extension and/or its declared MIME type; null when unsupported. A
 * known extension decides (browsers send .md as text/plain or application/octet-stream); without one the MIME
 * type does ("README" as text/plain). Content that does not match is caught by extractText.
 */
export function formatOf(filename: string | null, mimeType: string | null): DocumentFormat | null {
  const extension = /\.([^./\\]+)$/.exec(filename ?? '')?.[1]?.toLowerCase();
  const byExtension = extension === undefined ? undefined : EXTENSIONS[extension];
  if (byExtension) return byExtension;
  const mime = mimeType?.split(';')[0]?.trim().toLowerCase();
  return (mime && MIME_TYPES[mime]) || null;
}

/**
 * The plain text of an upload, read in this thread (a PDF too: the daemon reads PDFs through PdfWorkers, which run
 * this in worker threads). Throws ExtractionError (message says what is wrong and what to do) for a file that
 * is not what it claims (e.g. not a PDF, a damaged/encrypted PDF, text that is not valid UTF-8).
 */
export async function extractText(bytes: Uint8Array, format: DocumentFormat): Promise<string> {
  switch (format) {
    case 'txt':
      return decodeText(bytes, 'text file').trim();
    case 'md':
      return markdownToText(decodeText(bytes, 'markdown file'));
    case 'html':
      return htmlToText(decodeHtml(bytes));
    case 'pdf':
      return restoreReversedNumbers(await pdfToText(bytes));
    default:
      throw new ExtractionError(`Unsupported document format: ${String(format)}.`);
  }
}
