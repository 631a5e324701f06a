// whisper.cpp reports what it does (some 35 lines for each model it loads, a few for each transcription) through its
// log callback, which by default writes raw text to stderr, among the daemon's JSON lines. The binding can hand that
// callback's output to JavaScript instead (toggleNativeLog + addNativeLogListener; it sets ggml's callback too, and
// calls back on the JS thread through a thread-safe function); this turns it into the daemon's log lines.
import whisper from '@fugood/whisper.node';

export type NativeLevel = 'debug' | 'warn' | 'error';
export type NativeLogWriter = (level: NativeLevel, line: string) => void;

// whisper.cpp's info lines are its internals (hyper-parameters, buffer sizes, the detected language): the daemon's own
// lines say what an operator needs at info, so these are there at debug.
const LEVELS: Record<string, NativeLevel> = { error: 'error', warn: 'warn', info: 'debug', debug: 'debug' };

/** whisper.cpp's output, in the pieces it prints, as whole lines with a level each. */
export class NativeLines {
  private pending = '';
  private level: NativeLevel = 'debug';

  constructor(private readonly write: NativeLogWriter) {}

  push(level: string, text: string): void {
    // A piece that continues a line (ggml's "cont" level, which the binding passes as "") keeps that line's level.
    if (this.pending === '') this.level = LEVELS[level] ?? this.level;
    this.pending += text;
    let end: number;
    while ((end = this.pending.indexOf('\n')) >= 0) {
      this.emit(this.pending.slice(0, end));
      this.pending = this.pending.slice(end + 1);
    }
  }

  /** What is left without a newline, as a line of its own. */
  flush(): void {
    this.emit(this.pending);
    this.pending = '';
  }

  private emit(line: string): void {
    const text = line.trimEnd();
    if (text.trim()) this.write(this.level, text);
  }
}

let routes = 0;

/**
 * Routes whisper.cpp's output to `write` until the returned function is called. The callback is process-wide: it is
 * turned on with the first route and off with the last, when whisper.cpp goes back to stderr (nothing of the daemon's
 * runs whisper.cpp then). Call before the first model loads: the binding applies it as it loads its native module.
 */
export function routeNativeLog(write: NativeLogWriter): () => void {
  const lines = new NativeLines(write);
  const listener = whisper.addNativeLogListener((level, text) => {
    // Called from a native callback: a throw here would be uncaught and end the process.
    try {
      lines.push(level, text);
    } catch {
      // A line that cannot be logged is dropped, as the daemon's logger drops what stdout cannot take.
    }
  });
  if (routes++ === 0) void whisper.toggleNativeLog(true);
  let routed = true;
  return () => {
    if (!routed) return;
    routed = false;
    lines.flush();
    listener.remove();
    // The thread-safe function behind the callback holds the event loop open until it is released.
    if (--routes === 0) void whisper.toggleNativeLog(false);
  };
}
