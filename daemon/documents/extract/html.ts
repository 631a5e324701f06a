// HTML to plain text with htmlparser2's streaming parser: the text a reader sees, with block elements as line and
// paragraph breaks, entities decoded, whitespace collapsed as a browser would, and nothing from scripts, styles or
// other content that is never shown.
import { Parser } from 'htmlparser2';
import { ExtractionError } from './extraction-error.js';
import { bomEncoding, decodeText, TextWriter } from './plain-text.js';

/** Never shown as text; nor is `head`, except its title (below). */
const HIDDEN = new Set(['script', 'style', 'noscript', 'template', 'iframe', 'object', 'svg', 'math']);
const PARAGRAPHS = new Set([
  ...['p', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'blockquote', 'pre', 'table', 'ul', 'ol', 'dl', 'figure', 'form'],
  ...['section', 'article', 'aside', 'header', 'footer', 'main', 'nav', 'address', 'details', 'fieldset', 'hr'],
]);
const LINES = new Set(['br', 'div', 'li', 'dt', 'dd', 'tr', 'caption', 'figcaption', 'summary', 'legend', 'option', 'center']);
const CELLS = new Set(['td', 'th']);

/**
 * The title is kept, as the first paragraph: for a saved or exported page it is often the only place the
 * document's name appears, and it is what a question about the document as a whole will match.
 */
export function htmlToText(html: string): string {
  const out = new TextWriter();
  let hidden = 0;
  let pre = 0;
  let head = false;
  let title = false;
  const parser = new Parser(
    {
      onopentag(name) {
        if (name === 'head') head = true;
        else if (name === 'title' && !hidden) title = true;
        else if (HIDDEN.has(name)) hidden++;
        else if (name === 'pre') pre++;
        if (name === 'br') out.lineBreak();
        else if (PARAGRAPHS.has(name)) out.paragraphBreak();
        else if (LINES.has(name)) out.lineBreak();
      },
      ontext(text) {
        if (title) out.inline(text);
        else if (hidden || head) return;
        else if (pre) out.verbatim(text);
        else out.inline(text);
      },
      onclosetag(name) {
        if (name === 'head') head = false;
        else if (name === 'title' && title) {
          title = false;
          out.paragraphBreak();
        } else if (HIDDEN.has(name)) hidden = Math.max(0, hidden - 1);
        else if (name === 'pre') pre = Math.max(0, pre - 1);
        if (PARAGRAPHS.has(name)) out.paragraphBreak();
        else if (LINES.has(name) && name !== 'br') out.lineBreak();
        else if (CELLS.has(name)) out.cell();
      },
    },
    { decodeEntities: true },
  );
  parser.write(html);
  parser.end();
  return out.toString().replace(/\u00a0/g, ' ');
}

const CHARSET = /<meta[^>]+charset\s*=\s*["']?\s*([\w.:-]+)/i;

/**
 * An HTML file's text: UTF-8 (or UTF-16 by its BOM), or the charset its own <meta> declares (Arabic pages are still
 * often windows-1256), looked for where browsers look, in the first 1024 bytes.
 */
export function decodeHtml(bytes: Uint8Array): string {
  const declared = bomEncoding(bytes) ? undefined : CHARSET.exec(new TextDecoder('latin1').decode(bytes.subarray(0, 1024)))?.[1];
  let fallback: string | undefined;
  if (declared) {
    try {
      fallback = new TextDecoder(declared).encoding;
    } catch {
      throw new ExtractionError(
        `The HTML file declares a character set this server does not know (${declared}). Save it as UTF-8 and upload it again.`,
      );
    }
  }
  return decodeText(bytes, 'HTML file', fallback);
}
