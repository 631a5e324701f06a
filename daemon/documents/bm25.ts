// A lexical index (Okapi BM25) over chunks, so retrieval works without any embedding model and ranks exact terms
// (names, numbers, Arabic words in any of their written variants: see text.ts) that vectors blur. Postings are plain
// packed arrays per term; a removed chunk is skipped at once and its postings dropped when enough have piled up.
import { terms } from './text.js';

const K1 = 1.2;
const B = 0.75;

interface Postings {
  ids: number[];
  counts: number[];
}

export interface Scored {
  id: number;
  score: number;
}

export class Bm25Index {
  private readonly postings = new Map<string, Postings>();
  private readonly lengths = new Map<number, number>();
  private readonly removed = new Set<number>();
  private totalLength = 0;

  get size(): number {
    return this.lengths.size;
  }

  add(id: number, text: string): void {
    if (this.lengths.has(id)) throw new Error(`chunk ${id} is already indexed`);
    const counts = new Map<string, number>();
    const list = terms(text);
    for (const term of list) counts.set(term, (counts.get(term) ?? 0) + 1);
    for (const [term, count] of counts) {
      let p = this.postings.get(term);
      if (!p) this.postings.set(term, (p = { ids: [], counts: [] }));
      p.ids.push(id);
      p.counts.push(count);
    }
    this.lengths.set(id, list.length);
    this.totalLength += list.length;
  }

  remove(id: number): void {
    const length = this.lengths.get(id);
    if (length === undefined) return;
    this.lengths.delete(id);
    this.totalLength -= length;
    this.removed.add(id);
    if (this.removed.size > 1000 && this.removed.size > this.lengths.size / 5) this.compact();
  }

  /** The best `k` chunks for the query, best first; chunks sharing no term with it are not returned. */
  search(query: string, k: number): Scored[] {
    const n = this.lengths.size;
    if (!n) return [];
    const average = this.totalLength / n || 1;
    const scores = new Map<number, number>();
    for (const term of new Set(terms(query))) {
      const p = this.postings.get(term);
      if (!p) continue;
      const df = p.ids.length - (this.removed.size ? p.ids.filter((id) => this.removed.has(id)).length : 0);
      if (df <= 0) continue;
      const idf = Math.log(1 + (n - df + 0.5) / (df + 0.5));
      for (let i = 0; i < p.ids.length; i++) {
        const id = p.ids[i]!;
        const length = this.lengths.get(id);
        if (length === undefined) continue;
        const tf = p.counts[i]!;
        scores.set(id, (scores.get(id) ?? 0) + (idf * tf * (K1 + 1)) / (tf + K1 * (1 - B + (B * length) / average)));
      }
    }
    return bestOf(scores, k);
  }

  private compact(): void {
    for (const [term, p] of this.postings) {
      const ids: number[] = [];
      const counts: number[] = [];
      p.ids.forEach((id, i) => {
        if (!this.removed.has(id)) {
          ids.push(id);
          counts.push(p.counts[i]!);
        }
      });
      if (ids.length) this.postings.set(term, { ids, counts });
      else this.postings.delete(term);
    }
    this.removed.clear();
  }
}

/** The k best of many scores without sorting them all (k is small; the scores may be a hundred thousand). */
export function bestOf(scores: Map<number, number>, k: number): Scored[] {
  const best: Scored[] = [];
  for (const [id, score] of scores) {
    if (best.length === k && score <= best[k - 1]!.score) continue;
    let at = best.length;
    while (at > 0 && (best[at - 1]!.score < score || (best[at - 1]!.score === score && best[at - 1]!.id > id))) at--;
    best.splice(at, 0, { id, score });
    if (best.length > k) best.pop();
  }
  return best;
}
