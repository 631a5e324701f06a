// Scrubbing text that arrives in pieces (a model's streamed answer). Each piece is passed on as soon as nothing that
// could still arrive can change how it is scrubbed; only the tail that might be the start of a value, or part of a
// digit run that has not ended, is held back. The output, joined, is exactly what scrubbing the whole text at once
// gives, wherever the pieces were cut.
import { digitValue, isDecimalPoint, isInvisible, isSeparator, latinLetter } from './characters.js';
import { mayCutBefore, type Redaction } from './detect.js';
import { openIbanStart } from './iban.js';
import { jsonView, type JsonPosition, type JsonView } from './json.js';
import { LABEL_LOOKBACK } from './labels.js';
import { openRunStart, scanDigitsJs } from './runs.js';
import { inOriginal, noRedactions, resolveOverlaps, type RedactionCounts, type ScrubSession } from './session.js';

/** Neither joins nor continues a value: after it, matching starts afresh. */
function isHardBreak(cp: number): boolean {
  return digitValue(cp) < 0 && !latinLetter(cp) && !isSeparator(cp) && !isInvisible(cp) && cp !== 0x066b;
}

/** Held text past which a digit run that has not ended is cut (see forcedCut). */
const HOLD_LIMIT = 256;
/** Digits kept back at a forced cut: more than the longest value (19), so no value can straddle it unseen. */
const KEPT_DIGITS = 40;
/** Past this, the text cannot be judged in bounded time (a run of invisible characters, say): the stream fails. */
const WINDOW_LIMIT = 64 * 1024;
/** How far back from the passed point a place to drop the window is looked for. */
const DROP_SEARCH = 256;

/**
 * Where a digit run that has not ended can be cut anyway, so that a long run (a table of numbers, a model repeating
 * itself) does not hold the whole answer: at the start of a group with at least KEPT_DIGITS digits from it to the end,
 * so any value that could still include what follows lies wholly after the cut, and where no structure (a decimal, a
 * date) can span the cut (detect.ts's mayCutBefore). A group longer than 19 digits is never part of a value, so if the
 * run ends in one (not after a decimal point, which could still make the group before it a decimal's integer part), all
 * of it can go. -1 if the run cannot be cut yet.
 */
function forcedCut(text: string): number {
  const runStart = openRunStart(text);
  let cut = -1;
  let first = true;
  // The open run is the first in what is read, and comes whole: the held window is far shorter than a buffer of groups.
  scanDigitsJs(text.slice(runStart), {
    take(_text, run) {
      if (!first) return;
      first = false;
      for (let g = run.groups - 1; g > 0; g--) {
        if (run.count - run.from[g]! >= KEPT_DIGITS && mayCutBefore(run, g)) {
          cut = runStart + run.start[g]!;
          return;
        }
      }
      const last = run.groups - 1;
      if (run.count - run.from[last]! > 19 && !isDecimalPoint(run.gap[last]! % 65536)) cut = text.length;
    },
  });
  return cut;
}

/** The length of `text` less a high surrogate at its end whose other half has not arrived. */
function wholeCharacters(text: string): number {
  const last = text.charCodeAt(text.length - 1);
  return last >= 0xd800 && last <= 0xdbff ? text.length - 1 : text.length;
}

/** The view's position of a position of its text, which begins a character of the view (a passed point always does). */
function positionIn(view: JsonView, position: number): number {
  const at = view.at;
  if (!at) return position;
  let low = 0;
  let high = at.length - 1;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (at[middle]! < position) low = middle + 1;
    else high = middle;
  }
  return low;
}

export class StreamScrubber {
  /** Text not yet dropped, starting where matching starts afresh. */
  private window = '';
  /** How much of the window has been passed on (never inside a value). */
  private passed = 0;
  private largestHold = 0;

  /**
   * Placeholders come from `session`; what this stream replaces is also counted into `tally`. With `json`, the
   * answer is JSON (a structured answer): see json.ts.
   */
  constructor(
    private readonly session: ScrubSession,
    private readonly tally: RedactionCounts = noRedactions(),
    private readonly json?: JsonPosition,
  ) {}

  /** Takes the next piece; returns the scrubbed text that can be passed on now (possibly empty). */
  push(piece: string): string {
    this.window += piece;
    // Everything below is judged on the window as its reader sees it (a JSON answer with its escapes decoded), in that
    // view's positions; `at` takes a position back to the window's.
    const view = this.view();
    const seen = view.text;
    const at = (i: number) => (view.at ? view.at[i]! : i);
    const detected = this.session.detect(seen);
    // A high surrogate at the end waits for its other half (it may be half of a digit).
    const whole = seen.slice(0, wholeCharacters(seen));
    let settled = Math.min(openRunStart(whole), openIbanStart(whole));
    let cut = -1;
    if (whole.length - settled > HOLD_LIMIT) {
      cut = forcedCut(whole);
      if (cut > settled) settled = cut;
      else if (whole.length - settled > 4 * HOLD_LIMIT) {
        // Over a thousand characters and not forty digits to cut at: invisible characters or separators stuffed into
        // a number. Judging it would take unbounded time, so the stream fails (closed) instead.
        throw new Error(
          `${whole.length - settled} characters of one digit run could not be judged (invisible characters or separators stuffed into a number)`,
        );
      }
    }
    // A value found across the settled point waits with it (and so may one found across that value's start).
    for (let moved = true; moved;) {
      moved = false;
      for (const r of detected) {
        if (r.start < settled && r.end > settled) {
          settled = r.start;
          moved = true;
        }
      }
    }
    const out = this.pass(detected, settled, view);
    this.largestHold = Math.max(this.largestHold, this.window.length - this.passed);
    if (cut > 0 && this.passed === at(cut)) {
      // Matching resumes at the cut as if a new run began there.
      this.window = this.window.slice(this.passed);
      this.passed = 0;
    } else {
      this.dropSettled(detected, view);
    }
    if (this.window.length > WINDOW_LIMIT) {
      throw new Error(`more than ${WINDOW_LIMIT} characters could not be judged (a run of digits and invisible characters)`);
    }
    return out;
  }

  /** The end of the stream: everything still held, scrubbed. */
  end(): string {
    const view = this.view();
    let out = this.pass(this.session.detect(view.text), view.text.length, view);
    // An escape the answer ended inside of is no JSON: passed on as it is.
    if (this.passed < this.window.length)
      out += this.session.replace(this.window, [], this.passed, this.window.length, this.tally, this.json);
    this.window = '';
    this.passed = 0;
    return out;
  }

  /** Characters held back right now, and the most held back at any point. */
  get held(): number {
    return this.window.length - this.passed;
  }
  get mostHeld(): number {
    return this.largestHold;
  }

  /** The window as its reader sees it: a JSON answer's with its escapes decoded (json.ts), any other as it is. */
  private view(): JsonView {
    return this.json ? jsonView(this.window) : { text: this.window, at: null };
  }

  /** Passes on the view up to `to`: the window up to where that is, scrubbed. Spans are the view's. */
  private pass(detected: Redaction[], to: number, view: JsonView): string {
    const passed = positionIn(view, this.passed);
    if (to <= passed) return '';
    const resolved = resolveOverlaps(detected);
    // Cannot happen by construction (nothing before `passed` depends on what follows it); if it ever did, failing
    // the stream is the only way not to leak the rest of a value.
    if (resolved.some((r) => r.start < passed && r.end > passed)) {
      throw new Error('a value was found across text already passed on');
    }
    const redactions = inOriginal(
      resolved.filter((r) => r.start >= passed && r.end <= to),
      view,
    );
    const end = view.at ? view.at[to]! : to;
    const out = this.session.replace(this.window, redactions, this.passed, end, this.tally, this.json);
    this.passed = end;
    return out;
  }

  /**
   * Drops the passed-on text up to the last point where matching would start afresh and find the same: after a
   * hard break, after a Latin letter (a letter ends any digit run, and what may follow a letter does not depend on
   * what came before it), after three separators none of them a CR (CR LF is one line break), or at a Latin letter
   * after a separator (a word start); never inside anything a detector found, and never within LABEL_LOOKBACK of
   * the passed point, so that what is held can still read its label (and a plus sign) before it.
   */
  private dropSettled(detected: Redaction[], view: JsonView): void {
    const w = view.text;
    const from = positionIn(view, this.passed) - LABEL_LOOKBACK;
    for (let r = from; r > 0 && r >= from - DROP_SEARCH; r--) {
      const previous = w.charCodeAt(r - 1);
      if (previous >= 0xd800 && previous <= 0xdbff) continue; // never between the halves of a surrogate pair
      const high = r >= 2 ? w.charCodeAt(r - 2) : 0;
      const cp = previous >= 0xdc00 && previous <= 0xdfff && high >= 0xd800 && high <= 0xdbff ? w.codePointAt(r - 2)! : previous;
      const reset =
        isHardBreak(cp) ||
        latinLetter(cp) !== '' ||
        (isSeparator(previous) && latinLetter(w.charCodeAt(r)) !== '') ||
        (r >= 3 && [previous, w.charCodeAt(r - 2), w.charCodeAt(r - 3)].every((unit) => unit !== 0x0d && isSeparator(unit)));
      if (!reset || detected.some((d) => d.start < r && d.end > r)) continue;
      const drop = view.at ? view.at[r]! : r;
      this.window = this.window.slice(drop);
      this.passed -= drop;
      return;
    }
  }
}
