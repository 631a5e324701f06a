// Reads what a GGUF file's header says the model is (manifest.ts GgufFacts), in one bounded walk of the header.
// A header is believed only as far as its file can hold it: a 24-byte file claiming 2^64 keys or tensors, or an array
// of 2^40 elements, would keep a trusting reader reading and allocating until the process ran out of memory, and
// `models import` reads the header of any file offered to it before anything else. So every count and length is
// checked against what is left of the file before it is used, a nested array (llama.cpp refuses those too) is
// refused, and so is an array longer than any real model's (the largest vocabularies and merge lists are well under
// a million entries). Only the values the facts need are decoded; the rest is skipped. node-llama-cpp's reader
// gives the same facts (test/models-gguf-header.test.ts) but takes a second to load, in every CLI command that reads
// one header.
import { open, type FileHandle } from 'node:fs/promises';
import type { GgufFacts } from './manifest.js';

/** Elements an array may state: four times the longest real ones. */
export const MAX_GGUF_ARRAY = 4 * 1024 * 1024;
/** Dimensions a tensor may state (ggml's GGML_MAX_DIMS). */
const MAX_DIMS = 4;
/** Each fixed-size value type, by GGUF type number: its bytes and how to read it. Strings (8) and arrays (9) have lengths. */
const FIXED: Record<number, [bytes: number, read: (b: Buffer) => number]> = {
  0: [1, (b) => b.readUInt8(0)],
  1: [1, (b) => b.readInt8(0)],
  2: [2, (b) => b.readUInt16LE(0)],
  3: [2, (b) => b.readInt16LE(0)],
  4: [4, (b) => b.readUInt32LE(0)],
  5: [4, (b) => b.readInt32LE(0)],
  6: [4, (b) => b.readFloatLE(0)],
  7: [1, (b) => b.readUInt8(0)], // a boolean
  10: [8, (b) => Number(b.readBigUInt64LE(0))],
  11: [8, (b) => Number(b.readBigInt64LE(0))],
  12: [8, (b) => b.readDoubleLE(0)],
};
const STRING = 8;
const ARRAY = 9;
const CHUNK = 1024 * 1024;
/** Longer than any key GGUF defines: a longer name is skipped, never decoded. */
const MAX_KEY_BYTES = 256;

class Reader {
  private buffer = Buffer.alloc(0);
  private start = 0;
  at = 0;

  constructor(
    private readonly file: FileHandle,
    readonly size: number,
  ) {}

  get left(): number {
    return this.size - this.at;
  }

  async bytes(n: number): Promise<Buffer> {
    if (n > this.left) throw new Error(`it ends inside its header (at byte ${this.at} of ${this.size})`);
    if (this.at < this.start || this.at + n > this.start + this.buffer.length) {
      const length = Math.min(Math.max(n, CHUNK), this.left);
      const chunk = Buffer.alloc(length);
      await this.file.read(chunk, 0, length, this.at);
      this.buffer = chunk;
      this.start = this.at;
    }
    const from = this.at - this.start;
    this.at += n;
    return this.buffer.subarray(from, from + n);
  }

  async u32(): Promise<number> {
    return (await this.bytes(4)).readUInt32LE(0);
  }

  /** A u64 count or length, which must be at most `limit` (what the rest of the file can hold). */
  async count(what: string, limit: number): Promise<number> {
    const value = (await this.bytes(8)).readBigUInt64LE(0);
    if (value > BigInt(limit)) throw new Error(`its header states ${value} ${what}, more than the file can hold`);
    return Number(value);
  }

  skip(n: number): void {
    if (n > this.left) throw new Error(`it ends inside its header (at byte ${this.at} of ${this.size})`);
    this.at += n;
  }

  /** A string's length, checked; its bytes are next. */
  stringLength(): Promise<number> {
    return this.count('bytes of a string', this.left - 8);
  }

  /** A string short enough to decode, or null (skipped) when it is longer than `max` bytes. */
  async string(max: number): Promise<string | null> {
    const length = await this.stringLength();
    if (length > max) {
      this.skip(length);
      return null;
    }
    return (await this.bytes(length)).toString('utf8');
  }
}

/** A value as the facts need it: a number (booleans 0/1), a string (decoded only when `decode`), or an array's length. */
type Value = number | string | { length: number } | undefined;

async function readValue(r: Reader, type: number, decode: boolean): Promise<Value> {
  const fixed = FIXED[type];
  if (fixed !== undefined) return fixed[1](await r.bytes(fixed[0]));
  if (type === STRING) {
    if (decode) return (await r.string(MAX_KEY_BYTES)) ?? undefined;
    r.skip(await r.stringLength());
    return undefined;
  }
  if (type !== ARRAY) throw new Error(`its header has a value of type ${type}, which GGUF does not define`);
  const element = await r.u32();
  const least = FIXED[element]?.[0] ?? 8;
  const count = await r.count('array elements', Math.min(MAX_GGUF_ARRAY, Math.floor((r.left - 8) / least)));
  if (FIXED[element] !== undefined) r.skip(count * least);
  else if (element === STRING) for (let i = 0; i < count; i++) r.skip(await r.stringLength());
  else throw new Error(`its header has a value of type ${element} in an array, which GGUF does not allow`);
  return { length: count };
}

/** The keys the facts come from (the architecture's own ones are `<architecture>.<name>`). */
const FACT_KEY = /^(general\.architecture|tokenizer\.ggml\.tokens|[\w-]+\.(context_length|embedding_length|block_count|vocab_size))$/;

/** What the GGUF file at `path` says the model is. Throws, saying why, when it is not a GGUF this reads. */
export async function readGgufFacts(path: string): Promise<GgufFacts> {
  const file = await open(path, 'r');
  try {
    const r = new Reader(file, (await file.stat()).size);
    const magic = (await r.u32()).toString(16);
    const version = await r.u32();
    if (magic !== '46554747') throw new Error('it is not a GGUF file (no GGUF magic number at its start)');
    if (version !== 2 && version !== 3) throw new Error(`it is GGUF version ${version}; versions 2 and 3 are read`);
    // Each tensor's description takes at least 24 bytes (an empty name, no dimension), each key and value 13.
    const tensors = await r.count('tensors', Math.floor((r.left - 8) / 24));
    const keys = await r.count('metadata keys', Math.floor(r.left / 13));
    // The facts' keys name the architecture (`qwen2.context_length`), which may come later than they do.
    const values = new Map<string, Value>();
    for (let i = 0; i < keys; i++) {
      const key = await r.string(MAX_KEY_BYTES);
      const wanted = key !== null && FACT_KEY.test(key);
      const value = await readValue(r, await r.u32(), wanted);
      if (wanted && value !== undefined) values.set(key, value);
    }
    let parameterCount = 0;
    let embeddingRows: number | undefined;
    for (let i = 0; i < tensors; i++) {
      const name = await r.string(MAX_KEY_BYTES);
      const dims = await r.u32();
      if (dims > MAX_DIMS) throw new Error(`a tensor of its header states ${dims} dimensions; ggml has at most ${MAX_DIMS}`);
      let elements = 1;
      const shape: number[] = [];
      for (let d = 0; d < dims; d++) {
        const size = Number((await r.bytes(8)).readBigUInt64LE(0));
        shape.push(size);
        elements *= size;
      }
      r.skip(4 + 8); // its type and offset
      parameterCount += elements;
      if (name === 'token_embd.weight') embeddingRows = shape[1];
    }
    const architecture = values.get('general.architecture');
    const arch = typeof architecture === 'string' ? architecture : 'unknown';
    const numberOf = (key: string) => {
      const v = values.get(`${arch}.${key}`);
      return typeof v === 'number' ? v : undefined;
    };
    // The tokenizer's list is what llama.cpp takes n_vocab from; the embedding's rows must agree with it.
    const tokens = values.get('tokenizer.ggml.tokens');
    return {
      architecture: arch,
      parameterCount,
      vocabularySize: typeof tokens === 'object' ? tokens.length : (numberOf('vocab_size') ?? embeddingRows ?? 0),
      contextLength: numberOf('context_length') ?? 0,
      embeddingLength: numberOf('embedding_length') ?? 0,
      blockCount: numberOf('block_count') ?? 0,
    };
  } finally {
    await file.close();
  }
}
