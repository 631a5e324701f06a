// Scrubbing for one request: every text of the request goes through the same session, so a value gets the same
// placeholder in every message, and distinct values of a type are told apart ([IBAN], [IBAN_2], …).
import { findNumbers, type Redaction, type RedactionType } from './detect.js';
import { findIbans } from './iban.js';
import { JsonPosition, jsonView, type JsonView } from './json.js';
import { inOrder } from './order.js';
import { holdsDigits } from './runs.js';

export type RedactionCounts = Record<RedactionType, number>;

export const noRedactions = (): RedactionCounts => ({ NATIONAL_ID: 0, IQAMA: 0, IBAN: 0, CARD: 0 });

const startThenLongest = (a: Redaction, b: Redaction) => a.start - b.start || b.end - a.end;

/** Keeps, in order of start, each detection that does not overlap one kept before it (the longer wins a tie). */
export function resolveOverlaps(detections: Redaction[]): Redaction[] {
  const all = inOrder(detections, startThenLongest) ? detections : [...detections].sort(startThenLongest);
  const kept: Redaction[] = [];
  for (const r of all) if (!kept.length || r.start >= kept[kept.length - 1]!.end) kept.push(r);
  return kept;
}

/** Spans found in a JSON text's view, as spans of the text itself (json.ts). */
export function inOriginal(redactions: Redaction[], view: JsonView): Redaction[] {
  const at = view.at;
  if (!at) return redactions;
  return redactions.map((r) => ({ ...r, start: at[r.start]!, end: at[r.end]! }));
}

/** A session as plain data: to carry it to another thread and back (offload.ts). */
export interface SessionState {
  placeholders: Array<[RedactionType, Array<[value: string, placeholder: string]>]>;
  distinct: RedactionCounts;
  counted: RedactionCounts;
}

export class ScrubSession {
  /** Per type, per value: its placeholder. */
  private readonly placeholders = new Map<RedactionType, Map<string, string>>();
  private readonly distinct = noRedactions();
  private readonly counted = noRedactions();

  static fromState(state: SessionState): ScrubSession {
    const session = new ScrubSession();
    for (const [type, entries] of state.placeholders) session.placeholders.set(type, new Map(entries));
    Object.assign(session.distinct, state.distinct);
    Object.assign(session.counted, state.counted);
    return session;
  }

  state(): SessionState {
    return {
      placeholders: [...this.placeholders].map(([type, byValue]) => [type, [...byValue]]),
      distinct: { ...this.distinct },
      counted: { ...this.counted },
    };
  }

  /** Every detector's findings in `text`, before overlaps are resolved. Every value has digits: one pass finds them. */
  detect(text: string): Redaction[] {
    const { numbers, ibanStarts } = findNumbers(text);
    const ibans = findIbans(text, ibanStarts);
    return ibans.length ? [...ibans, ...numbers] : numbers;
  }

  /** Finds what to redact in `text` (spans in the original, in order, not overlapping). */
  find(text: string): Redaction[] {
    return resolveOverlaps(this.detect(text));
  }

  /** The text with every value replaced by its placeholder; everything else byte-identical. */
  scrub(text: string, tally?: RedactionCounts): string {
    // Most texts of a request (names, keys, enum members) have no digit, and need no more than this look.
    if (!holdsDigits(text)) return text;
    return this.replace(text, this.find(text), 0, text.length, tally);
  }

  /**
   * Texts a reader sees joined by `joiner` (a transcript's segments, its words), scrubbed as that joined text: a value
   * cut across pieces is one value. Each piece keeps its place: a value's placeholder goes in the piece where it
   * starts, and what it covers of the pieces after is taken out of them.
   */
  scrubPieces(pieces: readonly string[], joiner: string, tally?: RedactionCounts): string[] {
    const joined = pieces.join(joiner);
    const redactions = this.find(joined);
    if (!redactions.length) return [...pieces];
    const placeholders = redactions.map((r) => this.replace(joined, [r], r.start, r.end, tally));
    const out: string[] = [];
    let from = 0;
    let r = 0;
    for (const piece of pieces) {
      const to = from + piece.length;
      while (r < redactions.length && redactions[r]!.end <= from) r++;
      let text = '';
      let at = from;
      for (; r < redactions.length && redactions[r]!.start < to; r++) {
        const redaction = redactions[r]!;
        if (redaction.start >= from) text += joined.slice(at, redaction.start) + placeholders[r]!;
        at = Math.max(at, redaction.end);
        // A value that goes on into the next piece: its rest is taken out there too.
        if (redaction.end > to) break;
      }
      out.push(text + joined.slice(at, to));
      from = to + joiner.length;
    }
    return out;
  }

  /**
   * `scrub` for a text that is JSON: read with its escapes decoded, as the parser that reads it will (a value written
   * as \u0031… is still found, and its whole escaped span replaced); a value in a number's place becomes its
   * placeholder as a string (json.ts).
   */
  scrubJson(text: string, tally?: RedactionCounts, position?: JsonPosition): string {
    const view = jsonView(text);
    return this.replace(text, inOriginal(this.find(view.text), view), 0, text.length, tally, position ?? new JsonPosition());
  }

  /**
   * `text` from `from` to `to` with the given redactions (which must lie inside that range, in order) replaced by
   * their placeholders, counted into this session and into `tally` if given. With `json`, the JSON position read up
   * to `from`, the text is JSON: see json.ts.
   */
  replace(text: string, redactions: Redaction[], from: number, to: number, tally?: RedactionCounts, json?: JsonPosition): string {
    if (!redactions.length) {
      json?.advance(text, from, to);
      return text.slice(from, to);
    }
    let out = '';
    let at = from;
    for (const r of redactions) {
      json?.advance(text, at, r.end);
      const placeholder = this.placeholderFor(r);
      out += text.slice(at, r.start) + (json ? json.place(placeholder) : placeholder);
      at = r.end;
      this.counted[r.type]++;
      if (tally) tally[r.type]++;
    }
    json?.advance(text, at, to);
    return out + text.slice(at, to);
  }

  /** How many values of each type were replaced so far in this request (for the audit entry). */
  counts(): RedactionCounts {
    return { ...this.counted };
  }

  private placeholderFor(r: Redaction): string {
    let byValue = this.placeholders.get(r.type);
    if (!byValue) this.placeholders.set(r.type, (byValue = new Map<string, string>()));
    let placeholder = byValue.get(r.value);
    if (!placeholder) {
      const n = ++this.distinct[r.type];
      placeholder = n === 1 ? `[${r.type}]` : `[${r.type}_${n}]`;
      byValue.set(r.value, placeholder);
    }
    return placeholder;
  }
}
