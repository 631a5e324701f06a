// A listed model's file that changes while the daemon runs is never served unverified: a chmod (same bytes) changes
// nothing; other bytes under a model not loaded yet take it out of service and through the checks again; a model
// whose engine holds its weights, or whose file is removed, is withdrawn until a restart. Each withdrawal is an
// audit entry.
import {
  chmodSync,
  closeSync,
  mkdirSync,
  openSync,
  writeSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { tinyGguf, writeTinyGguf } from './fixtures/gguf.js';
import { entry } from './fixtures/models.js';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { modelsProbe } from './helpers/models.js';

const dir = tempDir(t);
const models = join(dir, 'models');
const spare = join(dir, 'spare');
mkdirSync(models);
mkdirSync(spare);
const written = {
  loaded: writeTinyGguf(join(models, 'loaded.gguf'), { seed: 41 }),
  waiting: writeTinyGguf(join(models, 'waiting.gguf'), { seed: 42 }),
  removed: writeTinyGguf(join(models, 'removed.gguf'), { seed: 43 }),
};
// Same shape (the header check passes), other weights: only the checksum tells them apart.
writeTinyGguf(join(spare, 'other.gguf'), { seed: 44 });
const manifest = join(dir, 'manifest.json');
writeFileSync(
  manifest,
  JSON.stringify({
    models: [
      entry('loaded-chat', 'loaded.gguf', 'chat', written.loaded),
      entry('waiting-chat', 'waiting.gguf', 'chat', written.waiting),
      entry('removed-chat', 'removed.gguf', 'chat', written.removed),
    ],
  }),
);
const dataDir = join(dir, 'data');
const config = join(dir, 'config.json');
writeFileSync(config, JSON.stringify({ dataDir, modelsDir: models, manifest, models: { load: 'on-demand', rescanSeconds: 1 } }));
const key = createKey(dataDir);
const daemon = await startDaemon(t, ['--config', config]);
const { client, listed, health, until } = modelsProbe(daemon.baseURL, key.secret);
const unavailable = async (id: string) => (await health()).unavailable_models.find((m) => m.id === id);
/** A chat call's status: 200 once loaded (503 model_not_ready while it loads is retried), else the error's. */
async function call(model: string): Promise<number> {
  for (const end = Date.now() + 30_000; ;) {
    try {
      await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 2 });
      return 200;
    } catch (err) {
      const status = (err as { status?: number }).status ?? 0;
      if (status !== 503 || Date.now() > end) return status;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}
function auditEntries(): Array<Record<string, any>> {
  const out = join(dir, `export-${Date.now()}`);
  const r = cli(['audit', 'export', '--data-dir', dataDir, '--out', out]);
  if (r.code !== 0) throw new Error(r.stderr);
  return readFileSync(join(out, 'entries.jsonl'), 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, any>);
}
const withdrawals = (model: string) => auditEntries().filter((e) => e.kind === 'model.withdrawn' && e.model === model);
/** Waits for two rescans (one second apart, plus the half-second settle) to have looked. */
const rescans = () => new Promise((r) => setTimeout(r, 3_000));

await until('the models listed', 30_000, async () => ((await listed()).length === 3 ? true : undefined));

t.test('a chmod changes the file’s stat, not the model: it stays listed and loads', async (t) => {
  const file = join(models, 'loaded.gguf');
  const before = statSync(file, { bigint: true }).ctimeNs;
  chmodSync(file, 0o600);
  t.not(statSync(file, { bigint: true }).ctimeNs, before, 'the ctime moved');
  await rescans();
  t.same(await listed(), ['loaded-chat', 'removed-chat', 'waiting-chat']);
  t.equal(await call('loaded-chat'), 200, 'it loads and answers');
  t.same(withdrawals('loaded-chat'), []);
});

t.test('other bytes under a model not loaded yet: out of service, verified again, listed when right again', async (t) => {
  const file = join(models, 'waiting.gguf');
  const original = readFileSync(file);
  const { atime, mtime } = statSync(file);
  // In place, same size, the mtime put back: only the ctime and the checksum tell.
  writeFileSync(file, readFileSync(join(spare, 'other.gguf')));
  utimesSync(file, atime, mtime);
  const found = await until('waiting-chat withdrawn', 20_000, async () => {
    const m = await unavailable('waiting-chat');
    return m?.state === 'checksum_mismatch' && !(await listed()).includes('waiting-chat') ? m : undefined;
  });
  t.match(found.reason, /checksum|SHA-256/);
  t.equal(await call('waiting-chat'), 404, 'a call does not load the changed file');
  const logged = await until('the withdrawal logged', 10_000, async () => {
    const w = withdrawals('waiting-chat');
    return w.length ? w : undefined;
  });
  t.match(logged, [{ state: 'checksum_mismatch', when: 'rescan' }]);

  writeFileSync(file, original);
  await until('waiting-chat listed again', 20_000, async () => ((await listed()).includes('waiting-chat') ? true : undefined));
  t.equal(await call('waiting-chat'), 200, 'the verified file loads and answers');
  t.ok(
    auditEntries().some((e) => e.kind === 'model.listed' && e.model === 'waiting-chat' && e.sha256 === written.waiting.sha256),
    'listed again, with the checksum it was verified against',
  );
});

t.test('a loaded model whose file is replaced is withdrawn until a restart, even if the file comes back', async (t) => {
  const file = join(models, 'loaded.gguf');
  const original = readFileSync(file);
  writeFileSync(join(spare, 'swap.gguf'), readFileSync(join(spare, 'other.gguf')));
  renameSync(join(spare, 'swap.gguf'), file);
  const found = await until('loaded-chat withdrawn', 20_000, async () => {
    const m = await unavailable('loaded-chat');
    return m && !(await listed()).includes('loaded-chat') ? m : undefined;
  });
  t.match(found, { state: 'checksum_mismatch', reason: /restart the daemon/ });
  t.equal(await call('loaded-chat'), 404);
  writeFileSync(file, original);
  await rescans();
  t.notOk((await listed()).includes('loaded-chat'), 'its engine holds the old weights: not listed again before a restart');
  t.match(
    await until('the withdrawal logged', 10_000, async () => {
      const w = withdrawals('loaded-chat');
      return w.length ? w : undefined;
    }),
    [{ state: 'checksum_mismatch', when: 'rescan', reason: /restart the daemon/ }],
  );
});

t.test('a listed model whose file is removed is withdrawn, and logged', async (t) => {
  rmSync(join(models, 'removed.gguf'));
  const found = await until('removed-chat withdrawn', 20_000, async () => {
    const m = await unavailable('removed-chat');
    return m && !(await listed()).includes('removed-chat') ? m : undefined;
  });
  t.match(found, { state: 'missing', reason: /removed/ });
  t.equal(await call('removed-chat'), 404);
  t.match(
    await until('the withdrawal logged', 10_000, async () => {
      const w = withdrawals('removed-chat');
      return w.length ? w : undefined;
    }),
    [{ state: 'missing', when: 'rescan' }],
  );
});

t.test('after a restart the restored file is verified and served again', async (t) => {
  t.equal(await daemon.stop(), 0);
  const again = await startDaemon(t, ['--config', config]);
  const probe = modelsProbe(again.baseURL, key.secret);
  await probe.until('loaded-chat listed after the restart', 30_000, async () =>
    (await probe.listed()).includes('loaded-chat') ? true : undefined,
  );
  t.pass('listed');
  t.equal(await again.stop(), 0);
});

t.test('a loaded model serves the weights it verified, whatever is written into its file afterwards', async (t) => {
  // No rescan to withdraw it: only what the engine holds decides what it serves.
  const own = tempDir(t);
  mkdirSync(join(own, 'models'));
  const embed = writeTinyGguf(join(own, 'models', 'embed.gguf'), { seed: 51, embedding: 32, heads: 2 });
  const otherWeights = tinyGguf({ seed: 52, embedding: 32, heads: 2 }).bytes;
  t.equal(otherWeights.length, embed.size, 'the same shape and size, other weights');
  writeFileSync(join(own, 'manifest.json'), JSON.stringify({ models: [entry('embed', 'embed.gguf', 'embeddings', embed)] }));
  const ownConfig = join(own, 'config.json');
  const ownData = join(own, 'data');
  writeFileSync(
    ownConfig,
    JSON.stringify({
      dataDir: ownData,
      modelsDir: join(own, 'models'),
      manifest: join(own, 'manifest.json'),
      models: { rescanSeconds: 0 },
    }),
  );
  const ownKey = createKey(ownData);
  const d = await startDaemon(t, ['--config', ownConfig]);
  const probe = modelsProbe(d.baseURL, ownKey.secret);
  await probe.until('embed ready', 30_000, async () =>
    (await probe.health()).models.some((m) => m.id === 'embed' && m.readiness === 'ready') ? true : undefined,
  );
  const vector = async () =>
    (await probe.client.embeddings.create({ model: 'embed', input: 'the same words', encoding_format: 'float' })).data[0].embedding;
  const before = await vector();
  // Written into the same file (same inode), as a careless copy or an attacker with write access would.
  const fd = openSync(join(own, 'models', 'embed.gguf'), 'r+');
  writeSync(fd, otherWeights, 0, otherWeights.length, 0);
  closeSync(fd);
  t.same(await vector(), before, 'the same vector: the weights are the daemon’s own copy, not the file’s pages');
  t.equal(await d.stop(), 0);
});
