// A GGUF header's counts and lengths checked against the file before node-llama-cpp reads it. That reader believes
// what a header states: a 24-byte file claiming 2^64 keys or tensors, or an array of 2^40 elements, keeps it reading
// and allocating until the process runs out of memory (`models import` reads the header before anything else, so any
// file offered to it could do that). This walk reads the header section only, in bounded steps, and refuses a count or
// a length that the rest of the file cannot hold, a nested array (llama.cpp refuses those too) and an array longer
// than any real model's (the largest vocabularies and merge lists are well under a million entries).
import { open, type FileHandle } from 'node:fs/promises';

/** Elements an array may state: four times the longest real ones. */
export const MAX_GGUF_ARRAY = 4 * 1024 * 1024;
/** Dimensions a tensor may state (ggml's GGML_MAX_DIMS). */
const MAX_DIMS = 4;
/** Bytes of each fixed-size value type, by GGUF type number; strings (8) and arrays (9) are read. */
const FIXED: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const STRING = 8;
const ARRAY = 9;
const CHUNK = 1024 * 1024;

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

  private async bytes(n: number): Promise<Buffer> {
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

  async string(): Promise<void> {
    this.skip(await this.count('bytes of a string', this.left - 8));
  }
}

async function value(r: Reader, type: number, inArray: boolean): Promise<void> {
  const fixed = FIXED[type];
  if (fixed !== undefined) return r.skip(fixed);
  if (type === STRING) return r.string();
  if (type !== ARRAY || inArray)
    throw new Error(`its header has a value of type ${type}${inArray ? ' in an array' : ''}, which GGUF does not define`);
  const element = await r.u32();
  const least = FIXED[element] ?? 8;
  const count = await r.count('array elements', Math.min(MAX_GGUF_ARRAY, Math.floor((r.left - 8) / least)));
  if (FIXED[element] !== undefined) return r.skip(count * least);
  for (let i = 0; i < count; i++) await value(r, element, true);
}

/** Throws, saying what is wrong, when the GGUF header at `path` states more than its file holds. */
export async function checkGgufBounds(path: string): Promise<void> {
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
    for (let i = 0; i < keys; i++) {
      await r.string();
      await value(r, await r.u32(), false);
    }
    for (let i = 0; i < tensors; i++) {
      await r.string();
      const dims = await r.u32();
      if (dims > MAX_DIMS) throw new Error(`a tensor of its header states ${dims} dimensions; ggml has at most ${MAX_DIMS}`);
      r.skip(8 * dims + 4 + 8);
    }
  } finally {
    await file.close();
  }
}
