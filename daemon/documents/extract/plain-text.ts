// Bytes to text for the text formats, and the writer the markup formats produce plain text with.
import { ExtractionError } from './extraction-error.js';

const BOMS: [number[], string][] = [
  [[0xef, 0xbb, 0xbf], 'utf-8'],
  [[0xff, 0xfe], 'utf-16le'],
  [[0xfe, 0xff], 'utf-16be'],
];

/** The encoding a byte order mark names, if the bytes start with one. */
export function bomEncoding(bytes: Uint8Array): string | undefined {
  return BOMS.find(([bom]) => bom.every((b, i) => bytes[i] === b))?.[1];
}

/**
 * Text in UTF-8, or UTF-16 when a byte order mark says so (the BOM is dropped either way). Anything else is refused
 * rather than guessed: a wrong guess would index mojibake that no query ever finds.
 */
export function decodeText(bytes: Uint8Array, what: string, fallback?: string): string {
  const encoding = bomEncoding(bytes) ?? fallback ?? 'utf-8';
  let text: string;
  try {
    text = new TextDecoder(encoding, { fatal: true }).decode(bytes);
  } catch {
    throw new ExtractionError(
      `The ${what} is not valid ${encoding.toUpperCase()} text. Save it as UTF-8 (or UTF-16 with a byte order mark) and upload it again.`,
    );
  }
  // A NUL never occurs in text: this is a binary file under a text name.
  if (text.includes('\u0000')) {
    throw new ExtractionError(
      `The ${what} contains binary data, not text. Check that the right file was chosen and that its name matches its format.`,
    );
  }
  return text.replace(/\r\n?/g, '\n');
}

/**
 * Plain text out of a document's structure: inline text with whitespace collapsed as a browser would, verbatim
 * text (code) kept as it is, and line, cell and paragraph breaks that merge when several are owed in a row (closing
 * a list item, then the list, then a section gives one blank line, not three).
 */
export class TextWriter {
  #lines: string[] = [];
  #line = '';
  /** What the next text is owed after the last: 0 nothing, 1 a new line, 2 a blank line. */
  #gap = 0;
  #cell = false;

  inline(text: string): void {
    let collapsed = text.replace(/\s+/g, ' ');
    if (this.#gap || this.#cell || !this.#line || this.#line.endsWith(' ')) collapsed = collapsed.trimStart();
    if (collapsed) this.#put(collapsed);
  }

  verbatim(text: string): void {
    const [first, ...rest] = text.replace(/^\n+|\s+$/g, '').split('\n');
    if (!first) return;
    this.#put(first);
    for (const line of rest) {
      this.#lines.push(this.#line.trimEnd());
      this.#line = line;
    }
  }

  lineBreak(): void {
    if (this.#line || this.#lines.length) this.#gap = Math.max(this.#gap, 1);
  }

  paragraphBreak(): void {
    if (this.#line || this.#lines.length) this.#gap = 2;
  }

  /** Between table cells: a tab, so a row stays on one line and a term stays beside its value. */
  cell(): void {
    if (this.#line && !this.#gap) this.#cell = true;
  }

  #put(text: string): void {
    if (this.#gap) {
      this.#lines.push(this.#line.trimEnd());
      if (this.#gap === 2) this.#lines.push('');
      this.#line = '';
      this.#gap = 0;
    } else if (this.#cell) {
      this.#line = `${this.#line.trimEnd()}\t`;
    }
    this.#cell = false;
    this.#line += text;
  }

  toString(): string {
    return [...this.#lines, this.#line.trimEnd()].join('\n').trim();
  }
}
