// Server-sent events as an OpenAI-compatible server streams them: `data:` lines, events ended by a blank line,
// comments and other fields ignored. Decoded text arrives in arbitrary pieces; an event is handed on only once its
// blank line has arrived.

/** The longest event an upstream may send (a piece of an answer is a few bytes; a tool call's arguments more). */
const LONGEST_EVENT = 4 * 1024 * 1024;

export class SseReader {
  private pending = '';
  private data: string[] = [];
  private dataLength = 0;

  constructor(private readonly onEvent: (data: string) => void) {}

  push(text: string): void {
    let start = 0;
    const input = this.pending ? this.pending + text : text;
    for (;;) {
      const end = input.indexOf('\n', start);
      if (end === -1) break;
      const line = input.charCodeAt(end - 1) === 13 ? input.slice(start, end - 1) : input.slice(start, end);
      start = end + 1;
      this.line(line);
    }
    this.pending = start === input.length ? '' : input.slice(start);
    if (this.pending.length + this.dataLength > LONGEST_EVENT)
      throw new Error(`the upstream sent an event longer than ${LONGEST_EVENT} characters`);
  }

  /** The stream ended: an event still open (no blank line after it) is handed on too. */
  end(): void {
    if (this.pending) this.line(this.pending);
    this.pending = '';
    this.line('');
  }

  private line(line: string): void {
    if (line === '') {
      if (this.data.length) {
        const data = this.data.length === 1 ? this.data[0]! : this.data.join('\n');
        this.data = [];
        this.dataLength = 0;
        this.onEvent(data);
      }
      return;
    }
    if (!line.startsWith('data:')) return;
    const data = line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5);
    this.dataLength += data.length;
    if (this.dataLength > LONGEST_EVENT) throw new Error(`the upstream sent an event longer than ${LONGEST_EVENT} characters`);
    this.data.push(data);
  }
}
