// Writes tiny llama-architecture GGUF v3 files with random weights, so the real llama.cpp engine can load,
// tokenize, generate and embed without any downloaded weights: `sovereign models demo` (a model to try the API with
// on a machine that has none) and the tests (test/fixtures/gguf.ts re-exports this file). The vocabulary is
// SentencePiece-style with byte fallback (<0x00>…<0xFF>), so any UTF-8 text, Arabic included, tokenizes and
// detokenizes exactly. The bytes depend only on the options (the weights come from a seeded generator): the tests
// pin checksums of what it writes, and `models demo` knows a file it wrote before by its checksum.
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';

const enum T {
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  STRING = 8,
  ARRAY = 9,
}

type Meta = [key: string, type: T, value: number | string | { of: T; items: Array<number | string> }];

class Writer {
  private chunks: Buffer[] = [];
  size = 0;
  push(b: Buffer) {
    this.chunks.push(b);
    this.size += b.length;
  }
  u32(v: number) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.push(b);
  }
  i32(v: number) {
    const b = Buffer.alloc(4);
    b.writeInt32LE(v);
    this.push(b);
  }
  u64(v: number) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.push(b);
  }
  f32(v: number) {
    const b = Buffer.alloc(4);
    b.writeFloatLE(v);
    this.push(b);
  }
  str(s: string) {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.push(b);
  }
  value(type: T, v: number | string) {
    if (type === T.UINT32) this.u32(v as number);
    else if (type === T.INT32) this.i32(v as number);
    else if (type === T.FLOAT32) this.f32(v as number);
    else if (type === T.STRING) this.str(v as string);
  }
  pad(alignment: number) {
    const rest = this.size % alignment;
    if (rest) this.push(Buffer.alloc(alignment - rest));
  }
  result() {
    return Buffer.concat(this.chunks);
  }
}

/** Deterministic normal-ish random numbers (xorshift + sum of uniforms, times `scale`), so the files are reproducible. */
export function random(seed: number, scale = 0.8) {
  let x = seed >>> 0 || 1;
  const uniform = () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 0xffffffff;
  };
  return () => (uniform() + uniform() + uniform() - 1.5) * scale;
}

export const SPECIAL = { unk: 0, bos: 1, eos: 2, imStart: 3, imEnd: 4 };

/** The vocabulary: specials, 256 byte tokens, printable ASCII, word pieces, Arabic letters and a few words. */
export function vocabulary(): { tokens: string[]; scores: number[]; types: number[] } {
  const tokens: string[] = ['<unk>', '<s>', '</s>', '<|im_start|>', '<|im_end|>'];
  const types = [2, 3, 3, 3, 3];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(6);
  }
  const pieces = new Set<string>(['▁']);
  for (let c = 0x21; c <= 0x7e; c++) pieces.add(String.fromCharCode(c));
  for (let c = 0x61; c <= 0x7a; c++) pieces.add(`▁${String.fromCharCode(c)}`);
  for (const w of [
    'the',
    'hello',
    'world',
    'and',
    'user',
    'system',
    'assistant',
    'json',
    'name',
    'answer',
    'tool',
    'ing',
    'er',
    'on',
    'in',
  ])
    pieces.add(w.startsWith('▁') ? w : `▁${w}`).add(w);
  for (let c = 0x0621; c <= 0x064a; c++) pieces.add(String.fromCharCode(c));
  for (const w of ['مرحبا', 'السلام', 'عليكم', 'الرياض', 'في', 'من']) pieces.add(`▁${w}`).add(w);
  for (const p of pieces) {
    tokens.push(p);
    types.push(1);
  }
  const scores = tokens.map((t, i) => (types[i] === 1 ? -1 / [...t].length - i * 1e-6 : 0));
  return { tokens, scores, types };
}

export const CHATML_TEMPLATE =
  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

export interface TinyModelOptions {
  embedding?: number;
  layers?: number;
  heads?: number;
  feedForward?: number;
  context?: number;
  seed?: number;
  name?: string;
  /** Gives one tensor a shape llama.cpp rejects: the file parses and checks out, but the model does not load. */
  wrongShape?: boolean;
  /** `general.architecture` (and the prefix of its keys); only `llama` loads. */
  architecture?: string;
  /** Word pieces added to the vocabulary (which grows the embedding and output tensors with it). */
  extraTokens?: number;
  /** Declares fill-in-the-middle tokens (prefix, suffix, middle), as code models' GGUFs do. */
  fim?: boolean;
  /**
   * Zeroes the output rows of the special tokens (begin, end, im_start, im_end): their logits are 0 while the others'
   * are random, so greedy decoding does not end a generation before its max tokens. For benchmarks, whose calls must
   * all do the same work however batching perturbs the logits. The other weights are unchanged.
   */
  neverEnds?: boolean;
}

/** What a manifest entry's `gguf` object says of a file writeTinyGguf wrote. */
export interface TinyGgufFacts {
  architecture: string;
  parameterCount: number;
  vocabularySize: number;
  contextLength: number;
  embeddingLength: number;
  blockCount: number;
}

/** Writes a tiny GGUF and returns its size, SHA-256 and the header facts a manifest entry states for it. */
export function writeTinyGguf(path: string, options: TinyModelOptions = {}): { size: number; sha256: string; gguf: TinyGgufFacts } {
  const { bytes, gguf } = tinyGguf(options);
  writeFileSync(path, bytes);
  return { size: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex'), gguf };
}

/** A tiny GGUF's bytes and the header facts a manifest entry states for it. */
export function tinyGguf(options: TinyModelOptions = {}): { bytes: Buffer; gguf: TinyGgufFacts } {
  const nEmbd = options.embedding ?? 64;
  const nLayer = options.layers ?? 2;
  const nHead = options.heads ?? 4;
  const nFf = options.feedForward ?? 128;
  const nCtx = options.context ?? 1024;
  const alignment = 32;
  const { tokens, scores, types } = vocabulary();
  for (let i = 0; i < (options.extraTokens ?? 0); i++) {
    tokens.push(`extra${i}`);
    scores.push(-10 - i * 1e-6);
    types.push(1);
  }
  const fim: Meta[] = [];
  if (options.fim) {
    for (const [name, key] of [
      ['<|fim_prefix|>', 'fim_pre'],
      ['<|fim_suffix|>', 'fim_suf'],
      ['<|fim_middle|>', 'fim_mid'],
    ] as const) {
      fim.push([`tokenizer.ggml.${key}_token_id`, T.UINT32, tokens.length]);
      tokens.push(name);
      scores.push(0);
      types.push(3);
    }
  }
  const nVocab = tokens.length;
  const arch = options.architecture ?? 'llama';

  const meta: Meta[] = [
    ['general.architecture', T.STRING, arch],
    ['general.name', T.STRING, options.name ?? 'tiny-test-llama'],
    ['general.alignment', T.UINT32, alignment],
    [`${arch}.context_length`, T.UINT32, nCtx],
    [`${arch}.embedding_length`, T.UINT32, nEmbd],
    [`${arch}.block_count`, T.UINT32, nLayer],
    [`${arch}.feed_forward_length`, T.UINT32, nFf],
    [`${arch}.attention.head_count`, T.UINT32, nHead],
    [`${arch}.attention.head_count_kv`, T.UINT32, nHead],
    [`${arch}.rope.dimension_count`, T.UINT32, nEmbd / nHead],
    [`${arch}.attention.layer_norm_rms_epsilon`, T.FLOAT32, 1e-5],
    [`${arch}.vocab_size`, T.UINT32, nVocab],
    ['tokenizer.ggml.model', T.STRING, 'llama'],
    ['tokenizer.ggml.tokens', T.ARRAY, { of: T.STRING, items: tokens }],
    ['tokenizer.ggml.scores', T.ARRAY, { of: T.FLOAT32, items: scores }],
    ['tokenizer.ggml.token_type', T.ARRAY, { of: T.INT32, items: types }],
    ['tokenizer.ggml.unknown_token_id', T.UINT32, SPECIAL.unk],
    ['tokenizer.ggml.bos_token_id', T.UINT32, SPECIAL.bos],
    ['tokenizer.ggml.eos_token_id', T.UINT32, SPECIAL.imEnd],
    ['tokenizer.chat_template', T.STRING, CHATML_TEMPLATE],
    ...fim,
  ];

  const tensors: Array<{ name: string; dims: number[]; fill: 'one' | 'random' }> = [
    { name: 'token_embd.weight', dims: [nEmbd, nVocab], fill: 'random' },
    { name: 'output_norm.weight', dims: [nEmbd], fill: 'one' },
    { name: 'output.weight', dims: [nEmbd, nVocab], fill: 'random' },
  ];
  for (let i = 0; i < nLayer; i++) {
    tensors.push(
      { name: `blk.${i}.attn_norm.weight`, dims: [nEmbd], fill: 'one' },
      { name: `blk.${i}.attn_q.weight`, dims: [nEmbd, options.wrongShape && i === 0 ? nEmbd / 2 : nEmbd], fill: 'random' },
      { name: `blk.${i}.attn_k.weight`, dims: [nEmbd, nEmbd], fill: 'random' },
      { name: `blk.${i}.attn_v.weight`, dims: [nEmbd, nEmbd], fill: 'random' },
      { name: `blk.${i}.attn_output.weight`, dims: [nEmbd, nEmbd], fill: 'random' },
      { name: `blk.${i}.ffn_norm.weight`, dims: [nEmbd], fill: 'one' },
      { name: `blk.${i}.ffn_gate.weight`, dims: [nEmbd, nFf], fill: 'random' },
      { name: `blk.${i}.ffn_up.weight`, dims: [nEmbd, nFf], fill: 'random' },
      { name: `blk.${i}.ffn_down.weight`, dims: [nFf, nEmbd], fill: 'random' },
    );
  }

  const w = new Writer();
  w.push(Buffer.from('GGUF', 'latin1'));
  w.u32(3);
  w.u64(tensors.length);
  w.u64(meta.length);
  for (const [key, type, value] of meta) {
    w.str(key);
    w.u32(type);
    if (type === T.ARRAY) {
      const arr = value as { of: T; items: Array<number | string> };
      w.u32(arr.of);
      w.u64(arr.items.length);
      for (const item of arr.items) w.value(arr.of, item);
    } else w.value(type, value as number | string);
  }
  let offset = 0;
  const sizes = tensors.map((t) => t.dims.reduce((a, b) => a * b, 1) * 4);
  tensors.forEach((t, i) => {
    w.str(t.name);
    w.u32(t.dims.length);
    for (const d of t.dims) w.u64(d);
    w.u32(0); // F32
    w.u64(offset);
    offset += Math.ceil(sizes[i]! / alignment) * alignment;
  });
  w.pad(alignment);
  const rand = random(options.seed ?? 42);
  tensors.forEach((t, i) => {
    const values = new Float32Array(sizes[i]! / 4);
    for (let j = 0; j < values.length; j++) values[j] = t.fill === 'one' ? 1 : rand();
    if (options.neverEnds && t.name === 'output.weight') {
      for (const token of [SPECIAL.bos, SPECIAL.eos, SPECIAL.imStart, SPECIAL.imEnd]) values.fill(0, token * nEmbd, (token + 1) * nEmbd);
    }
    w.push(Buffer.from(values.buffer));
    w.pad(alignment);
  });
  return {
    bytes: w.result(),
    gguf: {
      architecture: arch,
      parameterCount: tensors.reduce((sum, t) => sum + t.dims.reduce((a, b) => a * b, 1), 0),
      vocabularySize: nVocab,
      contextLength: nCtx,
      embeddingLength: nEmbd,
      blockCount: nLayer,
    },
  };
}
