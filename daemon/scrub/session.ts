// Scrubbing for one request: every text of the request goes through the same session, so a value gets the same
// placeholder in every message, and distinct values of a type are told apart ([IBAN], [IBAN_2], …).
import { findNumbers, type Redaction, type RedactionType } from './detect.js';
import { findIbans } from './iban.js';

export type RedactionCounts = Record<RedactionType, number>;

export interface Detector {
  (text: string): Redaction[];
}

export class ScrubSession {
  private readonly placeholders = new Map<string, string>();
  private readonly distinct: RedactionCounts = { NATIONAL_ID: 0, IQAMA: 0, IBAN: 0, CARD: 0 };
  private readonly counted: RedactionCounts = { NATIONAL_ID: 0, IQAMA: 0, IBAN: 0, CARD: 0 };

  constructor(private readonly detectors: Detector[] = [findIbans, findNumbers]) {}

  /** Finds what to redact in `text` (spans in the original, in order, not overlapping). */
  find(text: string): Redaction[] {
    const all = this.detectors.flatMap((detect) => detect(text)).sort((a, b) => a.start - b.start || b.end - a.end);
    const kept: Redaction[] = [];
    for (const r of all) if (!kept.length || r.start >= kept[kept.length - 1]!.end) kept.push(r);
    return kept;
  }

  /** The text with every value replaced by its placeholder; everything else byte-identical. */
  scrub(text: string): string {
    const redactions = this.find(text);
    if (!redactions.length) return text;
    let out = '';
    let at = 0;
    for (const r of redactions) {
      out += text.slice(at, r.start) + this.placeholderFor(r);
      at = r.end;
      this.counted[r.type]++;
    }
    return out + text.slice(at);
  }

  /** How many values of each type were replaced so far in this request (for the audit entry). */
  counts(): RedactionCounts {
    return { ...this.counted };
  }

  private placeholderFor(r: Redaction): string {
    const key = `${r.type}:${r.value}`;
    let placeholder = this.placeholders.get(key);
    if (!placeholder) {
      const n = ++this.distinct[r.type];
      placeholder = n === 1 ? `[${r.type}]` : `[${r.type}_${n}]`;
      this.placeholders.set(key, placeholder);
    }
    return placeholder;
  }
}
