// Models are what they claim to be: a file whose GGUF header (architecture, parameter count, vocabulary, context,
// sizes) disagrees with its manifest entry is refused by `sovereign models import` and, at boot, is not listed
// (`header_mismatch`), pinned or not. Generated GGUFs whose headers match load and answer on the real engine.
import { copyFileSync, existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import t from 'tap';
import { writeTinyGguf } from './fixtures/gguf.js';
import { entry } from './fixtures/models.js';
import { cli, createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';

const dir = tempDir(t);
const downloads = join(dir, 'downloads');
mkdirSync(downloads);
const good = writeTinyGguf(join(downloads, 'good.gguf'), { seed: 11 });
// Each differs from `good` in one respect the manifest states (the vocabulary also grows the embedding tensors).
const wrongArch = writeTinyGguf(join(downloads, 'qwen.gguf'), { seed: 12, architecture: 'qwen2' });
const wrongParams = writeTinyGguf(join(downloads, 'bigger.gguf'), { seed: 13, feedForward: 512 });
const wrongVocab = writeTinyGguf(join(downloads, 'vocab.gguf'), { seed: 14, extraTokens: 40 });
writeFileSync(join(downloads, 'random.gguf'), Buffer.alloc(200_000, 7));

const unpinned = { ...entry('tiny-chat', 'tiny-chat.gguf', 'chat', good), sha256: null, size: null };
const manifest = join(dir, 'manifest.json');
writeFileSync(manifest, JSON.stringify({ models: [unpinned] }));

t.test('import refuses a file whose header is not the model, saying exactly what differs', async (t) => {
  const models = join(dir, 'import-models');
  const args = ['--data-dir', join(dir, 'import-data'), '--models-dir', models, '--manifest', manifest];
  const cases: Array<[string, RegExp]> = [
    ['qwen.gguf', /is not 'tiny-chat': architecture is qwen2, the manifest says llama\. Nothing was imported/],
    [
      'bigger.gguf',
      new RegExp(
        `0\\.000\\d+B parameters \\(${wrongParams.gguf.parameterCount}\\), the manifest says 0\\.000\\d+B \\(${good.gguf.parameterCount}\\)`,
      ),
    ],
    ['vocab.gguf', new RegExp(`vocabulary is ${wrongVocab.gguf.vocabularySize}, the manifest says ${good.gguf.vocabularySize}`)],
    ['random.gguf', /cannot be read as a GGUF model/],
  ];
  for (const [file, message] of cases) {
    const r = cli(['models', 'import', join(downloads, file), '--id', 'tiny-chat', ...args]);
    t.equal(r.code, 1, `${file} is refused`);
    t.match(r.stderr, message, file);
  }
  t.notOk(existsSync(join(models, 'tiny-chat.gguf')), 'no refused file reached the models dir');
  t.equal(cli(['models', 'list', '--json', ...args]).json[0].state, 'missing', 'and no checksum was recorded for one');

  const ok = cli(['models', 'import', join(downloads, 'good.gguf'), '--id', 'tiny-chat', '--json', ...args]);
  t.equal(ok.code, 0, ok.stderr);
  t.match(ok.json, { id: 'tiny-chat', pinned: true, sha256: good.sha256 });
  t.same(readdirSync(models), ['tiny-chat.gguf']);
});

t.test('at boot a file whose header disagrees is header_mismatch, pinned or not; the one that matches serves', async (t) => {
  const models = join(dir, 'boot-models');
  mkdirSync(models);
  for (const f of ['good.gguf', 'qwen.gguf', 'bigger.gguf', 'vocab.gguf']) copyFileSync(join(downloads, f), join(models, f));
  // The checksums are the files' own: only the header tells these are not the models their entries describe.
  const claims = (id: string, file: string, written: typeof good) => ({ ...entry(id, file, 'chat', written), gguf: good.gguf });
  const bootManifest = join(dir, 'boot-manifest.json');
  writeFileSync(
    bootManifest,
    JSON.stringify({
      models: [
        entry('tiny-chat', 'good.gguf', 'chat', good),
        claims('arch-chat', 'qwen.gguf', wrongArch),
        claims('params-chat', 'bigger.gguf', wrongParams),
        claims('vocab-chat', 'vocab.gguf', wrongVocab),
      ],
    }),
  );
  const dataDir = join(dir, 'boot-data');
  const args = ['--data-dir', dataDir, '--models-dir', models, '--manifest', bootManifest];

  const list = cli(['models', 'list', '--json', ...args]);
  t.equal(list.code, 0, list.stderr);
  const byId = Object.fromEntries(list.json.map((m: { id: string }) => [m.id, m]));
  t.match(byId['tiny-chat'], { state: 'available', listed: true });
  t.match(byId['arch-chat'], {
    state: 'header_mismatch',
    listed: false,
    verified: false,
    reason: /architecture is qwen2, the manifest says llama/,
  });
  t.match(byId['params-chat'], { state: 'header_mismatch', reason: /B parameters .*the manifest says/ });
  t.match(byId['vocab-chat'], {
    state: 'header_mismatch',
    reason: /vocabulary is \d+, the manifest says \d+.*: this file is not vocab-chat/,
  });
  t.match(cli(['models', 'list', ...args]).stdout, /arch-chat .*header_mismatch: architecture is qwen2/);

  const key = createKey(dataDir);
  const daemon = await startDaemon(t, args);
  const health = await waitForModels(daemon.baseURL, key.secret, ['tiny-chat']);
  const states = Object.fromEntries(health.unavailable_models.map((m: { id: string; state: string }) => [m.id, m.state]));
  t.same(states, { 'arch-chat': 'header_mismatch', 'params-chat': 'header_mismatch', 'vocab-chat': 'header_mismatch' });
  t.match(health.unavailable_models.find((m: { id: string }) => m.id === 'arch-chat').reason, /architecture is qwen2/);
  const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
  t.same(
    (await client.models.list()).data.map((m) => m.id),
    ['tiny-chat'],
  );
  const answer = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'hello' }],
    max_tokens: 4,
  });
  t.equal(answer.object, 'chat.completion', 'the model whose header matches answers on the real engine');
  const refused = await client.chat.completions.create({ model: 'arch-chat', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
  t.equal(refused.status, 404);
  await daemon.stop();
});

t.test('a checksum recorded for a file that is not the model does not hold: the right file replaces it', async (t) => {
  // The manifest of an older release had no header facts, so its import recorded the wrong file's checksum; the
  // new manifest states the real model's facts.
  const args = (m: string) => ['--data-dir', join(dir, 'legacy-data'), '--models-dir', join(dir, 'legacy-models'), '--manifest', m];
  const old = join(dir, 'old-manifest.json');
  writeFileSync(old, JSON.stringify({ models: [{ ...unpinned, gguf: wrongArch.gguf }] }));
  t.equal(cli(['models', 'import', join(downloads, 'qwen.gguf'), '--id', 'tiny-chat', ...args(old)]).code, 0);
  const now = cli(['models', 'list', '--json', ...args(manifest)]);
  t.match(now.json[0], { state: 'header_mismatch', reason: /architecture is qwen2/ });
  const other = cli(['models', 'import', join(downloads, 'bigger.gguf'), '--id', 'tiny-chat', ...args(manifest)]);
  t.equal(other.code, 1, 'a wrong file still cannot take its place');
  const right = cli(['models', 'import', join(downloads, 'good.gguf'), '--id', 'tiny-chat', '--json', ...args(manifest)]);
  t.equal(right.code, 0, right.stderr);
  t.equal(right.json.replacedPin, wrongArch.sha256);
  t.match(cli(['models', 'list', '--json', ...args(manifest)]).json[0], { state: 'available' });
  const again = cli(['models', 'import', join(downloads, 'qwen.gguf'), '--id', 'tiny-chat', ...args(manifest)]);
  t.equal(again.code, 1);
});

t.test('the manifest must state header facts for every entry', async (t) => {
  const bare = join(dir, 'bare-manifest.json');
  writeFileSync(bare, JSON.stringify({ models: [{ ...unpinned, gguf: undefined }] }));
  const r = cli(['models', 'list', '--data-dir', join(dir, 'bare-data'), '--manifest', bare]);
  t.equal(r.code, 1);
  t.match(r.stderr, /invalid models manifest.*\n.*must have required property 'gguf'/);
});
