// A lexical index (Okapi BM25) over chunks, so retrieval works without any embedding model and ranks exact terms
// (names, numbers, Arabic words in any of their written variants: see text.ts) that vectors blur.
//
// Laid out for the query loop, which at 100,000 chunks walks tens of thousands of postings per term: each chunk gets
// a dense slot, postings are typed arrays of slots and term counts, and scores accumulate in one reused array indexed
// by slot (with the list of slots touched, to read and reset only those). A removed chunk's slot is marked dead at
// once and skipped; its postings are dropped, and its slot reused, when enough have piled up.
import { terms } from './text.js';

const K1 = 1.2;
const B = 0.75;
/** In `lengths`: a slot whose removed chunk postings still name, and a slot free for reuse. */
const DEAD = -1;
const FREE = -2;

class Postings {
  slots = new Int32Array(4);
  counts = new Uint32Array(4);
  size = 0;

  push(slot: number, count: number): void {
    if (this.size === this.slots.length) {
      this.slots = grow(this.slots, new Int32Array(this.size * 2));
      this.counts = grow(this.counts, new Uint32Array(this.size * 2));
    }
    this.slots[this.size] = slot;
    this.counts[this.size++] = count;
  }
}

function grow<T extends Int32Array | Uint32Array | Float32Array | Float64Array>(from: T, to: T): T {
  to.set(from);
  return to;
}

export interface Scored {
  id: number;
  score: number;
}

export class Bm25Index {
  private readonly postings = new Map<string, Postings>();
  private readonly slotOf = new Map<number, number>();
  /** Per slot: the chunk id, its length in terms (or DEAD, FREE), its score during a search. */
  private ids = new Float64Array(1024);
  private lengths = new Float32Array(1024);
  private scores = new Float64Array(1024);
  private touched = new Int32Array(1024);
  private slots = 0;
  private readonly freeSlots: number[] = [];
  /** Slots of removed chunks still named in postings. */
  private deadSlots = 0;
  private totalLength = 0;

  get size(): number {
    return this.slotOf.size;
  }

  has(id: number): boolean {
    return this.slotOf.has(id);
  }

  add(id: number, text: string): void {
    if (this.slotOf.has(id)) throw new Error(`chunk ${id} is already indexed`);
    const counts = new Map<string, number>();
    const list = terms(text);
    for (const term of list) counts.set(term, (counts.get(term) ?? 0) + 1);
    const slot = this.newSlot();
    this.ids[slot] = id;
    this.lengths[slot] = list.length;
    this.slotOf.set(id, slot);
    for (const [term, count] of counts) {
      let p = this.postings.get(term);
      if (!p) this.postings.set(term, (p = new Postings()));
      p.push(slot, count);
    }
    this.totalLength += list.length;
  }

  remove(id: number): void {
    const slot = this.slotOf.get(id);
    if (slot === undefined) return;
    this.slotOf.delete(id);
    this.totalLength -= this.lengths[slot]!;
    this.lengths[slot] = DEAD;
    this.deadSlots++;
    if (this.deadSlots > 1000 && this.deadSlots > this.slotOf.size / 5) this.compact();
  }

  /** The best `k` chunks for the query, best first (ties by id); chunks sharing no term with it are not returned. */
  search(query: string, k: number): Scored[] {
    const n = this.slotOf.size;
    if (!n || k <= 0) return [];
    const lengths = this.lengths;
    const scores = this.scores;
    const touched = this.touched;
    let touchedCount = 0;
    // tf·(k1+1) / (tf + k1·(1 − b + b·length/average)), with the constant parts taken out of the loop.
    const flat = K1 * (1 - B);
    const perTerm = (K1 * B) / (this.totalLength / n || 1);
    for (const term of new Set(terms(query))) {
      const p = this.postings.get(term);
      if (!p) continue;
      const { slots, counts, size } = p;
      let df = size;
      if (this.deadSlots) for (let i = 0; i < size; i++) if (lengths[slots[i]!]! === DEAD) df--;
      if (df <= 0) continue;
      const weight = Math.log(1 + (n - df + 0.5) / (df + 0.5)) * (K1 + 1);
      for (let i = 0; i < size; i++) {
        const slot = slots[i]!;
        const length = lengths[slot]!;
        if (length === DEAD) continue;
        const tf = counts[i]!;
        // Every contribution is positive, so a zero score means "not touched yet".
        const sum = scores[slot]!;
        if (sum === 0) touched[touchedCount++] = slot;
        scores[slot] = sum + (weight * tf) / (tf + flat + perTerm * length);
      }
    }
    const best: Scored[] = [];
    for (let i = 0; i < touchedCount; i++) {
      const slot = touched[i]!;
      const score = scores[slot]!;
      scores[slot] = 0;
      if (best.length === k && score < best[k - 1]!.score) continue;
      insertRanked(best, { id: this.ids[slot]!, score }, k);
    }
    return best;
  }

  private newSlot(): number {
    const free = this.freeSlots.pop();
    if (free !== undefined) return free;
    if (this.slots === this.ids.length) {
      const capacity = this.slots * 2;
      this.ids = grow(this.ids, new Float64Array(capacity));
      this.lengths = grow(this.lengths, new Float32Array(capacity));
      this.scores = new Float64Array(capacity);
      this.touched = new Int32Array(capacity);
    }
    return this.slots++;
  }

  /** Drops dead slots from every posting list and frees them for reuse. */
  private compact(): void {
    const lengths = this.lengths;
    for (const [term, p] of this.postings) {
      let kept = 0;
      for (let i = 0; i < p.size; i++) {
        if (lengths[p.slots[i]!]! === DEAD) continue;
        p.slots[kept] = p.slots[i]!;
        p.counts[kept++] = p.counts[i]!;
      }
      if (!kept) this.postings.delete(term);
      p.size = kept;
    }
    for (let slot = 0; slot < this.slots; slot++) {
      if (lengths[slot] !== DEAD) continue;
      lengths[slot] = FREE;
      this.freeSlots.push(slot);
    }
    this.deadSlots = 0;
  }
}

/** Inserts into a list ranked by score then id, kept to at most k entries. */
function insertRanked(best: Scored[], entry: Scored, k: number): void {
  let at = best.length;
  while (at > 0 && (best[at - 1]!.score < entry.score || (best[at - 1]!.score === entry.score && best[at - 1]!.id > entry.id))) at--;
  if (at >= k) return;
  best.splice(at, 0, entry);
  if (best.length > k) best.pop();
}

/** The k best of many scores without sorting them all (k is small; the scores may be a hundred thousand). */
export function bestOf(scores: Map<number, number>, k: number): Scored[] {
  const best: Scored[] = [];
  if (k <= 0) return best;
  for (const [id, score] of scores) {
    if (best.length === k && score < best[k - 1]!.score) continue;
    insertRanked(best, { id, score }, k);
  }
  return best;
}
