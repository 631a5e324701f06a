// What a model file says it is, compared with what its manifest entry says. A checksum only proves a file is the one
// somebody recorded; for an entry whose checksum is recorded at import, that somebody could have picked any file.
// The header (a GGUF's metadata and tensor shapes, a whisper ggml file's hyper-parameters) is what llama.cpp and
// whisper.cpp build the model from, so a file whose header disagrees with the manifest is not the model it is named.
import { open } from 'node:fs/promises';
import { readGgufFacts } from './gguf-header.js';
import { GGML_FIELDS, type GgmlFacts, type GgufFacts, type ManifestEntry } from './manifest.js';

/**
 * Parameters are counted from the tensors' element counts, so quantization does not change them. The count still
 * differs a little from the publisher's headline number: converters drop tensors llama.cpp does not use (a BERT
 * pooler, XLM-R's two padding rows of position embeddings, about 0.2% of bge-m3) or add small ones (RoPE factor
 * tables). Sibling sizes of one family are at least twice apart, so 2% accepts every honest conversion and still
 * tells 0.5B from 1.5B.
 */
export const PARAMETER_TOLERANCE = 0.02;

const GGML_MAGIC = 0x67676d6c;

export { readGgufFacts };

/** The hyper-parameters of a whisper.cpp ggml file (magic, then eleven int32; the last, ftype, is the quantization). */
export async function readGgmlFacts(path: string): Promise<GgmlFacts> {
  const file = await open(path, 'r');
  try {
    const head = Buffer.alloc(4 + 4 * GGML_FIELDS.length);
    const { bytesRead } = await file.read(head, 0, head.length, 0);
    if (bytesRead < head.length || head.readUInt32LE(0) !== GGML_MAGIC) {
      throw new Error('it is not a whisper.cpp ggml model (no ggml magic number at its start)');
    }
    const facts = {} as GgmlFacts;
    GGML_FIELDS.forEach((field, i) => (facts[field] = head.readInt32LE(4 + 4 * i)));
    return facts;
  } finally {
    await file.close();
  }
}

/** `7.6B`, `567M`, `0.0005B`: how many parameters, to the precision that tells sizes apart. */
export function formatParameters(count: number): string {
  if (count >= 1e9) return `${Number((count / 1e9).toPrecision(3))}B`;
  if (count >= 1e6) return `${Number((count / 1e6).toPrecision(3))}M`;
  return `${Number((count / 1e9).toPrecision(2))}B`;
}

/** Every way the file's header differs from its manifest entry, one phrase each; empty when it matches. */
export function headerDifferences(entry: ManifestEntry, found: GgufFacts | GgmlFacts): string[] {
  const out: string[] = [];
  if (entry.engine === 'llama.cpp' && entry.gguf) {
    const want = entry.gguf;
    const got = found as GgufFacts;
    if (got.architecture !== want.architecture) out.push(`architecture is ${got.architecture}, the manifest says ${want.architecture}`);
    if (Math.abs(got.parameterCount - want.parameterCount) > want.parameterCount * PARAMETER_TOLERANCE) {
      out.push(
        `${formatParameters(got.parameterCount)} parameters (${got.parameterCount}), the manifest says ${formatParameters(want.parameterCount)} (${want.parameterCount})`,
      );
    }
    const exact: Array<[keyof GgufFacts, string]> = [
      ['vocabularySize', 'vocabulary'],
      ['contextLength', 'trained context'],
      ['embeddingLength', 'embedding length'],
      ['blockCount', 'block count'],
    ];
    for (const [field, label] of exact) {
      if (got[field] !== want[field]) out.push(`${label} is ${got[field]}, the manifest says ${want[field]}`);
    }
  }
  if (entry.engine === 'whisper.cpp' && entry.ggml) {
    const want = entry.ggml;
    const got = found as GgmlFacts;
    for (const field of GGML_FIELDS) {
      if (got[field] !== want[field]) out.push(`${field} is ${got[field]}, the manifest says ${want[field]}`);
    }
  }
  return out;
}

/**
 * Why the file at `path` is not the model `entry` describes, or null when its header matches. Throws when the file
 * cannot be read as a model at all (the caller's `unreadable`).
 */
export async function headerMismatch(entry: ManifestEntry, path: string): Promise<string | null> {
  const found = entry.engine === 'whisper.cpp' ? await readGgmlFacts(path) : await readGgufFacts(path);
  const differences = headerDifferences(entry, found);
  return differences.length ? differences.join('; ') : null;
}
