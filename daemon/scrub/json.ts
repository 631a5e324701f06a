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
