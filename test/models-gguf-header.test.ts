// A GGUF header whose counts or lengths lie (docs/models.md, "What the header must say"): node-llama-cpp's reader
// believes them, so a 24-byte file claiming 2^64 keys kept `models import` reading and allocating until it ran out of
// memory. Each such file is refused at once, as unreadable; a real header reads as node-llama-cpp's own reader reads it.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { readGgufFacts } from '../daemon/models/header.js';
import { MAX_GGUF_ARRAY } from '../daemon/models/gguf-header.js';
import { writeTinyGguf } from './fixtures/gguf.js';
import { tempDir } from './helpers/daemon.js';

const u32 = (n: number) => Buffer.from(new Uint32Array([n]).buffer);
const u64 = (n: bigint) => Buffer.from(new BigUint64Array([n]).buffer);
const str = (s: string) => Buffer.concat([u64(BigInt(s.length)), Buffer.from(s)]);
const head = (tensors: bigint, keys: bigint) => Buffer.concat([Buffer.from('GGUF'), u32(3), u64(tensors), u64(keys)]);
const MAX = 0xffffffffffffffffn;

const crafted: Record<string, Buffer> = {
  'a key count of 2^64 - 1': head(0n, MAX),
  'a tensor count of 2^64 - 1': head(MAX, 0n),
  'a string of 2^40 bytes': Buffer.concat([head(0n, 1n), u64(1n << 40n), Buffer.from('x')]),
  'an array of 2^40 elements': Buffer.concat([
    head(0n, 1n),
    str('tokenizer.ggml.tokens'),
    u32(9),
    u32(8),
    u64(1n << 40n),
    Buffer.alloc(64),
  ]),
  'arrays nested in arrays': Buffer.concat([
    head(0n, 1n),
    str('a'),
    ...Array.from({ length: 50_000 }, () => Buffer.concat([u32(9), u32(9), u64(1n)])),
  ]),
  'an array longer than any model has': Buffer.concat([
    head(0n, 1n),
    str('tokenizer.ggml.token_type'),
    u32(9),
    u32(0),
    u64(BigInt(MAX_GGUF_ARRAY + 1)),
    Buffer.alloc(MAX_GGUF_ARRAY + 1),
  ]),
  'a tensor of 2^32 - 1 dimensions': Buffer.concat([head(1n, 0n), str('t'), u32(0xffffffff), Buffer.alloc(64)]),
};

t.test('a header stating more than its file holds is refused at once', async (t) => {
  const dir = tempDir(t);
  for (const [label, bytes] of Object.entries(crafted)) {
    const path = join(dir, 'crafted.gguf');
    writeFileSync(path, bytes);
    const started = Date.now();
    await t.rejects(readGgufFacts(path), label);
    t.ok(Date.now() - started < 5_000, `${label}: refused in ${Date.now() - started} ms`);
  }
});

/** The facts as node-llama-cpp's own GGUF reader gives them: the reference the bounded reader is held to. */
async function referenceFacts(path: string) {
  const { readGgufFileInfo } = await import('node-llama-cpp');
  const info = await readGgufFileInfo(path, { readTensorInfo: true, ignoreKeys: [], logWarnings: false });
  const arch = info.architectureMetadata as Record<string, unknown>;
  const tensors = info.fullTensorInfo ?? [];
  const tokens = (info.metadata as { tokenizer?: { ggml?: { tokens?: readonly unknown[] } } }).tokenizer?.ggml?.tokens;
  return {
    architecture: String(info.metadata.general?.architecture),
    parameterCount: tensors.reduce((sum, t) => sum + t.dimensions.reduce<number>((a, d) => a * Number(d), 1), 0),
    vocabularySize: tokens?.length,
    contextLength: arch.context_length,
    embeddingLength: arch.embedding_length,
    blockCount: arch.block_count,
  };
}

t.test('real headers read as node-llama-cpp reads them, and as the fixture wrote them', async (t) => {
  const dir = tempDir(t);
  const shapes = {
    'the chat fixture': { seed: 42 },
    'a wider, deeper one with more tokens': { seed: 5, embedding: 32, heads: 2, layers: 3, extraTokens: 40, context: 4096 },
    'another architecture': { seed: 6, architecture: 'qwen2' },
  };
  for (const [label, options] of Object.entries(shapes)) {
    const path = join(dir, 'model.gguf');
    const { gguf } = writeTinyGguf(path, options);
    const facts = await readGgufFacts(path);
    t.same(facts, gguf, `${label}: the facts the fixture wrote`);
    t.same(facts, await referenceFacts(path), `${label}: the facts node-llama-cpp reads`);
  }
});
