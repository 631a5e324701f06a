// Scrubbing text that is JSON (a structured answer, tool-call arguments): a value found where JSON has a number
// ({"id": 1012345678}) is replaced by its placeholder as a string ({"id": "[NATIONAL_ID]"}), so the text still parses.
// Values found inside strings are replaced as in any text (a placeholder holds no quote or backslash).

/** Where a JSON text is, read one character at a time: inside a string or not. Malformed JSON is read the same way. */
export class JsonPosition {
  private inString = false;
  private escaped = false;
  /** Placeholders written where JSON had a number. */
  quoted = 0;

  /** Reads `text` from `from` to `to`. */
  advance(text: string, from: number, to: number): void {
    for (let i = from; i < to; i++) {
      const unit = text.charCodeAt(i);
      if (this.escaped) this.escaped = false;
      else if (this.inString && unit === 0x5c) this.escaped = true;
      else if (unit === 0x22) this.inString = !this.inString;
    }
  }

  /** The placeholder as it must stand here: quoted outside strings. */
  place(placeholder: string): string {
    if (this.inString) return placeholder;
    this.quoted++;
    return `"${placeholder}"`;
  }
}

/**
 * A JSON text as its parser reads it: every escape (\u0031, \u0661, \n, \t, \", …) decoded to the character it
 * stands for, so that a value written with escapes is read as the client's parser will read it. `at[i]` is where
 * character i of `text` begins in the original, and `at[text.length]` where the decoded part ends: an escape cut off
 * at the end (a stream's next piece completes it) is left out. `at` is null when nothing was escaped (the text is its
 * own view). Escapes are read wherever they stand: outside a string a backslash is no JSON at all, and one that starts
 * no escape is kept as it is.
 */
export interface JsonView {
  text: string;
  at: Uint32Array | null;
}

const SIMPLE_ESCAPES = new Map([
  ['"', '"'],
  ['\\', '\\'],
  ['/', '/'],
  ['b', '\b'],
  ['f', '\f'],
  ['n', '\n'],
  ['r', '\r'],
  ['t', '\t'],
]);
const HEX4 = /^[0-9A-Fa-f]{4}$/;
const HEX_START = /^[0-9A-Fa-f]{0,3}$/;

export function jsonView(json: string): JsonView {
  let backslash = json.indexOf('\\');
  if (backslash < 0) return { text: json, at: null };
  let text = '';
  const at = new Uint32Array(json.length + 1);
  let i = 0;
  while (i < json.length) {
    // The characters up to the next backslash stand for themselves.
    const to = backslash < 0 ? json.length : backslash;
    for (let k = i; k < to; k++) at[text.length + k - i] = k;
    text += json.slice(i, to);
    i = to;
    if (i === json.length) break;
    const next = json[i + 1];
    const hex = json.slice(i + 2, i + 6);
    // An escape the text ends inside of: its rest has not arrived.
    if (next === undefined || (next === 'u' && hex.length < 4 && HEX_START.test(hex))) break;
    at[text.length] = i;
    const simple = SIMPLE_ESCAPES.get(next);
    if (simple !== undefined) {
      text += simple;
      i += 2;
    } else if (next === 'u' && HEX4.test(hex)) {
      text += String.fromCharCode(parseInt(hex, 16));
      i += 6;
    } else {
      text += '\\';
      i += 1;
    }
    backslash = json.indexOf('\\', i);
  }
  at[text.length] = i;
  return { text, at: at.subarray(0, text.length + 1) };
}
