// A model imported while the daemon runs is listed without a restart, after the same checks as at boot, and answers
// on the real engine; a file still being copied in is not listed, nor one whose header is not the model.
import { closeSync, mkdirSync, openSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { writeTinyGguf } from './fixtures/gguf.js';
import { entry } from './fixtures/models.js';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { modelsProbe } from './helpers/models.js';

const dir = tempDir(t);
const downloads = join(dir, 'downloads');
mkdirSync(downloads);
const chat = writeTinyGguf(join(downloads, 'tiny-chat.gguf'), { seed: 21 });
const copied = writeTinyGguf(join(downloads, 'copied-chat.gguf'), { seed: 22 });
const liar = writeTinyGguf(join(downloads, 'liar.gguf'), { seed: 23, layers: 3 });
const models = join(dir, 'models');
mkdirSync(models);
const manifest = join(dir, 'manifest.json');
writeFileSync(
  manifest,
  JSON.stringify({
    models: [
      { ...entry('tiny-chat', 'tiny-chat.gguf', 'chat', chat), sha256: null, size: null },
      entry('copied-chat', 'copied-chat.gguf', 'chat', copied),
      { ...entry('liar-chat', 'liar.gguf', 'chat', liar), gguf: chat.gguf },
    ],
  }),
);
const dataDir = join(dir, 'data');
const args = ['--data-dir', dataDir, '--models-dir', models, '--manifest', manifest];
const key = createKey(dataDir);
const daemon = await startDaemon(t, args, { SOVEREIGN_LOG_LEVEL: 'info' });
const { client, listed, health, until } = modelsProbe(daemon.baseURL, key.secret);

t.test('a model imported while the daemon runs is listed within seconds and answers', async (t) => {
  await until('boot assessed the manifest', 30_000, async () =>
    (await health()).unavailable_models.some((m) => m.id === 'tiny-chat') ? true : undefined,
  );
  t.same(await listed(), [], 'nothing is listed before the import');
  const imported = cli(['models', 'import', join(downloads, 'tiny-chat.gguf'), '--id', 'tiny-chat', ...args]);
  t.equal(imported.code, 0, imported.stderr);
  const started = Date.now();
  await until('tiny-chat listed', 20_000, async () => ((await listed()).includes('tiny-chat') ? true : undefined));
  t.ok(Date.now() - started < 20_000, `listed ${Date.now() - started} ms after the import`);
  await until('tiny-chat ready', 20_000, async () =>
    (await health()).models.some((m) => m.id === 'tiny-chat' && m.readiness === 'ready') ? true : undefined,
  );
  const answer = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'hello' }],
    max_tokens: 4,
  });
  t.equal(answer.object, 'chat.completion');
  t.ok(answer.usage!.completion_tokens > 0, 'the real engine generated');
  t.notOk(
    (await health()).unavailable_models.some((m) => m.id === 'tiny-chat'),
    'and it is no longer reported unavailable',
  );

  // The audit log has the import (by whom) and the listing, with the checksum it was verified against. (Their order
  // is not fixed: the outbox is drained every second, and the rescan may come first.)
  const entries = await until('the import and the listing logged', 10_000, async () => {
    const out = join(dir, `export-${Date.now()}`);
    const r = cli(['audit', 'export', '--data-dir', dataDir, '--out', out]);
    if (r.code !== 0) throw new Error(r.stderr);
    const all = readFileSync(join(out, 'entries.jsonl'), 'utf8')
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, any>);
    const imported = all.find((e) => e.kind === 'model.imported' && e.model === 'tiny-chat');
    const listed = all.find((e) => e.kind === 'model.listed' && e.model === 'tiny-chat');
    return imported && listed ? { imported, listed, all } : undefined;
  });
  t.match(entries.imported, { by: { cli: String }, file: 'tiny-chat.gguf', sha256: /^[0-9a-f]{64}$/ });
  t.match(entries.listed, { file: 'tiny-chat.gguf', sha256: entries.imported.sha256, boot: Number });
  t.match(
    entries.all.find((e) => e.kind === 'boot.models'),
    { models: [] },
    'at boot nothing was served',
  );
});

t.test('a file being copied in is not listed until it is whole', async (t) => {
  // Half the bytes now, the rest after the daemon has had time to look: the size is not the manifest's yet.
  const bytes = readFileSync(join(downloads, 'copied-chat.gguf'));
  const fd = openSync(join(models, 'copied-chat.gguf'), 'w');
  writeSync(fd, bytes, 0, bytes.length >> 1);
  await until('the partial file was assessed', 20_000, async () => {
    const m = (await health()).unavailable_models.find((m) => m.id === 'copied-chat');
    return m?.state === 'size_mismatch' ? m : undefined;
  });
  t.notOk((await listed()).includes('copied-chat'), 'a partial file is not listed');
  writeSync(fd, bytes, bytes.length >> 1, bytes.length - (bytes.length >> 1));
  closeSync(fd);
  await until('copied-chat listed once whole', 20_000, async () => ((await listed()).includes('copied-chat') ? true : undefined));
  t.pass('listed once the copy was whole');
});

t.test('a file arriving whose header is not the model is header_mismatch, not listed', async (t) => {
  writeFileSync(join(models, 'liar.gguf'), readFileSync(join(downloads, 'liar.gguf')));
  const m = await until('liar assessed', 20_000, async () => {
    const found = (await health()).unavailable_models.find((m) => m.id === 'liar-chat');
    return found?.state === 'header_mismatch' ? found : undefined;
  });
  t.match(m.reason, /block count is 3, the manifest says 2/);
  t.notOk((await listed()).includes('liar-chat'));
  t.ok(await daemon.logged('model arrived in the models dir'), 'the daemon logs each model it picks up');
});
