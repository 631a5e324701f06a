// Scrubbing for one request: every text of the request goes through the same session, so a value gets the same
// placeholder in every message, and distinct values of a type are told apart ([IBAN], [IBAN_2], …).
import { findNumbers, type Redaction, type RedactionType } from './detect.js';
import { findIbans } from './iban.js';
import { inOrder } from './order.js';

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

export class ScrubSession {
  /** Per type, per value: its placeholder. */
  private readonly placeholders = new Map<RedactionType, Map<string, string>>();
  private readonly distinct = noRedactions();
  private readonly counted = noRedactions();

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
    return this.replace(text, this.find(text), 0, text.length, tally);
  }

  /**
   * `text` from `from` to `to` with the given redactions (which must lie inside that range, in order) replaced by
   * their placeholders, counted into this session and into `tally` if given.
   */
  replace(text: string, redactions: Redaction[], from: number, to: number, tally?: RedactionCounts): string {
    if (!redactions.length) return text.slice(from, to);
    let out = '';
    let at = from;
    for (const r of redactions) {
      out += text.slice(at, r.start) + this.placeholderFor(r);
      at = r.end;
      this.counted[r.type]++;
      if (tally) tally[r.type]++;
    }
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
