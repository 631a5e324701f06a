// A call's stop sequences, matched on the text as the client reads it. node-llama-cpp's own stop triggers cut a token
// that holds the start of a stop sequence by tokenizing its text again, and with a SentencePiece vocabulary that loses
// the space before it ("a th|e3" stopped at "e3" came back "ath"). Here the text passes through unchanged up to the
// first stop sequence; what could still be the start of one waits until the next piece settles it.

export class StopSequences {
  /** What was passed on: the answer's text. */
  text = '';
  /** Set once a stop sequence was seen: nothing more is passed on, and generation should stop. */
  found = false;
  private held = '';
  private readonly longest: number;

  constructor(
    private readonly stops: readonly string[],
    private readonly onText: (text: string) => void,
  ) {
    this.longest = Math.max(...stops.map((s) => s.length));
  }

  /** Takes the next piece of generated text; passes on what can no longer be part of a stop sequence. */
  push(piece: string): void {
    if (this.found) return;
    const window = this.held + piece;
    let cut = -1;
    for (const stop of this.stops) {
      const at = window.indexOf(stop);
      if (at !== -1 && (cut === -1 || at < cut)) cut = at;
    }
    if (cut !== -1) {
      this.found = true;
      this.held = '';
      this.pass(window.slice(0, cut));
      return;
    }
    const keep = this.startOfStop(window);
    this.held = window.slice(window.length - keep);
    this.pass(window.slice(0, window.length - keep));
  }

  /** Generation ended without a stop sequence: what was held back is text after all. */
  end(): void {
    if (this.found) return;
    this.pass(this.held);
    this.held = '';
  }

  /** The length of the longest end of `window` that begins a stop sequence. */
  private startOfStop(window: string): number {
    for (let n = Math.min(this.longest - 1, window.length); n > 0; n--) {
      const end = window.slice(window.length - n);
      if (this.stops.some((stop) => stop.startsWith(end))) return n;
    }
    return 0;
  }

  private pass(text: string): void {
    if (!text) return;
    this.text += text;
    this.onText(text);
  }
}
