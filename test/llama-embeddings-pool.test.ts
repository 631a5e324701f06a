// Embeddings on a pool of contexts (daemon/engines/llama/embedding-pool.ts): the vectors are those of the one-input-
// at-a-time path (a pool of one context), for Arabic and English, short and at the context's limit, whether the inputs
// come in one call or in calls at once; and the pool's scheduling on stand-in contexts: every context kept busy,
// calls taking turns input by input, aborts and failures confined to their call.
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { LlamaEmbeddingContext, Token } from 'node-llama-cpp';
import { EmbeddingPool } from '../daemon/engines/llama/embedding-pool.js';
import { LlamaEngine } from '../daemon/engines/llama/engine.js';
import { llamaRuntime } from '../daemon/engines/llama/runtime.js';
import type { ManifestEntry } from '../daemon/models/manifest.js';
import { writeTinyGguf } from './fixtures/gguf.js';
import { tempDir } from './helpers/daemon.js';

const never = new AbortController().signal;

t.test('vectors from the pool equal the one-at-a-time vectors: Arabic and English, short and at the limit', async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'tiny-embed.gguf');
  writeTinyGguf(path, { seed: 7, embedding: 32, heads: 2, name: 'tiny-embed' });
  const entry: ManifestEntry = {
    id: 'embed',
    file: 'tiny-embed.gguf',
    sha256: null,
    size: null,
    engine: 'llama.cpp',
    capability: 'embeddings',
    languages: ['ar', 'en'],
    context: 1024,
    servingContext: 256,
    needs: { ramBytes: 0, vramBytes: 0, gpuRequired: false },
    ownedBy: 'tests',
  };
  const llama = await llamaRuntime({ gpu: 'off', threads: 2 });
  const options = { threads: 2, parallel: 2, queue: 64, gpu: 'off' as const };
  const single = new LlamaEngine(llama, { ...options, embeddingContexts: 1 });
  const pooled = new LlamaEngine(llama, { ...options, embeddingContexts: 3 });
  t.teardown(async () => {
    await single.close();
    await pooled.close();
  });
  await single.load(entry, path);
  await pooled.load(entry, path);

  const english = 'The branch opens at eight in the morning; bring your card and the signed form. ';
  const arabic = 'يفتح الفرع في الثامنة صباحا، أحضر بطاقتك والنموذج الموقع. ';
  const inputs: Array<string | number[]> = [
    'Hello',
    'مرحبا',
    english,
    arabic,
    english.repeat(12), // past the context: truncated to the last token that fits
    arabic.repeat(12),
    Array.from({ length: 253 }, (_, i) => 300 + (i % 100)), // the longest input that fits with its begin and end tokens
    arabic + english,
  ];
  for (const long of [4, 5, 6]) {
    const { promptTokens } = await single.embed('embed', [inputs[long]], never, { truncate: true });
    t.equal(promptTokens, 253, `input ${long} fills the context`);
  }
  const alone: Float32Array[] = [];
  for (const input of inputs) alone.push((await single.embed('embed', [input], never, { truncate: true })).vectors[0]);

  let worst = 0;
  const compare = (t: Test, got: Float32Array[], label: string) => {
    t.equal(got.length, alone.length, `${label}: a vector per input`);
    let exact = true;
    for (const [i, vector] of got.entries()) {
      const expected = alone[i];
      t.equal(vector.length, expected.length);
      for (let j = 0; j < vector.length; j++) {
        const difference = Math.abs(vector[j] - expected[j]);
        if (difference !== 0) exact = false;
        worst = Math.max(worst, difference / Math.max(Math.abs(expected[j]), 1e-30));
      }
    }
    t.ok(worst <= 1e-6, `${label}: within 1e-6 relative of the one-at-a-time vectors (worst so far ${worst})`);
    t.comment(`${label}: ${exact ? 'bit for bit the same' : 'not bit for bit the same'}`);
  };

  const oneCall = await pooled.embed('embed', inputs, never, { truncate: true });
  compare(t, oneCall.vectors, 'one call');
  const sameTokens = await single.embed('embed', inputs, never, { truncate: true });
  t.equal(oneCall.promptTokens, sameTokens.promptTokens, 'the same tokens are counted');

  // Calls at once, each input in several of them, in different orders: what the pool interleaves must not mix.
  const calls = await Promise.all([
    pooled.embed('embed', inputs, never, { truncate: true }),
    pooled.embed('embed', [...inputs].reverse(), never, { truncate: true }),
    ...inputs.map((input) => pooled.embed('embed', [input], never, { truncate: true })),
  ]);
  compare(t, calls[0].vectors, 'calls at once, in order');
  compare(t, [...calls[1].vectors].reverse(), 'calls at once, reversed');
  compare(
    t,
    calls.slice(2).map((c) => c.vectors[0]),
    'calls at once, one input each',
  );

  const refused = await pooled.embed('embed', ['fine', '', 'also fine'], never).catch((e: Error) => e);
  t.match(refused, { message: /input\[1\] is empty/ }, 'an empty input is refused, named by its index');
});

/** Stand-in contexts: each decode waits until the test lets it finish, and records what ran when. */
function standIns(count: number) {
  const log: string[] = [];
  const pending: Array<{ context: number; input: number; finish: (fail?: Error) => void }> = [];
  let running = 0;
  let most = 0;
  const contexts = Array.from({ length: count }, (_, context) => ({
    getEmbeddingFor(tokens: Token[]) {
      running++;
      most = Math.max(most, running);
      const input = tokens[0] as number;
      log.push(`start ${input}`);
      return new Promise<{ vector: number[] }>((resolve, reject) => {
        pending.push({
          context,
          input,
          finish: (fail) => {
            running--;
            log.push(`end ${input}`);
            if (fail) reject(fail);
            else resolve({ vector: [input, context] });
          },
        });
      });
    },
    async dispose() {},
  })) as unknown as LlamaEmbeddingContext[];
  /** Lets the oldest decode in progress finish, then lets the pool hand out the next input. */
  const finishOne = async (fail?: Error) => {
    pending.shift()!.finish(fail);
    for (let i = 0; i < 5; i++) await Promise.resolve();
  };
  return { contexts, log, pending, finishOne, most: () => most };
}
const inputs = (...ids: number[]) => ids.map((id) => [id] as unknown as Token[]);

t.test('the pool keeps every context busy and calls take turns input by input', async (t) => {
  const s = standIns(2);
  const pool = new EmbeddingPool(s.contexts);
  const long = pool.embed(inputs(1, 2, 3, 4, 5, 6), never);
  t.same(s.log, ['start 1', 'start 2'], "one call's inputs fill both contexts");
  const short = pool.embed(inputs(100), never);
  await s.finishOne();
  t.same(s.log.slice(-1), ['start 100'], 'a short call beside a long one goes next, not after it');
  let shortDone = false;
  void short.then(() => (shortDone = true));
  await s.finishOne();
  await s.finishOne();
  t.ok(shortDone, 'the short call is answered while the long one runs');
  while (s.pending.length) await s.finishOne();
  const vectors = await long;
  t.same(
    vectors.map((v) => v[0]),
    [1, 2, 3, 4, 5, 6],
    'vectors come back in input order',
  );
  t.equal(s.most(), 2, 'never more decodes at once than contexts');
});

t.test('an aborted call drops its inputs not yet started; a failed input fails its call only', async (t) => {
  const s = standIns(1);
  const pool = new EmbeddingPool(s.contexts);
  const controller = new AbortController();
  const aborted = pool.embed(inputs(1, 2, 3), controller.signal);
  const other = pool.embed(inputs(10, 11), never);
  controller.abort(new Error('client went away'));
  await t.rejects(aborted, { message: 'client went away' }, 'rejected at once');
  await s.finishOne(); // input 1 was decoding: it finishes, unread
  t.same(s.log.slice(-1), ['start 10'], 'the next call goes on; inputs 2 and 3 are never decoded');
  await s.finishOne(new Error('decode failed'));
  await t.rejects(other, { message: 'decode failed' });
  t.notOk(s.log.includes('start 11'), "a call's remaining inputs are dropped once one fails");
  const after = pool.embed(inputs(20), never);
  await s.finishOne();
  t.same(
    (await after).map((v) => v[0]),
    [20],
    'the context serves the next call',
  );
  await pool.dispose();
  await t.rejects(pool.embed(inputs(30), never), { message: /unloaded/ });
});
