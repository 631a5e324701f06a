// Server-sent events as an OpenAI-compatible server streams them: `data:` lines, events ended by a blank line,
// comments and other fields ignored. Decoded text arrives in arbitrary pieces; an event is handed on only once its
// blank line has arrived.

export class SseReader {
  private pending = '';
  private data: string[] = [];

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
        this.onEvent(data);
      }
      return;
    }
    if (line.startsWith('data:')) this.data.push(line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5));
  }
}
