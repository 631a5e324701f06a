// Writes a tiny multilingual whisper model in the legacy ggml format that whisper.cpp (and so the @fugood/whisper.node
// binding) loads, so the real speech-to-text engine runs without downloaded weights: `sovereign models demo` and the
// tests (test/fixtures/whisper.ts re-exports this file). The encoder has random weights; the decoder is wired by hand
// so that decoding is fast, deterministic and well-formed whatever the audio.
//
// File layout (all little-endian, no alignment padding anywhere):
//   u32 magic 0x67676d6c ("ggml")
//   i32 × 11 hyper-parameters: n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer,
//                              n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype
//   mel filters: i32 n_mel, i32 n_fft, then n_mel × n_fft f32 (an 80 × 201 Slaney filterbank, as librosa makes it)
//   vocabulary: i32 count, then per token u32 byte length + raw bytes
//   tensors until end of file: i32 n_dims, i32 name length, i32 type (0 = F32, 1 = F16), i32 × n_dims sizes
//                              (innermost first, as ggml's ne[]), the name, then the raw data
//
// Why these choices:
// - n_vocab 51865 makes whisper.cpp treat the model as multilingual (99 languages), so `language` (ar, en) and language
//   detection work. Only the 50257 text tokens are written; the loader names the 1608 special tokens itself
//   (end-of-text 50257, start-of-transcript 50258, languages from 50259, translate 50358, transcribe 50359, …,
//   timestamps from 50364 in 20 ms steps). The text tokens are the 256 single bytes (so any UTF-8 prompt, Arabic
//   included, tokenizes), the words below and made-up syllables.
// - n_audio_ctx 1500 and n_text_ctx 448 are whisper's own: the mel window is 30 s (3000 frames, halved by conv2) and
//   timestamps, seeking and prompt budgets derive from them.
// - n_audio_state = n_text_state = 32 with 2 heads and one layer each: the file is ~4.2 MB (mostly the F16 token
//   embedding, 51865 × 32) and a 5 s clip transcribes in well under a second on two cores. n_text_layer must not be
//   2: whisper.cpp takes such a model for a first-release distilled one and forces no_timestamps. The model's type
//   reports as "unknown" (only 4/6/12/24/32 encoder layers have names).
// - ftype 1 (F16): weight matrices and the two convolutions are F16; some whisper.cpp builds crash on F32
//   convolutions. Biases, layer norms and positional embeddings are F32, as whisper.cpp declares them. Conv biases are
//   2-D [1, n_state] and conv weights 3-D [3, n_in, n_state], matching whisper.cpp's shapes exactly.
// - A decoder with purely random weights loops on one token until the context is full, fails whisper.cpp's entropy
//   and log-probability checks and so falls back through five more temperatures with five decoders each: ~20 s for a
//   5 s clip. So the decoder is a hand-made bigram machine instead (see decoder() below): attention and positional
//   embeddings are scaled down to noise, the tokens it uses have orthogonal embeddings, and each MLP hidden unit
//   recognises one input token and pushes the output towards its successor. The result, for any audio, at any temperature:
//     detected language "en"; then per second of audio one segment: <|k.00|> WORDS[k] <|k+1.00|>, until a timestamp
//     reaches the end of the audio (whisper.cpp then stops) or 30 s (then end-of-text, and the next 30 s window).
//   So a 4.9 s clip gives " one two three four five" in five 1 s segments, the last ending at 5.00 s. The words carry
//   no meaning; tests assert on the API contract, formats and timing fields.
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import type { GgmlFacts } from '../manifest.js';
import { random } from './gguf.js';

const enum Type {
  F32 = 0,
  F16 = 1,
}

const N_VOCAB = 51865;
const N_TEXT_TOKENS = 50257;
const N_AUDIO_CTX = 1500;
const N_TEXT_CTX = 448;
const N_STATE = 32;
const N_HEAD = 2;
const N_AUDIO_LAYER = 1;
const N_TEXT_LAYER = 1;
const N_MELS = 80;
const N_FFT_BINS = 201; // 400-point FFT at 16 kHz
const SAMPLE_RATE = 16000;

/** Special token ids of a multilingual whisper vocabulary (derived by whisper.cpp from n_vocab 51865). */
const EOT = 50257;
const SOT = 50258;
const LANG_EN = 50259;
const TRANSLATE = 50358;
const TRANSCRIBE = 50359;
const TIMESTAMP_0 = 50364;
/** The timestamp token for `seconds` (whisper's timestamps step by 20 ms). */
const timestamp = (seconds: number) => TIMESTAMP_0 + seconds * 50;

/** The text of the segment covering second k..k+1 of each 30 s window; each is one token of the vocabulary. */
export const WHISPER_WORDS: readonly string[] = [
  ...['one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten', 'eleven', 'twelve', 'thirteen'],
  ...['fourteen', 'fifteen', 'sixteen', 'seventeen', 'eighteen', 'nineteen', 'twenty'],
  ...['twentyone', 'twentytwo', 'twentythree', 'twentyfour', 'twentyfive', 'twentysix', 'twentyseven', 'twentyeight'],
  ...['twentynine', 'thirty'],
].map((w) => ` ${w}`);

class Writer {
  private chunks: Buffer[] = [];
  push(b: Buffer) {
    this.chunks.push(b);
  }
  i32(...values: number[]) {
    const b = Buffer.alloc(4 * values.length);
    values.forEach((v, i) => b.writeInt32LE(v, 4 * i));
    this.push(b);
  }
  u32(v: number) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.push(b);
  }
  result() {
    return Buffer.concat(this.chunks);
  }
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** IEEE 754 binary32 → binary16 bits (round half up; enough for weights). */
function half(v: number): number {
  f32[0] = v;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = ((x >>> 23) & 0xff) - 127 + 15;
  const mant = x & 0x7fffff;
  if (((x >>> 23) & 0xff) === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    const m = mant | 0x800000;
    const shift = 14 - exp;
    return sign | ((m >>> shift) + ((m >>> (shift - 1)) & 1));
  }
  return (sign | (exp << 10) | (mant >>> 13)) + ((mant >>> 12) & 1);
}

/** librosa.filters.mel(sr=16000, n_fft=400, n_mels=80) with Slaney's mel scale and area normalisation, as whisper. */
function melFilters(): Float32Array {
  const fSp = 200 / 3;
  const minLogHz = 1000;
  const minLogMel = minLogHz / fSp;
  const logStep = Math.log(6.4) / 27;
  const hzToMel = (hz: number) => (hz < minLogHz ? hz / fSp : minLogMel + Math.log(hz / minLogHz) / logStep);
  const melToHz = (mel: number) => (mel < minLogMel ? mel * fSp : minLogHz * Math.exp(logStep * (mel - minLogMel)));
  const melMax = hzToMel(SAMPLE_RATE / 2);
  const points = Array.from({ length: N_MELS + 2 }, (_, i) => melToHz((melMax * i) / (N_MELS + 1)));
  const out = new Float32Array(N_MELS * N_FFT_BINS);
  for (let m = 0; m < N_MELS; m++) {
    const [lo, mid, hi] = [points[m]!, points[m + 1]!, points[m + 2]!];
    for (let k = 0; k < N_FFT_BINS; k++) {
      const f = (k * SAMPLE_RATE) / 400;
      const w = Math.max(0, Math.min((f - lo) / (mid - lo), (hi - f) / (hi - mid)));
      out[m * N_FFT_BINS + k] = (w * 2) / (hi - lo);
    }
  }
  return out;
}

/** The 50257 text tokens: single bytes, WHISPER_WORDS, a few English and Arabic words, then made-up syllables. */
function vocabulary(): Buffer[] {
  const tokens: Buffer[] = [];
  const seen = new Set<string>();
  for (let b = 0; b < 256; b++) {
    tokens.push(Buffer.from([b]));
    seen.add(b < 0x80 ? String.fromCharCode(b) : `byte ${b}`);
  }
  const add = (s: string) => {
    if (tokens.length >= N_TEXT_TOKENS || seen.has(s)) return;
    seen.add(s);
    tokens.push(Buffer.from(s, 'utf8'));
  };
  WHISPER_WORDS.forEach(add);
  for (const w of ['the', 'hello', 'world', 'and', 'of', 'to', 'is', 'in', 'it', 'you', 'that', 'this', 'test']) {
    add(` ${w}`);
    add(w);
  }
  for (const w of ['مرحبا', 'السلام', 'عليكم', 'في', 'من', 'على', 'هذا', 'العالم']) {
    add(` ${w}`);
    add(w);
  }
  for (let c = 0x0621; c <= 0x064a; c++) add(` ${String.fromCharCode(c)}`);
  for (const p of [' -', " '", '  ']) add(p);
  const syllables: string[] = [];
  for (const c of 'bdfghklmnprstvwyz') for (const v of 'aeiou') syllables.push(c + v);
  const words = [...syllables];
  for (const a of syllables) for (const b of syllables) words.push(a + b);
  for (const w of words) {
    add(` ${w}`);
    add(w);
  }
  for (let i = 0; tokens.length < N_TEXT_TOKENS; i++)
    add(` ${words[i % words.length]}${syllables[Math.floor(i / words.length) % syllables.length]}`);
  return tokens;
}

/** Layer norm without affine part, as ggml_norm (eps 1e-5). */
function norm(v: Float32Array): Float32Array {
  const mean = v.reduce((a, b) => a + b, 0) / v.length;
  const variance = v.reduce((a, b) => a + (b - mean) ** 2, 0) / v.length;
  return v.map((x) => (x - mean) / Math.sqrt(variance + 1e-5));
}

/**
 * The hand-made decoder: token embeddings (tied to the output projection) and the MLP of its only block.
 *
 * The 66 tokens it uses get the 64 signed axes ±e_d of the 32-dimensional state as embeddings (scaled to the norm of a
 * unit-variance vector), so each is orthogonal or opposite to every other: start-of-transcript and both task tokens
 * share −e_3 (the same unit serves them), <|en|> is −e_4, the timestamps <|k.00|> (k = 0…30) are +e_k, end-of-text
 * is +e_31 and word k is −e_(k+5 mod 32). No input is opposite to a token it leads to, and all other tokens get short
 * random embeddings. So whatever the seed, the intended successor wins by ~20 logits (checked with seeds 1–20).
 *
 * Each MLP hidden unit fires only for its input direction (gain·(cos − 0.6) before GELU) and adds strength × the
 * successor's embedding to the residual stream. A timestamp that closes one segment and opens the next has strength 1,
 * so the input timestamp itself (present in the residual stream) and the next word come out equally strong, and
 * whisper.cpp's timestamp rules (after text: a timestamp or end; after two timestamps: text) pick between them.
 */
function decoder(rand: () => number) {
  const s = N_STATE;
  if (s !== 32) throw new Error('tiny whisper model: the decoder wiring assumes a 32-dimensional state');
  const words = WHISPER_WORDS.map((_, k) => 256 + k);
  const axes = new Map<number, number>([
    [SOT, -4],
    [TRANSCRIBE, -4],
    [TRANSLATE, -4],
    [LANG_EN, -5],
    [EOT, 32],
  ]); // token → ±(axis + 1)
  for (let k = 0; k <= 30; k++) axes.set(timestamp(k), k + 1);
  words.forEach((id, k) => axes.set(id, -(((k + 5) % 32) + 1)));

  const embedding = new Float32Array(s * N_VOCAB);
  for (let i = 0; i < embedding.length; i++) embedding[i] = rand() * 0.1;
  for (const [id, axis] of axes) {
    embedding.fill(0, id * s, (id + 1) * s);
    embedding[id * s + Math.abs(axis) - 1] = Math.sign(axis) * Math.sqrt(s);
  }
  const row = (id: number) => embedding.subarray(id * s, (id + 1) * s);

  const units: Array<[input: number, targets: Array<[token: number, strength: number]>]> = [
    [
      SOT,
      [
        [LANG_EN, 3],
        [timestamp(0), 3],
      ],
    ],
  ];
  for (let k = 0; k < 30; k++) units.push([timestamp(k), [[words[k]!, k === 0 ? 3 : 1]]], [words[k]!, [[timestamp(k + 1), 3]]]);
  units.push([timestamp(30), [[EOT, 3]]]);

  const hidden = 4 * s;
  const gain = 20;
  const threshold = 0.6;
  const fired = gain * (1 - threshold);
  const w0 = new Float32Array(hidden * s);
  const b0 = new Float32Array(hidden).fill(-gain);
  const w2 = new Float32Array(s * hidden);
  units.forEach(([input, targets], j) => {
    const n = norm(row(input)); // norm √s, so w0·norm(x) = gain·cos(x, input)
    for (let d = 0; d < s; d++) w0[j * s + d] = (gain * n[d]!) / s;
    b0[j] = -gain * threshold;
    for (const [target, strength] of targets) {
      const e = row(target);
      for (let d = 0; d < s; d++) w2[d * hidden + j] = w2[d * hidden + j]! + (strength * e[d]!) / fired;
    }
  });
  return { embedding, w0, b0, w2 };
}

interface Tensor {
  name: string;
  /** Sizes innermost first, exactly as whisper.cpp creates the tensor (ggml ne[]). */
  dims: number[];
  type: Type;
  data: Float32Array;
}

function tensors(seed: number): Tensor[] {
  // Unit variance: 2 × the sum of three uniforms less 1.5.
  const rand = random(seed, 2);
  const s = N_STATE;
  const filled = (n: number, scale: number | 'one' | 'zero') =>
    new Float32Array(n).map(() => (scale === 'one' ? 1 : scale === 'zero' ? 0 : rand() * scale));
  /** A weight matrix y = W·x with `rows` outputs; scale 1 keeps the output's variance that of the input. */
  const matrix = (name: string, rows: number, cols: number, scale = 1): Tensor => ({
    name,
    dims: [cols, rows],
    type: Type.F16,
    data: filled(rows * cols, scale / Math.sqrt(cols)),
  });
  const vector = (name: string, n: number, scale: number | 'one' | 'zero'): Tensor => ({
    name,
    dims: [n],
    type: Type.F32,
    data: filled(n, scale),
  });
  /** Pre-norm attention; `out` scales its contribution to the residual stream. */
  const attention = (prefix: string, out: number): Tensor[] => [
    vector(`${prefix}_ln.weight`, s, 'one'),
    vector(`${prefix}_ln.bias`, s, 'zero'),
    matrix(`${prefix}.query.weight`, s, s),
    vector(`${prefix}.query.bias`, s, 0.02),
    matrix(`${prefix}.key.weight`, s, s),
    matrix(`${prefix}.value.weight`, s, s),
    vector(`${prefix}.value.bias`, s, 0.02),
    matrix(`${prefix}.out.weight`, s, s, out),
    vector(`${prefix}.out.bias`, s, out === 1 ? 0.02 : 'zero'),
  ];

  const list: Tensor[] = [
    { name: 'encoder.positional_embedding', dims: [s, N_AUDIO_CTX], type: Type.F32, data: filled(s * N_AUDIO_CTX, 0.1) },
    { name: 'encoder.conv1.weight', dims: [3, N_MELS, s], type: Type.F16, data: filled(3 * N_MELS * s, 1 / Math.sqrt(3 * N_MELS)) },
    { name: 'encoder.conv1.bias', dims: [1, s], type: Type.F32, data: filled(s, 0.02) },
    { name: 'encoder.conv2.weight', dims: [3, s, s], type: Type.F16, data: filled(3 * s * s, 1 / Math.sqrt(3 * s)) },
    { name: 'encoder.conv2.bias', dims: [1, s], type: Type.F32, data: filled(s, 0.02) },
  ];
  for (let i = 0; i < N_AUDIO_LAYER; i++) {
    const p = `encoder.blocks.${i}`;
    list.push(
      ...attention(`${p}.attn`, 1),
      vector(`${p}.mlp_ln.weight`, s, 'one'),
      vector(`${p}.mlp_ln.bias`, s, 'zero'),
      matrix(`${p}.mlp.0.weight`, 4 * s, s),
      vector(`${p}.mlp.0.bias`, 4 * s, 0.02),
      matrix(`${p}.mlp.2.weight`, s, 4 * s),
      vector(`${p}.mlp.2.bias`, s, 0.02),
    );
  }
  list.push(vector('encoder.ln_post.weight', s, 'one'), vector('encoder.ln_post.bias', s, 'zero'));

  const d = decoder(rand);
  list.push(
    { name: 'decoder.positional_embedding', dims: [s, N_TEXT_CTX], type: Type.F32, data: filled(s * N_TEXT_CTX, 0.02) },
    { name: 'decoder.token_embedding.weight', dims: [s, N_VOCAB], type: Type.F16, data: d.embedding },
  );
  for (let i = 0; i < N_TEXT_LAYER; i++) {
    const p = `decoder.blocks.${i}`;
    list.push(
      ...attention(`${p}.attn`, 0.02),
      ...attention(`${p}.cross_attn`, 0.02),
      vector(`${p}.mlp_ln.weight`, s, 'one'),
      vector(`${p}.mlp_ln.bias`, s, 'zero'),
      { name: `${p}.mlp.0.weight`, dims: [s, 4 * s], type: Type.F16, data: d.w0 },
      { name: `${p}.mlp.0.bias`, dims: [4 * s], type: Type.F32, data: d.b0 },
      { name: `${p}.mlp.2.weight`, dims: [4 * s, s], type: Type.F16, data: d.w2 },
      vector(`${p}.mlp.2.bias`, s, 'zero'),
    );
  }
  list.push(vector('decoder.ln.weight', s, 'one'), vector('decoder.ln.bias', s, 'zero'));
  return list;
}

/** Writes the tiny whisper model and returns its size and SHA-256. The same seed always gives the same bytes. */
export function writeTinyWhisperModel(path: string, options: { seed?: number } = {}): { size: number; sha256: string } {
  const bytes = tinyWhisperModel(options);
  writeFileSync(path, bytes);
  return { size: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') };
}

/** The tiny whisper model's bytes (~4.2 MB). */
export function tinyWhisperModel(options: { seed?: number } = {}): Buffer {
  const w = new Writer();
  w.u32(0x67676d6c);
  w.i32(N_VOCAB, N_AUDIO_CTX, N_STATE, N_HEAD, N_AUDIO_LAYER, N_TEXT_CTX, N_STATE, N_HEAD, N_TEXT_LAYER, N_MELS, Type.F16);

  const filters = melFilters();
  w.i32(N_MELS, N_FFT_BINS);
  w.push(Buffer.from(filters.buffer));

  const vocab = vocabulary();
  WHISPER_WORDS.forEach((word, k) => {
    if (vocab[256 + k]?.toString('utf8') !== word) throw new Error(`tiny whisper model: token ${256 + k} is not ${word}`);
  });
  w.i32(vocab.length);
  for (const token of vocab) {
    w.u32(token.length);
    w.push(token);
  }

  for (const t of tensors(options.seed ?? 7)) {
    const name = Buffer.from(t.name, 'utf8');
    w.i32(t.dims.length, name.length, t.type, ...t.dims);
    w.push(name);
    if (t.type === Type.F16) w.push(Buffer.from(Uint16Array.from(t.data, half).buffer));
    else w.push(Buffer.from(t.data.buffer));
  }

  return w.result();
}

/** The hyper-parameters a manifest entry's `ggml` states for the tiny whisper model (whatever the seed). */
export const TINY_WHISPER_FACTS: GgmlFacts = {
  vocabularySize: N_VOCAB,
  audioContext: N_AUDIO_CTX,
  audioState: N_STATE,
  audioHeads: N_HEAD,
  audioLayers: N_AUDIO_LAYER,
  textContext: N_TEXT_CTX,
  textState: N_STATE,
  textHeads: N_HEAD,
  textLayers: N_TEXT_LAYER,
  mels: N_MELS,
};

/** whisper's text context in tokens: what a manifest entry states as `context`. */
export const TINY_WHISPER_CONTEXT = N_TEXT_CTX;
