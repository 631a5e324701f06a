// Splitting a document into chunks for retrieval: whole sentences (Arabic and Latin sentence marks), paragraphs kept
// together when they fit, and a little overlap (the last sentences of a chunk start the next) so that a passage cut
// at a chunk boundary is still found whole in one of them.

export interface ChunkOptions {
  /** Aim for chunks about this many characters long. */
  target: number;
  /** Never longer than this: a longer sentence is cut at spaces. */
  max: number;
  /** Characters of whole sentences repeated at the start of the next chunk. */
  overlap: number;
}

export const DEFAULT_CHUNKING: ChunkOptions = { target: 900, max: 1500, overlap: 150 };

/** Sentences end at . ! ? and the Arabic question mark and full stop, or at a line break. */
const SENTENCE = /[^.!?\u061f\u06d4\n]*(?:[.!?\u061f\u06d4]+["'»”)\]]*|\n|$)/g;

function sentencesOf(paragraph: string, max: number): string[] {
  const out: string[] = [];
  for (const [raw] of paragraph.matchAll(SENTENCE)) {
    const sentence = raw.trim();
    if (!sentence) continue;
    if (sentence.length <= max) {
      out.push(sentence);
      continue;
    }
    // A run-on "sentence" (a table, a list without marks): cut at the last space before max.
    let rest = sentence;
    while (rest.length > max) {
      const cut = rest.lastIndexOf(' ', max);
      const at = cut > max / 2 ? cut : max;
      out.push(rest.slice(0, at).trim());
      rest = rest.slice(at).trim();
    }
    if (rest) out.push(rest);
  }
  return out;
}

export function chunkText(text: string, options: ChunkOptions = DEFAULT_CHUNKING): string[] {
  const paragraphs = text
    .replace(/\r\n?/g, '\n')
    .split(/\n\s*\n/)
    .map((p) => sentencesOf(p, options.max))
    .filter((p) => p.length);
  const chunks: string[] = [];
  let current: string[] = [];
  let length = 0;
  /** Sentences in `current` that are not carried over from the chunk before. */
  let fresh = 0;
  const close = () => {
    if (!fresh) return;
    chunks.push(current.join(' '));
    // Carry the last whole sentences, up to the overlap, into the next chunk.
    const carried: string[] = [];
    let carriedLength = 0;
    for (let i = current.length - 1; i > 0; i--) {
      if (carriedLength + current[i]!.length > options.overlap) break;
      carried.unshift(current[i]!);
      carriedLength += current[i]!.length + 1;
    }
    current = carried;
    length = carriedLength;
    fresh = 0;
  };
  for (const sentences of paragraphs) {
    for (const sentence of sentences) {
      if (fresh && length + sentence.length > options.target) close();
      // The overlap gives way to a sentence that would not fit with it.
      if (length + sentence.length > options.max) {
        current = [];
        length = 0;
      }
      current.push(sentence);
      length += sentence.length + 1;
      fresh++;
    }
    // A paragraph that ends past half the target ends the chunk: the next paragraph starts a new one.
    if (length >= options.target / 2) close();
  }
  close();
  return chunks;
}
