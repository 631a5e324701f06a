// A GGUF header whose counts or lengths lie (docs/models.md, "What the header must say"): node-llama-cpp's reader
// believes them, so a 24-byte file claiming 2^64 keys kept `models import` reading and allocating until it ran out of
// memory. Each such file is refused at once, as unreadable; a real header still reads.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { readGgufFacts } from '../daemon/models/header.js';
import { MAX_GGUF_ARRAY } from '../daemon/models/gguf-bounds.js';
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

t.test('a real header still reads', async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'tiny.gguf');
  const { gguf } = writeTinyGguf(path);
  const facts = await readGgufFacts(path);
  t.equal(facts.architecture, gguf.architecture);
  t.equal(facts.vocabularySize, gguf.vocabularySize);
  t.equal(facts.parameterCount, gguf.parameterCount);
});
